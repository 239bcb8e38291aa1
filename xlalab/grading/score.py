"""Scoring one submission: per-check results from the judge's run, errors of the student's cells, the status.

A check passes only if nbval passed its cell in the judge notebook (:mod:`xlalab.grading.judge`), where no
student code runs; the student's own run contributes only the probe records and the reasons shown in feedback.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from xlalab import fmt
from xlalab.grading import labformat
from xlalab.grading.faults import GRADED, NOT_GRADED, Fault, FaultKind, not_graded
from xlalab.grading.lab import Lab
from xlalab.grading.model import ANSWERED, EMPTY, MISSING, UNCHANGED, AnswerResult, CheckResult, Row
from xlalab.grading.run import CellResult, RunOutcome
from xlalab.grading.watchdog import died_text

STATUS_OK = GRADED   # the status of a row with nothing to say (the API's old name)
GRADER_CELLS = ("xlalab-grader-init", "xlalab-judge-init")


def zero_row(lab: Lab, student: str, why: str, submission: str = "") -> Row:
    """A row with 0 points on every check (a submission that was not graded), with the reason ``why``."""
    checks = [CheckResult(c.check, c.points, c.hidden, False, "not graded") for c in lab.checks]
    return Row(student, lab.name, lab.maximum, checks, submission=submission, state=NOT_GRADED,
               faults=[not_graded(why)])


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



_KIND = re.compile(r"(?:did not run: )?(?:[A-Za-z_]\w*\.)*([A-Z]\w{0,80}(?:Error|Exception|Interrupt|Exit|Warning))"
                   r"(?::|$)")


def hidden_message(message: str, *, own: bool = False, cell_timeout: bool = False, missing: bool = False) -> str:
    """What the feedback says about a failed hidden check: ``message`` as is when it is the grader's own reason
    about the run (``own``: a time limit, a dead kernel, refused records; they carry nothing of the check), else
    only that it failed and why in general: its cell ran past its timeout, a probe it calls did not run in the
    student's notebook (``missing``), or the exception's type (the first word of an error message names it). An
    error message may quote the check's inputs or expected value (an assertion's f-string, or the student's
    function naming its argument), so it is never shown; the full message is the instructor's
    (``CheckResult.detail``)."""
    message = (message or "").strip()
    if own:
        return message
    if cell_timeout:
        return "a hidden check failed: its cell ran past the cell time limit (Timeout)"
    if missing:
        return "a hidden check failed: a probe it calls did not run in your notebook"
    m = _KIND.match(message)
    return f"a hidden check failed: {m.group(1)}" if m else "a hidden check failed"


@dataclass
class Verdicts:
    """What the judge's kernel recorded (:func:`xlalab.grading.probe.passed`, :func:`~xlalab.grading.probe.judging`),
    by check id."""

    ended: set[str] = field(default_factory=set)     # checks whose last line ran
    missing: set[str] = field(default_factory=set)   # checks that asked for a probe the student's notebook never ran
    raised: set[str] = field(default_factory=set)    # checks that replayed an error of the student's code

    @classmethod
    def parse(cls, data: bytes) -> Verdicts:
        """The verdict records (JSON lines); a line that is not one is skipped."""
        out = cls()
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            check = rec.get("check") if isinstance(rec, dict) else None
            if not isinstance(check, str):
                continue
            if rec.get("passed") is True:
                out.ended.add(check)
            if "missing" in rec:
                out.missing.add(check)
            if "raised" in rec:
                out.raised.add(check)
        return out


def _by_check(results: list[CellResult]) -> dict[str, CellResult]:
    """The result of each check cell: a failure in any phase wins over a pass."""
    out: dict[str, CellResult] = {}
    for r in results:
        if r.check and (r.check not in out or out[r.check].passed):
            out[r.check] = r
    return out


def _died(results: list[CellResult]) -> str | None:
    """How the kernel died, from the first result that says it died while its cell ran (data, not words)."""
    for r in results:
        if r.died is not None:
            if r.died.get("signal") == "SIGKILL":
                return "the kernel died (SIGKILL: killed, e.g. for using too much memory)"
            return died_text(r.died)
    return None


def _setup_failed(lab: Lab, results: list[CellResult], who: str) -> str | None:
    setup_id = next((c.get("id") for c in lab.released.cells if labformat.xmeta(c).get("setup")), None)
    for r in results:
        if not r.passed and r.id in GRADER_CELLS:
            return f"the grader could not set up the kernel of {who} ({r.message or 'failed'})"
        if not r.passed and r.id == setup_id:
            return f"the lab's setup cell failed in {who} ({r.message or 'failed'})"
    return None


@dataclass
class _Why:
    """Why a check's cell did not run to its end in the student's kernel."""

    text: str = ""            # "" if it did
    limit: bool = False       # a time limit ended it (its cell's timeout, or the notebook's before it ran)
    cell_timeout: bool = False   # its own cell reached its timeout
    dead: bool = False        # the kernel had died in an earlier cell


def _student_why(rec: CellResult | None, outcome: RunOutcome, timeout: float) -> _Why:
    """Why a check's cell did not run to its end in the student's kernel (empty: it did)."""
    if rec is None:
        if outcome.timed_out:
            return _Why(f"the notebook reached the time limit ({timeout:g} s) first", limit=True)
        return _Why()
    if rec.passed:
        return _Why()
    if rec.dead_at_start:
        return _Why("the kernel had died in an earlier cell", dead=True)
    # a cell after a timed-out one (xfail) never gets here: score() says "not graded" first
    return _Why(rec.message or rec.outcome, limit=rec.timed_out, cell_timeout=rec.timed_out)


def run_faults(lab: Lab, student: RunOutcome, judge: RunOutcome | None, timeout: float,
               records_fault: str | None = None) -> list[Fault]:
    """The faults of one hand-in's two runs, typed, each named in the status: setup failed, time limit, kernel
    died, nbval did not run (the student's kernel); probe records refused; the judge could not set up or did not
    finish."""
    faults: list[Fault] = []

    def add(kind: FaultKind, detail: str) -> None:
        faults.append(Fault(kind, detail, detail))

    setup_failed = _setup_failed(lab, student.results, "your notebook")
    if setup_failed:
        add(FaultKind.SETUP_FAILED, setup_failed)
    if student.timed_out:
        add(FaultKind.TIME_LIMIT, f"time limit {timeout:g} s reached")
    elif student.stuck:
        add(FaultKind.TIME_LIMIT, f"the run was ended: it did not finish {student.stuck} within its cell timeout "
                                  "and the shutdown margin")
    died = _died(student.results)
    if died:
        add(FaultKind.KERNEL_DIED, died)
    if not student.ran and not student.timed_out:
        add(FaultKind.SETUP_FAILED, "nbval did not run (see the grader log)")
    if records_fault:
        add(FaultKind.RECORDS_REFUSED, f"probe records refused: {records_fault}")
    if judge is not None:
        judge_failed = _setup_failed(lab, judge.results, "the judge")
        if judge_failed:
            add(FaultKind.JUDGE_FAILED, judge_failed)
        if judge.timed_out or judge.stuck or _died(judge.results):
            add(FaultKind.JUDGE_FAILED, "the judge did not finish (" + (_died(judge.results) or "time limit") + ")")
    return faults


@dataclass
class Scored:
    """What :func:`score` makes of one hand-in's two runs."""

    checks: list[CheckResult]
    """One result per check of the lab (the judge's verdicts)."""
    cell_errors: list[str]
    """Errors of the student's other cells (at most 10)."""
    faults: list[Fault]
    """The runs' faults (:func:`run_faults`), each named in the row's status."""


def _check_result(check: labformat.Check, rec: CellResult | None, mine: CellResult | None, student: RunOutcome,
                  judge: RunOutcome | None, verdicts: Verdicts, timeout: float, records_fault: str | None,
                  setup_failed: str | None, judge_failed: str | None) -> CheckResult:
    """One check's result: passed only if the judge passed its cell and its last line ran; else why, typed."""
    # nbval runs the cells after a timed-out one in the interrupted kernel, expecting them to fail (xfail): what
    # they record depends on how far the interrupted cell got and on the machine's speed, so they never score.
    after_timeout = mine is not None and mine.xfail
    passed = bool(rec is not None and rec.phase == "call" and rec.passed and check.check in verdicts.ended
                  and not after_timeout)
    why = _student_why(mine, student, timeout)
    own, limit, cell_timeout, missing = True, False, False, False
    if passed:
        message = ""
    elif records_fault:
        message = f"not judged: {records_fault}"
    elif setup_failed:
        message = f"did not run: {setup_failed}"
    elif after_timeout:
        message, limit = "not graded: an earlier cell timed out", True
    elif judge_failed:
        message = f"not judged: {judge_failed}"
    elif rec is None:
        if judge is not None and judge.timed_out:
            message, limit = f"not judged: the judge reached the time limit ({timeout:g} s)", True
        else:
            message = "not judged: the judge did not reach this check"
    elif rec.passed:
        message = "the judge's cell passed but the check did not reach its end (its error was not reported)"
    elif why.text and (check.check in verdicts.missing or (check.check in verdicts.raised and why.cell_timeout)):
        # the judge failed for want of what the student's run never recorded: say why it did not
        message = why.text if why.cell_timeout else f"did not run: {why.text}"
        own, limit, cell_timeout = why.dead, why.limit, why.cell_timeout
    else:
        message, own = rec.message or rec.outcome, False
        limit = cell_timeout = rec.timed_out
        missing = check.check in verdicts.missing
    detail = ""
    if check.hidden and not passed:
        message, detail = hidden_message(message, own=own, cell_timeout=cell_timeout, missing=missing), message
    return CheckResult(check.check, check.points, check.hidden, passed, message, detail, timed_out=limit)


def score(lab: Lab, student: RunOutcome, judge: RunOutcome | None, timeout: float,
          records_fault: str | None = None) -> Scored:
    """Per-check results (the judge's verdicts), errors of the student's other cells, and the runs' faults.

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
    verdicts = Verdicts.parse(judge.records) if judge is not None else Verdicts()
    checks = [_check_result(check, judged.get(check.check), in_student.get(check.check), student, judge, verdicts,
                            timeout, records_fault, setup_failed, judge_failed) for check in lab.checks]
    return Scored(checks, other_errors[:10], run_faults(lab, student, judge, timeout, records_fault))


__all__ = ["ANSWERED", "EMPTY", "GRADER_CELLS", "MISSING", "STATUS_OK", "UNCHANGED", "AnswerResult", "CheckResult",
           "Row", "Scored", "Verdicts", "blocked_notes", "hidden_message", "run_faults", "score", "zero_row"]
