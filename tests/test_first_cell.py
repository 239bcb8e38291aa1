"""Every chapter's first cells run outside a checkout (issue 39, item 6).

A reader who opens a chapter from its Colab button has the course installed as a package (the setup cell's
``pip install``) and no checkout: no ``_toc.yml``, no ``results/``, no ``book/`` beside the notebook. The compat matrix
(``tests/scripts/compat_matrix.py``, ``results/compat/compat.md``) found the whole first code cell of ``intro`` and
``case_studies`` failing there in the TensorFlow 2.20 venv. This test runs, for each chapter, the hidden setup cell
and the first code cell after it in a fresh Python whose working directory is an empty temporary folder and whose
``xlalab`` is a copy of what a wheel installs (the package's modules and its declared package data, see
``pyproject.toml``), with the editable install of the working tree switched off, so nothing of the repository is
reachable except through that package.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((REPO / "book").glob("*.ipynb"))

#: Run in the fresh Python: switch off the editable finder of the working tree, then run each cell with IPython
#: (magics and display() as in a kernel); exit 1 with the cell's error on the first failure.
RUNNER = r"""
import json, sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in type(f).__module__
                    and "__editable__" not in getattr(f, "__name__", "")]
sys.path[:] = [p for p in sys.path if "__editable__" not in p]
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for i, src in enumerate(json.load(open(sys.argv[1]))):
    result = shell.run_cell(src)
    if not result.success:
        err = result.error_in_exec or result.error_before_exec
        print(f"CELL {i} FAILED: {type(err).__name__}: {err}", file=sys.stderr)
        sys.exit(1)
import xlalab
print("imported from", xlalab.__file__)
"""


def installed_copy(dest: Path) -> Path:
    """What ``pip install`` of the course puts in site-packages: the ``xlalab*`` packages' modules and the package
    data ``pyproject.toml`` declares (no tests, no book, no results). Returns the folder to put on ``PYTHONPATH``."""
    section = (REPO / "pyproject.toml").read_text().split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    declared = re.search(r"^xlalab\s*=\s*(\[.*?\])", section, re.M | re.S)
    data: list[str] = ast.literal_eval(declared.group(1)) if declared else []
    src = REPO / "xlalab"
    for path in src.rglob("*"):
        rel = path.relative_to(src)
        if path.is_dir() or "__pycache__" in rel.parts:
            continue
        if path.suffix == ".py" or any(fnmatch.fnmatch(rel.as_posix(), pat) for pat in data):
            target = dest / "xlalab" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return dest


#: Tags of the cells that hold a cell's bookkeeping (glue, tables), collapsed or removed in the book.
BOOKKEEPING_TAGS = {"hide-input", "remove-input", "remove-cell", "hide-cell"}


def first_cells(path: Path) -> list[str]:
    """The setup cell, the first code cell after it, and the collapsed bookkeeping cells right after that one (where
    a chapter moved the first cell's glue and tables): what a Colab reader runs first."""
    code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    assert code and code[0].get("metadata", {}).get("xlalab", {}).get("chapter_setup"), \
        f"{path.name}: its first cell is not the setup cell"
    n = 2
    while n < len(code) and BOOKKEEPING_TAGS & set(code[n].get("metadata", {}).get("tags", [])) \
            and not BOOKKEEPING_TAGS & set(code[1].get("metadata", {}).get("tags", [])):
        n += 1
    return ["".join(c["source"]) for c in code[:n]]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed_copy(tmp_path_factory.mktemp("site"))


def run_outside_checkout(cells: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``cells`` in a fresh Python with ``cwd`` as working directory and ``site`` as the only xlalab."""
    (cwd / "cells.json").write_text(json.dumps(cells))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLALAB_RESULTS")}
    env.update(PYTHONPATH=str(site), XLALAB_PROFILE="tiny", TF_CPP_MIN_LOG_LEVEL="2", MPLBACKEND="Agg",
               HOME=str(cwd), XDG_CACHE_HOME=str(cwd / ".cache"), XDG_STATE_HOME=str(cwd / ".state"),
               XDG_DATA_HOME=str(cwd / ".data"), XDG_CONFIG_HOME=str(cwd / ".config"), MPLCONFIGDIR=str(cwd / ".mpl"))
    return subprocess.run([sys.executable, "-c", RUNNER, str(cwd / "cells.json")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_copy_is_not_the_checkout(site: Path, tmp_path: Path) -> None:
    """The check can fail: a cell that needs the checkout fails there, and xlalab comes from the copy."""
    work = tmp_path / "work"
    work.mkdir()
    out = run_outside_checkout(["from pathlib import Path\nassert not Path('_toc.yml').exists()",
                                "import xlalab, pathlib\nassert (pathlib.Path(xlalab.__file__).parents[1] / "
                                "'_toc.yml').exists(), 'no checkout here'"], site, work)
    assert out.returncode == 1 and "no checkout here" in out.stderr, out.stderr[-2000:]
    ok = run_outside_checkout(["import xlalab"], site, work)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert f"imported from {site}" in ok.stdout


@pytest.mark.heavy
@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_first_cells_run_outside_a_checkout(path: Path, site: Path, tmp_path: Path) -> None:
    """Issue 39 item 6: the setup cell and the first code cell of every chapter run with the course installed as a
    package and no checkout (a temporary working directory)."""
    work = tmp_path / "work"
    work.mkdir()
    out = run_outside_checkout(first_cells(path), site, work)
    assert out.returncode == 0, f"{path.name} outside a checkout:\n{out.stderr[-3000:]}"
