"""Written answers graded by hand (issue 15): the released box never carries the rubric or the model answer,
answers are collected per question, ``manual.csv`` is merged (bad lines rejected one by one) and the gradebook
is exported for Canvas, Moodle and as plain CSV. On the NumPy-only sample lab of helpers/labs.py, with two written
questions (3 + 1 points) next to its 6 points of checks.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import nbformat
import pytest

from xlalab.cli import main as command
from xlalab.grading import answers as answers_mod, assign, cli, export
from xlalab.grading.cli import grade_submissions
from xlalab.grading.feedback import feedback_text
from xlalab.grading.lab import load_lab
from xlalab.grading.options import GradeOptions
from xlalab.grading.submissions import HandIn

from helpers import (
    MODEL_WHY,
    RUBRIC_SCALE,
    RUBRIC_WHY,
    SAMPLE,
    answered,
    cell,
    make_answers_root,
    md,
    released,
    sample_solution_with_answers,
)

pytestmark = [pytest.mark.xdist_group("grading")]

ANN_WHY = "Addition is associative,\nso the order of the sum does not change it.\n\n# not a heading of the file"


def _csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def _book(out: Path) -> dict[str, dict[str, str]]:
    return {r["student"]: r for r in _csv(out / "gradebook.csv")}


# -- the released lab ------------------------------------------------------------------------------------------

def test_the_released_box_has_id_and_points_but_no_rubric_or_model_answer(tmp_path):
    root = make_answers_root(tmp_path)
    text = (root / "labs" / f"{SAMPLE}.ipynb").read_text(encoding="utf-8")
    for secret in ("RUBRIC-SECRET", "MODEL-SECRET", "rubric", RUBRIC_SCALE, "multiplies each element"):
        assert secret not in text, secret
    nb = released(root)
    for cid, points in (("p2-why", 3), ("p1-explain", 1)):
        c = cell(nb, cid)
        assert c.cell_type == "markdown" and c.source == assign.ANSWER_BOX
        assert c.metadata == {"xlalab": {"answer": cid, "points": points}}
    lab = load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    assert (lab.max_auto, lab.max_manual, lab.maximum) == (6, 4, 10)
    assert [a.answer for a in lab.answers] == ["p1-explain", "p2-why"] and lab.answers[1].rubric == RUBRIC_WHY


@pytest.mark.parametrize("bad, message", [
    (lambda nb: nb.cells.append(nbformat.v4.new_code_cell("x", id="c", metadata={"xlalab": {"answer": "c",
                                                                                           "points": 1}})),
     "must be a markdown cell"),
    (lambda nb: nb.cells.append(md("d", "x", answer="p1-scale", points=1)), "share one namespace"),
    (lambda nb: nb.cells.append(md("d", "x", answer="p2-why", points=1)), "duplicate id"),
    (lambda nb: nb.cells.append(md("d", "x", answer="d", points=0)), "positive numeric 'points'"),
])
def test_a_malformed_answer_cell_is_refused(bad, message):
    nb = sample_solution_with_answers()
    bad(nb)
    with pytest.raises(assign.FormatError, match=message):
        assign.student_notebook(nb, "u", SAMPLE)


def test_answer_states_are_read_from_the_notebook(tmp_path):
    root = make_answers_root(tmp_path)
    lab = load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    nb = released(root)
    got = {a.answer: a for a in answers_mod.answers_of(lab, json.loads(nbformat.writes(nb)))}
    assert got["p2-why"].state == "unchanged" and got["p2-why"].earned == 0
    cell(nb, "p2-why").source = "  \n"
    nb.cells = [c for c in nb.cells if c.get("id") != "p1-explain"]
    got = {a.answer: a for a in answers_mod.answers_of(lab, json.loads(nbformat.writes(nb)))}
    assert (got["p2-why"].state, got["p1-explain"].state) == ("empty", "missing")
    # A student who re-made the cell (new id) but kept its metadata is still found; text is kept verbatim.
    nb = released(root)
    cell(nb, "p2-why").id = "renamed"
    cell(nb, "renamed").source = "**Your answer:** associativity"
    got = {a.answer: a for a in answers_mod.answers_of(lab, json.loads(nbformat.writes(nb)))}
    assert got["p2-why"].state == "answered" and got["p2-why"].earned is None
    assert got["p2-why"].text == "**Your answer:** associativity"
    assert all(a.state == "missing" for a in answers_mod.collect(lab, HandIn.read("x", tmp_path / "nothing.ipynb")))


# -- grading two submissions, scoring by hand, merging, exporting -------------------------------------------------

@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """ann: every check passes, one written answer given, the other left as released; bob: the unmodified lab."""
    root = make_answers_root(tmp_path_factory.mktemp("answers-lab"))
    subs = root / "hand-ins"
    subs.mkdir()
    nb = answered(root)
    cell(nb, "p2-why").source = ANN_WHY
    nbformat.write(nb, str(subs / "ann.ipynb"))
    nbformat.write(released(root), str(subs / "bob.ipynb"))
    out = root / "grades"
    rows = grade_submissions(root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                   GradeOptions(out=str(out), cell_timeout=60, timeout=180, memory_gb=3), quiet=True)
    return root, out, {r.student: r for r in rows}


@pytest.mark.heavy   # graded: a grading run
def test_the_gradebook_keeps_automatic_and_manual_points_apart(graded):
    root, out, rows = graded
    assert rows["ann"].auto == 6 and rows["bob"].auto == 0, feedback_text(rows["ann"])
    book = _book(out)
    cols = list(next(iter(book.values())))
    assert cols[:7] == ["student", "total", "max", "auto", "max_auto", "manual", "max_manual"]
    assert cols[-3:] == ["p1-explain", "p2-why", "status"]
    ann, bob = book["ann"], book["bob"]
    assert (ann["total"], ann["max"], ann["auto"], ann["manual"], ann["max_manual"]) == ("6", "10", "6", "0", "4")
    assert ann["p2-why"] == "" and ann["p1-explain"] == "0" and "not scored yet: p2-why" in ann["status"]
    # The unmodified lab scores 0 for its written answers at once, with nothing left to score.
    assert (bob["total"], bob["manual"], bob["p2-why"], bob["p1-explain"]) == ("0", "0", "0", "0")
    assert "not scored yet" not in bob["status"]


@pytest.mark.heavy   # graded: a grading run
def test_answer_files_group_by_question_with_rubric_and_model_answer(graded):
    root, out, _ = graded
    folder = out / "answers" / SAMPLE
    assert sorted(p.name for p in folder.iterdir()) == ["p1-explain.md", "p2-why.md"]
    why = (folder / "p2-why.md").read_text(encoding="utf-8")
    assert RUBRIC_WHY in why and "> " + MODEL_WHY in why
    assert "### ann (answered; not scored yet)" in why and "> Addition is associative," in why
    assert "> # not a heading of the file" in why          # the student's text is quoted, not structure
    assert "### bob (unchanged; 0 / 3)" in why
    explain = (folder / "p1-explain.md").read_text(encoding="utf-8")
    assert RUBRIC_SCALE in explain and "associative" not in explain and RUBRIC_WHY not in explain
    assert "### ann (unchanged; 0 / 1)" in explain


@pytest.mark.heavy   # graded: a grading run
def test_manual_csv_is_merged_and_bad_lines_are_rejected_one_by_one(graded, capsys):
    root, out, _ = graded
    manual = out / "manual.csv"
    template = _csv(manual)
    assert [(r["student"], r["question"], r["points"]) for r in template] == [
        ("ann", "p1-explain", "0"), ("ann", "p2-why", ""), ("bob", "p1-explain", "0"), ("bob", "p2-why", "0")]
    before = {p.name: p.read_bytes() for p in (out / "feedback").iterdir()}
    bob_line = next(line for line in (out / "gradebook.csv").read_text().splitlines() if line.startswith("bob,"))
    filled = manual.read_text(encoding="utf-8").replace("ann,p2-why,,", "ann,p2-why,2.5,\"right idea, but say why "
                                                                         "the order matters | in float\"")
    filled += ("ann,p2-why,4,too many\nmallory,p2-why,1,\nann,p3-missing,1,\nbob,p2-why,2,generous\n"
               "ann,p1-explain,lots,\n")
    manual.write_text(filled, encoding="utf-8")
    rc = command(["merge-manual", SAMPLE, str(manual), "--source", str(root / "solutions"), "--out", str(out)])
    err = capsys.readouterr().err
    rejected = [line for line in err.splitlines() if line.startswith("rejected:")]
    assert rc == 1 and len(rejected) == 5, err
    assert "line 6 (ann, p2-why): 4 points is outside 0..3" in err
    assert "unknown student 'mallory'" in err and "unknown question 'p3-missing'" in err
    assert "the answer is unchanged, so it scores 0, not 2" in err and "'lots' is not a number" in err
    book = _book(out)
    ann = book["ann"]
    assert (ann["total"], ann["auto"], ann["manual"], ann["p2-why"], ann["max"]) == ("8.5", "6", "2.5", "2.5", "10")
    assert ann["status"] == "graded"
    assert next(line for line in (out / "gradebook.csv").read_text().splitlines()
                if line.startswith("bob,")) == bob_line
    assert (out / "feedback" / "bob.md").read_bytes() == before["bob.md"]
    fb = (out / "feedback" / "ann.md").read_text(encoding="utf-8")
    assert "**Score: 8.5 / 10 points**" in fb and "written answers: 2.5 / 4" in fb
    assert "| `p2-why` | 2.5 / 3 | right idea, but say why the order matters \\| in float |" in fb
    assert "| `p1-explain` | 0 / 1 | no answer (the box was left as released): 0 points |" in fb
    assert "### ann (answered; 2.5 / 3)" in (out / "answers" / SAMPLE / "p2-why.md").read_text()
    # Merging the same file again changes nothing.
    snapshot = (out / "gradebook.csv").read_bytes()
    changed, errors = cli.merge_manual(SAMPLE, manual, out, source=root / "solutions", quiet=True)
    assert changed == [] and len(errors) == 5 and (out / "gradebook.csv").read_bytes() == snapshot


@pytest.mark.heavy   # graded: a grading run
def test_exports_follow_the_documented_columns(graded, tmp_path):
    root, out, _ = graded
    src = str(root / "solutions")
    assert command(["export", SAMPLE, "canvas", "moodle", "csv", "--source", src, "--out", str(out)]) == 0
    rows = list(csv.reader(io.StringIO((out / "export-canvas.csv").read_text())))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", SAMPLE]
    assert rows[1][0].strip() == "Points Possible" and rows[1][-1] in ("10", "10.0")
    totals = {r[0]: r[-1] for r in rows[2:]}
    assert set(totals) == {"ann", "bob"} and float(totals["bob"]) == 0
    assert next(r for r in rows[2:] if r[0] == "ann")[3] == "ann"   # matched by SIS Login ID without a roster
    moodle = _csv(out / "export-moodle.csv")
    assert list(moodle[0])[:2] == ["Username", SAMPLE]
    assert {r["Username"]: float(r[SAMPLE]) for r in moodle}["bob"] == 0
    assert (out / "export-csv.csv").read_text() == (out / "gradebook.csv").read_text()
    roster = tmp_path / "roster.csv"
    roster.write_text("student,Student,ID,SIS User ID,SIS Login ID,Section,Email address\n"
                      "ann,\"Lee, Ann\",1234,S-1,alee,Lab A,ann@example.org\n", encoding="utf-8")
    cli.export_gradebook(SAMPLE, "canvas", out, source=src, roster=roster, quiet=True)
    rows = list(csv.reader(io.StringIO((out / "export-canvas.csv").read_text())))
    assert rows[2][:5] == ["Lee, Ann", "1234", "S-1", "alee", "Lab A"]
    cli.export_gradebook(SAMPLE, "moodle", out, source=src, roster=roster, moodle_id="email", quiet=True)
    moodle = _csv(out / "export-moodle.csv")
    assert list(moodle[0])[0] == "Email address" and moodle[0]["Email address"] == "ann@example.org"
    with pytest.raises(ValueError, match="'student' column"):
        export.read_roster(_write(tmp_path / "bad.csv", "name,ID\nann,1\n"))


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.heavy   # two grading runs
def test_regrading_keeps_the_instructors_points_for_an_unchanged_answer(tmp_path):
    root = make_answers_root(tmp_path)
    src, out, sub = root / "solutions" / f"{SAMPLE}.ipynb", root / "grades", root / "ann.ipynb"
    nb = answered(root)
    cell(nb, "p2-why").source = ANN_WHY
    nbformat.write(nb, str(sub))
    opts = GradeOptions(out=str(out), cell_timeout=60, timeout=180, memory_gb=3)
    grade_submissions(src, [sub], opts, quiet=True)
    manual = out / "manual.csv"
    manual.write_text(manual.read_text().replace("ann,p2-why,,", "ann,p2-why,3,fine"), encoding="utf-8")
    changed, errors = cli.merge_manual(src, manual, out, quiet=True)
    assert [r.student for r in changed] == ["ann"] and errors == []
    (row,) = grade_submissions(src, [sub], opts, quiet=True)          # same answer: the points stay
    assert (row.manual, row.total) == (3, 9) and _book(out)["ann"]["p2-why"] == "3"
    assert "ann,p2-why,3,fine" in manual.read_text()                  # the filled template is not reset
    cell(nb, "p2-why").source = ANN_WHY + " Edited."
    nbformat.write(nb, str(sub))
    (row,) = grade_submissions(src, [sub], opts, quiet=True)          # a changed answer waits to be scored again
    assert row.pending == ["p2-why"] and _book(out)["ann"]["p2-why"] == "" and row.total == 6
