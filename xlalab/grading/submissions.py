"""Reading and naming hand-ins.

A submission is a notebook (the student is its file name) or a folder: each notebook in it is one student, and
each sub-folder holding a notebook is one student named after the folder. A file that cannot be graded (not
readable, not a notebook, the wrong lab) raises :class:`Unreadable` with a reason a student understands; it
becomes a row with 0 points.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

import nbformat

from xlalab.grading.lab import Lab
from xlalab.grading.notebook import parse_header

class Unreadable(Exception):
    """A submission that cannot be graded; the message is the reason shown in the gradebook."""


def read_submission(path: Path, lab: Lab) -> Any:
    """Parse a submission notebook; raise Unreadable with a reason a student understands."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise Unreadable(f"cannot read the file ({err.strerror})") from None
    if not raw.strip():
        raise Unreadable("empty file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Unreadable("not a text file (not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise Unreadable(f"not valid JSON (line {err.lineno}: {err.msg}); not a notebook") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Unreadable("not a Jupyter notebook (no list of cells)")
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as err:  # nbformat raises several kinds
        raise Unreadable(f"not a valid notebook ({type(err).__name__}: {str(err)[:200]})") from None
    for cell in nb.cells:
        if not isinstance(cell.get("source", ""), str) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise Unreadable("not a valid notebook (a cell has no text source or an unknown type)")
    meta = nb.metadata.get("xlalab", {})
    claimed = meta.get("lab") if isinstance(meta, dict) else None
    if isinstance(claimed, str) and claimed != lab.name:
        raise Unreadable(f"wrong lab: this notebook is {claimed}, expected {lab.name}")
    ids = {c.get("id") for c in lab.source.cells if c.get("id")}
    check_ids = {c.check for c in lab.checks}
    known = any(c.get("id") in ids for c in nb.cells) or any(
        (parse_header(c.source) or ("",))[0] in check_ids for c in nb.cells if c.cell_type == "code")
    if not known:
        raise Unreadable(f"wrong lab: no cell or check of {lab.name} found in this notebook")
    return nb


def expand_submissions(paths: Iterable[str | Path], lab_name: str) -> list[tuple[str, Path]]:
    """``(student, notebook path)`` for each submission argument (a notebook, or a folder of them)."""
    out: list[tuple[str, Path]] = []
    for p in map(Path, paths):
        if p.is_dir():
            for child in sorted(p.iterdir()):
                if child.is_file() and child.suffix == ".ipynb":
                    out.append((child.stem, child))
                elif child.is_dir() and not child.name.startswith("."):
                    nbs = sorted(child.glob("*.ipynb"))
                    pick = [n for n in nbs if n.stem == lab_name] or nbs
                    out.append((child.name, pick[0] if pick else child / f"{lab_name}.ipynb"))
        else:
            out.append((p.stem, p))
    return _distinct_names(out)


def _distinct_names(subs: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """Make student names unique: a clash is renamed ``<parent folder>-<name>``, then numbered."""
    counts: dict[str, int] = {}
    for name, _ in subs:
        counts[name] = counts.get(name, 0) + 1
    seen: set[str] = set()
    out = []
    for name, path in subs:
        unique = name if counts[name] == 1 else f"{path.resolve().parent.name}-{name}"
        base, k = unique, 2
        while unique in seen:
            unique, k = f"{base}-{k}", k + 1
        seen.add(unique)
        out.append((unique, path))
    return out


def safe_name(student: str) -> str:
    """A file-system-safe version of a student's name (for feedback/<student>.md)."""
    return re.sub(r"[^\w.\-]+", "_", student).strip("._") or "student"
