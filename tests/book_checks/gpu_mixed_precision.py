"""The glue audit and built-page checks of the mixed-precision chapter's XLA:GPU section (issue 36; see
``tests/book_checks/core.py``). The section's cells have ids starting ``gpu-``; its prose states types, rates and
counts read from the compiled modules and compares none (no audited sentence)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401
from book_checks.gpu_fusion import _gpu_section_shown

CHAPTER = 'mixed_precision'

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = []

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {}

# Glues chosen in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'gpu_mp_where': "whether the build machine has a GPU TensorFlow sees (gpu_view.where)",
}


def _policies_shown(page: Page) -> list[str]:
    """The three policies and TF32 off compiled for T4 and H100, labelled, with the products' operand types."""
    text = page.text or page.prose
    problems = _gpu_section_shown(page)
    for step in ("mixed_float16", "mixed_bfloat16", "float32, TF32 off"):
        if not re.search(rf"{re.escape(step)}\W+(T4|H100)\W+(cuBLAS|Triton)", text):
            problems.append(f"no table row for the {step} step on a T4 or an H100")
    return problems


# Built-page checks (core.PageCheck): each fails on the page as it was before the section existed.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("issue 36: the mixed-precision chapter shows the policies compiled for T4, A100 and H100",
              "mixed_precision", _policies_shown,
              reviewed=Page(prose="Read the FP16 / FP32 column with care. On GPUs from the A100 on, TensorFlow runs "
                                  "float32 matrix products as TF32 by default.",
                            text="| GPU | FP32 | TF32 | FP16 | BF16 |\n| T4 | 8.1 | – | 65 | – |")),
]
