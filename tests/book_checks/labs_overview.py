"""The glue audit and built-page checks of the chapter ``labs_overview`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401

CHAPTER = 'labs_overview'

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
}

# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.


def _s5_26(page: Page) -> list[str]:
    """Hidden points read as points, not as a count of checks: 'N of those points in hidden checks'."""
    bad = re.findall(r"checks \(" + NUM + r" in hidden checks\)", page.prose)
    if bad:
        return [f"S5-26: '({bad[0]} in hidden checks)' reads as a count of checks"]
    if not re.search(r"\(" + NUM + r" of those points in hidden checks\)", page.prose):
        return ["S5-26: the labs' hidden points are not stated"]
    return []


PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-26", CHAPTER, _s5_26, Page(prose="Lab 5 · 20 points over 9 checks (10 in hidden checks) + 8 points "
                                                   "over 4 written answers")),
]
