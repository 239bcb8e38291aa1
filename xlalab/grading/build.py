"""Building the notebook that is run for one submission.

The student's cells keep their text (not their metadata or outputs); every visible check is the released one,
at the student's position (a tampered or deleted check is reported and the released one is run); hidden checks
are put back from the instructor source; the guard (:mod:`xlalab.grading.guard`) is the first cell, and every
graded check cell is a call of it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading import assign
from xlalab.grading.guard import INIT as GUARD_INIT
from xlalab.grading.lab import Lab
from xlalab.grading.notebook import parse_header

NBVAL_TAGS = {"raises-exception", "nbval-raises-exception", "nbval-skip", "nbval-check-output",
              "nbval-ignore-output", "pytest-validate-ignore-output"}

def _is_check_like(cell: Any, lab: Lab) -> str | None:
    """The check id a submission cell claims to be (by source cell id, metadata or header), if any."""
    by_id = {c.cell_id: c.check for c in lab.checks if c.cell_id}
    if cell.get("id") in by_id:
        return by_id[cell.get("id")]
    meta = assign.xmeta(cell)
    if isinstance(meta.get("check"), str):
        return meta["check"]
    if cell.cell_type == "code":
        header = parse_header(cell.source)
        if header:
            return header[0]
    return None


def given_names(lab: Lab) -> dict[str, str]:
    """``{name: statement}`` for the names the released lab's given code cells define (not the setup, a check
    or an answer cell) by a literal assignment (``SIZES = [3, 5, 8]``; not an empty dict or list, where the
    student's cells record results) or a plain ``def``: the guard puts the released ones back for a check that
    reads them. A name a student's answer cell also defines is left out."""
    given: dict[str, str] = {}
    answered: set[str] = set()
    for cell in lab.source.cells:
        if cell.cell_type != "code":
            continue
        meta = assign.xmeta(cell)
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        is_answer = bool(meta.get("solution") or assign.has_inline(cell.source))
        if "check" in meta or meta.get("setup"):
            continue
        for node in tree.body:
            names: list[str] = []
            ok = False
            if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
                names = [t.id for t in node.targets]
                try:
                    ast.literal_eval(node.value)
                    # An empty dict or list is where the student's cells record results (``timings = {}``).
                    ok = not (isinstance(node.value, (ast.Dict, ast.List)) and not (
                        node.value.keys if isinstance(node.value, ast.Dict) else node.value.elts))
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    ok = False
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names, ok = [node.name], not node.decorator_list and isinstance(node, ast.FunctionDef)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [(a.asname or a.name).split(".")[0] for a in node.names]
            if is_answer:
                answered.update(names)
                continue
            for name in names:
                if ok:
                    given[name] = ast.get_source_segment(cell.source, node) or ""
                else:
                    given.pop(name, None)
                    answered.add(name)
    return {k: v for k, v in given.items() if v and k not in answered}


def check_cells(lab: Lab) -> dict[str, tuple[str, str]]:
    """``{check id: (header line, body)}``: what the plugin writes into each graded check cell as it runs."""
    return {c.check: (f"# CHECK {c.check} ({c.points:g} points)", c.source) for c in lab.checks}


def build_graded(lab: Lab, sub: Any, nonce: str, log_path: Path, nb_path: Path | None = None
                 ) -> tuple[Any, list[str]]:
    """The notebook to run for one submission, and the tampering found.

    A visible check stays where the student has it (its text replaced by the graded version); a hidden or
    deleted check is inserted after the nearest preceding source cell the submission still has (matched by
    cell id, or by identical text for cells that are not answers) and after the student's own cells that
    follow it. A check cell holds only its header and a call of the guard by check id; its code is written
    into it by the nbval plugin as it runs (:func:`check_cells`), never into the notebook.
    """
    tampering: list[str] = []
    source_cells = lab.source.cells
    released_by_id = {c.get("id"): c for c in lab.released.cells}
    setup_ids = {c.get("id") for c in source_cells if assign.xmeta(c).get("setup")}
    check_by_id = {c.check: c for c in lab.checks}
    guard_name, bind_name = f"_xlalab_guard_{nonce}", f"_xlalab_bind_{nonce}"

    def graded_check(check: assign.Check) -> Any:
        return nbformat.v4.new_code_cell(
            source=f"# CHECK {check.check} ({check.points:g} points)\n{guard_name}({check.check!r})",
            id=f"xlalab-check-{lab.checks.index(check)}",
            metadata={"xlalab": {"check": check.check, "points": check.points, "hidden": check.hidden}})

    # The submission's cells in order: a cell claiming a known visible check becomes the graded check (at
    # the student's position); other check-like cells and the setup cell are dropped; the rest keep their
    # text but lose metadata and outputs (no nbval tags, no claimed checks) and get valid, unique ids.
    found: dict[str, Any] = {}
    body: list[Any] = []
    from_source: list[bool] = []  # whether body[i] is a cell of the source (a placed check counts)
    ids: set[str] = set()
    for i, cell in enumerate(sub.cells):
        claimed = _is_check_like(cell, lab)
        if claimed is not None:
            check = check_by_id.get(claimed)
            if check is not None and not check.hidden and claimed not in found:
                found[claimed] = cell
                body.append(graded_check(check))
                from_source.append(True)
            continue
        if cell.get("id") in setup_ids or assign.xmeta(cell).get("setup"):
            found.setdefault("__setup__", cell)
            continue
        cid = str(cell.get("id") or "")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,56}", cid) or cid.startswith("xlalab-"):
            cid = f"student-{i}"
        while cid in ids:
            cid += "-dup"
        ids.add(cid)
        if cell.cell_type == "code":
            body.append(nbformat.v4.new_code_cell(source=cell.source, id=cid))
        elif cell.cell_type == "markdown":
            body.append(nbformat.v4.new_markdown_cell(source=cell.source, id=cid))
        else:
            body.append(nbformat.v4.new_raw_cell(source=cell.source, id=cid))
        from_source.append(False)

    for check in lab.checks:
        if check.hidden:
            continue
        cell = found.get(check.check)
        if cell is None:
            tampering.append(f"check `{check.check}` was deleted; the released check was run")
        elif assign.source_digest(cell.source) != check.digest:
            tampering.append(f"check `{check.check}` was changed; the released check was run instead")
    setup_source = next((c for c in lab.released.cells if assign.xmeta(c).get("setup")), None)
    if setup_source is not None and "__setup__" in found and assign.source_digest(
            found["__setup__"].source.replace(assign.REPOSITORY_TOKEN, lab.url)) != \
            assign.source_digest(setup_source.source):
        tampering.append("the setup cell was changed; the released setup cell was run")

    def source_index(src: Any) -> int | None:
        """Where a non-check source cell is in the body (by id, or by identical text if not an answer)."""
        rel = released_by_id.get(src.get("id"))
        is_answer = assign.xmeta(src).get("solution") or assign.has_inline(src.source)
        digest = assign.source_digest(rel.source) if rel is not None and not is_answer else None
        for j, cell in enumerate(body):
            if cell.get("id") == src.get("id") or (digest and cell.cell_type == src.cell_type
                                                    and assign.source_digest(cell.source) == digest):
                return j
        return None

    # Mark the body cells that match source cells, then put each missing check (hidden, or a deleted visible
    # one) after the nearest preceding source cell present, and after the student's own cells that follow it.
    for src in source_cells:
        if "check" not in assign.xmeta(src) and not assign.xmeta(src).get("setup"):
            j = source_index(src)
            if j is not None:
                from_source[j] = True
    pos, after_answer = 0, False
    for src in source_cells:
        meta = assign.xmeta(src)
        if meta.get("setup"):
            continue
        if "check" in meta:
            check = check_by_id[meta["check"]]
            cell_id = f"xlalab-check-{lab.checks.index(check)}"
            placed = next((j for j, c in enumerate(body) if c.get("id") == cell_id), None)
            if placed is None:
                # After an answer cell, skip the student's own cells (their work on that answer); right
                # after another check (a hidden check following its visible one), do not.
                while after_answer and pos < len(body) and not from_source[pos]:
                    pos += 1
                body.insert(pos, graded_check(check))
                from_source.insert(pos, True)
                placed = pos
            pos, after_answer = placed + 1, False
        else:
            j = source_index(src)
            if j is not None:
                pos, after_answer = j + 1, True

    visible = [c.check for c in lab.checks if not c.hidden]
    args = ", ".join(repr(a) for a in (str(log_path), visible, given_names(lab), guard_name, bind_name))
    init = nbformat.v4.new_code_cell(source=GUARD_INIT % {"args": args}, id="xlalab-grader-init")
    cells = [init]
    if setup_source is not None:
        cells.append(nbformat.v4.new_code_cell(source=setup_source.source, id=setup_source.get("id") or "setup",
                                               metadata={"xlalab": {"setup": True}}))
    cells.append(nbformat.v4.new_code_cell(source=f"{bind_name}()", id="xlalab-grader-bind"))
    nb = nbformat.v4.new_notebook(cells=cells + body,
                                  metadata={"kernelspec": dict(assign.KERNELSPEC), "xlalab": {"lab": lab.name}})
    return nb, tampering
