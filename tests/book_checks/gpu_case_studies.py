"""The glue audit and built-page checks of the case studies' XLA:GPU section (issue 36; see
``tests/book_checks/core.py``). The section's cells have ids starting ``gpu-``; its prose states counts and sums
read from the compiled modules and the recorded run, and compares none (no audited sentence)."""

from __future__ import annotations

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401
from book_checks.gpu_fusion import _gpu_section_shown

CHAPTER = 'case_studies'

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = []

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {}

# Glues chosen in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'gpu_cs_where': "whether the build machine has a GPU TensorFlow sees (gpu_view.where)",
}


def _gemv_and_step_shown(page: Page) -> list[str]:
    """GEMV and the decoder step compiled for T4 and H100 with their labels, and the H100 step's bound summed."""
    problems = _gpu_section_shown(page)
    if "decoder step" not in (page.text or page.prose):
        problems.append("no decoder step row on the page")
    return problems


# Built-page checks (core.PageCheck): each fails on the page as it was before the section existed.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("issue 36: the case studies show GEMV and the decoder step compiled for T4 and H100", "case_studies",
              _gemv_and_step_shown,
              reviewed=Page(prose="That run compiled with XLA:CPU. On XLA:GPU a convolution followed by a bias add can "
                                  "become one cuDNN call.",
                            text="matvec (XLA:CPU): kernels 1, fusions {}; a recorded XLA:GPU module stands in under "
                                 "XLALAB_FAKE_GPU")),
]
