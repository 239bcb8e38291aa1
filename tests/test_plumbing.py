"""Teaching code in view, plumbing out of it (issue 39, item 5): at most 20% of each chapter's visible code lines
are the book's machinery (glue calls, sentences built in code, table formatting, setup); this test fails above 25%."""

from __future__ import annotations

from pathlib import Path

import pytest

from book_checks.plumbing import classify, share

BOOK = Path(__file__).resolve().parents[1] / "book"
LIMIT = 0.25
CHAPTERS = sorted(p for p in BOOK.glob("*.ipynb"))


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_visible_code_is_mostly_teaching(path: Path) -> None:
    s = share(path)
    print(f"{s.chapter}: {s.total} visible lines, {s.plumbing} plumbing ({s.share:.0%}): {s.lines}")
    assert s.share <= LIMIT, f"{s.chapter}: {s.share:.0%} of {s.total} visible code lines are plumbing ({s.lines})"


def test_classifier_tells_plumbing_from_teaching() -> None:
    """The classifier can fail: glue, tables, prose and setup are plumbing; TensorFlow and timing are teaching."""
    import ast

    cases = {"glue('x', 1, display=False)": "glue", "book.glue_values(a=1)": "glue",
             "display(book.md_table(['a'], [[1]]))": "format", "rows.append(f'| {a} | {b} |')": "format",
             "story = 'XLA fused the chain into one kernel, so it reads the input once.'": "prose",
             "import tensorflow as tf": "setup", "plot.use_style()": "setup",
             "y = tf.function(f, jit_compile=True)(x)": "teaching",
             "cmp = bench.compare(variants, x, baseline='graph')": "teaching"}
    for src, kind in cases.items():
        assert classify(ast.parse(src).body[0], src) == kind, src
