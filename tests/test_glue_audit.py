"""The glued-value audit (book review s4 item 1, s5 item 3): every value the book glues, and every sentence whose
truth depends on one, checked against the value.

The audit lives in ``tests/book_checks/``: one module per chapter (its audited sentences, definitions, computed glues
and built-page checks of review findings) over ``core.py``. Four layers:

1. The inventory (static, fast): every ``{glue}`` role in ``book/*.ipynb`` has a glue call in the same chapter
   (:func:`test_every_role_is_glued`).
2. No typed outcomes (static, fast): a sentence that holds a glued value may not type a comparison word (faster,
   slower, above/below a bound, larger/smaller than ...) itself unless its chapter lists it in ``DEFINITIONS`` with
   the reason (:func:`test_no_typed_outcome_beside_a_glued_value`). Every glue chosen by a condition in code is
   audited or listed in ``COMPUTED_NOT_MEASURED`` (:func:`test_every_outcome_glue_is_audited`).
3. Every comparing sentence is audited (static, fast): the list of sentences that compare, rank or state an outcome
   beside a glued value is generated from the chapters (:func:`book_checks.core.comparing_sentences`); each is covered
   by an audited entry of its chapter (one of its glued names is the entry's) or is a listed definition
   (:func:`test_every_comparing_sentence_is_audited`). A new comparing sentence fails the suite until registered.
4. The audited sentences (built pages): each entry finds its sentence on the built page, computes the outcome from
   the numbers printed there by the book's one rule and compares it with the stated word
   (:func:`check_built_pages`, run by ``tests/test_book.py``); :func:`test_each_rule_flips_when_its_value_crosses`
   forces each entry's values to the other side, so every check can fail. The review findings' page checks
   (``PAGE_CHECKS``) run on the built pages there too, and here on the reviewed text, where each must fail.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from book_checks import core
from book_checks.core import ROLE, TYPED, Entry, Page

AUDIT: list[Entry] = core.all_entries()


def test_every_role_is_glued() -> None:
    """Every role names a value its own chapter glues (a missing one would render as an error or stale text)."""
    missing = []
    uses = core.inventory()
    for path in sorted(core.BOOK.glob("*.ipynb")):
        names = core.glued_names(path)
        for use in (u for u in uses if u.chapter == path.stem):
            if not any(p.match(use.name) for p in names):
                missing.append(f"{use.chapter}: {use.name}")
    assert not missing, f"roles without a glue call in their chapter: {missing}"
    print(f"{len(uses)} glue roles of {len({(u.chapter, u.name) for u in uses})} distinct values in "
          f"{len({u.chapter for u in uses})} chapters")


def _definitions() -> dict[str, dict[str, str]]:
    defs: dict[str, dict[str, str]] = {}
    for m in core.chapter_modules():
        defs.setdefault(m.CHAPTER, {}).update(m.DEFINITIONS)
    return defs


def _is_definition(chapter: str, sentence: str, defs: dict[str, dict[str, str]]) -> bool:
    return any(opening in sentence for opening in defs.get(chapter, {}))


def _typed_outcomes() -> list[str]:
    found, defs = [], _definitions()
    for use in core.inventory():
        stripped = ROLE.sub(" GLUE ", use.sentence)
        if TYPED.search(stripped) and not _is_definition(use.chapter, use.sentence, defs):
            found.append(f"{use.chapter}: {stripped[:160]}")
    return sorted(set(found))


def test_no_typed_outcome_beside_a_glued_value() -> None:
    found = _typed_outcomes()
    assert not found, "sentences that type an outcome word next to a glued value:\n" + "\n".join(found)


def test_typed_outcome_check_can_fail() -> None:
    """The reviewed false sentence of main (graphs, R5) is caught by the check."""
    stripped = ROLE.sub(" GLUE ", "For the 8-op chain the ratio is {glue:text}`small_ratio:.2f`, so here the graph "
                                  "was faster than eager.")
    assert TYPED.search(stripped)
    assert not TYPED.search(ROLE.sub(" GLUE ", "the table above shows {glue:text}`n` rows"))


def test_each_rule_flips_when_its_value_crosses() -> None:
    """Every audited sentence's expected outcome changes when its value is forced to the other side, so a page that
    kept its word while the value moved would fail the built-page check."""
    stuck = [f"{e.chapter}: {e.glues}" for e in AUDIT if e.rule(e.mutate(e.sample)) == e.rule(e.sample)]
    assert not stuck, f"rules that do not flip: {stuck}"
    # Whichever side the build's values fell on, the mutation crosses: mutating the mutated sample moves the word
    # again (a mutation that only pushes one way could not fail on a build that already went that way).
    one_way = [f"{e.chapter}: {e.glues}" for e in AUDIT
               if e.rule(e.mutate(e.mutate(e.sample))) == e.rule(e.mutate(e.sample))]
    assert not one_way, f"mutations that cross one way only: {one_way}"
    print(f"{len(AUDIT)} audited sentence patterns; {sum(bool(e.wrong_before) for e in AUDIT)} of them were wrong in "
          "a reviewed build")


def test_every_outcome_glue_is_audited() -> None:
    """A new outcome glue must be audited (an entry of its chapter) or listed with what it depends on."""
    missing: list[str] = []
    covered: dict[str, list[str]] = {}
    for m in core.chapter_modules():
        covered.setdefault(m.CHAPTER, []).extend([g for e in m.AUDIT for g in e.glues] + list(m.COMPUTED_NOT_MEASURED))
    for chapter, names in covered.items():
        path = core.BOOK / f"{chapter}.ipynb"
        missing += [f"{chapter}: {n}" for n in sorted(core.outcome_glues(path))
                    if not any(n == c or core._name_matches(c, n) or core._name_matches(n, c) for c in names)]
    assert not missing, f"outcome glues neither audited nor listed: {missing}"


def uncovered_comparing_sentences(chapter: str | None = None) -> tuple[int, list[str]]:
    """How many comparing sentences the audit covers, and the ones it does not (chapter: one chapter only)."""
    entries: dict[str, list[str]] = {}
    for e in AUDIT:
        entries.setdefault(e.chapter, []).extend(e.glues)
    defs = _definitions()
    covered, missing = 0, []
    for s in core.comparing_sentences(chapter):
        glues = entries.get(s.chapter, [])
        if _is_definition(s.chapter, s.sentence, defs) or any(
                core._name_matches(g, n) for g in glues for n in s.names):
            covered += 1
        else:
            missing.append(f"{s.chapter} [{s.why}]: {ROLE.sub(' GLUE ', s.sentence)[:200]}")
    return covered, missing


def test_every_comparing_sentence_is_audited() -> None:
    """Issue 39 item 3: the list of comparing sentences comes from the chapters, not a sample; each one is audited
    (with a mutation that crosses) or marked as a definition with the reason."""
    covered, missing = uncovered_comparing_sentences()
    print(f"the audit covers {covered} comparing sentences of the book")
    assert not missing, f"{len(missing)} comparing sentences not audited:\n" + "\n".join(missing)


def test_comparing_sentence_finder_can_fail() -> None:
    """A sentence with a glued number and a comparison word is found; one with neither is not."""
    assert core.COMPARING.search(ROLE.sub(" GLUE ", "XLA ran {glue:text}`r:.2f` times as fast as graph mode"))
    assert not core.COMPARING.search(ROLE.sub(" GLUE ", "The table has {glue:text}`n` rows"))


def test_page_checks_fail_on_the_reviewed_text() -> None:
    """Every built-page check of a review finding finds its problem in the text the review read."""
    silent = [f"{c.chapter} {c.finding}" for c in core.all_page_checks() if not c.check(c.reviewed)]
    assert not silent, f"page checks that pass the reviewed (false) text: {silent}"


def check_built_pages(page_text: Callable[[str], str], page_all_text: Callable[[str], str]) -> tuple[int, list[str]]:
    """Check every audited sentence on the built book (called by tests/test_book.py, which owns the build):
    returns (sentences checked, problems)."""
    problems, checked = [], 0
    for e in AUDIT:
        text = page_all_text(e.chapter) if e.whole_page else page_text(e.chapter)
        matches = list(re.finditer(e.pattern, text))
        if not matches:
            if not e.optional:
                problems.append(f"{e.chapter} {e.glues}: sentence not found")
            continue
        for m in matches:
            values, said = e.values(m), e.said(m)
            checked += 1
            if e.rule(values) != said:
                problems.append(f"{e.chapter} {e.glues}: says {said!r}, its values {values} give {e.rule(values)!r}")
            if e.rule(e.mutate(values)) == said:
                problems.append(f"{e.chapter} {e.glues}: the check cannot fail (mutated values give the same word)")
    return checked, problems


def check_page_checks(page: Callable[[str], Page]) -> tuple[int, list[str]]:
    """Run every review finding's page check on the built book (called by tests/test_book.py)."""
    checks = core.all_page_checks()
    problems = [f"{c.chapter} {c.finding}: {p}" for c in checks for p in c.check(page(c.chapter))]
    return len(checks), problems
