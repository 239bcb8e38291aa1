"""Scoring one submission: per-check results from the judge's run, errors of the student's cells, the status.

A check passes only if nbval passed its cell in the judge notebook (:mod:`xlalab.grading.judge`), where no
student code runs; the student's own run contributes only the probe records and the reasons shown in feedback.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from xlalab import fmt
from xlalab.grading import assign
from xlalab.grading.faults import GRADED, NOT_GRADED, Fault, from_status
from xlalab.grading.lab import Lab
from xlalab.grading.run import CellResult, RunOutcome

STATUS_OK = "graded"
GRADER_CELLS = ("xlalab-grader-init", "xlalab-judge-init")


@dataclass
class CheckResult:
    """One check of one submission: passed only if nbval passed its cell in the judge notebook.

    ``message`` is what the student reads (for a failed hidden check, a generic reason: :func:`hidden_message`);
    ``detail`` the full reason of a failed hidden check, for the instructor only (the class report).
    """

    check: str
    points: float
    hidden: bool
    passed: bool
    message: str = ""
    detail: str = ""

    @property
    def earned(self) -> float:
        return self.points if self.passed else 0.0


# The states of a written answer; all but "answered" score 0 without the instructor.
ANSWERED, EMPTY, UNCHANGED, MISSING = "answered", "empty", "unchanged", "missing"


@dataclass
class AnswerResult:
    """One written answer of one submission, read from the submission by the grader's own process.

    ``earned`` is None until the instructor's points are merged (``xlalab merge-manual``); an empty, unchanged
    or missing answer scores 0 at once.
    """

    answer: str
    points: float
    state: str
    text: str = ""
    earned: float | None = None
    comment: str = ""

    @property
    def score(self) -> float:
        return self.earned or 0.0


@dataclass
class Row:
    """One student's line of the gradebook, with what the feedback file needs."""

    student: str
    lab: str
    maximum: float
    checks: list[CheckResult] = field(default_factory=list)
    status: str = STATUS_OK
    tampering: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # not tampering: check cells of an earlier release
    restored: list[str] = field(default_factory=list)
    cell_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    submission: str = ""
    blocked: list[str] = field(default_factory=list)
    sandbox: str = ""
    notebook_seconds: float = 0.0   # the run under nbval (pytest start, kernel, cells, teardown)
    cells_seconds: float = 0.0      # the notebook's own cells (the lab's, the student's, the checks)
    cpu_seconds: float = 0.0        # CPU time of the run (pytest, kernel; exact when one run at a time)
    answers: list[AnswerResult] = field(default_factory=list)   # written answers (client side)
    state: str = GRADED             # GRADED or NOT_GRADED (:mod:`.faults`); ``status`` is the text for people
    faults: list[Fault] = field(default_factory=list)           # typed: what the class report counts

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
        return sum(c.points for c in self.checks)

    @property
    def max_manual(self) -> float:
        return sum(a.points for a in self.answers)

    @property
    def pending(self) -> list[str]:
        """Written answers the instructor has not scored yet."""
        return [a.answer for a in self.answers if a.earned is None]

    @property
    def total(self) -> float:
        return self.auto + self.manual

    def points(self) -> dict[str, float]:
        return {c.check: c.earned for c in self.checks}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["checks"] = [CheckResult(**c) for c in known.get("checks", [])]
        known["answers"] = [AnswerResult(**a) for a in known.get("answers", [])]
        if "faults" in known:
            known["faults"] = [f for f in map(Fault.from_dict, known["faults"] or []) if f is not None]
        row = cls(**known)
        if "faults" not in data:   # a row an older grader kept: its faults read once from its words
            row.state, row.faults = from_status(row)
        return row


def zero_row(lab: Lab, student: str, status: str, submission: str = "") -> Row:
    """A row with 0 points on every check (a submission that was not graded), with the reason."""
    checks = [CheckResult(c.check, c.points, c.hidden, False, "not graded") for c in lab.checks]
    return Row(student, lab.name, lab.maximum, checks, status=status, submission=submission, state=NOT_GRADED,
               faults=[Fault("not graded", status.removeprefix("not graded: "))])


# What the jail refused, read from the errors of the student's cells (only where the error says so).
_BLOCKED = [
    (re.compile(r"Errno (101|111|113|-2|-3|-5)\b|Network is unreachable|Connection refused|"
                r"Temporary failure in name resolution|Name or service not known|gaierror"),
     "to open a network connection (the notebook runs without a network)"),
    (re.compile(r"Errno 30\b|Read-only file system"), "to write outside its work folder (read-only)"),
    (re.compile(r"FileNotFoundError.*?'(/[^']*)'"), "to use {0} (outside its work folder: not in the sandbox)"),
    (re.compile(r"MemoryError|Unable to allocate|std::bad_alloc|Cannot allocate memory"),
     "to use memory beyond the limit of {memory}"),
    (re.compile(r"Errno 28\b|No space left on device|Errno 27\b|File too large"),
     "to write more than the size limits allow (the work folder {work_size}, /tmp {tmp_size}, /dev/shm "
     "{shm_size}; they are memory, not disk)"),
    (re.compile(r"Errno 11\b|Resource temporarily unavailable|can't start new thread"),
     "to start more processes or threads than the limit of {tasks}"),
]


def blocked_notes(errors: list[str], *, sandbox_on: bool, memory_gb: float, work: str = "") -> list[str]:
    """What the grader's limits or jail refused, as far as the cells' errors tell (``work``: the work folder,
    where a missing file is the notebook's own business)."""
    notes: list[str] = []
    for err in errors:
        for pattern, text in _BLOCKED:
            m = pattern.search(err)
            if not m or (not sandbox_on and "memory" not in text):
                continue
            if m.groups() and work and m.group(1).startswith(work.rstrip("/") + "/"):
                continue
            from xlalab.grading import sandbox as sandbox_mod

            limits = dict(memory=f"{memory_gb:g} GB", work_size=fmt.limit_size(sandbox_mod.WORK_BYTES),
                          tmp_size=fmt.limit_size(sandbox_mod.TMP_BYTES),
                          shm_size=fmt.limit_size(sandbox_mod.SHM_BYTES),
                          tasks=sandbox_mod.MAX_TASKS)
            note = text.format(*m.groups(), **limits) if m.groups() else text.format(**limits)
            if note not in notes:
                notes.append(note)
            break
    return notes



# What a failed hidden check's feedback may say as is: the grader's own words about the run, which carry nothing of
# the check (its source, inputs or expected values).
_RUN_REASONS = re.compile(r"(not judged: .*|not graded: .*|did not run: the lab's setup cell failed.*|"
                          r"did not run: the grader could not set up.*|did not run: the kernel had died.*|"
                          r"the judge's cell passed but the check did not reach its end.*)", re.S)
_KIND = re.compile(r"(?:did not run: )?(?:[A-Za-z_]\w*\.)*([A-Z]\w{0,80}(?:Error|Exception|Interrupt|Exit|Warning))"
                   r"(?::|$)")


def hidden_message(message: str) -> str:
    """What the feedback says about a failed hidden check: the grader's reason when the run itself failed (a
    time limit, a dead kernel, refused records), else only that it failed and the exception's type. An error
    message may quote the check's inputs or expected value (an assertion's f-string, or the student's function
    naming its argument), so it is never shown; the full message is the instructor's (``CheckResult.detail``)."""
    message = (message or "").strip()
    if _RUN_REASONS.fullmatch(message):
        return message
    if "Timeout" in message or "timed out" in message:
        return "a hidden check failed: its cell ran past the cell time limit (Timeout)"
    if "did not run in your notebook" in message:
        return "a hidden check failed: a probe it calls did not run in your notebook"
    m = _KIND.match(message)
    return f"a hidden check failed: {m.group(1)}" if m else "a hidden check failed"


def _by_check(results: list[CellResult]) -> dict[str, CellResult]:
    """The result of each check cell: a failure in any phase wins over a pass."""
    out: dict[str, CellResult] = {}
    for r in results:
        if r.check and (r.check not in out or out[r.check].passed):
            out[r.check] = r
    return out


def _died(results: list[CellResult]) -> str | None:
    for r in results:
        if "the kernel died" in r.message:
            died = r.message.replace(" while this cell ran", "")
            return died.replace("(SIGKILL)", "(SIGKILL: killed, e.g. for using too much memory)")
    return None


def _setup_failed(lab: Lab, results: list[CellResult], who: str) -> str | None:
    setup_id = next((c.get("id") for c in lab.released.cells if assign.xmeta(c).get("setup")), None)
    for r in results:
        if not r.passed and r.id in GRADER_CELLS:
            return f"the grader could not set up the kernel of {who} ({r.message or 'failed'})"
        if not r.passed and r.id == setup_id:
            return f"the lab's setup cell failed in {who} ({r.message or 'failed'})"
    return None


def _student_message(rec: CellResult | None, outcome: RunOutcome, timeout: float) -> str:
    """Why a check's cell did not run to its end in the student's kernel, or ""."""
    if rec is None:
        return f"the notebook reached the time limit ({timeout:g} s) first" if outcome.timed_out else ""
    if rec.passed:
        return ""
    message = rec.message or rec.outcome
    if message == "RuntimeError: Kernel dead on test start":
        return "the kernel had died in an earlier cell"
    return message   # a cell after a timed-out one (xfail) never gets here: score() says "not graded" first


def run_faults(lab: Lab, student: RunOutcome, judge: RunOutcome | None, timeout: float,
               records_fault: str | None = None) -> list[Fault]:
    """The faults of one hand-in's two runs, typed: setup failed, time limit, kernel died, nbval did not run (the
    student's kernel); probe records refused; the judge could not set up or did not finish."""
    faults: list[Fault] = []
    setup_failed = _setup_failed(lab, student.results, "your notebook")
    if setup_failed:
        faults.append(Fault("setup failed", setup_failed))
    if student.timed_out:
        faults.append(Fault("time limit", f"time limit {timeout:g} s reached"))
    elif student.stuck:
        faults.append(Fault("time limit", f"the run was ended: it did not finish {student.stuck} within its cell "
                                          "timeout and the shutdown margin"))
    died = _died(student.results)
    if died:
        faults.append(Fault("kernel died", died))
    if not student.ran and not student.timed_out:
        faults.append(Fault("setup failed", "nbval did not run (see the grader log)"))
    if records_fault:
        faults.append(Fault("records refused", f"probe records refused: {records_fault}"))
    if judge is not None:
        judge_failed = _setup_failed(lab, judge.results, "the judge")
        if judge_failed:
            faults.append(Fault("judge failed", judge_failed))
        if judge.timed_out or judge.stuck or _died(judge.results):
            faults.append(Fault("judge failed", "the judge did not finish (" + (_died(judge.results) or "time limit")
                                + ")"))
    return faults


def score(lab: Lab, student: RunOutcome, judge: RunOutcome | None, timeout: float,
          records_fault: str | None = None) -> tuple[list[CheckResult], list[str], str]:
    """Per-check results (the judge's verdicts), errors of the student's other cells, and the status.

    ``judge`` is None when the probe records were refused (``records_fault`` says why): every check fails with
    that reason.
    """
    other_errors = [f"cell `{r.id}`: {r.message or r.outcome}" if r.id else f"code cell {r.cell}: {r.message}"
                    for r in student.results if not r.check and not r.passed and r.phase == "call"]
    in_student = _by_check(student.results)
    judged = _by_check(judge.results) if judge is not None else {}
    setup_failed = _setup_failed(lab, student.results, "your notebook")
    judge_failed = _setup_failed(lab, judge.results, "the judge") if judge is not None else None
    # The checks whose last line ran in the judge (xlalab.grading.probe.passed): nbval's pass alone is not enough.
    ended = set(judge.records.decode("utf-8", errors="replace").split()) if judge is not None else set()
    checks = []
    for check in lab.checks:
        rec = judged.get(check.check)
        mine = in_student.get(check.check)
        # nbval runs the cells after a timed-out one in the interrupted kernel, expecting them to fail (xfail): what
        # they record depends on how far the interrupted cell got and on the machine's speed, so they never score.
        after_timeout = mine is not None and mine.xfail
        passed = bool(rec is not None and rec.phase == "call" and rec.passed and check.check in ended
                      and not after_timeout)
        why = _student_message(mine, student, timeout)
        if passed:
            message = ""
        elif records_fault:
            message = f"not judged: {records_fault}"
        elif setup_failed:
            message = f"did not run: {setup_failed}"
        elif after_timeout:
            message = "not graded: an earlier cell timed out"
        elif judge_failed:
            message = f"not judged: {judge_failed}"
        elif rec is None:
            if judge is not None and judge.timed_out:
                message = f"not judged: the judge reached the time limit ({timeout:g} s)"
            else:
                message = "not judged: the judge did not reach this check"
        elif rec.passed:
            message = "the judge's cell passed but the check did not reach its end (its error was not reported)"
        else:
            message = rec.message or rec.outcome
            if why and ("did not run in your notebook" in message or
                        ("KeyboardInterrupt" in message and "Timeout" in why)):
                message = why if "Timeout" in why else f"did not run: {why}"
        detail = ""
        if check.hidden and not passed:
            message, detail = hidden_message(message), message
        checks.append(CheckResult(check.check, check.points, check.hidden, passed, message, detail))
    status = "; ".join([STATUS_OK] + [f.detail for f in run_faults(lab, student, judge, timeout, records_fault)])
    return checks, other_errors[:10], status
