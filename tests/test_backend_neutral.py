"""No notebook words its prose for one backend, or reads memory from a device the tensors may not live on.

Students run the book and the labs on T4, A100 and H100 GPUs as well as on CPUs. Prose that says "this CPU" or
"the CPU compiled" is wrong on a GPU, so it may appear only in a string that a branch on the backend chooses
(``if hw.backend().kind == "cpu": ...`` or ``"..." if be.kind == "cpu" else "..."``); never in a Markdown cell.
Memory is read with ``xlalab.hw.memory_info()`` (the device the tensors live on), never from ``"CPU:0"``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "book").glob("*.ipynb")) + sorted((REPO / "solutions").glob("*.ipynb"))
CPU_PROSE = re.compile(r"\b(on this CPU|this CPU|the CPU compiled)\b", re.IGNORECASE)
CPU_MEMORY = re.compile(r"(get_memory_info|reset_memory_stats)\(\s*[\"'](/device:)?CPU:0[\"']")
# A branch "words it from the backend" when its condition reads the backend.
BACKEND_TEST = re.compile(r"backend\(|\.kind\b|\bis_gpu\b|\.xla\b|\bgpus\(\)")


def _code(source: str) -> str:
    """The cell's Python with IPython magics and shell lines blanked (line numbers kept)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _branch_lines(tree: ast.AST, source: str) -> set[int]:
    """Lines inside the body or else-part of an ``if`` or conditional expression whose test reads the backend."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)):
            test = ast.get_source_segment(source, node.test) or ""
            if not BACKEND_TEST.search(test):
                continue
            parts = [node.body, node.orelse] if isinstance(node, ast.IfExp) else [*node.body, *node.orelse]
            for part in parts:
                for sub in ast.walk(part):
                    if hasattr(sub, "lineno"):
                        lines.update(range(sub.lineno, (getattr(sub, "end_lineno", None) or sub.lineno) + 1))
    return lines


def _strings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.end_lineno or node.lineno, node.value


def problems(path: Path) -> list[str]:
    """Every CPU-only sentence outside a backend branch and every ``"CPU:0"`` memory read in one notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for i, cell in enumerate(nb["cells"]):
        text = "".join(cell.get("source", ""))
        name = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
        where = f"{name} cell {i} ({cell.get('id', '?')})"
        if cell["cell_type"] == "markdown":
            for m in CPU_PROSE.finditer(text):
                found.append(f"{where}: Markdown says {m.group(0)!r}; word it from xlalab.hw.backend() (glue a phrase)")
            continue
        if cell["cell_type"] != "code":
            continue
        for m in CPU_MEMORY.finditer(text):
            found.append(f"{where}: reads {m.group(0)!r}...; use xlalab.hw.memory_info()")
        code = _code(text)
        try:
            tree = ast.parse(code)
        except SyntaxError:
            if CPU_PROSE.search(text):
                found.append(f"{where}: CPU-only prose in a cell that does not parse")
            continue
        allowed = _branch_lines(tree, code)
        for start, end, value in _strings(tree):
            hit = CPU_PROSE.search(value)
            if hit and not set(range(start, end + 1)) & allowed:
                found.append(f"{where} line {start}: {hit.group(0)!r} outside a branch on xlalab.hw.backend()")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(REPO)) for p in NOTEBOOKS])
def test_notebook_is_backend_neutral(path):
    found = problems(path)
    assert not found, "\n".join(found)


def test_the_rule_catches_and_allows(tmp_path):
    nb = {"cells": [
        {"cell_type": "markdown", "source": "On this CPU the chain fuses."},
        {"cell_type": "code", "source": "info = tf.config.experimental.get_memory_info('CPU:0')"},
        {"cell_type": "code", "source": "glue('w', 'the CPU compiled 3 modules', display=False)"},
        {"cell_type": "code",
         "source": "if hw.backend().kind == 'cpu':\n    w = 'on this CPU'\nelse:\n    w = 'on this GPU'"},
        {"cell_type": "code", "source": "w = 'this CPU' if be.kind == 'cpu' else 'this GPU'"},
        {"cell_type": "code", "source": "w = f'on this {be.kind.upper()}'\n%timeit f()"},
    ]}
    path = tmp_path / "probe.ipynb"
    path.write_text(json.dumps(nb))
    found = problems(path)
    assert [f.split(" cell ")[1].split(" ")[0] for f in found] == ["0", "1", "2"], found
