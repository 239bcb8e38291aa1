"""The instructors' Python API: grade a class, build a lab, read a gradebook, from a script or a notebook.

The ``xlalab`` command (:mod:`xlalab.cli`) is the one way in from a shell; this module is the one import for
Python. Everything here is also reachable where it is defined; the names below are the ones kept stable.

Grade a class (the options are ``xlalab grade``'s, :class:`GradeOptions`; their defaults :data:`GRADE`)::

    from xlalab.grading.api import GradeOptions, grade_submissions, summary_table
    rows = grade_submissions("lab01_timing", ["hand-ins/"], GradeOptions(out="grades", jobs=2))
    print(summary_table(rows, rows.elapsed))

Build a lab (``solutions/`` -> ``labs/``, as ``xlalab assign``)::

    from xlalab.grading.api import build_lab
    path, text = build_lab("solutions/lab01_timing.ipynb", root=".")

Read a gradebook (the grader's own rows, never ``gradebook.csv`` read back)::

    from xlalab.grading.api import read_rows
    for row in read_rows("lab01_timing", "grades"):
        print(row.student, row.total, row.status)

Then ``class_report``, ``merge_manual`` and ``export_gradebook`` remake the report, fold the instructor's scores
of the written answers in, and write a platform's CSV, as ``xlalab report``, ``merge-manual`` and ``export`` do.
"""

from __future__ import annotations

from pathlib import Path

from xlalab.grading.assign import build as build_lab
from xlalab.grading.build import build_graded
from xlalab.grading.cli import (
    Graded,
    class_report,
    export_gradebook,
    grade_submissions,
    merge_manual,
)
from xlalab.grading.engine import EngineSpec
from xlalab.grading.feedback import feedback_text, summary_table
from xlalab.grading.gradebook import Gradebook
from xlalab.grading.lab import Lab, load_lab
from xlalab.grading.model import AnswerResult, CheckResult, Row
from xlalab.grading.options import GRADE, ExportOptions, GradeOptions, MergeManualOptions, ReportOptions
from xlalab.grading.run import RunOutcome, run_notebook
from xlalab.grading.score import STATUS_OK, Scored, score
from xlalab.grading.submissions import HandIn, Unreadable, expand_submissions, read_submission, safe_name
from xlalab.grading.task import Limits, grade_one


def read_rows(lab: str | Path, out: str | Path = GRADE.out, *, source: str | Path | None = None) -> list[Row]:
    """The rows of the gradebook in ``out`` for ``lab``, as the grader keeps them (its private spool), by student."""
    the_lab = load_lab(lab, source)
    with Gradebook(out, [c.check for c in the_lab.checks], quiet=True,
                   answer_ids=[a.answer for a in the_lab.answers]) as book:
        return [book.stored[s] for s in sorted(book.stored)]


__all__ = ["GRADE", "STATUS_OK", "AnswerResult", "CheckResult", "EngineSpec", "ExportOptions", "GradeOptions",
           "Gradebook", "Graded", "HandIn", "Lab", "Limits", "MergeManualOptions", "ReportOptions", "Row",
           "RunOutcome", "Scored", "Unreadable", "build_graded", "build_lab", "class_report", "expand_submissions",
           "export_gradebook", "feedback_text", "grade_one", "grade_submissions", "load_lab", "merge_manual",
           "read_rows", "read_submission", "run_notebook", "safe_name", "score", "summary_table"]
