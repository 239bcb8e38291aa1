"""What went wrong in one row, typed: the row's :data:`state` and a list of :class:`Fault` (plain data).

The class report (:mod:`.classreport`) counts faults by their ``kind``; the words of ``detail`` are for people
and may be reworded freely. ``status`` (the gradebook's column) is made from the state and the faults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GRADED, NOT_GRADED = "graded", "not graded"

# The kinds of fault, in the report's order, with what each means (the report's words).
KINDS: dict[str, str] = {
    "not graded": "not graded at all (0 points, the reason in the row)",
    "time limit": "reached the notebook's time limit or a cell timeout",
    "kernel died": "the kernel died (os._exit, a crash, killed for memory)",
    "setup failed": "the grader or the lab's setup cell could not set up the kernel",
    "tampering": "check cells changed or deleted (the released ones ran)",
    "guard restored": "replaced functions the guard put back before the checks",
    "sandbox blocked": "something the sandbox or the limits refused",
    "unsandboxed": "graded without the jail",
    "memory per process": "memory limited per process only (no memory cgroup for the whole jail)",
    "copy of the source": "the hand-in is byte for byte the instructor's source notebook",
    "records refused": "the probe records that left the student's jail were refused (malformed, too large)",
    "judge failed": "the judge kernel could not set up or did not finish on this student's records",
}


@dataclass
class Fault:
    """One fault of a row: ``kind`` is a key of :data:`KINDS`; ``detail`` says what, for people."""

    kind: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {', '.join(KINDS)}")

    @classmethod
    def from_dict(cls, data: Any) -> Fault | None:
        if isinstance(data, dict) and data.get("kind") in KINDS:
            return cls(str(data["kind"]), str(data.get("detail") or ""))
        return None


def _timed_out(message: str) -> bool:
    return "timed out" in message or "Timeout" in message or "time limit" in message


def row_faults(row: Any) -> list[Fault]:
    """The faults a scored row's own fields show: checks that timed out, tampering, what the guard put back,
    what the sandbox blocked, no jail. (The run's faults come from :func:`xlalab.grading.score.run_faults`.)"""
    out: list[Fault] = []
    timeouts = [c.check for c in row.checks if _timed_out(c.message or "")]
    if timeouts:
        out.append(Fault("time limit", "; ".join(f"check {c}" for c in timeouts[:3])))
    if row.tampering:
        out.append(Fault("tampering", "; ".join(row.tampering[:3])))
    if row.restored:
        out.append(Fault("guard restored", ", ".join(row.restored[:5])))
    if row.blocked:
        out.append(Fault("sandbox blocked", "; ".join(row.blocked[:3])))
    if row.sandbox == "none":
        out.append(Fault("unsandboxed"))
    return out


def from_status(row: Any) -> tuple[str, list[Fault]]:
    """State and faults of a row kept by an older grader (no typed faults): read once from its status words."""
    status = row.status or ""
    if status.startswith("not graded"):
        return NOT_GRADED, [Fault("not graded", status.removeprefix("not graded: "))]
    parts = status.split("; ")
    out = [Fault("time limit", p) for p in parts if "time limit" in p]
    out += [Fault("kernel died", p) for p in parts if "kernel died" in p]
    out += [Fault("setup failed", p) for p in parts if "set up the kernel" in p or "setup cell failed" in p]
    return GRADED, out + row_faults(row)


def merge(faults: list[Fault]) -> list[Fault]:
    """``faults`` with one entry per kind (details joined with "; "), in :data:`KINDS` order."""
    by: dict[str, list[str]] = {}
    for f in faults:
        by.setdefault(f.kind, [])
        if f.detail and f.detail not in by[f.kind]:
            by[f.kind].append(f.detail)
    return [Fault(k, "; ".join(by[k])) for k in KINDS if k in by]
