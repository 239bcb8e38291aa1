"""The sample lab of the grading tests, made in the test (NumPy only, no TensorFlow), and builders around it."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

SAMPLE = "lab90_sample"
SAMPLE_URL = "https://example.org/xlalab-sample"


def code(cell_id: str, source: str, **xlalab) -> nbformat.NotebookNode:
    meta = {"xlalab": xlalab} if xlalab else {}
    return nbformat.v4.new_code_cell(source=source, id=cell_id, metadata=meta)


def md(cell_id: str, source: str, **xlalab) -> nbformat.NotebookNode:
    meta = {"xlalab": xlalab} if xlalab else {}
    return nbformat.v4.new_markdown_cell(source=source, id=cell_id, metadata=meta)


def check(cell_id: str, check_id: str, points: int, body: str, hidden: bool = False) -> nbformat.NotebookNode:
    meta = {"check": check_id, "points": points}
    if hidden:
        meta["hidden"] = True
    return code(cell_id, f"# CHECK {check_id} ({points} points)\n{body}", **meta)


def sample_solution() -> nbformat.NotebookNode:
    """A 4-check, 6-point lab (2 of the checks hidden) with an inline, a whole-cell and a written answer."""
    cells = [
        md("title", "# Lab 90: a sample lab for the grader's tests"),
        code("setup", "# Setup: pip install @REPOSITORY_URL@ when xlalab is missing\n"
                      "import numpy as np\nimport xlalab.grading\n"
                      "from xlalab.grading.probe import check_rng, probe, written\n"
                      "xlalab.grading.track_checks()", setup=True),
        md("p1-intro", "## Part 1: scale (4 points)"),
        code("p1-answer", "def scale(x, k):\n    \"\"\"x * k as float64; x has shape (n,).\"\"\"\n"
                          "    # BEGIN SOLUTION\n    return np.asarray(x, dtype=float) * k\n    # END SOLUTION"),
        check("p1-check", "p1-scale", 2,
              "got = probe('scale-123', lambda: scale([1, 2, 3], 2.0))\n# JUDGE\nwritten('scale')\n"
              "np.testing.assert_allclose(np.asarray(got, dtype=float), [2.0, 4.0, 6.0], err_msg='scale([1, 2, 3], "
              "2.0) should be [2, 4, 6]')"),
        check("p1-hidden", "p1-scale-random", 2,
              "rng = check_rng('p1-scale-random')\nx = rng.normal(size=int(rng.integers(5, 50)))\n"
              "k = float(rng.normal())\n"
              "got = probe('scale-random', lambda: scale(x, k))\n# JUDGE\nwritten('scale')\n"
              "np.testing.assert_allclose(np.asarray(got, dtype=float), x * k, "
              "err_msg='scale is wrong on random inputs')", hidden=True),
        md("p2-intro", "## Part 2: total (2 points)"),
        code("p2-answer", "def total(x):\n    return float(np.sum(x))", solution=True),
        check("p2-check", "p2-total", 1,
              "a = probe('total-12', lambda: total([1.0, 2.0]))\n"
              "b = probe('total-1235', lambda: total([1.0, 2.0, 3.5]))\n"
              "# JUDGE\nwritten('total')\n"
              "assert isinstance(a, float), 'total must return a Python float'\n"
              "assert abs(b - 6.5) < 1e-12, 'total([1, 2, 3.5]) should be 6.5'"),
        check("p2-hidden", "p2-total-random", 1,
              "x = check_rng('p2-total-random').normal(size=37)\n"
              "got = probe('total-random', lambda: total(x))\n# JUDGE\nwritten('total')\n"
              "assert np.isclose(got, x.sum()), 'total is wrong on random inputs'", hidden=True),
        md("p2-why", "Because addition is associative (a sample written answer).", solution=True),
        code("report", "xlalab.grading.report()"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name":
                                                                         "Python 3", "language": "python"}})
    nb.metadata["xlalab"] = {"mutations": [
        {"check": "p1-scale", "cell": "p1-answer", "replace": ["* k", "* k + 1"]},
        {"check": "p2-total-random", "cell": "p2-answer", "replace": ["np.sum(x)", "np.sum(x[:5])"]},
    ]}
    return nb


def make_lab_root(root: Path, solution: nbformat.NotebookNode | None = None) -> Path:
    """``root`` made a repository with ``solution`` (default: the sample lab) in solutions/ and its released
    version in labs/."""
    from xlalab import cli

    (root / "_config.yml").write_text("title: t\nrepository:\n  url: https://example.org/x\n", encoding="utf-8")
    (root / "solutions").mkdir()
    nbformat.write(solution if solution is not None else sample_solution(), str(root / "solutions" / f"{SAMPLE}.ipynb"))
    assert cli.main(["assign", "--root", str(root)]) == 0
    return root


def released(root: Path) -> nbformat.NotebookNode:
    return _read(root / "labs" / f"{SAMPLE}.ipynb")


def answered(root: Path) -> nbformat.NotebookNode:
    """The released lab with the reference answers filled in (what a good student hands in)."""
    nb = released(root)
    sol = {c.id: c.source for c in _read(root / "solutions" / f"{SAMPLE}.ipynb").cells}
    for cell in nb.cells:
        if cell.id in ("p1-answer", "p2-answer"):
            cell.source = sol[cell.id]
    return nb


def cell(nb, cell_id):
    return next(c for c in nb.cells if c.get("id") == cell_id)


def insert_after(nb, cell_id, source, new_id="student-extra"):
    i = next(i for i, c in enumerate(nb.cells) if c.get("id") == cell_id)
    nb.cells.insert(i + 1, code(new_id, source))
    return nb


def _read(path: Path) -> nbformat.NotebookNode:
    from xlalab.grading import assign

    return assign.read(path)


# -- written answers graded by hand (tests/test_answers.py) -----------------------------------------------------

RUBRIC_WHY = "2 points: names associativity; 1 point: says the order of the sum does not matter. RUBRIC-SECRET"
MODEL_WHY = "Because addition is associative (a sample written answer). MODEL-SECRET"
RUBRIC_SCALE = "1 point: says scale multiplies every element. RUBRIC-SECRET-2"


def sample_solution_with_answers() -> nbformat.NotebookNode:
    """The sample lab with two written answers graded by hand (3 + 1 points): 6 automatic + 4 manual."""
    nb = sample_solution()
    i = next(i for i, c in enumerate(nb.cells) if c.get("id") == "p2-why")
    nb.cells[i] = md("p2-why", MODEL_WHY, answer="p2-why", points=3, rubric=RUBRIC_WHY)
    j = next(i for i, c in enumerate(nb.cells) if c.get("id") == "p1-hidden")
    nb.cells.insert(j + 1, md("p1-explain", "scale multiplies each element by k.", answer="p1-explain",
                              points=1, rubric=RUBRIC_SCALE))
    return nb


def make_answers_root(root: Path) -> Path:
    """``root`` made a repository with the written-answer sample lab in solutions/ and labs/."""
    return make_lab_root(root, sample_solution_with_answers())


def handin_copy(path: Path, folder: Path) -> Path:
    """A copy of ``path`` as a student's hand-in, ``folder/<its name>``: the grader refuses a hand-in that is the
    instructor's source file itself (same device and inode), so a test that grades a solution hands in a copy."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(path, folder / path.name))
