"""The import graph of ``xlalab/``: no cycle, and no import from a lower layer to a higher one (review s5, 2.1-2.2).

Every ``import`` and ``from ... import`` in every module counts, at the top or inside a function or an ``if``
(a lazy import still closes a circle the moment it runs); relative imports are resolved. An edge goes to the most
specific module the statement names (``from xlalab.hlo import graph`` is ``xlalab.hlo.graph``; ``from xlalab.hlo
import Module`` is ``xlalab.hlo``). :data:`LAYERS` places every module; a module may import its own layer or a lower
one. When the graph has a cycle, the failure names the edges that close it (see :func:`closing_edges`).
"""

from __future__ import annotations

import ast
import itertools
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "xlalab"

#: The layers of ``xlalab``, lowest first: a dotted name places the module of that name and every module below it
#: (the longest name that matches decides); the package's own name places only its ``__init__``. Each module may
#: import only from its own layer and the ones before it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("utilities", ("xlalab", "xlalab.log", "xlalab.fmt", "xlalab.files", "xlalab.env", "xlalab.compat",
                   "xlalab.sphinx_dedupe", "xlalab.threads")),
    ("core", ("xlalab.bench", "xlalab.roofline", "xlalab.plot", "xlalab.hw", "xlalab.hlo", "xlalab.profile")),
    ("workloads and the chapters' helpers", ("xlalab.workloads", "xlalab.book", "xlalab.flops", "xlalab.hlo_memory")),
    ("options and the suite", ("xlalab.options", "xlalab.suite")),
    ("grading", ("xlalab.grading",)),
    ("commands", ("xlalab.cli", "xlalab.__main__", "xlalab.gpu_check")),
)


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``source``'s line ``line`` (``lazy``: inside a function)."""

    source: str
    target: str
    line: int
    lazy: bool

    def __str__(self) -> str:
        where = "inside a function" if self.lazy else "at the top"
        return f"{self.source} -> {self.target} (line {self.line}, {where})"


def modules(root: Path, package: str = "xlalab") -> dict[str, tuple[Path, bool]]:
    """Every module of the package in folder ``root``: dotted name -> (file, is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _resolve(name: str, known: dict[str, tuple[Path, bool]]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             known: dict[str, tuple[Path, bool]]) -> list[str]:
    """The dotted names one import statement of ``module`` brings in (relative names resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]


class _Imports(ast.NodeVisitor):
    """Collects the import statements of one module, each with whether it sits inside a function."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
        self.depth = 0

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, self.depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append((node, self.depth > 0))


def import_graph(root: Path, package: str = "xlalab") -> dict[str, list[Edge]]:
    """Each module of the package in ``root`` -> its imports of other modules of the package, first one per target."""
    known = modules(root, package)
    graph: dict[str, list[Edge]] = {}
    for name, (path, is_package) in known.items():
        visitor = _Imports()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        edges: dict[str, Edge] = {}
        for node, lazy in visitor.found:
            for dotted in _targets(node, name, is_package, known):
                target = _resolve(dotted, known) if dotted.split(".")[0] == package else None
                if target and target != name and target not in edges:
                    edges[target] = Edge(name, target, node.lineno, lazy)
        graph[name] = list(edges.values())
    return graph


def cycles(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = itertools.count()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = next(counter)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for edge in edges:
                nxt = edge.target
                if nxt not in index:
                    index[nxt] = low[nxt] = next(counter)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, []))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def shortest_cycle(graph: dict[str, list[Edge]], members: list[str]) -> list[Edge]:
    """One shortest cycle among ``members`` (a strongly connected component), as its edges."""
    inside = set(members)
    best: list[Edge] = []
    for start in members:
        came: dict[str, Edge] = {}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for edge in graph[node]:
                if edge.target not in inside or edge.target in came:
                    continue
                came[edge.target] = edge
                if edge.target == start:
                    queue.clear()
                    break
                queue.append(edge.target)
        if start in came:
            path, node = [], start
            while True:
                path.append(came[node])
                node = came[node].source
                if node == start:
                    break
            if not best or len(path) < len(best):
                best = path[::-1]
    return best


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The index of the layer that places ``module`` (the longest matching name), or None."""
    matches = [(len(name), i) for i, (_, names) in enumerate(layers) for name in names
               if module == name or ("." in name and module.startswith(name + "."))]
    return max(matches)[1] if matches else None


def upward(graph: dict[str, list[Edge]], layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[Edge]:
    """The edges from a lower layer to a higher one."""
    out = []
    for edges in graph.values():
        for edge in edges:
            source, target = layer_of(edge.source, layers), layer_of(edge.target, layers)
            if source is not None and target is not None and target > source:
                out.append(edge)
    return out


def closing_edges(graph: dict[str, list[Edge]],
                  layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[Edge]:
    """Edges whose removal leaves no cycle, chosen greedily: on a shortest remaining cycle, an upward edge first,
    then an import inside a function, else the cycle's last edge. A short list of what to cut, not a minimum."""
    graph = {name: list(edges) for name, edges in graph.items()}
    cut: list[Edge] = []
    up = set(upward(graph, layers))
    while found := cycles(graph):
        loop = shortest_cycle(graph, found[0])
        edge = next((e for e in loop if e in up), None) or next((e for e in loop if e.lazy), loop[-1])
        graph[edge.source].remove(edge)
        cut.append(edge)
    return cut


def describe(graph: dict[str, list[Edge]], layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> str:
    """The cycles and upward edges of ``graph``, as a failure message."""
    lines = []
    for members in cycles(graph):
        lines.append(f"a cycle of {len(members)} modules: {', '.join(members)}")
        lines.append("  e.g. " + " -> ".join([e.source for e in shortest_cycle(graph, members)] + [
            shortest_cycle(graph, members)[0].source]))
    cut = closing_edges(graph, layers)
    if cut:
        lines.append("edges whose removal opens every cycle:")
        lines += [f"  {edge}" for edge in cut]
    up = upward(graph, layers)
    if up:
        lines.append("imports from a lower layer to a higher one:")
        lines += [f"  {edge} [{layers[layer_of(edge.source, layers) or 0][0]} -> "
                  f"{layers[layer_of(edge.target, layers) or 0][0]}]" for edge in up]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The rule on xlalab itself.

def test_every_module_has_a_layer():
    """A new module is placed in :data:`LAYERS` (else its imports would go unchecked)."""
    unplaced = [name for name in modules(PACKAGE) if layer_of(name) is None]
    assert not unplaced, f"modules without a layer in tests/test_layers.py: {unplaced}"


def test_xlalab_imports_have_no_cycle_and_go_down_the_layers():
    """The whole package: no cycle (imports inside functions included) and no import upward."""
    graph = import_graph(PACKAGE)
    assert sum(len(e) for e in graph.values()) > 50, "the scan found too few imports to be scanning xlalab"
    message = describe(graph)
    assert not message, "\n" + message


# ---------------------------------------------------------------------------------------------
# The scanner and the rule on hand-made packages: each can fail.

def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_scanner_counts_lazy_and_relative_imports(tmp_path):
    """``import``, ``from``, relative (``.``/``..``), inside a function and a name that is not a module."""
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "import os\nfrom pkg import b\n",
        "b.py": "def f():\n    from .sub import c\n    return c\n",
        "sub/__init__.py": "from .. import a\n",
        "sub/c.py": "from ..a import os\nimport pkg.sub\n",
    })
    graph = import_graph(root, "pkg")
    edges = {(e.source, e.target, e.lazy) for es in graph.values() for e in es}
    assert edges == {("pkg.a", "pkg.b", False), ("pkg.b", "pkg.sub.c", True), ("pkg.sub", "pkg.a", False),
                     ("pkg.sub.c", "pkg.a", False), ("pkg.sub.c", "pkg.sub", False)}


ALL = (("all", ("pkg", "pkg.a", "pkg.b", "pkg.c")),)


def test_a_cycle_through_a_lazy_import_is_found_and_its_closing_edge_named(tmp_path):
    """A -> B at the top, B -> A inside a function: one cycle, closed by the lazy edge; C outside it."""
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def main():\n    from pkg import a\n    return a\n",
        "c.py": "from pkg import a\n",
    })
    graph = import_graph(root, "pkg")
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert [(e.source, e.target) for e in closing_edges(graph, ALL)] == [("pkg.b", "pkg.a")]
    assert "a cycle of 2 modules: pkg.a, pkg.b" in describe(graph, ALL)
    assert describe({k: [e for e in v if not e.lazy] for k, v in graph.items()}, ALL) == ""


def test_an_upward_import_is_refused_and_a_downward_one_allowed(tmp_path):
    """Two layers: low may not import high, high may import low."""
    root = _package(tmp_path, {"__init__.py": "", "low.py": "def f():\n    import pkg.high\n",
                               "high.py": "from pkg import low\n"})
    layers = (("bottom", ("pkg", "pkg.low")), ("top", ("pkg.high",)))
    assert layer_of("pkg.high", layers) == 1 and layer_of("pkg.other", layers) is None
    graph = import_graph(root, "pkg")
    assert [(e.source, e.target) for e in upward(graph, layers)] == [("pkg.low", "pkg.high")]
    graph["pkg.low"] = []
    assert upward(graph, layers) == [] and cycles(graph) == []


@pytest.mark.parametrize(("module", "layer"), [("xlalab", 0), ("xlalab.hlo.graph", 1), ("xlalab.grading.cli", 4),
                                               ("xlalab.cli", 5), ("xlalab.climate", None)])
def test_the_longest_matching_name_places_a_module(module, layer):
    assert layer_of(module) == layer
