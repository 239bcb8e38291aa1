"""The gradebook module on made-up rows (fast, no kernel): rows come from the grader's spool, never from a
``gradebook.csv`` a student could have written."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from xlalab.grading.gradebook import Gradebook, spool_dir
from xlalab.grading.score import CheckResult, Row

CHECKS = ["a", "b"]


def row(student: str, a: bool, b: bool) -> Row:
    return Row(student, "lab90_sample", 3.0, [CheckResult("a", 1, False, a), CheckResult("b", 2, True, b)])


def read(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def grade(out: Path, *rows: Row) -> list[str]:
    with Gradebook(out, CHECKS, quiet=True) as book:
        for r in rows:
            book.record(r)
    return book.warnings


def test_rows_accumulate_and_a_regraded_row_is_replaced(tmp_path):
    out = tmp_path / "grades"
    assert grade(out, row("ann", True, True), row("bob", False, False)) == []
    assert grade(out, row("bob", True, False)) == []
    book = read(out)
    assert book["ann"]["total"] == "3" and book["bob"]["total"] == "1" and book["bob"]["a"] == "1"
    assert list(book["ann"]) == ["student", "total", "max", "a", "b", "status"]
    assert (out / "feedback" / "bob.md").read_text().count("1 / 3") == 1


def test_a_gradebook_changed_between_runs_is_reported_and_rebuilt(tmp_path):
    out = tmp_path / "grades"
    grade(out, row("ann", True, True), row("bob", False, False))
    (out / "gradebook.csv").write_text("student,total,max,a,b,status\nbob,3,3,1,2,graded\nmallory,3,3,1,2,graded\n")
    warnings = grade(out, row("cid", True, False))
    assert any("changed behind the grader's back before this run" in w for w in warnings), warnings
    book = read(out)
    assert sorted(book) == ["ann", "bob", "cid"] and book["bob"]["total"] == "0"
    assert "mallory" in next(out.glob("gradebook.csv.changed-*")).read_text()


def test_a_gradebook_changed_during_the_run_names_who_ran_since(tmp_path):
    out = tmp_path / "grades"
    with Gradebook(out, CHECKS, quiet=True) as book:
        book.record(row("ann", True, True))
        book.record(row("eve", False, False))
        (out / "gradebook.csv").write_text("student,total\neve,1000\n")   # what eve's notebook did
        (out / "feedback" / "ann.md").write_text("ann: 0 points")
        book.record(row("zed", True, True))
    assert any("while grading (noticed after zed)" in w for w in book.warnings), book.warnings
    assert any("ann.md was changed" in w for w in book.warnings), book.warnings
    assert sorted(read(out)) == ["ann", "eve", "zed"] and read(out)["eve"]["total"] == "0"
    assert "3 / 3" in (out / "feedback" / "ann.md").read_text()


def test_the_spool_is_private_and_outside_the_out_folder(tmp_path, grader_state):
    out = tmp_path / "grades"
    grade(out, row("ann", True, True))
    spool = spool_dir(out)
    assert grader_state in spool.parents and out not in spool.parents
    assert spool.stat().st_mode & 0o077 == 0
    assert all(f.stat().st_mode & 0o077 == 0 for f in spool.glob("row-*.json"))


def test_an_older_gradebook_is_adopted_once_and_a_new_folder_starts_empty(tmp_path):
    old = tmp_path / "old"
    grade(old, row("ann", True, True))
    copy = tmp_path / "copy"
    shutil.copytree(old, copy)                 # no spool for this folder yet: its gradebook is adopted
    grade(copy, row("bob", False, True))
    assert sorted(read(copy)) == ["ann", "bob"]
    shutil.rmtree(old)                          # the instructor starts over at the same path
    assert grade(old, row("cid", True, True)) == []
    assert sorted(read(old)) == ["cid"]
