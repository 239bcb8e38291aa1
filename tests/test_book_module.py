"""xlalab.book: the chapters' glue helpers and the one verdict rule they apply (issue 39, items 2 and 5)."""

from __future__ import annotations

import sys
import types

import pytest

from xlalab import bench, book


@pytest.fixture
def glued(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A stand-in myst_nb whose glue records what was glued."""
    store: dict = {}
    mod = types.ModuleType("myst_nb")
    mod.glue = lambda name, value, display=True: store.__setitem__(name, value)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "myst_nb", mod)
    return store


def test_glue_values_glues_strings_without_quotes(glued: dict) -> None:
    book.glue_values(a=1.5, b="faster", c=book.Text("one `reduce` fusion"))
    assert glued["a"] == 1.5 and repr(glued["b"]) == "faster"
    assert repr(glued["c"]) == "one reduce fusion"      # {glue:text} would print the backticks


def test_glue_without_myst_nb_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "myst_nb", None)
    book.glue("x", 1)   # no error outside the book build


@pytest.mark.parametrize(("ci", "n", "verdict"), [((1.2, 1.9), 20, "faster"), ((0.5, 0.9), 20, "slower"),
                                                  ((0.66, 1.36), 17, "indistinguishable"),
                                                  ((1.2, 1.9), 5, "indistinguishable"),
                                                  ((1.003, 1.2), 20, "indistinguishable")])
def test_glue_interval_takes_its_word_from_ratio_verdict(glued: dict, ci, n, verdict) -> None:
    """S5-3: 'inflated by 1.43' beside [0.66, 1.36] is impossible: the word follows the printed interval."""
    words = {"faster": "F", "slower": "S", "cannot_tell": "C"}
    assert book.glue_interval("r", 1.4, ci, n, words=words) == verdict == bench.ratio_verdict(ci, n=n)
    assert repr(glued["r_word"]) == {"faster": "F", "slower": "S", "indistinguishable": "C"}[verdict]
    assert (glued["r_lo"], glued["r_hi"], glued["r_n"]) == (ci[0], ci[1], n)
    few = n < bench.MIN_VERDICT_SAMPLES
    assert repr(glued["r_ci_word"]) == (book.FEW_SAMPLES_WORDS if few else book.CI_WORDS[verdict])
    assert set(glued) == {"r" + s for s in book.INTERVAL_SUFFIXES}


def test_choose_rejects_unknown_verdicts() -> None:
    assert repr(book.choose("faster", faster="a", slower="b", cannot_tell="c")) == "a"
    with pytest.raises(ValueError):
        book.choose("quicker", faster="a", slower="b", cannot_tell="c")


def test_choose_order_compares_as_printed() -> None:
    w = dict(larger="more", smaller="fewer", same="as many")
    assert str(book.choose_order(5, 3, **w)) == "more"
    assert str(book.choose_order(3, 5, **w)) == "fewer"
    assert str(book.choose_order(2.04, 2.01, fmt=".1f", **w)) == "as many"
    assert str(book.choose_order(2.04, 2.01, **w)) == "more"


def test_md_table_escapes_and_checks_widths() -> None:
    t = book.md_table(["a", "b"], [[1, "x|y"], [2.5, "z"]], fmt={0: ".1f"})
    assert t._repr_markdown_() == "| a | b |\n|---|---|\n| 1.0 | x\\|y |\n| 2.5 | z |"
    with pytest.raises(ValueError):
        book.md_table(["a"], [[1, 2]])


def test_paired_compares_two_variants_in_the_same_rounds() -> None:
    t = {"a": bench.Timing("a", 0.0, [2.0] * 12), "b": bench.Timing("b", 0.0, [1.0] * 12),
         "base": bench.Timing("base", 0.0, [1.0] * 12)}
    cmp = bench.Comparison("base", t, {k: 1.0 for k in t}, {k: (1.0, 1.0) for k in t})
    ratio, ci, n = cmp.paired("b", "a")
    assert (ratio, ci, n) == (2.0, (2.0, 2.0), 12)
    assert bench.ratio_verdict(ci, n=n) == "faster"


def test_side_by_side_keeps_order_and_raises() -> None:
    import time

    def work(i: int) -> int:
        time.sleep(0.01 * (3 - i))          # the first item finishes last
        return i * i

    assert book.side_by_side(work, [0, 1, 2], workers=3) == [0, 1, 4]
    assert book.side_by_side(work, []) == []
    assert book.side_by_side(work, [1], workers=1) == [1]

    def fail(i: int) -> int:
        if i == 1:
            raise ValueError("probe 1 failed")
        return i

    with pytest.raises(ValueError, match="probe 1 failed"):
        book.side_by_side(fail, [0, 1, 2])
