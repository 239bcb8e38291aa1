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
answers of the same exercise are not flagged for being short), or when the ordered code signal reaches
:data:`ORDER_THRESHOLD` (calibrated on independent solutions of four labs, see there). The report
(:mod:`.classreport`) shows each flagged pair with its most similar cells side by side and the shared text marked.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xlalab.files import atomic_write
from xlalab.grading import labformat
from xlalab.grading.lab import Lab
from xlalab.grading.model import ANSWERED
from xlalab.grading.notebook import parse_header
from xlalab.grading.options import DEFAULT_THRESHOLD
from xlalab.grading.submissions import HandIn, Unreadable

# Why 0.6: copydetect replaces every identifier, string and comment, so a copy with renamed variables, new comments
# and moved cells scores close to 1 (1.00 on code, 0.84 on the written answer in tests/test_classreport.py), while
# two honest solutions of the same exercises share only the syntax the exercise forces (0 there: no 25-character
# run of filtered tokens in common). copydetect's own display default, 0.33, is made for whole programs, where that
# forced part is a smaller share than in a lab's short answers. The threshold only decides what is listed for a look.
# Measured on Labs 1 to 4 (tests/data/similarity/, results/grading/similarity-calibration.json): 88 pairs of
# independently written solutions score at most 0.43 on code fingerprints, 12 disguised copies of the reference at
# least 0.72 (0.60 between two copies).
# DEFAULT_THRESHOLD (0.6, the default of --similarity-threshold) is defined in xlalab.grading.options.
# The ordered code signal (:func:`skeleton`, :func:`ordered_overlap`) flags a pair only from this score (or the
# threshold, if higher). Independent solutions of the same exercises follow the order the lab asks for and call
# the same library functions, so their skeletons agree far more than their text: 0.53 to 0.84 on those 88 pairs
# (two honest Lab 1 solutions scored 0.70 and were flagged at 0.6), against 0.82 to 1.00 for the disguised copies,
# which the fingerprints flag anyway. At 0.9 no measured honest pair is flagged; the signal still flags a
# copy whose inserted statements keep its order (tests/test_classreport.py's mechanical rewrite scores 1.0).
ORDER_THRESHOLD = 0.9
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
    skeleton: list[str] = field(default_factory=list)    # the code's ordered signal (:func:`skeleton`)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Own:
        return cls(str(data["student"]), [(str(a), str(b)) for a, b in data.get("code", [])],
                   [(str(a), str(b)) for a, b in data.get("answers", [])],
                   [str(t) for t in data.get("skeleton", [])][:MAX_TOKENS])


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
    order_code: float = 0.0        # the ordered signal (:func:`ordered_overlap`) of the code skeletons
    order_answers: float = 0.0     # and of the answers' content words

    @property
    def score(self) -> float:
        return max(self.code, self.answers, self.order_code, self.order_answers)


def _src(cell: Any) -> str:
    src = cell.get("source", "") if isinstance(cell, dict) else ""
    return "".join(x for x in src if isinstance(x, str)) if isinstance(src, list) else str(src)


def _norm_text(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _state(text: str) -> str:
    """answered, empty or unchanged (the released box), as :mod:`.answers` decides."""
    from xlalab.grading.answers import _result

    return _result(labformat.Answer("", 0, "", "", "", 0), text).state


def _released_lines(lab: Lab) -> set[str]:
    return {line.strip() for c in lab.released.cells if c.get("cell_type") == "code"
            for line in _src(c).splitlines() if line.strip()}


def own_of(lab: Lab, student: str, nb: Any) -> Own:
    """The student's own code cells and written answers in a parsed submission (dict or NotebookNode)."""
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    released_code = {_src(c).strip() for c in lab.released.cells if c.get("cell_type") == "code"}
    check_cell_ids = {c.get("id") for c in lab.released.cells if labformat.xmeta(c).get("check")}
    check_ids = {c.check for c in lab.checks}
    starter = _released_lines(lab)
    answer_cells = {a.cell_id: a.answer for a in lab.answers if a.cell_id}
    answer_ids = {a.answer for a in lab.answers}
    own = Own(student)
    ids = set()   # identity functions defined anywhere in the hand-in, unwrapped in every cell
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            ids |= _identity_functions(_parse(_src(cell)))
    starter = {line.strip() for c in lab.released.cells if c.get("cell_type") == "code"
               for line in normal_code(_src(c)).splitlines() if line.strip()} | starter
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            continue
        src = _src(cell)
        if cell.get("cell_type") == "markdown":
            question = answer_cells.get(cell.get("id", "")) or labformat.xmeta(cell).get("answer")
            if question in answer_ids and _state(src) == ANSWERED:
                own.answers.append((str(question), _norm_text(src)))
            continue
        if cell.get("cell_type") != "code" or not src.strip() or src.strip() in released_code:
            continue
        header = parse_header(src)
        if (cell.get("id") in check_cell_ids or labformat.xmeta(cell).get("check")
                or (header and header[0] in check_ids)):
            continue
        norm = normal_code(src, ids)
        kept = "\n".join(line for line in norm.splitlines() if line.strip() not in starter).strip("\n")
        if kept.strip():
            own.code.append((str(cell.get("id") or f"cell {i}"), kept))
            own.skeleton += skeleton(src, ids)
    own.code, own.answers = _cut(own.code), _cut(own.answers)
    own.skeleton = own.skeleton[:MAX_TOKENS]
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


def collect(lab: Lab, handin: HandIn) -> Own:
    """:func:`own_of` a hand-in (read once, by the same reader as grading: :class:`~xlalab.grading.submissions.
    HandIn`); an unreadable file has nothing of its own."""
    try:
        nb = handin.json()
    except Unreadable:
        nb = {}
    try:
        return own_of(lab, handin.student, nb if isinstance(nb, dict) else {})
    except Exception:  # noqa: BLE001  (a hand-in of odd shape has nothing to compare; its grading row says why)
        return own_of(lab, handin.student, {})


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
        atomic_write(folder / f"{name}.json", json.dumps(own.to_dict()), 0o600)


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

# -- normalising before fingerprinting (issue 25: a mechanical rewrite hid a copy) -----------------------------

# Words that carry no content in an answer, dropped before comparing (English function words and fillers).
STOP_WORDS = frozenset("""a about above actually after again against all also am an and any are as at basically be
because been before being below between both but by can could did do does doing down during each else even ever
every few for from further had has have having he her here hers him his how however i if in indeed into is it its
itself just kind kinda least less let like literally many may me might more most much must my myself no nor not
now of off often on once only or other our ours out over own per perhaps pretty quite rather really same she
should simply so some somewhat such than that the their theirs them then there these they this those though
through thus to too truly under until up upon us very was we well were what when where whether which while who
whom why will with would yes yet you your yours""".split())
MIN_ORDERED = 30          # tokens a pair's ordered signal must match before it may flag the pair
MAX_TOKENS = 3000         # of a student's code skeleton or answer words, in order, for the ordered signal


def _identity_functions(tree) -> set[str]:
    """Names bound to functions that return their one argument unchanged (``def f(x): return x``,
    ``f = lambda x: x``), after no-op statements are ignored (none for a ``tree`` of None)."""
    import ast

    names: set[str] = set()
    if tree is None:
        return names
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(node.args.args) == 1 \
                and not node.args.vararg and not node.args.kwarg and not node.decorator_list:
            body = [s for s in node.body if not _noop(s)]
            arg = node.args.args[0].arg
            if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Name) \
                    and body[0].value.id == arg:
                names.add(node.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Lambda) and len(node.value.args.args) == 1 \
                and isinstance(node.value.body, ast.Name) and node.value.body.id == node.value.args.args[0].arg:
            names.add(node.targets[0].id)
    return names


def _noop(stmt) -> bool:
    """A statement that does nothing: ``pass``, a bare constant, name or attribute (docstrings included), or
    ``x = x``."""
    import ast

    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, (ast.Constant, ast.Name, ast.Attribute))
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return isinstance(stmt.value, ast.Name) and stmt.value.id == stmt.targets[0].id
    return False


def _parse(text: str):
    import ast

    if len(text) > MAX_CHARS:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _normal_tree(text: str, ids: set[str] | None = None):
    """The AST of ``text`` with identity wrappers (``ids``, and those ``text`` defines) unwrapped (``f(x)`` ->
    ``x``), their definitions and every no-op statement removed; None if it does not parse."""
    import ast

    tree = _parse(text)
    if tree is None:
        return None
    known = set(ids or ()) | _identity_functions(tree)

    class Normal(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id in known and len(node.args) == 1 \
                    and not node.keywords and not isinstance(node.args[0], ast.Starred):
                return node.args[0]
            return node

    try:
        tree = Normal().visit(tree)
        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                body = getattr(node, name, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    kept = [s for s in body if not _noop(s) and not (
                        isinstance(s, (ast.FunctionDef, ast.Assign)) and _defines(s) & known)]
                    setattr(node, name, kept or ([ast.Pass()] if name == "body" and not isinstance(node, ast.Module)
                                                 else []))
        return ast.fix_missing_locations(tree)
    except RecursionError:
        return None


def _defines(stmt) -> set[str]:
    import ast

    if isinstance(stmt, ast.FunctionDef):
        return {stmt.name}
    return {t.id for t in stmt.targets if isinstance(t, ast.Name)}


def normal_code(text: str, ids: set[str] | None = None) -> str:
    """``text`` as it is compared: parsed and written back (comments and layout gone) without identity
    wrappers and no-op statements; the text itself where it does not parse."""
    import ast

    tree = _normal_tree(text, ids)
    if tree is None:
        return text
    try:
        return ast.unparse(tree)
    except (RecursionError, ValueError):
        return text


def skeleton(text: str, ids: set[str] | None = None) -> list[str]:
    """The ordered signal of code: in source order, what a working rewrite must keep: the statements' kinds,
    called and looked-up attributes, operators and constants (never variable names), of the normalised code."""
    import ast

    tree = _normal_tree(text, ids)
    if tree is None:
        return []
    out: list[str] = []

    def walk(node) -> None:
        if len(out) >= MAX_TOKENS:
            return
        if isinstance(node, ast.stmt):
            out.append(type(node).__name__)
        elif isinstance(node, ast.Attribute):
            out.append("." + node.attr)
        elif isinstance(node, ast.Constant):
            out.append(repr(node.value)[:40])
        elif isinstance(node, (ast.operator, ast.cmpop, ast.boolop, ast.unaryop)):
            out.append(type(node).__name__)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            out.append(node.func.id + "()")
        for child in ast.iter_child_nodes(node):
            walk(child)

    try:
        walk(tree)
    except RecursionError:
        pass
    return out


def content_words(text: str) -> list[str]:
    """The ordered signal of a written answer: its words without :data:`STOP_WORDS` (fillers, function words)."""
    words = re.findall(r"[a-z0-9]+(?:[-'][a-z0-9]+)*", text.lower())
    return [w for w in words if w not in STOP_WORDS][:MAX_TOKENS]


def ordered_overlap(a: list[str], b: list[str]) -> tuple[float, int]:
    """(tokens of the shorter found in the other in the same order, as a share; how many): words or statements
    inserted anywhere (fillers, no-ops, wrappers) do not lower it, only rewording or reordering does."""
    if not a or not b:
        return 0.0, 0
    from difflib import SequenceMatcher

    matched = sum(block.size for block in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
    return matched / min(len(a), len(b)), matched


def compared(text: str, code: bool) -> str:
    """The text fingerprinted: code as :func:`own_of` keeps it (already :func:`normal_code`), an answer's
    :func:`content_words`."""
    return text if code else " ".join(content_words(text))


def _fingerprint(text: str, *, code: bool, boilerplate=None):
    import matplotlib

    matplotlib.use("Agg")   # copydetect imports pyplot; no display here
    from copydetect import CodeFingerprint

    text = compared(text, code)
    return CodeFingerprint("own.py" if code else "own.txt", NOISE, GUARANTEE - NOISE + 1, boilerplate=boilerplate,
                           filter=code, language="python" if code else None, fp=io.StringIO(text))


def _boilerplate(lab: Lab) -> tuple[Any, Any]:
    code = "\n\n".join(normal_code(_src(c)) for c in lab.released.cells if c.get("cell_type") == "code")
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
    sk = [o.skeleton for o in owns]
    words = [content_words(_join(o.answers)) for o in owns]
    found = []
    for i in range(len(owns)):
        for j in range(i + 1, len(owns)):
            code, shared_code, _ = _compare(fp_code[i], fp_code[j])
            answers, shared_answers, _ = _compare(fp_text[i], fp_text[j])
            order_code, matched_code = ordered_overlap(sk[i], sk[j])
            order_answers, matched_words = ordered_overlap(words[i], words[j])
            if not (shared_code or shared_answers or matched_code >= MIN_ORDERED or matched_words >= MIN_ORDERED):
                continue
            flagged = (code >= threshold and shared_code >= min_shared) or \
                (answers >= threshold and shared_answers >= min_shared) or \
                (order_code >= max(threshold, ORDER_THRESHOLD) and matched_code >= MIN_ORDERED) or \
                (order_answers >= threshold and matched_words >= MIN_ORDERED)
            pair = Pair(owns[i].student, owns[j].student, round(code, 3), round(answers, 3), shared_code,
                        shared_answers, flagged, order_code=round(order_code, 3),
                        order_answers=round(order_answers, 3))
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
        code = kind == "code"
        out.append(CellPair(left[x][0], right[y][0], _marked(compared(left[x][1], code), sx),
                            _marked(compared(right[y][1], code), sy), overlap))
        if len(out) == limit:
            break
    return out
