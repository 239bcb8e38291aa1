"""The glue audit and built-page checks of the claims chapter's XLA:GPU section (issue 36; see
``tests/book_checks/core.py``): claims 11 and 13 checked on modules compiled for T4, A100 and H100."""

from __future__ import annotations

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401
from book_checks.gpu_fusion import _gpu_section_shown

CHAPTER = 'claims'

ONE_WORDS = r"(more than the claimed one|fewer than the claimed one|the claimed one)"


def one_word(n: int) -> str:
    """The word a kernel count takes beside the claim's one kernel (exact comparison)."""
    return "more than the claimed one" if n > 1 else "fewer than the claimed one" if n < 1 else "the claimed one"


def cross_one(v: dict) -> dict:
    return {"n": 2} if v["n"] <= 1 else {"n": 1}


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("claims", ("gpu_cl_c11_h100", "gpu_cl_c11_word"),
          r"the convolution with bias and ReLU compiled to (\d+) kernel\(s\) \([^)]*\): " + ONE_WORDS,
          lambda m: {"n": int(m.group(1))}, lambda v: one_word(v["n"]), lambda m: m.group(2), cross_one,
          sample={"n": 2}),
    Entry("claims", ("gpu_cl_c13_h100", "gpu_cl_c13_word"),
          r"The product with bias and ReLU compiled to (\d+) kernel\(s\) for the H100: " + ONE_WORDS,
          lambda m: {"n": int(m.group(1))}, lambda v: one_word(v["n"]), lambda m: m.group(2), cross_one,
          sample={"n": 1}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    "For the T4: {glue:text}`gpu_cl_c11_t4`": "counts and the product's structure read from the T4 modules "
                                              "(gpu_view.gemm_story), no comparison",
}

# Glues chosen in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'gpu_cl_where': "whether the build machine has a GPU TensorFlow sees (gpu_view.where)",
    'gpu_cl_c13_story': "structure of the compiled H100 module (gpu_view.gemm_story)",
    'gpu_cl_c13_t4_story': "structure of the compiled T4 module (gpu_view.gemm_story)",
}


def _claims_shown(page: Page) -> list[str]:
    problems = _gpu_section_shown(page)
    if "claim 13" not in (page.text or page.prose):
        problems.append("no GPU check of claim 13 on the page")
    return problems


# Built-page checks (core.PageCheck): each fails on the page as it was before the section existed.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("issue 36: claims 11 and 13 checked on modules compiled for T4 and H100", "claims", _claims_shown,
              reviewed=Page(prose="Here XLA compiled one dot and one loop fusion. Even a single kernel does not touch "
                                  "memory only once.", text="XLA:CPU: 2 kernels")),
]
