"""Building the notebook that is run in the student's kernel for one submission.

The student's cells keep their text (not their metadata or outputs); every visible check is the released one,
at the student's position (a tampered or deleted check is reported and the released one is run); hidden checks
are put back from the instructor source. Every check cell holds only its probing part (the lines before
``# JUDGE``): its assertions and expected values never reach the student's kernel. The first cell sets the
probes to record (:mod:`xlalab.grading.probe`); the verdicts come from the judge (:mod:`xlalab.grading.judge`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading import assign
from xlalab.grading.judge import probing_part
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


RECORD_INIT = ("# xlalab grader: probes record what the student's code returns (injected; not part of the lab)\n"
               "import xlalab.grading.probe\n"
               "xlalab.grading.probe.configure('record', %(path)r, %(seed)d)\n")
REPLAY_INIT = ("# xlalab judge: probes return what the student's kernel recorded (no student code runs here)\n"
               "import xlalab.grading.probe\n"
               "xlalab.grading.probe.configure('replay', %(path)r, %(seed)d, sources=%(sources)r, "
               "verdicts=%(verdicts)r)\n")


def build_graded(lab: Lab, sub: Any, records_path: Path, seed: int) -> tuple[Any, list[str]]:
    """The notebook to run for one submission, and the tampering found.

    A visible check stays where the student has it (its text replaced by the graded version); a hidden or
    deleted check is inserted after the nearest preceding source cell the submission still has (matched by
    cell id, or by identical text for cells that are not answers) and after the student's own cells that
    follow it. A check cell holds its probing part only; ``records_path`` is where the probes write (in the
    work folder), ``seed`` the grader's seed of the checks' random inputs.
    """
    tampering: list[str] = []
    source_cells = lab.source.cells
    released_by_id = {c.get("id"): c for c in lab.released.cells}
    setup_ids = {c.get("id") for c in source_cells if assign.xmeta(c).get("setup")}
    check_by_id = {c.check: c for c in lab.checks}

    def graded_check(check: assign.Check) -> Any:
        return nbformat.v4.new_code_cell(
            source=probing_part(check.source),
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

    init = nbformat.v4.new_code_cell(source=RECORD_INIT % {"path": str(records_path), "seed": seed},
                                     id="xlalab-grader-init")
    cells = [init]
    if setup_source is not None:
        cells.append(nbformat.v4.new_code_cell(source=setup_source.source, id=setup_source.get("id") or "setup",
                                               metadata={"xlalab": {"setup": True}}))
    nb = nbformat.v4.new_notebook(cells=cells + body,
                                  metadata={"kernelspec": dict(assign.KERNELSPEC), "xlalab": {"lab": lab.name}})
    return nb, tampering
