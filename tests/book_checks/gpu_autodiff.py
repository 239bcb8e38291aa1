"""The glue audit and built-page checks of the autodiff chapter's XLA:GPU section (issue 36; see
``tests/book_checks/core.py``). The section's cells have ids starting ``gpu-``."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401
from book_checks.gpu_fusion import _gpu_section_shown

CHAPTER = 'autodiff'


def _order(a: float, b: float, larger: str, smaller: str, same: str) -> str:
    return larger if a > b else smaller if a < b else same


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("autodiff", ("gpu_ad_temp_plain", "gpu_ad_temp_rc", "gpu_ad_temp_word"),
          r"took the planned temporaries from " + NUM + r" MiB to " + NUM
          + r" MiB: (more with recomputation|less with recomputation|the same with both)",
          lambda m: {"plain": _num(m.group(1)), "rc": _num(m.group(2))},
          lambda v: _order(v["rc"], v["plain"], "more with recomputation", "less with recomputation",
                           "the same with both"),
          lambda m: m.group(3),
          lambda v: {**v, "rc": v["plain"] + 1.0} if v["rc"] <= v["plain"] else {**v, "rc": v["plain"] / 2},
          sample={"plain": 6.0, "rc": 4.0}),
    Entry("autodiff", ("gpu_ad_gf_diff", "gpu_ad_gf_forward", "gpu_ad_flops_word"),
          r"the difference, " + NUM + r" GFLOP, (exceeds|falls short of|equals) the forward pass's " + NUM + " GFLOP",
          lambda m: {"diff": _num(m.group(1)), "fwd": _num(m.group(3))},
          lambda v: _order(v["diff"], v["fwd"], "exceeds", "falls short of", "equals"),
          lambda m: m.group(2),
          lambda v: {**v, "diff": v["fwd"] + 1.0} if v["diff"] <= v["fwd"] else {**v, "diff": v["fwd"]},
          sample={"diff": 2.147, "fwd": 2.147}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {}

# Glues chosen in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'gpu_ad_where': "whether the build machine has a GPU TensorFlow sees (gpu_view.where)",
}


def _memory_shown(page: Page) -> list[str]:
    """Both steps compiled for T4 and H100, labelled, with XLA's planned temporaries beside the walk."""
    text = page.text or page.prose
    problems = _gpu_section_shown(page)
    if not re.search(r"with tf\.recompute_grad\W+H100\W+\d", text):
        problems.append("no H100 row for the step with tf.recompute_grad")
    if "planned temporaries (MiB, XLA)" not in text:
        problems.append("no column of XLA's planned temporaries")
    return problems


# Built-page checks (core.PageCheck): each fails on the page as it was before the section existed.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("issue 36: the autodiff chapter shows the planned temporaries for T4 and H100", "autodiff", _memory_shown,
              reviewed=Page(prose="The curves are that walk step by step: after each instruction the live bytes.",
                            text="value and gradients: 412 instructions, peak 40 KiB")),
]
