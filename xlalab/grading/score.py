"""Scoring one run: per-check results, what the guard put back, errors of other cells, and the status.

A check passes only if nbval passed its cell *and* the guard's log says it ended passed.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from xlalab.grading import assign
from xlalab.grading.faults import GRADED, NOT_GRADED, Fault, from_status
from xlalab.grading.lab import Lab
from xlalab.grading.run import RunOutcome

STATUS_OK = "graded"
GRADER_CELLS = ("xlalab-grader-init", "xlalab-grader-bind")


@dataclass
class CheckResult:
    """One check of one submission: passed only if nbval passed its cell and the guard saw it pass."""

    check: str
    points: float
    hidden: bool
    passed: bool
    message: str = ""

    @property
    def earned(self) -> float:
        return self.points if self.passed else 0.0


# The states of a written answer; all but "answered" score 0 without the instructor.
ANSWERED, EMPTY, UNCHANGED, MISSING = "answered", "empty", "unchanged", "missing"


@dataclass
class AnswerResult:
    """One written answer of one submission, read from the submission by the grader's own process.

    ``earned`` is None until the instructor's points are merged (``--merge-manual``); an empty, unchanged
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
    def from_dict(cls, data: dict[str, Any]) -> "Row":
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


def _size(n: int) -> str:
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


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

            limits = dict(memory=f"{memory_gb:g} GB", work_size=_size(sandbox_mod.WORK_BYTES),
                          tmp_size=_size(sandbox_mod.TMP_BYTES), shm_size=_size(sandbox_mod.SHM_BYTES),
                          tasks=sandbox_mod.MAX_TASKS)
            note = text.format(*m.groups(), **limits) if m.groups() else text.format(**limits)
            if note not in notes:
                notes.append(note)
            break
    return notes



_NUMPY_LINES = re.compile(r"(Not equal to tolerance rtol=[-+\w.]+, atol=[-+\w.]+|Arrays are not equal|"
                          r"Arrays are not almost equal to \d+ decimals|Items are not equal:?|"
                          r"\(shapes \(\d*(, ?\d+)*,?\), \(\d*(, ?\d+)*,?\) mismatch\))")
_GRADER_LINES = re.compile(r"(did not run.*|the check did not finish|the check's code did not run.*|"
                           r"AssertionError: the code this check called replaced [^;]{0,300}; the check does not count|"
                           r"KeyboardInterrupt|.*Timeout.*|the kernel died.*|failed|not graded|.*Kernel dead.*)")


def _literal_patterns(body: str) -> list[re.Pattern]:
    """The check's own messages: each string literal of its code, an f-string's values matching anything."""
    import ast

    try:
        tree = ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"[^\n]{0,80}?" for v in node.values]
            out.append(re.compile("".join(parts)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value.strip()) >= 3:
            out.append(re.compile(re.escape(node.value)))
    return out


def hidden_message(message: str, body: str) -> str:
    """What the feedback may say about a failed hidden check: its exception type, and the detail only if it is
    one of the check's own messages (a string literal of its code), a NumPy testing line or the grader's own
    words. Anything else may carry the check's code (e.g. read by the student's function from the frame that
    called it), so it is withheld."""
    message = (message or "").strip()
    if _GRADER_LINES.fullmatch(message):
        return message
    kind, _, detail = message.partition(": ")
    if not re.fullmatch(r"[A-Za-z_][\w.]{0,80}", kind):
        return "the check failed (the details of a hidden check's error are not shown)"
    detail = detail.strip()
    if not detail:
        return kind
    if _NUMPY_LINES.fullmatch(detail) or any(p.fullmatch(detail) for p in _literal_patterns(body)):
        return message
    return f"{kind} (the details of a hidden check's error are not shown)"


def run_faults(lab: Lab, outcome: RunOutcome, timeout: float) -> list[Fault]:
    """The faults of one run, from its records: setup failed, time limit, kernel died, nbval did not run."""
    lab_setup_id = next((c.get("id") for c in lab.released.cells if assign.xmeta(c).get("setup")), None)
    faults: list[Fault] = []
    for rec in outcome.plugin:
        if rec.get("event") == "result" and rec.get("outcome") != "passed" and rec.get("id") in GRADER_CELLS:
            faults.append(Fault("setup failed", f"the grader could not set up the kernel "
                                                f"({rec.get('message') or 'failed'})"))
            break
        if rec.get("event") == "result" and rec.get("outcome") != "passed" and rec.get("id") == lab_setup_id:
            faults.append(Fault("setup failed", f"the lab's setup cell failed ({rec.get('message') or 'failed'})"))
            break
    if outcome.timed_out:
        faults.append(Fault("time limit", f"time limit {timeout:g} s reached"))
    for rec in outcome.plugin:
        if rec.get("event") == "result" and "the kernel died" in (rec.get("message") or ""):
            died = rec["message"].replace(" while this cell ran", "")
            if "SIGKILL" in died:
                died = died.replace("(SIGKILL)", "(SIGKILL: killed, e.g. for using too much memory)")
            faults.append(Fault("kernel died", died))
            break
    if not any(r.get("event") == "result" for r in outcome.plugin) and not outcome.timed_out:
        faults.append(Fault("setup failed", "nbval did not run (see the grader log)"))
    return faults


def score(lab: Lab, outcome: RunOutcome, timeout: float) -> tuple[list[CheckResult], list[str], list[str], str]:
    """Per-check results, notes of what the guard restored, errors of other cells, and the status (the words
    of :func:`run_faults`, which the row keeps typed)."""
    faults = run_faults(lab, outcome, timeout)
    results = {}
    other_errors: list[str] = []
    for rec in outcome.plugin:
        if rec.get("event") != "result":
            continue
        if rec.get("check"):
            prev = results.get(rec["check"])
            # A failure in any phase wins over a pass.
            if prev is None or prev.get("outcome") == "passed":
                results[rec["check"]] = rec
        elif rec.get("outcome") != "passed" and rec.get("phase") == "call":
            where = f"cell `{rec['id']}`" if rec.get("id") else f"code cell {rec.get('cell')}"
            other_errors.append(f"{where}: {rec.get('message') or rec.get('outcome')}")
    setup_failed = next((f.detail for f in faults if f.kind == "setup failed" and "nbval" not in f.detail), None)
    guard_end = {r["check"]: r for r in outcome.guard if r.get("event") == "end" and "check" in r}
    guard_start = {r["check"]: r for r in outcome.guard if r.get("event") == "start" and "check" in r}
    restored: list[str] = []
    for rec in outcome.guard:
        for note in rec.get("notes") or []:
            if note not in restored:
                restored.append(note)
    checks = []
    for check in lab.checks:
        rec, end = results.get(check.check), guard_end.get(check.check)
        nb_pass = rec is not None and rec.get("phase") == "call" and rec.get("outcome") == "passed"
        passed = bool(nb_pass and end is not None and end.get("passed") is True)
        if passed:
            message = ""
        elif setup_failed and end is None:
            message = f"did not run: {setup_failed}"
        elif end is not None and end.get("passed") is False:
            message = end.get("message") or "failed"
            if message.startswith("KeyboardInterrupt") and rec is not None and "Timeout" in rec.get("message", ""):
                message = rec["message"]
        elif rec is not None and rec.get("outcome") != "passed":
            message = rec.get("message") or rec.get("outcome", "failed")
            if message == "RuntimeError: Kernel dead on test start":
                message = "did not run: the kernel had died in an earlier cell"
            elif rec.get("xfail") and rec.get("outcome") == "skipped":
                message = "did not run normally: an earlier cell timed out"
        elif rec is not None and nb_pass and check.check in guard_start:
            message = "the check did not finish"
        elif rec is not None and nb_pass:
            message = "the check's code did not run (was the cell transformed?)"
        elif outcome.timed_out:
            message = f"did not run: the notebook reached the time limit ({timeout:g} s)"
        else:
            message = "did not run"
        if check.hidden and not passed:
            message = hidden_message(message, check.source)
        checks.append(CheckResult(check.check, check.points, check.hidden, passed, message))
    status = "; ".join([STATUS_OK] + [f.detail for f in faults])
    return checks, restored, other_errors[:10], status

