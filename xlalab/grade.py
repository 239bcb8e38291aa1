"""``python -m xlalab.grade``, now ``xlalab grade``: grade a class's hand-ins of one lab. The code is the package
:mod:`xlalab.grading` (see its docstring for the pipeline); this module keeps the old import paths.

``xlalab grade LAB SUBMISSIONS... --out grades/ [-j N] [--source DIR] [--sandbox auto|bwrap|none]``
(all options: ``xlalab grade --help``; the older ``python -m xlalab.grade`` keeps working, --report and all).
"""

import sys

from xlalab.grading.build import build_graded
from xlalab.grading.cli import Graded, grade_submissions, main
from xlalab.grading.engine import EngineSpec
from xlalab.grading.feedback import feedback_text, summary_table
from xlalab.grading.gradebook import Gradebook
from xlalab.grading.lab import Lab, load_lab
from xlalab.grading.run import RunOutcome, run_notebook
from xlalab.grading.score import STATUS_OK, CheckResult, Row, score
from xlalab.grading.submissions import Unreadable, expand_submissions, read_submission, safe_name
from xlalab.grading.task import grade_one

__all__ = ["CheckResult", "EngineSpec", "Gradebook", "Graded", "Lab", "Row", "RunOutcome", "STATUS_OK",
           "Unreadable", "build_graded", "expand_submissions", "feedback_text", "grade_one",
           "grade_submissions", "load_lab", "main", "read_submission", "run_notebook", "safe_name", "score",
           "summary_table"]

if __name__ == "__main__":
    print("note: `python -m xlalab.grade` is now `xlalab grade` (and `xlalab report`, `merge-manual`, `export`); "
          "this form keeps working", file=sys.stderr)
    sys.exit(main())
