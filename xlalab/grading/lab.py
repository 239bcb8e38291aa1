"""The lab being graded: the instructor's source (with hidden checks), the released student version made from
it, its checks and points. Points, ids and hidden checks always come from here, never from a submission.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlalab.grading import assign, labformat


@dataclass
class Lab:
    """The instructor's source of one lab and the released student version made from it."""

    name: str
    source_path: Path
    source: Any
    released: Any
    checks: list[labformat.Check]
    url: str = labformat.REPOSITORY_TOKEN
    answers: list[labformat.Answer] = field(default_factory=list)   # written answers, graded by hand

    @property
    def max_auto(self) -> float:
        """Points of the automatic checks."""
        return sum(c.points for c in self.checks)

    @property
    def max_manual(self) -> float:
        """Points of the written answers (the instructor's, merged from ``manual.csv``)."""
        return sum(a.points for a in self.answers)

    @property
    def maximum(self) -> float:
        return self.max_auto + self.max_manual




def _find_config_root(start: Path) -> Path | None:
    for d in [start, *start.parents, Path.cwd(), Path(__file__).resolve().parents[2]]:
        if (d / "_config.yml").exists():
            return d
    return None


def load_lab(lab: str | Path, source: str | Path | None = None) -> Lab:
    """The instructor source of ``lab`` (a name or a path to a solution notebook).

    A name is looked up as ``<source>/<name>.ipynb``, where ``source`` defaults to ``solutions/`` in the
    current folder, then next to this package.
    """
    path = Path(lab)
    if not (path.suffix == ".ipynb" and path.exists()):
        name = labformat.lab_name(lab)
        dirs = [Path(source)] if source else [Path("solutions"), Path(__file__).resolve().parents[2] / "solutions"]
        for d in dirs:
            if (d / f"{name}.ipynb").exists():
                path = d / f"{name}.ipynb"
                break
        else:
            raise FileNotFoundError(f"no instructor source for {lab!r} in " + ", ".join(map(str, dirs)))
    nb = labformat.read(path)
    name = labformat.lab_name(path)
    root = _find_config_root(path.resolve().parent)
    url = assign.repository_url(root) if root else labformat.REPOSITORY_TOKEN
    released = assign.student_notebook(nb, url, name)
    return Lab(name, path, nb, released, labformat.checks(nb), url, labformat.answers(nb))

