"""Breaks found by the third hostile trial (issue 25, "The other breaks found by the same trial"), each on the
grader's own code with made-up rows or files (no kernel runs here): the manual.csv template, the Canvas points
row, submission folders given as links, a hand-in named after the lab, hard links to the private source,
lone surrogates in the class report, and the grader's own work on a huge hand-in."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from xlalab.grading import answers, export
from xlalab.grading.score import ANSWERED, EMPTY, AnswerResult, CheckResult, Row
from xlalab.grading.submissions import expand_submissions, read_handin


def _row(student: str, total_ok: bool = True, answer: str = "because") -> Row:
    return Row(student, "lab90_sample", 6.0, [CheckResult("a", 6, False, total_ok)],
               answers=[AnswerResult("p2-why", 3, ANSWERED if answer else EMPTY, answer,
                                     None if answer else 0.0)])


FORMULAS = ["=HYPERLINK(\"http://x\",\"ann\")", "+1+1", "-2+3", "@SUM(A1)", "'=quoted"]


def test_the_manual_template_writes_no_name_as_a_formula_and_reads_every_name_back(tmp_path):
    """Break: manual.csv wrote student names raw, so a spreadsheet ran ``=HYPERLINK(...)`` as a formula."""
    path = tmp_path / "manual.csv"
    rows = [_row(name) for name in FORMULAS] + [_row("ann")]
    answers.write_manual_template(None, rows, path)
    cells = [r[0] for r in csv.reader(io.StringIO(path.read_text(encoding="utf-8")))][1:]
    assert all(c[:1] not in ("=", "+", "-", "@") for c in cells), cells
    # Filled in and merged back, every student is found (the ' a spreadsheet keeps is taken off again).
    lines = answers.read_manual(path)
    assert sorted(line["student"] for line in lines) == sorted(FORMULAS + ["ann"])
    for line in lines:
        line["points"] = "1"
    changed, errors = answers.merge_manual(_Lab(), {r.student: r for r in rows}, lines)
    assert errors == [] and len(changed) == len(rows)


class _Lab:
    name = "lab90_sample"
    answers = [type("A", (), {"answer": "p2-why", "points": 3})()]


@pytest.mark.parametrize("name", ["    Points Possible", "Points Possible", "points  possible", "PointsPossible"])
def test_a_student_named_points_possible_adds_no_second_points_row(name):
    """Break: a student named ``    Points Possible`` was written raw, and Canvas read a second points row."""
    text = export.canvas([_row(name), _row("ann")], "lab90_sample", 10, {})
    rows = list(csv.reader(io.StringIO(text)))
    points_rows = [r for r in rows[1:] if "pointspossible" in "".join(r[0].split()).lower().replace("-", "")
                   and not r[0].startswith("student: ")]
    assert len(points_rows) == 1 and rows[1][0] == export.CANVAS_POINTS_ROW, rows
    assert len(rows) == 4 and any(r[0].startswith("student: ") and r[-1] == "6" for r in rows[2:]), rows


def _lab_file(folder: Path, name: str = "lab90_sample.ipynb") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_folder_or_notebook_named_by_a_link_on_the_command_line_is_followed(tmp_path):
    """Break: a submission folder given as a link was one refused row; its students were never graded. A link
    the instructor names is followed; a link inside the folder is still refused (read_handin)."""
    real = tmp_path / "store" / "class-2026"
    _lab_file(real, "ann.ipynb")
    _lab_file(real / "bob")
    (real / "eve.ipynb").symlink_to(real / "ann.ipynb")
    (tmp_path / "handins").symlink_to(real)
    (tmp_path / "carl.ipynb").symlink_to(_lab_file(tmp_path / "elsewhere", "x.ipynb"))
    entries = dict(expand_submissions([tmp_path / "handins", tmp_path / "carl.ipynb"], "lab90_sample"))
    assert sorted(entries) == ["ann", "bob", "carl", "eve"], entries
    for student in ("ann", "bob", "carl"):
        assert read_handin(entries[student]).startswith(b"{"), student
    from xlalab.grading.submissions import Unreadable

    with pytest.raises(Unreadable, match="symbolic link"):
        read_handin(entries["eve"])


def test_a_hand_in_named_after_the_lab_takes_its_folder_name(tmp_path):
    """Issue 26: ``handin/<student>/lab01_timing.ipynb`` named the row after the lab file, not the student."""
    paths = [_lab_file(tmp_path / "handin" / s) for s in ("ann", "bob")]
    assert [n for n, _ in expand_submissions(paths, "lab90_sample")] == ["ann", "bob"]
    other = _lab_file(tmp_path / "handin" / "cid", "my_work.ipynb")
    assert [n for n, _ in expand_submissions([other], "lab90_sample")] == ["my_work"]


def test_a_hard_link_to_the_source_is_refused_and_a_byte_copy_is_flagged(tmp_path):
    """Break: a hard link to the private source (a tar unpacked with Python's defaults makes one) is a regular
    file: it earned 20/20 with the model answers filed as the student's. It is refused (same device and inode as
    a source file), its answers are not read; a hand-in whose bytes equal a source notebook's is flagged."""
    import shutil

    from conftest import make_answers_root, MODEL_WHY, SAMPLE
    from xlalab import grade

    (tmp_path / "repo").mkdir()
    root = make_answers_root(tmp_path / "repo")
    src = root / "solutions" / f"{SAMPLE}.ipynb"
    subs = tmp_path / "subs"
    subs.mkdir()
    os.link(src, subs / "linked.ipynb")
    shutil.copyfile(src, subs / "copied.ipynb")
    out = tmp_path / "out"
    rows = {r.student: r for r in grade.grade_submissions(src, [subs], out, sandbox="none", cell_timeout=30,
                                                          timeout=60, memory_gb=3, quiet=True)}
    linked, copied = rows["linked"], rows["copied"]
    assert linked.state == "not graded" and "the same file as the instructor's source" in linked.status
    assert linked.auto == 0 and all(a.state == "missing" for a in linked.answers), linked.answers
    answers = (out / "answers" / SAMPLE / "p2-why.md").read_text(encoding="utf-8")
    assert answers.count("MODEL-SECRET") == 2, "the model answer once at the top, once in the byte copy's answer"
    assert MODEL_WHY in answers
    assert [f.kind for f in copied.faults if f.kind == "copy of the source"] == ["copy of the source"]
    assert "byte for byte the instructor's source" in copied.status
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "byte for byte the instructor&#x27;s source" in report
