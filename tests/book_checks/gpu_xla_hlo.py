"""The glue audit and built-page checks of the XLA and HLO chapter's XLA:GPU section (issue 36; see
``tests/book_checks/core.py``). The section's cells have ids starting ``gpu-``."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401
from book_checks.gpu_fusion import ORDER_WORDS, cross, order_word

CHAPTER = 'xla_hlo'

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("xla_hlo", ("gpu_xh_step_t4", "gpu_xh_step_h100", "gpu_xh_step_word"),
          r"For the T4 the step is (\d+) kernel\(s\), for the H100 (\d+): " + ORDER_WORDS,
          lambda m: {"other": int(m.group(1)), "h100": int(m.group(2))},
          lambda v: order_word(v["h100"], v["other"]), lambda m: m.group(3), cross,
          sample={"h100": 15, "other": 17}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {}

# Glues chosen in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'gpu_xh_where': "whether the build machine has a GPU TensorFlow sees (gpu_view.where)",
}


def _flipbook_and_step_shown(page: Page) -> list[str]:
    """The page steps through XLA:GPU's passes for an H100 and shows the training step compiled for a T4 and an
    H100, each labelled."""
    text = page.text or page.prose
    problems = []
    if not re.search(r"XLA:GPU for H100-SXM, XLA:GPU from jaxlib [\d.]+ .* without a device; autotuning: not run",
                     text):
        problems.append("no XLA:GPU flipbook for the H100 with its compiler, 'without a device' and 'not run'")
    for gpu in ("T4", "H100"):
        if not re.search(rf"compiled (for|on this machine's) {gpu} \(", text):
            problems.append(f"no module compiled for {gpu} on the page")
    return problems


# Built-page checks (core.PageCheck): each fails on the page as it was before the section existed.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("issue 36: the XLA chapter shows XLA:GPU's passes for an H100 and the step for T4 and H100", "xla_hlo",
              _flipbook_and_step_shown,
              reviewed=Page(prose="On a GPU the optimized module holds one more structure. Late in XLA:GPU's pipeline, "
                                  "after scheduling, the CommandBufferScheduling pass outlines each run of consecutive "
                                  "fusions.",
                            text="42 frames, 512 passes ran; page weight 96 KiB. relu(x * y + 1.0) through the passes "
                                 "of XLA:CPU, TensorFlow 2.21.0")),
]
