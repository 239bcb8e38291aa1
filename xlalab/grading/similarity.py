"""Similar hand-ins, flagged for the instructor to look at (never penalized): pairwise similarity of what each
student wrote themselves, by winnowed fingerprints (:mod:`copydetect`, the method of MOSS: Schleimer, Wilkerson
and Aiken, "Winnowing: local algorithms for document fingerprinting", SIGMOD 2003).

What is compared, read by the grader's own process from the submission file before any student code runs:

- **code**: the student's own code cells, that is every code cell that is not a check cell (by its ``# CHECK``
  header, ``xlalab.check`` metadata or released cell id) and not a copy of a released cell; in each, the lines
  that are also lines of the released lab (its starter code: signatures, docstrings, ``raise
  NotImplementedError``) are removed, and the released lab's own fingerprints are subtracted as boilerplate, so
  that the text every student got does not count. copydetect's tokenizer (Pygments) replaces every name by
  ``V``/``F``/``O`` and every string by ``S`` and drops comments and whitespace, so renamed variables and moved
  comments do not hide a copy; fingerprints are sets of k-grams, so reordered cells do not either;
- **written answers**: the text of each answered question (lower-cased, whitespace collapsed), with the released
  lab's Markdown subtracted the same way.

A pair's score, for code and for answers apart, is the larger of the two fractions copydetect reports (the share
of one hand-in's fingerprinted text found in the other), so that a short hand-in copied into a longer one is
found. A pair is flagged when either score reaches the threshold (``--similarity-threshold``, default
:data:`DEFAULT_THRESHOLD`) and the shared text is at least :data:`MIN_SHARED` tokens (so that two one-line
answers of the same exercise are not flagged for being short). The report (:mod:`.classreport`) shows each flagged
pair with its most similar cells side by side and the shared text marked.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xlalab.grading import assign
from xlalab.grading.lab import Lab
from xlalab.grading.notebook import parse_header
from xlalab.grading.score import ANSWERED

# Why 0.6: copydetect replaces every identifier, string and comment, so a copy with renamed variables, new comments
# and moved cells scores close to 1 (1.00 on code, 0.84 on the written answer in tests/test_classreport.py), while
# two honest solutions of the same exercises share only the syntax the exercise forces (0 there: no 25-character
# run of filtered tokens in common). copydetect's own display default, 0.33, is made for whole programs, where that
# forced part is a smaller share than in a lab's short answers. The threshold only decides what is listed for a look.
DEFAULT_THRESHOLD = 0.6
# Tokens of shared (filtered) text below which a pair is not flagged: the sample lab's whole reference answer (two
# one-line functions that honest students may well write alike) is 49; a copied hand-in there shares over 200.
MIN_SHARED = 80
NOISE = 25               # copydetect's noise threshold k: the k-gram length, in filtered characters
GUARANTEE = 25           # copydetect's guarantee threshold: a match this long is always found (window 1)
MAX_CHARS = 200_000      # of a student's own code (and, apart, answers) compared: a hostile megabyte cell is cut


@dataclass
class Own:
    """What one student wrote: ``code`` is ``[(cell label, text), ...]`` (starter lines removed), ``answers``
    is ``[(question, normalized text), ...]``."""

    student: str
    code: list[tuple[str, str]] = field(default_factory=list)
    answers: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Own":
        return cls(str(data["student"]), [(str(a), str(b)) for a, b in data.get("code", [])],
                   [(str(a), str(b)) for a, b in data.get("answers", [])])


@dataclass
class CellPair:
    """Two cells of a flagged pair, as HTML with the shared text in ``<mark>``."""

    label_a: str
    label_b: str
    html_a: str
    html_b: str
    shared: int          # tokens of filtered text the two cells share


@dataclass
class Pair:
    """Two students whose own text is similar: scores in 0..1 for code and written answers."""

    a: str
    b: str
    code: float
    answers: float
    shared_code: int
    shared_answers: int
    flagged: bool
    cells: list[CellPair] = field(default_factory=list)

    @property
    def score(self) -> float:
        return max(self.code, self.answers)


def _src(cell: Any) -> str:
    src = cell.get("source", "") if isinstance(cell, dict) else ""
    return "".join(x for x in src if isinstance(x, str)) if isinstance(src, list) else str(src)


def _norm_text(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _state(text: str) -> str:
    """answered, empty or unchanged (the released box), as :mod:`.answers` decides."""
    from xlalab.grading.answers import _result

    return _result(assign.Answer("", 0, "", "", "", 0), text).state


def _released_lines(lab: Lab) -> set[str]:
    return {line.strip() for c in lab.released.cells if c.get("cell_type") == "code"
            for line in _src(c).splitlines() if line.strip()}


def own_of(lab: Lab, student: str, nb: Any) -> Own:
    """The student's own code cells and written answers in a parsed submission (dict or NotebookNode)."""
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    released_code = {_src(c).strip() for c in lab.released.cells if c.get("cell_type") == "code"}
    check_cell_ids = {c.get("id") for c in lab.released.cells if assign.xmeta(c).get("check")}
    check_ids = {c.check for c in lab.checks}
    starter = _released_lines(lab)
    answer_cells = {a.cell_id: a.answer for a in lab.answers if a.cell_id}
    answer_ids = {a.answer for a in lab.answers}
    own = Own(student)
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            continue
        src = _src(cell)
        if cell.get("cell_type") == "markdown":
            question = answer_cells.get(cell.get("id")) or assign.xmeta(cell).get("answer")
            if question in answer_ids and _state(src) == ANSWERED:
                own.answers.append((str(question), _norm_text(src)))
            continue
        if cell.get("cell_type") != "code" or not src.strip() or src.strip() in released_code:
            continue
        header = parse_header(src)
        if cell.get("id") in check_cell_ids or assign.xmeta(cell).get("check") or (header and header[0] in check_ids):
            continue
        kept = "\n".join(line for line in src.splitlines() if line.strip() not in starter).strip("\n")
        if kept.strip():
            own.code.append((str(cell.get("id") or f"cell {i}"), kept))
    own.code, own.answers = _cut(own.code), _cut(own.answers)
    return own


def _cut(parts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """At most :data:`MAX_CHARS` characters of text in all, in order."""
    out, left = [], MAX_CHARS
    for label, text in parts:
        if left <= 0:
            break
        out.append((label, text[:left]))
        left -= len(text)
    return out


def collect(lab: Lab, student: str, path: str | Path) -> Own:
    """:func:`own_of` the submission file ``path``; an unreadable file has nothing of its own."""
    from xlalab.grading.submissions import Unreadable, parse_json, read_handin

    try:   # the same reader as grading: regular files only, no links, FIFOs or devices, size-capped
        nb = parse_json(read_handin(path))
    except Unreadable:
        nb = {}
    try:
        return own_of(lab, student, nb if isinstance(nb, dict) else {})
    except Exception:  # noqa: BLE001  (a hand-in of odd shape has nothing to compare; its grading row says why)
        return own_of(lab, student, {})


# -- keeping what was read, next to the grader's rows ------------------------------------------------------------

def _folder(out: str | Path) -> Path:
    from xlalab.grading.gradebook import spool_dir

    path = spool_dir(out) / "similarity"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def save(out: str | Path, owns: list[Own]) -> None:
    """Keep each student's own text in the grader's private spool (re-grading a student replaces it)."""
    folder = _folder(out)
    for own in owns:
        name = hashlib.sha256(own.student.encode()).hexdigest()[:20]
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(own.to_dict()), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, folder / f"{name}.json")


def load(out: str | Path, students: list[str]) -> list[Own]:
    """The kept own text of ``students`` (those of the gradebook's rows; others are ignored)."""
    folder = _folder(out)
    found = []
    for student in students:
        f = folder / f"{hashlib.sha256(student.encode()).hexdigest()[:20]}.json"
        try:
            own = Own.from_dict(json.loads(f.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if own.student == student:
            found.append(own)
    return found


# -- fingerprints and pairs --------------------------------------------------------------------------------------

def _fingerprint(text: str, *, code: bool, boilerplate=None):
    import matplotlib

    matplotlib.use("Agg")   # copydetect imports pyplot; no display here
    from copydetect import CodeFingerprint

    return CodeFingerprint("own.py" if code else "own.txt", NOISE, GUARANTEE - NOISE + 1, boilerplate=boilerplate,
                           filter=code, language="python" if code else None, fp=io.StringIO(text))


def _boilerplate(lab: Lab) -> tuple[Any, Any]:
    code = "\n\n".join(_src(c) for c in lab.released.cells if c.get("cell_type") == "code")
    text = "\n\n".join(_norm_text(_src(c)) for c in lab.released.cells if c.get("cell_type") == "markdown")
    import numpy as np

    return (np.array(sorted(_fingerprint(code, code=True).hashes)),
            np.array(sorted(_fingerprint(text, code=False).hashes)))


def _compare(fa, fb) -> tuple[float, int, Any]:
    from copydetect import compare_files

    if not fa.hashes or not fb.hashes:
        return 0.0, 0, None
    overlap, (sa, sb), slices = compare_files(fa, fb)
    return float(max(sa, sb)), int(overlap), slices


def _marked(text: str, slices) -> str:
    import html

    from copydetect.utils import highlight_overlap

    if slices is None or len(slices[0]) == 0:
        return html.escape(text)
    marked, _ = highlight_overlap(text, slices, "<mark>", "</mark>", escape_html=True)
    return marked


def _join(parts: list[tuple[str, str]]) -> str:
    return "\n\n".join(text for _, text in parts)


def pairs(lab: Lab, owns: list[Own], threshold: float = DEFAULT_THRESHOLD, *,
          min_shared: int = MIN_SHARED, cells: int = 3) -> list[Pair]:
    """Every pair of students with some shared text, most similar first; ``flagged`` where a score reaches
    ``threshold`` with at least ``min_shared`` tokens shared. Flagged pairs carry up to ``cells`` cell pairs."""
    if not 0 < threshold <= 1:
        raise ValueError(f"the similarity threshold must be in (0, 1], not {threshold}")
    code_bp, text_bp = _boilerplate(lab)
    owns = sorted(owns, key=lambda o: o.student)
    fp_code = [_fingerprint(_join(o.code), code=True, boilerplate=code_bp) for o in owns]
    fp_text = [_fingerprint(_join(o.answers), code=False, boilerplate=text_bp) for o in owns]
    found = []
    for i in range(len(owns)):
        for j in range(i + 1, len(owns)):
            code, shared_code, _ = _compare(fp_code[i], fp_code[j])
            answers, shared_answers, _ = _compare(fp_text[i], fp_text[j])
            if not (shared_code or shared_answers):
                continue
            flagged = (code >= threshold and shared_code >= min_shared) or \
                (answers >= threshold and shared_answers >= min_shared)
            pair = Pair(owns[i].student, owns[j].student, round(code, 3), round(answers, 3), shared_code,
                        shared_answers, flagged)
            if flagged:
                pair.cells = _cell_pairs(owns[i], owns[j], code_bp, text_bp, cells)
            found.append(pair)
    return sorted(found, key=lambda p: (-p.score, p.a, p.b))


def _cell_pairs(a: Own, b: Own, code_bp, text_bp, limit: int) -> list[CellPair]:
    """The cells of ``a`` and ``b`` that share the most text, each matched once, best first."""
    candidates = []
    for kind, left, right, bp in (("code", a.code, b.code, code_bp), ("text", a.answers, b.answers, text_bp)):
        fl = [_fingerprint(t, code=kind == "code", boilerplate=bp) for _, t in left]
        fr = [_fingerprint(t, code=kind == "code", boilerplate=bp) for _, t in right]
        for x, fx in enumerate(fl):
            for y, fy in enumerate(fr):
                if not fx.hashes or not fy.hashes:
                    continue
                from copydetect import compare_files

                overlap, _, (sx, sy) = compare_files(fx, fy)
                if overlap:
                    candidates.append((int(overlap), kind, x, y, sx, sy))
    used_l, used_r, out = set(), set(), []
    for overlap, kind, x, y, sx, sy in sorted(candidates, key=lambda c: -c[0]):
        if (kind, x) in used_l or (kind, y) in used_r:
            continue
        used_l.add((kind, x))
        used_r.add((kind, y))
        left, right = (a.code, b.code) if kind == "code" else (a.answers, b.answers)
        out.append(CellPair(left[x][0], right[y][0], _marked(left[x][1], sx), _marked(right[y][1], sy), overlap))
        if len(out) == limit:
            break
    return out
