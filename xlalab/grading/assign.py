"""Write the student labs in ``labs/`` from the single-source notebooks in ``solutions/``.

``xlalab assign [solutions/labNN_x.ipynb ...] [--check]`` (formerly ``python -m xlalab.assign``, which still works)

For each solution notebook (all ``solutions/lab*.ipynb`` when no path is given) the student version
``labs/<same name>`` is written with: inline answers (``# BEGIN SOLUTION`` ... ``# END SOLUTION``) and whole
answer cells replaced by ``# YOUR CODE HERE`` / ``raise NotImplementedError``, written answers replaced by an
empty answer box (a graded one, ``"xlalab": {"answer", "points", "rubric"}``, keeps only its id and points),
hidden checks removed, ``@REPOSITORY_URL@`` replaced by ``repository.url`` from
``_config.yml``, instructor-only metadata removed, outputs and execution counts cleared. The output is
deterministic (sorted metadata keys, nbformat 4.5, stable cell ids, trailing newline), so ``--check`` compares
bytes and exits 1 when ``labs/`` is out of date.

A check is refused (:func:`xlalab.grading.judge.check_problems`) unless it has a ``# JUDGE`` line and, outside
the callables it passes to ``probe``, reads only names the judge kernel defines: the setup cell's, the given
cells', its own, an earlier check's, builtins; never a name an answer cell binds.

The format is documented in ``solutions/README.md``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat

from xlalab.grading.notebook import CHECK_HEADER

if TYPE_CHECKING:
    from xlalab.options import AssignOptions

log = logging.getLogger(__name__)

REPOSITORY_TOKEN = "@REPOSITORY_URL@"
# In markdown cells: the compiler the labs were built and graded on (xlalab/built_with.json, `make labs` records it).
BUILT_WITH_TOKEN = "@BUILT_WITH@"
ANSWER_STUB = "# YOUR CODE HERE\nraise NotImplementedError"
ANSWER_BOX = "**Your answer:** …"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)#\s*BEGIN SOLUTION\s*$")
_END = re.compile(r"^[ \t]*#\s*END SOLUTION\s*$")
# Cell metadata keys that never reach labs/: course metadata is rebuilt, execution timings are noise.
_DROPPED_CELL_KEYS = {"xlalab", "execution", "ExecuteTime", "collapsed", "scrolled"}


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


def repository_url(root: str | Path = ".") -> str:
    """``repository.url`` from ``<root>/_config.yml`` (the one place the course's URL lives)."""
    from xlalab import compat

    yaml = compat.require("yaml", "reading _config.yml")
    config = yaml.safe_load(Path(root, "_config.yml").read_text(encoding="utf-8")) or {}
    url = (config.get("repository") or {}).get("url")
    if not url:
        raise FormatError(f"no repository.url in {Path(root, '_config.yml')}")
    return str(url)


def built_with_text() -> str:
    """How a lab's text names the course's compiler, e.g. ``"XLA:CPU of TensorFlow 2.21.0"``
    (xlalab/built_with.json)."""
    from xlalab import compat

    ref = compat.built_with()
    if not ref:
        return "the compiler recorded in `xlalab/built_with.json`"
    return f"{ref.get('backend', 'XLA')} of TensorFlow {ref.get('tensorflow', '(unrecorded)')}"


def _clean_metadata(meta: dict) -> dict:
    return {k: copy.deepcopy(v) for k, v in meta.items() if k not in _DROPPED_CELL_KEYS}


def student_notebook(nb: Any, repo_url: str, name: str) -> Any:
    """The student version of a solution notebook (a new NotebookNode; ``nb`` is not changed).

    Args:
        nb: the solution notebook (nbformat v4).
        repo_url: replaces ``@REPOSITORY_URL@`` in the setup cell.
        name: the lab's name, e.g. ``"lab01_timing"``; stored as ``metadata.xlalab.lab``.
    """
    answers(nb)  # validates check headers, check and answer ids
    cells = []
    for index, cell in enumerate(nb.cells):
        meta = xmeta(cell)
        cid = cell.get("id") or f"cell-{index}"
        new_meta = _clean_metadata(dict(cell.get("metadata", {})))
        try:
            if "check" in meta:
                if meta.get("hidden"):
                    continue
                source = cell.source
                new_meta["xlalab"] = {"check": meta["check"], "points": meta["points"]}
            elif "answer" in meta:   # written answer: an empty box; rubric and model answer stay behind
                source = ANSWER_BOX
                new_meta["xlalab"] = {"answer": meta["answer"], "points": meta["points"]}
            elif cell.cell_type == "markdown":
                source = ANSWER_BOX if meta.get("solution") else cell.source.replace(BUILT_WITH_TOKEN,
                                                                                      built_with_text())
            elif cell.cell_type == "code":
                source = cell.source
                if has_inline(source):
                    source = strip_inline(source)
                elif meta.get("solution"):
                    source = ANSWER_STUB
                if meta.get("setup"):
                    source = source.replace(REPOSITORY_TOKEN, repo_url)
                    new_meta["xlalab"] = {"setup": True}
            else:
                source = cell.source
        except FormatError as err:
            raise FormatError(f"cell {index} (id {cid!r}): {err}") from None
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(source=source, metadata=new_meta, id=cid)
        elif cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(source=source, metadata=new_meta, id=cid)
        else:
            new = nbformat.v4.new_raw_cell(source=source, metadata=new_meta, id=cid)
        cells.append(new)
    meta = {k: copy.deepcopy(v) for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
    meta.setdefault("kernelspec", dict(KERNELSPEC))
    if "language_info" in meta:
        meta["language_info"] = {"name": meta["language_info"].get("name", "python")}
    meta["xlalab"] = {"lab": name}
    out = nbformat.v4.new_notebook(cells=cells, metadata=meta)
    out.nbformat, out.nbformat_minor = 4, 5
    return out


def dumps(nb: Any) -> str:
    """Deterministic JSON text of a notebook: sorted keys, one-space indent, trailing newline."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    text = nbformat.writes(nb, version=4)
    # nbformat sorts keys and indents; re-dump through json to be independent of its version's defaults.
    text = json.dumps(json.loads(text), sort_keys=True, indent=1, ensure_ascii=False)
    return text + "\n"


def read(path: str | Path) -> Any:
    """Read a notebook as nbformat v4 (cells without ids get none added here)."""
    return nbformat.read(str(path), as_version=4)


def build(solution: str | Path, root: str | Path = ".") -> tuple[Path, str]:
    """``(labs path, text)`` of the student version of one solution notebook under ``root``."""
    from xlalab.grading.judge import check_problems

    solution = Path(solution)
    nb = read(solution)
    problems = check_problems(nb)
    if problems:
        raise FormatError("a check would judge with state the student controls (probe it): " + "; ".join(problems))
    text = dumps(student_notebook(nb, repository_url(root), lab_name(solution)))
    return Path(root, "labs", solution.name), text


def solution_paths(root: str | Path = ".") -> list[Path]:
    """Every ``solutions/lab*.ipynb`` under ``root``, sorted."""
    return sorted(Path(root, "solutions").glob("lab*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    """``python -m xlalab.assign``, the older form of ``xlalab assign`` (:func:`run`)."""
    from xlalab import log as log_setup
    from xlalab.options import AssignOptions, add_options, from_args

    parser = argparse.ArgumentParser(prog="python -m xlalab.assign", description=__doc__.split("\n\n")[0])
    add_options(parser, AssignOptions)
    log_setup.configure()
    return run(from_args(AssignOptions, parser.parse_args(argv)))


def run(args: AssignOptions) -> int:
    """``xlalab assign``: write labs/ (0), or with ``check`` say whether it is up to date (0, or 1); 2 on an error."""
    root = Path(args.root)
    if args.record_built_with and not args.check:
        from xlalab import compat, hw

        print(f"recorded {compat.record_built_with(hw.backend().xla)} in {compat.BUILT_WITH}")
    paths = [Path(p) for p in args.solutions] or solution_paths(root)
    stale: list[str] = []
    for path in paths:
        try:
            target, text = build(path, root)
        except (FormatError, OSError, nbformat.reader.NotJSONError, ValueError) as err:
            log.error("error: %s: %s", path, err)
            return 2
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if args.check:
            if current != text:
                stale.append(str(target))
        elif current != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target}")
    if args.record_built_with and not args.check:
        from xlalab.grading.build import record_released_checks

        print(f"recorded the released versions of every check in {record_released_checks(root)}")
    if args.check:
        expected = {Path(root, "labs", p.name).resolve() for p in paths}
        if not args.solutions:  # a full check also finds labs without a solution
            for lab in sorted(Path(root, "labs").glob("lab*.ipynb")):
                if lab.resolve() not in expected:
                    stale.append(f"{lab} (no solutions/{lab.name})")
        if stale:
            log.error("labs/ is out of date; run `xlalab assign` (or `make labs`):")
            for s in stale:
                log.error("  %s", s)
            return 1
        print(f"labs/ is up to date ({len(paths)} lab(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
