"""The lab format (``solutions/README.md``): what a solution notebook's cells say, read as data.

The vocabulary every grading step shares: a cell's ``xlalab`` metadata (:func:`xmeta`), the check cells
(:class:`Check`, :func:`checks`) and written answers (:class:`Answer`, :func:`answers`) of a notebook, validated;
:func:`source_digest` (what tamper detection compares), the tokens and stubs of the released lab, and
:func:`read`. It imports no grading step, so that :mod:`.assign` (solutions -> labs), :mod:`.judge`, :mod:`.build`
and the rest can all import it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading.notebook import CHECK_HEADER

REPOSITORY_TOKEN = "@REPOSITORY_URL@"
# In markdown cells: the compiler the labs were built and graded on (xlalab/built_with.json, `make labs` records it).
BUILT_WITH_TOKEN = "@BUILT_WITH@"
ANSWER_STUB = "# YOUR CODE HERE\nraise NotImplementedError"
ANSWER_BOX = "**Your answer:** …"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)#\s*BEGIN SOLUTION\s*$")
_END = re.compile(r"^[ \t]*#\s*END SOLUTION\s*$")


class FormatError(ValueError):
    """A solution notebook breaks the lab format (solutions/README.md)."""


@dataclass(frozen=True)
class Check:
    """One check cell of a solution notebook.

    ``index`` is the cell's position in the solution notebook; ``source`` its text (header included).
    """

    check: str
    points: float
    hidden: bool
    cell_id: str
    index: int
    source: str

    @property
    def digest(self) -> str:
        """SHA-256 of the cell's source with trailing whitespace ignored (what tamper detection compares)."""
        return source_digest(self.source)


@dataclass(frozen=True)
class Answer:
    """One written-answer cell of a solution notebook: ``"xlalab": {"answer": id, "points": n, "rubric": ...}``.

    ``model`` (the cell's source) and ``rubric`` are instructor-only: they never reach ``labs/``.
    """

    answer: str
    points: float
    rubric: str
    model: str
    cell_id: str
    index: int


def source_digest(source: str) -> str:
    """SHA-256 hex digest of a cell source, ignoring trailing whitespace on lines and at the end."""
    text = "\n".join(line.rstrip() for line in source.strip("\n").splitlines())
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def xmeta(cell: Any) -> dict:
    """The ``xlalab`` metadata dict of a cell (empty if there is none or it is not a dict)."""
    meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    value = meta.get("xlalab", {}) if isinstance(meta, dict) else {}
    return value if isinstance(value, dict) else {}


def lab_name(path: str | Path) -> str:
    """``"lab01_timing"`` from ``solutions/lab01_timing.ipynb`` (or a bare name)."""
    return Path(path).name.removesuffix(".ipynb")


def _check_id_and_points(where: str, kind: str, ident: Any, points: Any) -> float:
    """``points`` as a float; raise FormatError unless ``ident`` is a gradebook-column id and ``points`` a positive
    number."""
    if not isinstance(ident, str) or not re.fullmatch(r"[\w\-.]+", ident):
        raise FormatError(f"{where}: {kind} id {ident!r} must be letters, digits, '-', '_' or '.'")
    if isinstance(points, bool) or not isinstance(points, (int, float)) or points <= 0:
        raise FormatError(f"{where}: {kind} {ident!r} needs positive numeric 'points', got {points!r}")
    return float(points)


def checks(nb: Any) -> list[Check]:
    """Every check cell of a solution notebook, in order, validated against its ``# CHECK`` header.

    Raises FormatError on a missing or mismatched header, a bad points value or a duplicate id.
    """
    found: list[Check] = []
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        meta = xmeta(cell)
        if "check" not in meta:
            continue
        cid, points = meta["check"], meta.get("points")
        where = f"cell {index} (id {cell.get('id')!r})"
        if cell.cell_type != "code":
            raise FormatError(f"{where}: a check must be a code cell")
        points = _check_id_and_points(where, "check", cid, points)
        first = cell.source.lstrip().splitlines()[0] if cell.source.strip() else ""
        m = CHECK_HEADER.match(first)
        if not m:
            raise FormatError(f"{where}: check {cid!r} must start with '# CHECK {cid} ({points:g} points)'")
        if m["id"] != cid or float(m["points"]) != float(points):
            raise FormatError(f"{where}: header says {m['id']} ({m['points']} points) but metadata says "
                              f"{cid} ({points:g} points)")
        if cid in seen:
            raise FormatError(f"{where}: duplicate check id {cid!r}")
        seen.add(cid)
        found.append(Check(cid, float(points), bool(meta.get("hidden", False)), cell.get("id", ""),
                           index, cell.source))
    return found


def answers(nb: Any) -> list[Answer]:
    """Every written-answer cell of a solution notebook, in order.

    Raises FormatError on a code cell, a bad id, non-positive points, a duplicate id or an id that is also a
    check's (gradebook columns are named by both).
    """
    found: list[Answer] = []
    seen = {c.check for c in checks(nb)}
    for index, cell in enumerate(nb.cells):
        meta = xmeta(cell)
        if "answer" not in meta:
            continue
        aid, points, rubric = meta["answer"], meta.get("points"), meta.get("rubric", "")
        where = f"cell {index} (id {cell.get('id')!r})"
        if cell.cell_type != "markdown":
            raise FormatError(f"{where}: a written answer must be a markdown cell")
        points = _check_id_and_points(where, "answer", aid, points)
        if not isinstance(rubric, str):
            raise FormatError(f"{where}: answer {aid!r}: 'rubric' must be a string")
        if aid in seen:
            raise FormatError(f"{where}: duplicate id {aid!r} (answer and check ids share one namespace)")
        seen.add(aid)
        found.append(Answer(aid, float(points), rubric, cell.source, cell.get("id", ""), index))
    return found


def strip_inline(source: str) -> str:
    """Replace every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block by the answer stub.

    The stub (``# YOUR CODE HERE`` then ``raise NotImplementedError``) is indented like the BEGIN line.
    Raises FormatError on an unclosed or unopened block.
    """
    out: list[str] = []
    indent: str | None = None
    for line in source.splitlines():
        begin, end = _BEGIN.match(line), _END.match(line)
        if begin:
            if indent is not None:
                raise FormatError("nested '# BEGIN SOLUTION'")
            indent = begin["indent"]
            out.extend(indent + stub for stub in ANSWER_STUB.splitlines())
        elif end:
            if indent is None:
                raise FormatError("'# END SOLUTION' without '# BEGIN SOLUTION'")
            indent = None
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise FormatError("'# BEGIN SOLUTION' without '# END SOLUTION'")
    return "\n".join(out)


def has_inline(source: str) -> bool:
    """Whether a cell source holds a ``# BEGIN SOLUTION`` block."""
    return any(_BEGIN.match(line) for line in source.splitlines())


def read(path: str | Path) -> Any:
    """Read a notebook as nbformat v4 (cells without ids get none added here)."""
    return nbformat.read(str(path), as_version=4)
