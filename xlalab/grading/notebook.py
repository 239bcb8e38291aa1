"""Notebook-side grading helpers: track how the check cells of a lab stand, and report it.

A check cell starts with a header line ``# CHECK <id> (<points> points)`` (``xlalab.assign`` verifies it
against the cell's metadata). :func:`track_checks`, called in a lab's setup cell, registers an IPython
hook that records whether each check cell ran without error; :func:`report`, in the lab's last cell,
prints the table. The instructor's grade comes from ``xlalab grade``, never from this table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

CHECK_HEADER = re.compile(r"^#\s*CHECK\s+(?P<id>[\w\-.]+)\s*\((?P<points>\d+(?:\.\d+)?)\s*points?\)", re.M)


@dataclass
class CheckState:
    """The last result of one check cell in this kernel."""

    check: str
    points: float
    passed: bool
    message: str = ""


_STATES: dict[str, CheckState] = {}
_REGISTERED = False


def parse_header(source: str) -> tuple[str, float] | None:
    """``(check_id, points)`` from a check cell's first line, or ``None`` if it is not a check cell."""
    first = source.lstrip().splitlines()[0] if source.strip() else ""
    m = CHECK_HEADER.match(first)
    return (m["id"], float(m["points"])) if m else None


def _record(result: Any) -> None:
    header = parse_header(getattr(result.info, "raw_cell", "") or "")
    if header is None:
        return
    check_id, points = header
    error = result.error_before_exec or result.error_in_exec
    message = "" if error is None else f"{type(error).__name__}: {error}".splitlines()[0][:300]
    _STATES[check_id] = CheckState(check_id, points, error is None, message)


def track_checks() -> None:
    """Record the outcome of every check cell run from now on in this IPython kernel (idempotent)."""
    global _REGISTERED
    try:
        ip = get_ipython()  # type: ignore[name-defined]
    except NameError:
        return
    if not _REGISTERED:
        ip.events.register("post_run_cell", _record)
        _REGISTERED = True


def states() -> list[CheckState]:
    """The recorded check results, in the order the checks last ran."""
    return list(_STATES.values())


def report() -> str:
    """Print and return a table of the visible checks run so far: id, points, pass or fail."""
    rows = states()
    if not rows:
        text = "No check cell has run yet in this kernel: run the notebook from the top."
    else:
        earned = sum(r.points for r in rows if r.passed)
        total = sum(r.points for r in rows)
        lines = [f"{'check':<28} {'points':>6}  result"]
        for r in rows:
            lines.append(f"{r.check:<28} {r.points:>6g}  {'pass' if r.passed else 'FAIL  ' + r.message}")
        lines.append(f"visible checks: {earned:g} / {total:g} points "
                     "(hidden checks are added when the instructor grades)")
        text = "\n".join(lines)
    print(text)
    return text
