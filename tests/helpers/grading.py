"""What the tests of whole grading runs share: the limits for the sample lab, a folder of hand-ins, a run's output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat

# The grader's limits for the sample lab (NumPy only): keywords of xlalab.grading.cli.grade_submissions ...
LIMITS: dict[str, Any] = {"cell_timeout": 30, "timeout": 90, "memory_gb": 3}
# ... and the same as options of `xlalab grade`.
LIMIT_ARGS = [arg for key, value in LIMITS.items() for arg in (f"--{key.replace('_', '-')}", str(value))]


def write_handins(folder: Path, handins: dict[str, nbformat.NotebookNode | str]) -> Path:
    """``folder`` with ``<student>.ipynb`` for each of ``handins`` (a notebook, or the file's text as is)."""
    folder.mkdir(parents=True, exist_ok=True)
    for student, nb in handins.items():
        text = nb if isinstance(nb, str) else json.dumps(nb)
        (folder / f"{student}.ipynb").write_text(text, encoding="utf-8")
    return folder


def outputs(out: Path) -> dict[str, str]:
    """A grading run's gradebook.csv and feedback/*.md, by file name: equal for two runs that graded alike."""
    files = {"gradebook.csv": (out / "gradebook.csv").read_text(encoding="utf-8")}
    for f in sorted((out / "feedback").glob("*.md")):
        files[f.name] = f.read_text(encoding="utf-8")
    return files


def feedback_file(out: Path, student: str) -> str:
    """The feedback a grading run into ``out`` wrote for ``student`` (``<out>/feedback/<student>.md``)."""
    return (out / "feedback" / f"{student}.md").read_text(encoding="utf-8")
def verdicts(*passed: str, missing: dict[str, str] | None = None) -> bytes:
    """The judge's verdict records (JSON lines, :func:`xlalab.grading.probe.passed`): ``passed`` checks ran to their
    end; ``missing`` maps a check to a probe it asked for that the student's notebook never ran."""
    lines: list[dict[str, Any]] = [{"check": c, "missing": name} for c, name in (missing or {}).items()]
    lines += [{"check": c, "passed": True} for c in passed]
    return "".join(json.dumps(x) + "\n" for x in lines).encode()
