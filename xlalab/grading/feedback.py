"""What the student and the instructor read: the Markdown feedback of one row, and the class summary."""

from __future__ import annotations

from xlalab import fmt
from xlalab.grading.faults import NOT_GRADED
from xlalab.grading.model import Row
from xlalab.grading.submissions import printable


def feedback_text(row: Row) -> str:
    """The Markdown feedback for one student."""
    lines = [f"# {row.lab}: feedback for {printable(row.student)}", "",
             f"**Score: {fmt.points(row.total)} / {fmt.points(row.maximum)} points** ({row.status})", ""]
    if row.answers:
        lines += [f"Automatic checks: {fmt.points(row.auto)} / {fmt.points(row.max_auto)}; written answers: "
                  f"{fmt.points(row.manual)} / {fmt.points(row.max_manual)}"
                  + (f" ({len(row.pending)} not scored yet)" if row.pending else "") + ".", ""]
    if row.state == NOT_GRADED:
        lines += [f"Your submission could not be graded: {row.reason}.", ""]
    lines += ["| check | kind | points | result |", "|---|---|---|---|"]
    for c in row.checks:
        result = "pass" if c.passed else "FAIL: " + c.message.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{c.check}` | {'hidden' if c.hidden else 'visible'} | {fmt.points(c.earned)} / "
                     f"{fmt.points(c.points)} | {result} |")
    if row.answers:
        lines += ["", "## Written answers", "", "| question | points | comment |", "|---|---|---|"]
        for a in row.answers:
            got = "not scored yet" if a.earned is None else fmt.points(a.earned)
            comment = (a.comment or "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{a.answer}` | {got} / {fmt.points(a.points)} | {comment} |")
    if row.notes:
        lines += ["", "## Notes", ""] + [f"- {t}" for t in row.notes]
    if row.tampering:
        lines += ["", "## Tampering", ""] + [f"- {t}" for t in row.tampering]
    if row.cell_errors:
        lines += ["", "## Errors in your cells", ""] + [f"- {e}" for e in row.cell_errors]
    if row.blocked:
        lines += ["", "## Blocked by the grader", "",
                  "Your notebook runs in a sandbox without a network, with only its own folder writable and a "
                  "memory limit; it tried:", ""] + [f"- {b}" for b in row.blocked]
    return "\n".join(lines) + "\n"


def summary_table(rows: list[Row], elapsed: float | None = None, slowest: int = 3) -> str:
    """A plain-text table (student, points, time, status), how long the class took and the slowest ones."""
    width = max([len(printable(r.student)) for r in rows] + [7])
    lines = [f"{'student':<{width}}  {'points':>11}  {'time':>6}  status"]
    for r in sorted(rows, key=lambda r: r.student):
        lines.append(f"{printable(r.student):<{width}}  {fmt.points(r.total) + ' / ' + fmt.points(r.maximum):>11}  "
                     f"{r.seconds:5.0f}s  {r.status}")
    if elapsed is not None and rows:
        graded = [r for r in rows if r.state != NOT_GRADED]
        lines.append("")
        lines.append(f"{len(rows)} submissions ({len(graded)} ran) in {elapsed:.0f} s: "
                     f"{60 * len(rows) / max(elapsed, 1e-9):.1f} per minute; sandbox: "
                     f"{', '.join(sorted({r.sandbox for r in rows if r.sandbox})) or 'n/a'}")
        top = sorted(graded, key=lambda r: -r.seconds)[:slowest]
        if top:
            lines.append("slowest: " + ", ".join(f"{r.student} ({r.seconds:.0f} s)" for r in top))
    return "\n".join(lines)

