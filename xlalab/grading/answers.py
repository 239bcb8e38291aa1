"""Written answers, graded by hand: collected from the hand-ins, laid out one question per file, scored by the
instructor in ``manual.csv`` and merged back into the gradebook and the feedback.

- :func:`collect` reads a submission's answers in the grader's own process, from the submission file, before
  any student code of the run starts (never from anything a kernel wrote). An answer cell is found by the
  released cell id, else by its ``xlalab.answer`` metadata. An answer that is blank, still the released box
  (``**Your answer:** …``) or deleted scores 0 at once; the others wait for the instructor.
- :func:`write_answer_files` writes ``<out>/answers/<lab>/<question>.md``: the rubric and the model answer
  (from the instructor source) at the top, then every student's answer to that question.
- :func:`write_manual_template` adds the missing ``student,question,points,comment`` lines to
  ``<out>/manual.csv`` (lines already there, the instructor's, are never changed).
- :func:`merge_manual` checks each line of a filled ``manual.csv`` (unknown student or question, points that
  are not a number, negative, above the question's maximum, or given to a blank answer: one line of error
  each, that line is skipped) and returns the rows whose written-answer points or comments changed.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from xlalab import fmt
from xlalab.grading import labformat
from xlalab.grading.lab import Lab
from xlalab.grading.model import ANSWERED, EMPTY, MISSING, UNCHANGED, AnswerResult, Row
from xlalab.grading.submissions import HandIn, Unreadable, printable

MANUAL_COLUMNS = ("student", "question", "points", "comment")
_NO_ANSWER = {EMPTY: "no answer (blank): 0 points", UNCHANGED: "no answer (the box was left as released): 0 points",
              MISSING: "no answer (the answer cell was deleted): 0 points"}


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _result(answer: labformat.Answer, text: str | None) -> AnswerResult:
    if text is None:
        state = MISSING
    elif not text.strip():
        state = EMPTY
    elif _normal(text) == _normal(labformat.ANSWER_BOX) or _normal(text).replace("…", "").replace("...", "").strip(
            " *") in ("Your answer:", ""):
        state = UNCHANGED
    else:
        state = ANSWERED
    if state == ANSWERED:
        return AnswerResult(answer.answer, answer.points, state, text or "")
    return AnswerResult(answer.answer, answer.points, state, text or "", 0.0, _NO_ANSWER[state])


def answers_of(lab: Lab, nb: Any) -> list[AnswerResult]:
    """The written answers of a parsed submission notebook (cells as dicts or NotebookNodes)."""
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    out = []
    for a in lab.answers:
        text = None
        for c in cells:
            if not isinstance(c, dict) or c.get("cell_type") != "markdown":
                continue
            meta = c.get("metadata")
            xl = meta.get("xlalab") if isinstance(meta, dict) else None
            claimed = xl.get("answer") if isinstance(xl, dict) else None
            if (a.cell_id and c.get("id") == a.cell_id) or (isinstance(claimed, str) and claimed == a.answer):
                src = c.get("source", "")
                if isinstance(src, list):
                    text = "".join(x for x in src if isinstance(x, str))
                else:
                    text = src if isinstance(src, str) else ""
                text = _text(text)
                break
        out.append(_result(a, text))
    return out


def _text(text: str) -> str:
    """``text`` with lone surrogates (``"\\ud800"`` in the JSON) replaced by U+FFFD, so it can be written."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def collect(lab: Lab, handin: HandIn) -> list[AnswerResult]:
    """The written answers in a hand-in (read once: :class:`~xlalab.grading.submissions.HandIn`); an unreadable or
    broken file has them all missing."""
    try:
        nb = handin.json()
        return answers_of(lab, nb if isinstance(nb, dict) else {})
    except (Unreadable, RecursionError, MemoryError):
        return answers_of(lab, {})


def carry_over(answers: list[AnswerResult], old: Row | None) -> list[AnswerResult]:
    """``answers`` (just read from a hand-in) with the instructor's points and comment of ``old`` (the student's
    row kept before this run) for each answer whose text did not change: a re-graded student keeps them."""
    for res in answers:
        prev = next((a for a in (old.answers if old else []) if a.answer == res.answer), None)
        if prev is not None and prev.earned is not None and res.earned is None and prev.text == res.text:
            res.earned, res.comment = prev.earned, prev.comment
    return answers


def _quote(text: str) -> str:
    return "\n".join("> " + line if line.strip() else ">" for line in text.strip().splitlines())


def answer_file_text(lab: Lab, answer: labformat.Answer, rows: list[Row]) -> str:
    """The Markdown file of one question: rubric and model answer, then each student's answer."""
    lines = [f"# {lab.name}: `{answer.answer}` ({fmt.points(answer.points)} points)", "",
             "## Rubric", "", answer.rubric.strip() or "(none given)", "",
             "## Model answer", "", _quote(answer.model) or "(none)", "", "## Answers", ""]
    for row in sorted(rows, key=lambda r: r.student):
        res = next((a for a in row.answers if a.answer == answer.answer), None)
        if res is None:
            continue
        score = "not scored yet" if res.earned is None else f"{fmt.points(res.earned)} / {fmt.points(res.points)}"
        lines += [f"### {printable(row.student)} ({res.state}; {score})", ""]
        if res.state == ANSWERED:
            lines += [_quote(res.text), ""]
        else:
            lines += [f"*{_NO_ANSWER[res.state]}*", ""]
        if res.comment and res.state == ANSWERED:
            lines += [f"Comment: {res.comment}", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_answer_files(lab: Lab, rows: list[Row], out: str | Path) -> list[Path]:
    """``<out>/answers/<lab>/<question>.md`` for every written question of the lab."""
    folder = Path(out) / "answers" / lab.name
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for answer in lab.answers:
        path = folder / f"{answer.answer}.md"
        path.write_text(answer_file_text(lab, answer, rows), encoding="utf-8", errors="backslashreplace")
        paths.append(path)
    return paths


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def manual_cell(value: str) -> str:
    """A ``manual.csv`` cell a spreadsheet shows as text: a value starting with a formula character (``=``,
    ``+``, ``-``, ``@``, a tab or carriage return; OWASP, "CSV Injection") or with ``'`` gets a leading ``'``,
    which :func:`read_manual` removes again (so ``'=x`` and ``=x`` stay two names)."""
    return "'" + value if value[:1] in _FORMULA_START else value


def _unquote(value: str) -> str:
    return value[1:] if value[:1] == "'" else value


def read_manual(path: str | Path) -> list[dict[str, str]]:
    """The lines of a ``manual.csv`` (student and comment with :func:`manual_cell`'s ``'`` removed)."""
    text = Path(path).read_text(encoding="utf-8-sig")
    lines = [{k.strip(): (v or "") for k, v in r.items() if k} for r in csv.DictReader(io.StringIO(text))]
    return [{k: (_unquote(v) if k == "student" else _unquote(v.strip()) if k == "comment" else v.strip())
             for k, v in r.items()} for r in lines]


def write_manual_template(lab: Lab, rows: list[Row], path: str | Path) -> Path:
    """Add a line per (student, question) not yet in ``path``; blank answers come with 0 points filled in."""
    path = Path(path)
    existing = read_manual(path) if path.exists() else []
    have = {(r.get("student"), r.get("question")) for r in existing}
    new = []
    for row in sorted(rows, key=lambda r: r.student):
        for res in row.answers:
            if (row.student, res.answer) not in have:
                new.append({"student": row.student, "question": res.answer,
                            "points": "" if res.earned is None else fmt.points(res.earned),
                            "comment": "" if res.state == ANSWERED else _NO_ANSWER[res.state]})
    if new or not path.exists():
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=MANUAL_COLUMNS, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for r in existing + new:
            writer.writerow({k: manual_cell(v) if k in ("student", "comment") and isinstance(v, str) else v
                             for k, v in r.items()})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(buf.getvalue(), encoding="utf-8", errors="backslashreplace")
    return path


def merge_manual(lab: Lab, rows: dict[str, Row], lines: list[dict[str, str]]) -> tuple[list[Row], list[str]]:
    """Apply the instructor's lines to ``rows`` (by student); return (changed rows, one error per bad line).

    A line with blank points is not scored yet and is skipped silently; a bad line changes nothing.
    """
    maxima = {a.answer: a.points for a in lab.answers}
    errors: list[str] = []
    changed: dict[str, Row] = {}
    for n, line in enumerate(lines, start=2):   # line 1 is the header
        student, question = line.get("student", ""), line.get("question", "")
        points, comment = line.get("points", ""), line.get("comment", "")
        if student not in rows and student.strip() in rows:
            student = student.strip()   # spaces a spreadsheet added (a name with its own spaces matches as is)
        where = f"manual.csv line {n} ({student or '?'}, {question or '?'})"
        if student not in rows:
            errors.append(f"{where}: unknown student {student!r} (not in this gradebook)")
            continue
        if question not in maxima:
            errors.append(f"{where}: unknown question {question!r}; {lab.name} has "
                          f"{', '.join(maxima) or 'no written questions'}")
            continue
        if points == "":
            continue
        try:
            value = float(points)
        except ValueError:
            errors.append(f"{where}: points {points!r} is not a number")
            continue
        if not 0 <= value <= maxima[question]:
            errors.append(f"{where}: {points} points is outside 0..{fmt.points(maxima[question])}, the question's "
                          "maximum")
            continue
        row = rows[student]
        res = next((a for a in row.answers if a.answer == question), None)
        if res is None:
            errors.append(f"{where}: {student}'s row has no written answers (graded before they existed?); "
                          "grade the submission again")
            continue
        if res.state != ANSWERED and value != 0:
            errors.append(f"{where}: the answer is {res.state}, so it scores 0, not {points}")
            continue
        if res.earned != value or (comment and res.comment != comment):
            res.earned = value
            res.comment = comment or res.comment
            changed[student] = row
    return list(changed.values()), errors
