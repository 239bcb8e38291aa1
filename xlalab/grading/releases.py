"""Every released version of each lab's visible check cells (and setup cell), from the git history of ``labs/``.

``xlalab assign --record-built-with`` (``make labs``) writes :data:`RELEASED_CHECKS` (:func:`record_released_checks`);
the grader (:mod:`.build`) reads it (:func:`released_digests`), so that a check cell of an earlier release is named
an older version, not tampering.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from xlalab.grading import labformat
from xlalab.grading.notebook import parse_header

RELEASED_CHECKS = Path(__file__).with_name("released_checks.json")


@functools.lru_cache(maxsize=1)
def released_digests() -> dict[str, Any]:
    """``{lab: {"checks": {check id or "__setup__": [digest, ...]}, "releases": [{check id: digest}, ...]}}``: the
    text of every released version of each visible check (and setup cell), and which checks each release had, from
    :data:`RELEASED_CHECKS` (written by :func:`record_released_checks`)."""
    try:
        data = json.loads(RELEASED_CHECKS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def released_cell_digests(nb: Any) -> dict[str, str]:
    """``{check id or "__setup__": digest}`` of a released lab notebook's visible checks and setup cell."""
    out: dict[str, str] = {}
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        meta = labformat.xmeta(cell)
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        key = meta.get("check") if isinstance(meta.get("check"), str) else None
        if key is None and meta.get("setup"):
            key = "__setup__"
        if key is None:
            header = parse_header(source) if cell.get("cell_type") == "code" else None
            key = header[0] if header else None
        if key is not None:
            out.setdefault(key, labformat.source_digest(source))
    return out


def history_digests(root: Path) -> dict[str, Any]:
    """What :func:`released_digests` reads, from the git history of ``root/labs/lab*.ipynb`` (``git log --follow``
    of each file, ``git show`` of each commit), the current file included."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout

    out: dict[str, Any] = {}
    for path in sorted(Path(root, "labs").glob("lab*.ipynb")):
        rel = path.relative_to(root).as_posix()
        texts = [path.read_text(encoding="utf-8")]
        for entry in git("log", "--follow", "--format=%x00%H", "--name-only", "--", rel).split("\0"):
            words = entry.split()
            if len(words) < 2:
                continue
            rev, names = words[0], words[1:]
            try:
                texts.append(git("show", f"{rev}:{names[-1]}"))
            except subprocess.CalledProcessError:
                continue
        checks: dict[str, list[str]] = {}
        releases: list[dict[str, str]] = []
        for text in texts:
            try:
                digests = released_cell_digests(json.loads(text))
            except (ValueError, AttributeError, TypeError):
                continue
            for key, digest in digests.items():
                if digest not in checks.setdefault(key, []):
                    checks[key].append(digest)
            release = {k: d for k, d in digests.items() if k != "__setup__"}
            if release not in releases:
                releases.append(release)
        out[labformat.lab_name(path)] = {"checks": checks, "releases": releases}
    return out


def record_released_checks(root: Path, target: Path = RELEASED_CHECKS) -> Path:
    """Write :data:`RELEASED_CHECKS` from the git history of ``root/labs`` (``xlalab assign
    --record-built-with``, what ``make labs`` runs): the grader then names a check cell of an earlier release an
    older version, not tampering."""
    data = history_digests(Path(root))
    target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    released_digests.cache_clear()
    return target
