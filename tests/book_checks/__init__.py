"""The book's audit, one module per chapter (``tests/book_checks/<chapter>.py``) over a shared core (``core.py``).

Each chapter module defines ``AUDIT`` (sentences whose outcome word its printed numbers decide, each with a mutation
that crosses to the other outcome), ``DEFINITIONS`` (sentences with a glued value and a comparison word that state no
measured outcome, with the reason), ``COMPUTED_NOT_MEASURED`` (glues chosen in code that are no measured outcome) and
``PAGE_CHECKS`` (built-page checks of review findings, each failing on the reviewed text).
``tests/test_glue_audit.py`` runs the static parts; ``tests/test_book.py`` runs the built-page parts.
"""
