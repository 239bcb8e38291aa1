"""The glue audit and built-page checks of ``appendix_troubleshooting`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

from book_checks.core import CI3, NUM, Entry, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401

CHAPTER = 'appendix_troubleshooting'

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
PAGE_CHECKS: list[PageCheck] = []
