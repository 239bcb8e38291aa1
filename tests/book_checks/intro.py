"""The glue audit and built-page checks of the chapter ``intro`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401

CHAPTER = 'intro'

#: The load classes of the intro (definitions: quiet below a quarter of the cores, overloaded above them).
LOAD_WORDS = ("quiet (under a quarter of the cores busy)", "busy (at most one process per core)",
              "overloaded (more processes than cores: timings and measured roofs on these pages are slower than "
              "this machine's own)")


def _load_word(v: dict) -> str:
    busiest = max(v["load1"], v["load5"])
    return LOAD_WORDS[0] if busiest < 0.25 * v["cores"] else LOAD_WORDS[1] if busiest <= v["cores"] else LOAD_WORDS[2]


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("intro", ("build_load", "build_cores", "build_load_word"),
          r"the load average over the last 1, 5 and 15 minutes was " + NUM + ", " + NUM + " and " + NUM
          + r" on (\d+) cores, so the machine was (" + "|".join(map(re.escape, LOAD_WORDS)) + ")",
          lambda m: {"load1": _num(m.group(1)), "load5": _num(m.group(2)), "cores": int(m.group(4))},
          _load_word, lambda m: m.group(5),
          lambda v: {**v, "load1": 0.0, "load5": 0.0} if max(v["load1"], v["load5"]) >= 0.25 * v["cores"]
          else {**v, "load1": 2.0 * v["cores"] + 1},
          sample={"load1": 4.36, "load5": 4.31, "cores": 2}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'bf16_native': "machine",
    'colab_sentence': "notebook sources (test_book R3)",
    'build_load_word': "audited",
}


def _s5_23(page: Page) -> list[str]:
    """The promise 'computed by the code above it on the machine named below' is qualified for the pages that read a
    results file measured elsewhere (case_studies)."""
    m = re.search(r"each number in the\s+text was computed by the code above it(.*?)(?=- \*\*In Colab|$)", page.prose,
                  re.S)
    if not m:
        return ["S5-23: the intro's promise is missing"]
    rest = m.group(1)
    if "results file" not in rest or "case_studies" not in rest and "Case studies" not in rest:
        return ["S5-23: the promise is not qualified for pages that read a results file (case_studies)"]
    return []


PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-23", CHAPTER, _s5_23, Page(prose=(
        "- **Online, as HTML.** Every chapter is a Jupyter notebook executed when the book was built; each number in "
        "the text was computed by the code above it on the machine named below, never typed by hand. - **In Colab.** "
        "The rocket icon ..."))),
]
