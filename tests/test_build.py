"""build_graded's steps (xlalab.grading.build.TRANSFORMS), each on a small hand-made lab and hand-in (as nbgrader
tests its preprocessors): where the student's cells, the graded checks and the grader's cells end up, and what is
tampering. No kernel runs here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

from xlalab.grading import assign, build, labformat
from xlalab.grading.lab import Lab

from helpers import check, code, md

NAME = "lab98_built"   # not in released_checks.json: no earlier release is known
SEED = 424242


def _lab() -> Lab:
    """A lab of five cells: setup, an answer, its visible check, a second answer and a hidden check."""
    cells = [
        code("setup", "import numpy as np\nfrom xlalab.grading.probe import probe", setup=True),
        md("intro", "## Part 1"),
        code("a1", "def f(x):\n    # BEGIN SOLUTION\n    return 2 * x\n    # END SOLUTION"),
        check("c1", "p1-f", 1, "got = probe('f-2', lambda: f(2))\n# JUDGE\nassert got == 4"),
        code("a2", "def g(x):\n    # BEGIN SOLUTION\n    return x + 1\n    # END SOLUTION"),
        check("c2", "p2-g", 2, "got = probe('g-1', lambda: g(1))\n# JUDGE\nassert got == 2", hidden=True),
    ]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": dict(labformat.KERNELSPEC)})
    released = assign.student_notebook(nb, "https://example.org/course", NAME)
    return Lab(NAME, Path(f"{NAME}.ipynb"), nb, released, labformat.checks(nb), "https://example.org/course")


@pytest.fixture
def lab() -> Lab:
    return _lab()


def _handin(lab: Lab) -> Any:
    """The released lab, answered."""
    nb = nbformat.from_dict(nbformat.reads(assign.dumps(lab.released), as_version=4))
    for c in nb.cells:
        if c.get("id") == "a1":
            c.source = "def f(x):\n    return 2 * x"
        if c.get("id") == "a2":
            c.source = "def g(x):\n    return x + 1"
    return nb


def _run(lab: Lab, sub: Any, upto) -> build.Build:
    b = build.Build(lab, sub, Path("/work/records.jsonl"), SEED, notes=[])
    for t in build.TRANSFORMS[:build.TRANSFORMS.index(upto) + 1]:
        t(b)
    return b


def _ids(cells: list[Any]) -> list[str]:
    return [c.get("id") for c in cells]


def test_take_cells_keeps_the_students_text_and_puts_the_graded_check_at_their_position(lab):
    sub = _handin(lab)
    sub.cells.insert(3, nbformat.v4.new_code_cell("y = f(3)", id="mine", metadata={"tags": ["raises-exception"]},
                                                  execution_count=3))
    sub.cells.insert(0, nbformat.from_dict({"cell_type": "code", "id": "bad id!", "metadata": {}, "source": "z = 1",
                                            "outputs": [], "execution_count": None}))
    sub.cells.append(nbformat.v4.new_code_cell("w = 2", id="mine"))
    b = _run(lab, sub, build.take_cells)
    assert _ids(b.body) == ["student-0", "intro", "a1", "mine", "xlalab-check-0", "a2", "mine-dup"]
    assert set(b.found) == {"p1-f", "__setup__"}, "the setup cell and the claimed check are set aside to compare"
    assert all(c.metadata == {} for c in b.body if not c.get("id", "").startswith("xlalab-")), "no tags, no claims"
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in b.body if c.cell_type == "code")
    graded = b.body[4]
    assert graded.metadata["xlalab"] == {"check": "p1-f", "points": 1.0, "hidden": False}
    assert "# JUDGE" not in graded.source and "assert got == 4" not in graded.source, "probing part only"
    assert b.from_source == [False, False, False, False, True, False, False]


def test_take_cells_drops_a_cell_claiming_a_hidden_check_and_a_second_claim(lab):
    sub = _handin(lab)
    sub.cells.append(code("fake", "# CHECK p2-g (2 points)\nprint('forged')"))
    sub.cells.append(code("again", "# CHECK p1-f (1 points)\nprint('second')"))
    b = _run(lab, sub, build.take_cells)
    assert "fake" not in _ids(b.body) and "again" not in _ids(b.body)
    assert not any("forged" in c.source or "second" in c.source for c in b.body)
    assert _ids(b.body).count("xlalab-check-0") == 1 and "xlalab-check-1" not in _ids(b.body), \
        "a hidden check never runs at the student's position"
    nb, _ = build.build_graded(lab, sub, Path("/work/records.jsonl"), SEED)
    assert _ids(nb.cells).count("xlalab-check-1") == 1 and _ids(nb.cells)[-1] == "xlalab-check-1"


def test_find_tampering_names_changed_and_deleted_checks_and_a_changed_setup(lab):
    b = _run(lab, _handin(lab), build.find_tampering)
    assert b.tampering == [] and b.notes == []
    sub = _handin(lab)
    next(c for c in sub.cells if c.get("id") == "c1").source += "\nassert True"
    next(c for c in sub.cells if c.get("id") == "setup").source += "\nimport os"
    b = _run(lab, sub, build.find_tampering)
    assert b.tampering == ["check `p1-f` was changed; the released check was run instead",
                           "the setup cell was changed; the released setup cell was run"]
    sub = _handin(lab)
    sub.cells = [c for c in sub.cells if c.get("id") != "c1"]
    assert _run(lab, sub, build.find_tampering).tampering == ["check `p1-f` was deleted; the released check was run"]


def test_place_deleted_checks_after_their_answer_and_the_students_cells_that_follow(lab):
    sub = _handin(lab)
    sub.cells = [c for c in sub.cells if c.get("id") != "c1"]
    i = _ids(sub.cells).index("a1")
    sub.cells[i + 1:i + 1] = [code("work", "t = f(5)"), code("more", "u = f(6)")]
    b = _run(lab, sub, build.take_cells)
    assert "xlalab-check-0" not in _ids(b.body)
    build.find_tampering(b)
    build.place_deleted_checks(b)
    assert _ids(b.body) == ["intro", "a1", "work", "more", "xlalab-check-0", "a2"]
    assert len(b.from_source) == len(b.body)


def test_place_deleted_checks_leaves_a_present_check_where_the_student_has_it(lab):
    sub = _handin(lab)
    order = ["setup", "intro", "a2", "a1", "c1"]
    sub.cells = sorted(sub.cells, key=lambda c: order.index(c.get("id")))
    b = _run(lab, sub, build.place_deleted_checks)
    assert _ids(b.body) == ["intro", "a2", "a1", "xlalab-check-0"]


def test_hidden_checks_come_after_every_student_cell(lab):
    sub = _handin(lab)
    sub.cells.append(code("last", "g = lambda x: 0   # the student's last word"))
    b = _run(lab, sub, build.append_hidden_checks)
    assert _ids(b.body)[-2:] == ["last", "xlalab-check-1"]
    hidden = b.body[-1]
    assert hidden.metadata["xlalab"]["hidden"] is True and "assert got == 2" not in hidden.source


def test_grader_cells_come_first_and_no_cell_holds_the_master_seed(lab):
    nb, tampering = build.build_graded(lab, _handin(lab), Path("/work/records.jsonl"), SEED)
    assert tampering == []
    assert _ids(nb.cells)[:2] == ["xlalab-grader-init", "setup"]
    assert "configure('record', '/work/records.jsonl')" in nb.cells[0].source
    assert nb.cells[1].source == next(c for c in lab.released.cells if c.get("id") == "setup").source
    assert nb.metadata["xlalab"] == {"lab": NAME} and nb.metadata["kernelspec"]["name"] == "python3"
    text = nbformat.writes(nb)
    assert str(SEED) not in text, "the master seed stays with the grader"
    from xlalab.grading.probe import derive

    assert str(derive(SEED, "p2-g")) in nb.cells[-1].source, "each check carries its own derived seed"


def test_build_graded_is_its_transforms_in_turn(lab):
    sub = _handin(lab)
    sub.cells = [c for c in sub.cells if c.get("id") != "c1"]
    nb, tampering = build.build_graded(lab, sub, Path("/work/records.jsonl"), SEED, notes=[])
    b = _run(lab, sub, build.TRANSFORMS[-1])
    assert nbformat.writes(nb) == nbformat.writes(b.notebook()) and tampering == b.tampering
    assert [t.__name__ for t in build.TRANSFORMS] == ["take_cells", "find_tampering", "place_deleted_checks",
                                                      "append_hidden_checks", "add_grader_cells"]
