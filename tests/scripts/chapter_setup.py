"""Each book page's first cell: the Colab setup of the labs, hidden in the book (issue 26).

``python tests/scripts/chapter_setup.py`` puts :func:`setup_source` as the FIRST cell of every ``book/*.ipynb`` (or
updates that cell where it is there already) and touches no other cell; ``--check`` exits 1 where a notebook lacks it or
holds an old one. The cell installs the course the way a lab's setup cell does (``pip install --no-deps`` of the
repository, only where ``xlalab`` is missing) and calls :func:`xlalab.compat.chapter_setup`. Its tag ``remove-cell``
keeps it, input and output, out of the built HTML (Jupyter Book 1.x, "Hide or remove content":
https://jupyterbook.org/en/stable/interactive/hiding.html), so the page reads as before; the build still runs it,
where it installs nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CELL_ID = "xlalab-setup"
TAGS = ["remove-cell"]


def repository_url() -> str:
    """``repository.url`` of ``_config.yml`` (the one place the course's URL lives)."""
    for line in (REPO / "_config.yml").read_text().splitlines():
        if line.strip().startswith("url:"):
            return line.split("url:", 1)[1].strip()
    raise LookupError("_config.yml has no repository url")


def setup_source(url: str | None = None) -> str:
    """The setup cell's source, installing from ``git+<url>`` (default: the course's repository)."""
    url = url or repository_url()
    return (
        "# Setup (hidden in the book): in Colab, or anywhere xlalab is missing, install the course library first.\n"
        "import importlib.util\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if importlib.util.find_spec("xlalab") is None:\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",\n'
        f'                    "git+{url}"], check=True)\n'
        "import xlalab.compat\n"
        "\n"
        "# what Colab lacks (xprof), the book's glue, TensorFlow imported quietly; the URL finds the course's results\n"
        f'xlalab.compat.chapter_setup(repository="{url}")')


def setup_cell() -> dict:
    src = setup_source()
    lines = src.splitlines(keepends=True)
    return {"cell_type": "code", "execution_count": None, "id": CELL_ID,
            "metadata": {"tags": list(TAGS), "xlalab": {"chapter_setup": True}}, "outputs": [], "source": lines}


def is_setup(cell: dict) -> bool:
    return cell.get("metadata", {}).get("xlalab", {}).get("chapter_setup") is True


def notebooks() -> list[Path]:
    return sorted((REPO / "book").glob("*.ipynb"))


def apply(path: Path) -> bool:
    """Put the setup cell first in ``path`` (replacing an old one there); True when the file changed."""
    raw = path.read_text(encoding="utf-8")
    nb = json.loads(raw)
    cells = nb["cells"]
    if cells and is_setup(cells[0]):
        cells[0] = setup_cell()
    else:
        cells.insert(0, setup_cell())
    out = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if out != raw:
        path.write_text(out, encoding="utf-8")
        return True
    return False


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        stale = [p.name for p in notebooks()
                 if not (json.loads(p.read_text())["cells"][0] == setup_cell())]
        for name in stale:
            print(f"book/{name}: its first cell is not the setup cell (run python tests/scripts/chapter_setup.py)")
        return 1 if stale else 0
    for path in notebooks():
        if apply(path):
            print(f"book/{path.name}: setup cell written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
