"""Hand-ins for calibrating the similarity thresholds (issue 34, item 9), built from ``tests/data/similarity/``.

Each lab's folder holds one file per hand-in: ``honest_*.cells``, solutions written independently of the reference
(loops or comprehensions, helpers or none, other names and statement orders), and ``copy_*.cells``, the reference
solution copied and disguised (renamed variables, reordered independent statements, new comments and layout, an
extracted helper). A file is a list of blocks, each headed ``# %% CELL-ID``: the blocks of a cell fill, in order,
the released cell's ``# YOUR CODE HERE`` / ``raise NotImplementedError`` places (indented to match). The
reference itself (the solution's cells without their ``BEGIN/END SOLUTION`` lines) is the hand-in ``reference``,
one more independent author for the honest pairs and the original of every copy.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "similarity"
REPO = Path(__file__).resolve().parents[2]
PLACE = re.compile(r"^([ \t]*)# YOUR CODE HERE\n[ \t]*raise NotImplementedError[ \t]*(?:\n|$)", re.M)
MARKER = re.compile(r"^[ \t]*# (?:BEGIN|END) SOLUTION[ \t]*\n?", re.M)


def labs() -> list[str]:
    """The labs with calibration hand-ins."""
    return sorted(p.name for p in DATA.iterdir() if p.is_dir())


def blocks(path: Path) -> dict[str, list[str]]:
    """``{cell id: [block, ...]}`` of one hand-in file."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        head = re.match(r"^# %% (\S+)\s*$", line)
        if head:
            current = []
            out.setdefault(head.group(1), []).append("")
            key = head.group(1)
            continue
        if current is None:
            continue
        out[key][-1] += line + "\n"
    return out


def _fill(source: str, parts: list[str], where: str) -> str:
    places = list(PLACE.finditer(source))
    if len(places) != len(parts):
        raise ValueError(f"{where}: {len(parts)} blocks for {len(places)} places")
    text, end = "", 0
    for place, part in zip(places, parts):
        indent = place.group(1)
        body = "".join(indent + line if line.strip() else line for line in part.rstrip("\n").splitlines(True))
        text += source[end:place.start()] + body + "\n"
        end = place.end()
    return text + source[end:]


def _source(cell: Any) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def handin(lab: str, path: Path, released: Any) -> Any:
    """The released lab with the answer cells of hand-in file ``path`` filled in."""
    nb = copy.deepcopy(released)
    parts = blocks(path)
    for cell in nb["cells"]:
        if cell.get("id") in parts:
            cell["source"] = _fill(_source(cell), parts.pop(cell["id"]), f"{path.name} {cell['id']}")
    if parts:
        raise ValueError(f"{path.name}: no released cells {sorted(parts)} in {lab}")
    return nb


def reference(released: Any, solution: Any) -> Any:
    """The released lab with the reference answers (the solution's cells of the same ids, markers removed)."""
    nb = copy.deepcopy(released)
    sol = {c.get("id"): _source(c) for c in solution["cells"]}
    for cell in nb["cells"]:
        src = _source(cell)
        if PLACE.search(src) and cell.get("id") in sol:
            cell["source"] = MARKER.sub("", sol[cell["id"]])
    return nb


def handins(lab: str) -> dict[str, Any]:
    """Every calibration hand-in of ``lab`` by name (``reference``, ``honest_*``, ``copy_*``), as notebooks."""
    import json

    released = json.loads((REPO / "labs" / f"{lab}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((REPO / "solutions" / f"{lab}.ipynb").read_text(encoding="utf-8"))
    out = {"reference": reference(released, solution)}
    for path in sorted((DATA / lab).glob("*.cells")):
        out[path.stem] = handin(lab, path, released)
    return out


def kind(a: str, b: str) -> str:
    """``copy`` (a disguised copy and its original), ``copies`` (two copies of one original) or ``independent``."""
    copies = [n for n in (a, b) if n.startswith("copy_")]
    if len(copies) == 2:
        return "copies"
    if copies and "reference" in (a, b):
        return "copy"
    return "independent"


def _spread(values: list[float]) -> dict[str, float]:
    import numpy as np

    if not values:
        return {}
    return {"min": round(min(values), 3), "median": round(float(np.median(values)), 3),
            "p90": round(float(np.percentile(values, 90)), 3), "max": round(max(values), 3)}


def measure(names: list[str] | None = None) -> dict[str, Any]:
    """Every pair of every lab's calibration hand-ins, scored by :func:`xlalab.grading.similarity.pairs` at the
    default threshold; with the rule before the calibration (the ordered code signal at the default threshold) for
    comparison. Returns the pairs and, per kind, how many were flagged and the spread of each score."""
    from xlalab.grading import similarity
    from xlalab.grading.lab import load_lab

    rows: list[dict[str, Any]] = []
    for name in names or labs():
        lab = load_lab(REPO / "solutions" / f"{name}.ipynb")
        owns = {n: similarity.own_of(lab, n, nb) for n, nb in handins(name).items()}
        for p in similarity.pairs(lab, list(owns.values())):
            order, matched = similarity.ordered_overlap(owns[p.a].skeleton, owns[p.b].skeleton)
            before = p.flagged or (order >= similarity.DEFAULT_THRESHOLD and matched >= similarity.MIN_ORDERED)
            rows.append({"lab": name, "a": p.a, "b": p.b, "kind": kind(p.a, p.b), "code": p.code,
                         "order_code": p.order_code, "flagged": p.flagged, "flagged_before": before})
    summary = {}
    for k in ("independent", "copy", "copies"):
        mine = [r for r in rows if r["kind"] == k]
        summary[k] = {"pairs": len(mine), "flagged": sum(r["flagged"] for r in mine),
                      "flagged_before": sum(r["flagged_before"] for r in mine),
                      "code": _spread([r["code"] for r in mine]),
                      "order_code": _spread([r["order_code"] for r in mine])}
    return {"labs": names or labs(), "threshold": similarity.DEFAULT_THRESHOLD,
            "order_threshold": similarity.ORDER_THRESHOLD, "summary": summary, "pairs": rows}
