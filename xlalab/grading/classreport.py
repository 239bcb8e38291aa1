"""The class report: ``<out>/report.html``, one self-contained page for the instructor (written after every grading
run and by ``xlalab report LAB --out grades/``).

It is made from the grader's own rows (the spool of :mod:`.gradebook`, never ``gradebook.csv``) and shows, in
this order:

1. the most frequent failure messages: (check, message) with how many students hit each, the message as the
   feedback shows it (for a hidden check: its id and message, never its source); rows that were not graded at
   all are counted under faults instead;
2. the score distribution: histograms of the automatic points and, for a lab with written answers, of the total
   with the written points merged so far; median and quartiles (linear interpolation, ``numpy.percentile``);
3. per check: how many passed, the pass rate (of every row), points, mean points earned, its top message;
4. per written question: answered, blank (empty, left as released, deleted), scored by the instructor, not
   scored yet, and the mean points of those with points;
5. time per submission (of the rows that ran): median, and the slowest five;
6. faults: rows not graded, time limits, dead kernels, setup failures, tampering, what
   the sandbox blocked, rows graded without the jail;
7. similar hand-ins (:mod:`.similarity`): flagged pairs with their most similar cells side by side.

The page has no script and loads nothing: plots are PNG images inlined as base64 ``data:`` URLs, the style is
inline, and a Content-Security-Policy forbids anything else, so a student's name or message (escaped anyway)
cannot run in the instructor's browser. :func:`summarize` returns every number on the page (the tests check them).
"""

from __future__ import annotations

import base64
import html
import io
import statistics
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlalab import fmt
from xlalab.files import atomic_write
from xlalab.grading.faults import KINDS, NOT_GRADED, FaultKind, merge
from xlalab.grading.lab import Lab
from xlalab.grading.model import ANSWERED, EMPTY, MISSING, UNCHANGED, Row
from xlalab.grading.similarity import DEFAULT_THRESHOLD, Pair

TOP_MESSAGES = 30
SLOWEST = 5


def shown(message: str) -> str:
    """A check's message as the feedback shows it (one line)."""
    return (message or "failed").replace("\n", " ")


def not_graded(row: Row) -> bool:
    return row.state == NOT_GRADED


@dataclass
class Summary:
    """Every number of the report (see the module docstring for their definitions)."""

    lab: str
    students: int
    ran: int
    max_auto: float
    max_manual: float
    messages: list[dict[str, Any]]                       # check, hidden, message, students (count), share
    auto: list[float]                                    # automatic points per row, sorted
    totals: list[float] | None                           # total with written points merged (labs with answers)
    quartiles: dict[str, list[float]]                    # "auto"/"total" -> [q1, median, q3]
    checks: list[dict[str, Any]]                         # check, hidden, points, passed, rate, mean, top
    questions: list[dict[str, Any]]                      # question, points, answered, blank, scored, pending, mean
    seconds_median: float | None
    slowest: list[tuple[str, float]]
    faults: dict[FaultKind, list[tuple[str, str]]]       # kind -> [(student, detail)]
    pairs: list[Pair] = field(default_factory=list)
    threshold: float = DEFAULT_THRESHOLD
    compared: int = 0                                    # students compared for similarity


def _quartiles(values: list[float]) -> list[float]:
    import numpy as np

    return [float(v) for v in np.percentile(np.asarray(values, dtype=float), [25, 50, 75])] if values else []


FAULTS = KINDS


def _faults(rows: list[Row]) -> dict[FaultKind, list[tuple[str, str]]]:
    """Students per fault kind, read from each row's typed faults (never from its status words)."""
    out: dict[FaultKind, list[tuple[str, str]]] = {k: [] for k in FAULTS}
    for r in sorted(rows, key=lambda r: r.student):
        for f in merge(r.faults):
            out[f.kind].append((r.student, f.detail))
    return out


def summarize(lab: Lab, rows: list[Row], pairs: list[Pair] | None = None, *,
              threshold: float = DEFAULT_THRESHOLD, compared: int = 0) -> Summary:
    """The numbers of the report for ``rows`` (every row of the gradebook) of ``lab``."""
    rows = sorted(rows, key=lambda r: r.student)
    ran = [r for r in rows if not not_graded(r)]
    order = {c.check: i for i, c in enumerate(lab.checks)}
    hidden = {c.check: c.hidden for c in lab.checks}
    counts: Counter = Counter()
    for r in ran:
        for x in r.checks:
            if not x.passed and x.check in order:
                counts[(x.check, shown(x.detail or x.message))] += 1
    messages = [{"check": chk, "hidden": hidden[chk], "message": msg, "students": n,
                 "share": n / len(ran) if ran else 0.0}
                for (chk, msg), n in sorted(counts.items(), key=lambda kv: (-kv[1], order[kv[0][0]], kv[0][1]))]
    checks = []
    for c in lab.checks:
        results = [x for r in rows for x in r.checks if x.check == c.check]
        passed = sum(x.passed for x in results)
        top = [m for m in messages if m["check"] == c.check][:1]
        checks.append({"check": c.check, "hidden": c.hidden, "points": c.points, "passed": passed,
                       "rows": len(rows), "rate": passed / len(rows) if rows else 0.0,
                       "mean": sum(x.earned for x in results) / len(rows) if rows else 0.0,
                       "top": top[0]["message"] if top else "", "top_students": top[0]["students"] if top else 0})
    questions = []
    for a in lab.answers:
        res = [x for r in rows for x in r.answers if x.answer == a.answer]
        answered = [x for x in res if x.state == ANSWERED]
        with_points = [x for x in res if x.earned is not None]
        questions.append({"question": a.answer, "points": a.points, "answered": len(answered),
                          "blank": sum(x.state in (EMPTY, UNCHANGED, MISSING) for x in res),
                          "scored": sum(x.earned is not None for x in answered),
                          "pending": sum(x.earned is None for x in answered),
                          "mean": (sum(x.score for x in with_points) / len(with_points)) if with_points else None})
    auto = sorted(r.auto for r in rows)
    totals = sorted(r.total for r in rows) if lab.answers else None
    quartiles = {"auto": _quartiles(auto)}
    if totals is not None:
        quartiles["total"] = _quartiles(totals)
    secs = [r.seconds for r in ran]
    slowest = [(r.student, r.seconds) for r in sorted(ran, key=lambda r: (-r.seconds, r.student))[:SLOWEST]]
    return Summary(lab.name, len(rows), len(ran), lab.max_auto, lab.max_manual, messages, auto, totals, quartiles,
                   checks, questions, statistics.median(secs) if secs else None, slowest, _faults(rows),
                   list(pairs or []), threshold, compared)


# -- the page -----------------------------------------------------------------------------------------------------

def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _histogram(values: list[float], maximum: float, title: str, xlabel: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = Counter(values)
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    xs = sorted(counts)
    width = max(maximum, 1) / 40 if len(xs) > 1 or maximum else 0.5
    ax.bar(xs, [counts[x] for x in xs], width=max(width, 0.2), color="#3b6ea8")
    ax.set_xlim(-max(maximum, 1) * 0.03 - 0.5, max(maximum, max(xs, default=0)) * 1.03 + 0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("students")
    ax.set_title(title, fontsize=10)
    ax.yaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]  # it is an AutoLocator (MaxNLocator)
    return _png(fig)


def _time_plot(rows: list[Row]) -> str | None:
    ran = sorted((r.seconds for r in rows if not not_graded(r)), reverse=True)
    if not ran:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 2.4))
    ax.bar(range(1, len(ran) + 1), ran, width=0.9, color="#8a5a9e")
    ax.set_xlabel("submissions, slowest first")
    ax.set_ylabel("seconds")
    ax.set_title("time per submission (wall clock, in the grader)", fontsize=10)
    return _png(fig)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1150px;color:#222;
line-height:1.4;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}td,th{border:1px solid #ccc;padding:.25em .5em;
vertical-align:top;text-align:left}th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
.msg{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em;white-space:pre-wrap;word-break:break-word}
.hidden{color:#8a4b00}.note{color:#555;font-size:.9em}
.side{display:grid;grid-template-columns:1fr 1fr;gap:.6em;margin:.4em 0 1.2em}
.side pre{background:#f7f7f7;border:1px solid #ddd;padding:.5em;margin:0;overflow:auto;font-size:.85em;
white-space:pre-wrap}mark{background:#ffe28a}img{max-width:100%}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _table(table_id: str, head: list[str], body: list[list[Any]], numeric: Collection[int] = frozenset()) -> str:
    rows = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in body)
    return (f'<table id="{table_id}"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{rows}</tbody></table>")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _check_name(check: str, hidden: bool) -> str:
    return f"<code>{_e(check)}</code>" + (' <span class="hidden">(hidden)</span>' if hidden else "")


def page(s: Summary, rows: list[Row]) -> str:
    """The HTML of the report."""
    parts = [f"<h1>{_e(s.lab)}: class report</h1>",
             f'<p class="note">{s.students} students in the gradebook, {s.ran} ran; automatic points out of '
             f"{fmt.points(s.max_auto)}"
             + (f", written answers out of {fmt.points(s.max_manual)}" if s.max_manual else "")
             + ". Made by the grader from its own rows; nothing here is decided automatically.</p>"]
    parts.append("<h2>Most frequent failures</h2>")
    if s.messages:
        body = [[str(m["students"]), _pct(m["share"]), _check_name(m["check"], m["hidden"]),
                 f'<span class="msg">{_e(m["message"])}</span>'] for m in s.messages[:TOP_MESSAGES]]
        parts.append(_table("failures", ["students", "of those that ran", "check", "message (as in the feedback)"],
                            body, {0, 1}))
        if len(s.messages) > TOP_MESSAGES:
            parts.append(f'<p class="note">{len(s.messages) - TOP_MESSAGES} less frequent messages not shown.</p>')
    else:
        parts.append("<p>No check failed.</p>")
    parts.append("<h2>Score distribution</h2>")
    q = s.quartiles.get("auto") or []
    if s.auto:
        parts.append(f'<img alt="histogram of automatic points" src="'
                     f'{_histogram(s.auto, s.max_auto, "automatic points", f"points (of {fmt.points(s.max_auto)})")}">')
    stats = [["automatic", *(f"{v:.4g}" for v in q)]] if q else []
    if s.totals is not None:
        pending = sum(x["pending"] for x in s.questions)
        total = s.max_auto + s.max_manual
        chart = _histogram(s.totals, total, "total with the written points merged", f"points (of {fmt.points(total)})")
        parts.append(f'<img alt="histogram of total points" src="{chart}">')
        stats.append(["total (written merged)", *(f"{v:.4g}" for v in s.quartiles.get("total", []))])
        if pending:
            parts.append(f'<p class="note">{pending} written answers are not scored yet (counted as 0 in the '
                         "total until <code>xlalab merge-manual</code>).</p>")
    if stats:
        parts.append(_table("quartiles", ["points", "first quartile", "median", "third quartile"], stats,
                            {1, 2, 3}))
    parts.append("<h2>Per check</h2>")
    parts.append(_table("checks", ["check", "points", "passed", "pass rate", "mean points", "most frequent failure"],
                        [[_check_name(c["check"], c["hidden"]), fmt.points(c["points"]), f'{c["passed"]} / {c["rows"]}',
                          _pct(c["rate"]), f'{c["mean"]:.3g}',
                          (f'{c["top_students"]}: <span class="msg">{_e(c["top"])}</span>' if c["top"] else "")]
                         for c in s.checks], {1, 2, 3, 4}))
    if s.questions:
        parts.append("<h2>Written questions</h2>")
        parts.append(_table("questions", ["question", "points", "answered", "blank", "scored", "not scored yet",
                                          "mean points (of those with points)"],
                            [[f'<code>{_e(x["question"])}</code>', fmt.points(x["points"]), x["answered"], x["blank"],
                              x["scored"], x["pending"], "" if x["mean"] is None else f'{x["mean"]:.3g}']
                             for x in s.questions], {1, 2, 3, 4, 5, 6}))
    parts.append("<h2>Time per submission</h2>")
    if s.seconds_median is not None:
        plot = _time_plot(rows)
        if plot:
            parts.append(f'<img alt="seconds per submission" src="{plot}">')
        parts.append(f'<p id="median-time">Median {s.seconds_median:.1f} s per submission.</p>')
        parts.append(_table("slowest", ["slowest", "seconds"], [[_e(n), f"{t:.1f}"] for n, t in s.slowest], {1}))
    else:
        parts.append("<p>No submission ran.</p>")
    parts.append("<h2>Faults</h2>")
    parts.append(_table("faults", ["fault", "students", "who (and what)"],
                        [[_e(FAULTS[k]), len(v), "<br>".join(_e(f"{n}: {d}" if d else n) for n, d in v[:10])
                          + (f"<br>… {len(v) - 10} more" if len(v) > 10 else "")]
                         for k, v in s.faults.items()], {1}))
    parts.append(_similarity_html(s))
    page = "\n".join(parts)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>{_e(s.lab)}: class report</title>"
            f"<style>{_CSS}</style></head><body>\n{page}\n</body></html>\n")


def _similarity_html(s: Summary) -> str:
    flagged = [p for p in s.pairs if p.flagged]
    out = ["<h2>Similar hand-ins</h2>",
           f'<p class="note">{s.compared} students compared pairwise on their own code cells and written answers '
           f"(the released lab's text removed; code parsed and written back without comments, no-op statements and "
           f"identity wrappers; answers without filler and function words), by winnowed fingerprints (copydetect, "
           f"as MOSS does) and by what of the shorter one's code skeleton (statements, calls, constants) or answer "
           f"words the other holds in the same order. Pairs at or above {s.threshold:g} on any of the four are "
           f"listed for a look; they are flagged, never penalized.</p>"]
    if not flagged:
        best = max((p.score for p in s.pairs), default=0.0)
        out.append(f'<p id="no-similar">No pair reached {s.threshold:g} (the highest score: {best:.2f}).</p>')
        return "\n".join(out)
    out.append(_table("similar", ["student", "student", "code", "written answers", "shared tokens (code, text)",
                                  "code skeleton in order", "answer words in order"],
                      [[_e(p.a), _e(p.b), f"{p.code:.2f}", f"{p.answers:.2f}",
                        f"{p.shared_code}, {p.shared_answers}", f"{p.order_code:.2f}", f"{p.order_answers:.2f}"]
                       for p in flagged], {2, 3, 4, 5, 6}))
    for p in flagged:
        out.append(f"<h3>{_e(p.a)} and {_e(p.b)}</h3>")
        for c in p.cells:
            out.append(f'<div class="side"><div><div class="note">{_e(p.a)}: <code>{_e(c.label_a)}</code></div>'
                       f"<pre>{c.html_a}</pre></div><div><div class=\"note\">{_e(p.b)}: <code>{_e(c.label_b)}</code>"
                       f"</div><pre>{c.html_b}</pre></div></div>")
    rest = len(s.pairs) - len(flagged)
    if rest:
        out.append(f'<p class="note">{rest} other pairs share some text, below the threshold (highest: '
                   f"{max(p.score for p in s.pairs if not p.flagged):.2f}).</p>")
    return "\n".join(out)


def write_report(lab: Lab, rows: list[Row], out: str | Path, *, threshold: float = DEFAULT_THRESHOLD) -> Path:
    """Write ``<out>/report.html`` for ``rows`` (the gradebook's), with the similarity of the students' own text
    kept in the spool (:func:`xlalab.grading.similarity.save`); return its path."""
    from xlalab.grading import similarity

    owns = similarity.load(out, [r.student for r in rows])
    pairs = similarity.pairs(lab, owns, threshold) if len(owns) > 1 else []
    summary = summarize(lab, rows, pairs, threshold=threshold, compared=len(owns))
    path = Path(out) / "report.html"
    # A fresh file, never through a planted link; a character UTF-8 cannot hold (a lone surrogate some hand-in
    # smuggled past the readers) is written escaped, never stops the class's page.
    atomic_write(path, page(summary, rows).encode("utf-8", errors="backslashreplace"), 0o644)
    return path
