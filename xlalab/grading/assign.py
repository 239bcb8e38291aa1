"""Write the student labs in ``labs/`` from the single-source notebooks in ``solutions/``.

``xlalab assign [solutions/labNN_x.ipynb ...] [--check]`` (:func:`run`; the lab format itself is
:mod:`xlalab.grading.labformat`, re-exported here)

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

import copy
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat

from xlalab.grading.judge import check_problems
from xlalab.grading.labformat import (
    ANSWER_BOX,
    ANSWER_STUB,
    BUILT_WITH_TOKEN,
    KERNELSPEC,
    REPOSITORY_TOKEN,
    Answer,
    Check,
    FormatError,
    answers,
    checks,
    has_inline,
    lab_name,
    read,
    source_digest,
    strip_inline,
    xmeta,
)
from xlalab.grading.releases import record_released_checks

if TYPE_CHECKING:
    from xlalab.options import AssignOptions

log = logging.getLogger(__name__)

# Cell metadata keys that never reach labs/: course metadata is rebuilt, execution timings are noise.
_DROPPED_CELL_KEYS = {"xlalab", "execution", "ExecuteTime", "collapsed", "scrolled"}


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


def build(solution: str | Path, root: str | Path = ".") -> tuple[Path, str]:
    """``(labs path, text)`` of the student version of one solution notebook under ``root``."""
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


__all__ = ["ANSWER_BOX", "ANSWER_STUB", "BUILT_WITH_TOKEN", "KERNELSPEC", "REPOSITORY_TOKEN", "Answer", "Check",
           "FormatError", "answers", "build", "built_with_text", "checks", "dumps", "has_inline", "lab_name", "read",
           "repository_url", "run", "solution_paths", "source_digest", "strip_inline", "student_notebook", "xmeta"]
