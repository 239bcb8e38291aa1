"""The records of grading: one check's result, one written answer's, and a student's row (what the gradebook,
the feedback and the class report are made from). Plain data; the row's status is made from its typed faults
(:func:`xlalab.grading.faults.status_text`), never kept or appended to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from xlalab.grading.faults import GRADED, Fault, reason, status_text

# The states of a written answer; all but "answered" score 0 without the instructor.
ANSWERED, EMPTY, UNCHANGED, MISSING = "answered", "empty", "unchanged", "missing"


@dataclass
class CheckResult:
    """One check of one submission: passed only if nbval passed its cell in the judge notebook."""

    check: str
    """The check's id (a gradebook column)."""
    points: float
    """What it is worth."""
    hidden: bool
    """Whether students never see it (its source and inputs stay with the instructor)."""
    passed: bool
    """Whether the judge passed it."""
    message: str = ""
    """Why it failed, as the student reads it (for a failed hidden check, a generic reason:
    :func:`xlalab.grading.score.hidden_message`)."""
    detail: str = ""
    """The full reason of a failed hidden check, for the instructor only (the class report)."""
    timed_out: bool = False
    """It failed because a time limit was reached (its cell's timeout, the notebook's or the judge's)."""

    @property
    def earned(self) -> float:
        """Its points if it passed, else 0."""
        return self.points if self.passed else 0.0


@dataclass
class AnswerResult:
    """One written answer of one submission, read from the submission by the grader's own process."""

    answer: str
    """The question's id (a gradebook column)."""
    points: float
    """What it is worth."""
    state: str
    """:data:`ANSWERED`, :data:`EMPTY`, :data:`UNCHANGED` or :data:`MISSING`."""
    text: str = ""
    """The student's answer."""
    earned: float | None = None
    """The instructor's points: None until merged (``xlalab merge-manual``); an empty, unchanged or missing answer
    scores 0 at once."""
    comment: str = ""
    """The instructor's comment."""

    @property
    def score(self) -> float:
        """Its points so far (0 while not scored)."""
        return self.earned or 0.0


@dataclass
class Row:
    """One student's line of the gradebook, with what the feedback file needs."""

    student: str
    """The student's name (the hand-in's file or folder name)."""
    lab: str
    """The lab's name."""
    maximum: float
    """The lab's points (checks and written answers)."""
    checks: list[CheckResult] = field(default_factory=list)
    """One result per check of the lab, in the lab's order."""
    tampering: list[str] = field(default_factory=list)
    """Check cells changed or deleted (the released ones ran)."""
    notes: list[str] = field(default_factory=list)
    """Not tampering: check cells of an earlier release."""
    cell_errors: list[str] = field(default_factory=list)
    """Errors of the student's own cells (at most 10)."""
    seconds: float = 0.0
    """Wall time of grading this hand-in."""
    submission: str = ""
    """The hand-in's path."""
    blocked: list[str] = field(default_factory=list)
    """What the grader's limits or jail refused, as far as the cells' errors tell."""
    sandbox: str = ""
    """The jail it ran in (``bwrap``, ``none``)."""
    notebook_seconds: float = 0.0
    """The runs under nbval (pytest start, kernel, cells, teardown)."""
    cells_seconds: float = 0.0
    """The notebook's own cells (the lab's, the student's, the checks)."""
    cpu_seconds: float = 0.0
    """CPU time of the runs (pytest, kernel; exact when one run at a time)."""
    answers: list[AnswerResult] = field(default_factory=list)
    """Written answers (read by the client, before any student code of the run)."""
    state: str = GRADED
    """:data:`~xlalab.grading.faults.GRADED` or :data:`~xlalab.grading.faults.NOT_GRADED`."""
    faults: list[Fault] = field(default_factory=list)
    """What went wrong, typed, in the order the status names them (the class report counts them)."""
    kept_status: str = ""
    """A row an older grader kept (its faults carry no status words): its status as that grader worded it, shown
    as is (never read for meaning); "" for every row this grader makes."""

    @property
    def status(self) -> str:
        """The status words (:func:`~xlalab.grading.faults.status_text`), without the written answers pending."""
        return status_text(self.state, self.faults, kept=self.kept_status)

    def status_line(self) -> str:
        """The gradebook's status column: :attr:`status` and the written answers not scored yet."""
        return status_text(self.state, self.faults, self.pending, kept=self.kept_status)

    @property
    def reason(self) -> str:
        """Why the row was not graded ("" for a graded row)."""
        return reason(self.faults)

    @property
    def auto(self) -> float:
        """Points of the automatic checks."""
        return sum(c.earned for c in self.checks)

    @property
    def manual(self) -> float:
        """Points of the written answers graded so far (pending ones count 0)."""
        return sum(a.score for a in self.answers)

    @property
    def max_auto(self) -> float:
        """Points the automatic checks are worth."""
        return sum(c.points for c in self.checks)

    @property
    def max_manual(self) -> float:
        """Points the written answers are worth."""
        return sum(a.points for a in self.answers)

    @property
    def pending(self) -> list[str]:
        """Written answers the instructor has not scored yet."""
        return [a.answer for a in self.answers if a.earned is None]

    @property
    def total(self) -> float:
        """Automatic and written points so far."""
        return self.auto + self.manual

    def points(self) -> dict[str, float]:
        """Each check's points earned."""
        return {c.check: c.earned for c in self.checks}

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON data (what the spool keeps)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        """A row the spool kept. Unknown keys are dropped (an older grader's ``restored`` list); a row whose faults
        carry no status words (an older grader's) keeps its ``status`` words as :attr:`kept_status`."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["checks"] = [CheckResult(**{k: v for k, v in c.items() if k in CheckResult.__dataclass_fields__})
                           for c in known.get("checks", [])]
        known["answers"] = [AnswerResult(**a) for a in known.get("answers", [])]
        known["faults"] = [f for f in map(Fault.from_dict, known.get("faults") or []) if f is not None]
        words = data.get("status")
        if isinstance(words, str) and not any(isinstance(f, dict) and "status" in f for f in data.get("faults") or []):
            known["kept_status"] = words   # its grader kept the status as words beside the faults: shown as is
        return cls(**known)
