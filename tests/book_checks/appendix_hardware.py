"""The glue audit and built-page checks of the chapter ``appendix_hardware`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401

CHAPTER = 'appendix_hardware'

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("appendix_hardware", ("hwa_roof", "hwa_roof_kind"),
          r"host copy bandwidth, 1 thread " + NUM + r" GB/s host copy bandwidth, (\d+) threads " + NUM
          + r" GB/s.*?The memory roof of .+? is " + NUM + r" GB/s \(from the (single-threaded NumPy copy|NumPy copy "
          r"split over)",
          lambda m: {"one": _num(m.group(1)), "many": _num(m.group(3))},
          lambda v: "single-threaded NumPy copy" if v["one"] >= v["many"] else "NumPy copy split over",
          lambda m: m.group(5),
          lambda v: {**v, "many": v["one"] + 1.0} if v["one"] >= v["many"] else {**v, "many": v["one"] / 2},
          whole_page=True,
          optional="on a GPU the roof is the datasheet's",
          wrong_before="R2 (F): 'a measured multi-threaded copy' for a roof that was the single-threaded copy",
          sample={"one": 8.8, "many": 3.8}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'hwa_roof_kind': "audited",
}

# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.


def _s5_7(page: Page) -> list[str]:
    """S5-7 / R10: a GPU without a datasheet row gets measured roofs (hw.measured_gpu_peaks), and the appendix says
    so instead of describing the pre-R10 error or calling every GPU roof a datasheet row."""
    out = []
    if "with an error naming it" in page.prose:
        out.append("S5-7: says a GPU missing from the table stops xlalab.hw.peaks() with an error")
    if "On a GPU: its datasheet row (the roof)" in page.prose:
        out.append("S5-7: every GPU roof called its datasheet row")
    if not all(k in page.prose for k in ("measured_gpu_peaks", 'roof="measured"', "near them or above them")):
        out.append("S5-7: the measured roofs of a GPU without a datasheet row are not described")
    return out


PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-7", CHAPTER, _s5_7, Page(prose=(
        "maps the name that nvidia-smi or TensorFlow reports to its row, and a GPU that is not in the table stops "
        "`xlalab.hw.peaks()` with an error naming it rather than borrowing a neighbour's numbers. "
        "`xlalab.hw.peaks()` returns the ceilings of the device the work runs on. On a GPU: its datasheet row (the "
        "roof), plus the bandwidth of a compiled copy measured on that GPU."))),
]
