"""The glue audit and built-page checks of the fusion chapter's XLA:GPU section (issue 36; see
``tests/book_checks/core.py``). The section's cells have ids starting ``gpu-``."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401

CHAPTER = 'fusion'

ORDER_WORDS = r"(fewer on the H100|more on the H100|as many on both)"


def order_word(h100: int, other: int) -> str:
    """The word a count on the H100 beside another backend's count takes (exact comparison, as printed)."""
    return "fewer on the H100" if h100 < other else "more on the H100" if h100 > other else "as many on both"


def cross(v: dict) -> dict:
    """Move the H100's count to the other side of the other count (from 'fewer' or 'as many' to 'more', from 'more'
    to 'fewer')."""
    return {**v, "h100": v["other"] + 1} if v["h100"] <= v["other"] else {**v, "h100": max(v["other"] - 1, 0)}


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("fusion", ("gpu_fu_norm_h100", "gpu_fu_norm_t4", "gpu_fu_norm_word"),
          r"For the H100, softmax and layer norm compile to (\d+) kernel\(s\) in all, for the T4 to (\d+): "
          + ORDER_WORDS,
          lambda m: {"h100": int(m.group(1)), "other": int(m.group(2))},
          lambda v: order_word(v["h100"], v["other"]), lambda m: m.group(3), cross,
          sample={"h100": 2, "other": 6}),
    Entry("fusion", ("gpu_fu_mm_cpu", "gpu_fu_mm_h100", "gpu_fu_mm_word"),
          r"is (\d+) kernel\(s\) on XLA:CPU \([^)]*\) and (\d+) for the H100 \([^)]*\): " + ORDER_WORDS,
          lambda m: {"other": int(m.group(1)), "h100": int(m.group(2))},
          lambda v: order_word(v["h100"], v["other"]), lambda m: m.group(3), cross,
          sample={"h100": 1, "other": 2}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    "In the H100's module of the large product": "structure read from the compiled modules (gpu_view.gemm_story), "
                                                 "no comparison",
    "The T4's large product:": "structure read from the compiled T4 module (gpu_view.gemm_story), no comparison",
}

# Glues chosen in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'gpu_fu_big_story': "structure of the compiled H100 module (gpu_view.gemm_story: backend, epilogue, split-K)",
    'gpu_fu_small_story': "structure of the compiled H100 module (gpu_view.gemm_story)",
    'gpu_fu_t4_story': "structure of the compiled T4 module (gpu_view.gemm_story)",
    'gpu_fu_where': "whether the build machine has a GPU TensorFlow sees (gpu_view.where)",
    'gpu_fu_stop_reason': "XLA:GPU's logged reason, quoted",
}

LABELS = ("compiled for T4", "compiled for H100")


def _gpu_section_shown(page: Page) -> list[str]:
    """The built page (its whole text, tags stripped, one line) shows modules compiled for a T4 and an H100, each
    with its label (or, built on that GPU, the on-device label) saying autotuning was not run and times are bounds."""
    text = page.text or page.prose
    problems = []
    for gpu in ("T4", "H100"):
        if not re.search(rf"compiled (for|on this machine's) {gpu} \(", text):
            problems.append(f"no module compiled for {gpu} on the page")
    for m in re.finditer(r"compiled for (\w+) \([^)]*\) by [^;]*?without a device;", text):
        said = text[m.end():m.end() + 200]
        if "autotuning not run" not in said or "lower bounds from the datasheet, not measurements" not in said:
            problems.append(f"the {m.group(1)} label omits 'autotuning not run' or 'not measurements'")
    return problems


# Built-page checks (core.PageCheck): each fails on the page as it was before the section existed.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("issue 36: the fusion chapter shows XLA:GPU for T4 and H100", "fusion", _gpu_section_shown,
              reviewed=Page(prose="On a GPU the product is a Triton GEMM fusion or a cuBLAS call on compute capability "
                                  "8.0 and newer; XLALAB_FAKE_GPU: a recorded module stands in.",
                            text="Backend shown: XLA:CPU on AMD EPYC, 2 cores. compiled for H100 (NVIDIA H100 80GB "
                                 "HBM3) by XLA:GPU from jaxlib 0.10.2 without a device; times measured")),
]
