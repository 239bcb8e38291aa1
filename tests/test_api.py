"""xlalab.grading.api, the instructors' one Python import (issue 37): what the old xlalab.grade offered is there,
and a gradebook reads back as the grader's own rows."""

from __future__ import annotations

from xlalab.grading import api
from xlalab.grading.gradebook import Gradebook
from xlalab.grading.model import CheckResult, Row
from xlalab.grading.score import zero_row

from helpers import SAMPLE, make_lab_root

# What `from xlalab.grade import ...` gave instructors' scripts before issue 37 (its __all__, less `main`).
OLD_GRADE_NAMES = ["CheckResult", "EngineSpec", "Gradebook", "Graded", "Lab", "Row", "RunOutcome", "STATUS_OK",
                   "Unreadable", "build_graded", "expand_submissions", "feedback_text", "grade_one",
                   "grade_submissions", "load_lab", "read_submission", "run_notebook", "safe_name", "score",
                   "summary_table"]


def test_the_api_offers_what_xlalab_grade_did_and_the_commands_functions():
    missing = [n for n in OLD_GRADE_NAMES + ["GradeOptions", "HandIn", "Limits", "build_lab", "class_report",
                                             "merge_manual", "export_gradebook", "read_rows"] if not hasattr(api, n)]
    assert not missing, missing
    assert set(api.__all__) <= set(dir(api))


def test_read_rows_gives_the_grader_rows_by_student(tmp_path):
    (tmp_path / "repo").mkdir()
    root = make_lab_root(tmp_path / "repo")
    lab = api.load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    out = tmp_path / "grades"
    good = Row("zoe", lab.name, lab.maximum, [CheckResult(c.check, c.points, c.hidden, True) for c in lab.checks])
    with Gradebook(out, [c.check for c in lab.checks], quiet=True) as book:
        book.record(good)
        book.record(zero_row(lab, "adam", "empty file"))
    rows = api.read_rows(root / "solutions" / f"{SAMPLE}.ipynb", out)
    assert [(r.student, r.total, r.status) for r in rows] == [("adam", 0, "not graded: empty file"),
                                                             ("zoe", lab.max_auto, "graded")]
