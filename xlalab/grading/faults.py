"""What went wrong in one row, typed: the row's state and a list of :class:`Fault` (plain data), and the one
function that words a row's status from them (:func:`status_text`).

The class report (:mod:`.classreport`) counts faults by their :class:`FaultKind`; the words of ``detail`` are for
people and may be reworded freely. Nothing reads a status or a detail back to decide anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

GRADED, NOT_GRADED = "graded", "not graded"


class FaultKind(str, Enum):
    """The kinds of fault, in the report's order (their values are the words the report and the spool keep)."""

    NOT_GRADED = "not graded"
    TIME_LIMIT = "time limit"
    KERNEL_DIED = "kernel died"
    SETUP_FAILED = "setup failed"
    TAMPERING = "tampering"
    SANDBOX_BLOCKED = "sandbox blocked"
    UNSANDBOXED = "unsandboxed"
    MEMORY_PER_PROCESS = "memory per process"
    COPY_OF_SOURCE = "copy of the source"
    RECORDS_REFUSED = "records refused"
    JUDGE_FAILED = "judge failed"

    def __str__(self) -> str:
        return str(self.value)


# What each kind means (the report's words), in the report's order.
KINDS: dict[FaultKind, str] = {
    FaultKind.NOT_GRADED: "not graded at all (0 points, the reason in the row)",
    FaultKind.TIME_LIMIT: "reached the notebook's time limit or a cell timeout",
    FaultKind.KERNEL_DIED: "the kernel died (os._exit, a crash, killed for memory)",
    FaultKind.SETUP_FAILED: "the grader or the lab's setup cell could not set up the kernel",
    FaultKind.TAMPERING: "check cells changed or deleted (the released ones ran)",
    FaultKind.SANDBOX_BLOCKED: "something the sandbox or the limits refused",
    FaultKind.UNSANDBOXED: "graded without the jail",
    FaultKind.MEMORY_PER_PROCESS: "memory limited per process only (no memory cgroup for the whole jail)",
    FaultKind.COPY_OF_SOURCE: "the hand-in is byte for byte the instructor's source notebook",
    FaultKind.RECORDS_REFUSED: "the probe records that left the student's jail were refused (malformed, too large)",
    FaultKind.JUDGE_FAILED: "the judge kernel could not set up or did not finish on this student's records",
}


@dataclass
class Fault:
    """One fault of a row.

    Attributes:
        kind: what went wrong, a :class:`FaultKind` (a plain string of :data:`KINDS` is taken and converted).
        detail: what exactly, for people (the class report shows it).
        status: the fault's words in the row's status (:func:`status_text`); "" for a fault the status does not
            name (a check that timed out, what the sandbox blocked: the feedback says those).
    """

    kind: FaultKind
    detail: str = ""
    status: str = ""

    def __post_init__(self) -> None:
        try:
            self.kind = FaultKind(self.kind)
        except ValueError:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {', '.join(KINDS)}") from None

    @classmethod
    def from_dict(cls, data: Any) -> Fault | None:
        """A fault kept in the spool, or None for one this grader does not know."""
        if isinstance(data, dict) and data.get("kind") in {k.value for k in FaultKind}:
            return cls(FaultKind(data["kind"]), str(data.get("detail") or ""), str(data.get("status") or ""))
        return None


def not_graded(reason: str) -> Fault:
    """The fault of a hand-in that was not graded at all; ``reason`` says why."""
    return Fault(FaultKind.NOT_GRADED, reason, f"{NOT_GRADED}: {reason}")


def status_text(state: str, faults: Iterable[Fault], pending: Sequence[str] = (), kept: str = "") -> str:
    """The row's status, the gradebook's column and the feedback's first line, made from the row's state and
    typed faults (each fault's ``status`` words, in order) and the written answers not scored yet. The only
    producer of a status: nothing appends to it, nothing reads it back. ``kept``: the words an older grader kept
    for a row whose faults carry none (see :attr:`xlalab.grading.model.Row.kept_status`), used as they are."""
    words = [f.status for f in faults if f.status]
    parts = [kept] if kept else words if state == NOT_GRADED else [GRADED, *words]
    if pending:
        parts.append(f"written answers not scored yet: {', '.join(pending)}")
    return "; ".join(parts)


def reason(faults: Iterable[Fault]) -> str:
    """Why a row was not graded: the detail of its :attr:`FaultKind.NOT_GRADED` fault ("" if it has none)."""
    return next((f.detail for f in faults if f.kind is FaultKind.NOT_GRADED), "")


def row_faults(row: Any) -> list[Fault]:
    """The faults a scored row's own fields show: checks that timed out, tampering, what the sandbox blocked,
    no jail. (The run's faults come from :func:`xlalab.grading.score.run_faults`.)"""
    out: list[Fault] = []
    timeouts = [c.check for c in row.checks if c.timed_out]
    if timeouts:
        out.append(Fault(FaultKind.TIME_LIMIT, "; ".join(f"check {c}" for c in timeouts[:3])))
    if row.tampering:
        out.append(Fault(FaultKind.TAMPERING, "; ".join(row.tampering[:3]), "tampered"))
    if row.blocked:
        out.append(Fault(FaultKind.SANDBOX_BLOCKED, "; ".join(row.blocked[:3])))
    if row.sandbox == "none":
        out.append(Fault(FaultKind.UNSANDBOXED))
    return out


def merge(faults: list[Fault]) -> list[Fault]:
    """``faults`` with one entry per kind (details joined with "; "), in :data:`KINDS` order (what the report
    counts; a row keeps its faults unmerged, in the order its status names them)."""
    by: dict[FaultKind, list[str]] = {}
    for f in faults:
        by.setdefault(f.kind, [])
        if f.detail and f.detail not in by[f.kind]:
            by[f.kind].append(f.detail)
    return [Fault(k, "; ".join(by[k])) for k in KINDS if k in by]
