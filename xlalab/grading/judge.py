"""The judge: where every verdict is computed, in a kernel that never runs the student's code.

A check cell is ``# CHECK id (n points)``, a probing part, a line ``# JUDGE``, a judging part
(:mod:`xlalab.grading.probe`). The student's kernel runs only the probing parts (:func:`probing_part`); the judge
notebook (:func:`build_judge`) holds the released lab's setup cell, the given cells the checks need (never an
answer cell, nor a given cell that reads a name an answer defines) and every check, whole, in the source's
order; there :func:`~xlalab.grading.probe.probe` replays the records.

:func:`check_problems` is the static rule ``make labs`` enforces: outside the callables passed to ``probe``, a
check reads only names the judge has (the setup's, the given cells', its own or an earlier check's, builtins);
and since a graded check runs in a namespace of its own (:func:`xlalab.grading.probe.run_check`), no other cell
after a check, and no check's probing part, reads a name that only check cells bind.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

import nbformat

from xlalab.grading import labformat
from xlalab.grading.probe import JUDGE_MARKER

_MARKER = re.compile(r"^#\s*JUDGE\s*$", re.M)
BUILTINS = set(dir(builtins)) | {"get_ipython", "display", "In", "Out", "__file__"}


def split_check(source: str) -> tuple[str, str] | None:
    """``(probing part, judging part)`` of a check cell's source (header in the first), or None without the
    ``# JUDGE`` line."""
    m = _MARKER.search(source)
    if m is None:
        return None
    return source[:m.start()].rstrip() + "\n", source[m.end():].lstrip("\n")


def probing_part(source: str) -> str:
    """What the student's kernel runs of a check cell: its header and the lines before ``# JUDGE``."""
    parts = split_check(source)
    return source if parts is None else parts[0]


# ------------------------------------------------------------------------------------------- static analysis
def bound_names(tree: ast.AST) -> set[str]:
    """Names a piece of code binds at any depth (assignments, defs, imports, loop and with targets)."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def top_bound(tree: ast.Module) -> set[str]:
    """Names a cell binds at module level (what later cells can read)."""
    out: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
            continue
        for n in ast.walk(stmt):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                out.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in n.names)
    return out


def _is_probe_call(node: ast.AST) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "probe"


def reads_outside_probe(tree: ast.Module) -> set[str]:
    """Names read by a check outside the callables it passes to ``probe`` (lambdas, or local functions used only
    as a probe's argument)."""
    probe_fns: set[str] = set()
    for n in ast.walk(tree):
        if _is_probe_call(n):
            for arg in n.args[1:] + [k.value for k in n.keywords]:
                if isinstance(arg, ast.Name):
                    probe_fns.add(arg.id)
    # A local function counts as probing only if every read of its name is a probe argument.
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    as_arg = {id(a) for n in ast.walk(tree) if _is_probe_call(n) for a in n.args[1:] + [k.value for k in n.keywords]}
    for n in loads:
        if n.id in probe_fns and id(n) not in as_arg:
            probe_fns.discard(n.id)
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _is_probe_call(node):
            visit(node.func)
            if node.args:
                visit(node.args[0])
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in probe_fns:
            for d in node.decorator_list:
                visit(d)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


@dataclass
class Plan:
    """What the judge runs of a lab: the setup cell, the given cells it needs (source indices), the checks."""

    setup: int | None
    given: list[int]
    checks: list[int]
    student_names: set[str]     # names an answer cell binds, or a given cell that reads one
    judge_names: set[str]       # names the setup and the clean given cells bind


def _is_answer(cell: Any) -> bool:
    meta = labformat.xmeta(cell)
    return bool(meta.get("solution") or labformat.has_inline(cell.source))


def _parse(source: str) -> ast.Module:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except ImportError:
        pass
    return ast.parse(source)


def plan(nb: Any) -> Plan:
    """Which cells of a solution notebook the judge runs (see :class:`Plan`)."""
    setup, checks = None, []
    student: set[str] = set()
    clean: dict[int, tuple[set[str], set[str]]] = {}   # index -> (binds, reads)
    judge_names: set[str] = set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = labformat.xmeta(cell)
        if meta.get("setup"):
            setup = i
            judge_names |= top_bound(_parse(cell.source))
            continue
        if "check" in meta:
            checks.append(i)
            continue
        try:
            tree = _parse(cell.source)   # an answer cell with its solution: every name the student may bind
        except SyntaxError:
            continue
        binds = top_bound(tree)
        if _is_answer(cell):
            student |= binds
            continue
        reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if reads & student:
            student |= binds
            continue
        clean[i] = (binds, reads)
    for binds, _ in clean.values():
        judge_names |= binds - student
    # The given cells the checks need, found backwards from the names the checks read outside probes.
    needed: set[str] = set()
    for i in checks:
        needed |= reads_outside_probe(_parse(nb.cells[i].source))
    given = []
    for i in sorted(clean, reverse=True):
        binds, reads = clean[i]
        if binds & needed and not binds <= student:
            given.append(i)
            needed |= reads
    return Plan(setup, sorted(given), checks, student, judge_names)


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _unseeded(tree: ast.AST) -> set[str]:
    """Calls that draw from a global or fresh random state (``np.random.default_rng()``, ``np.random.rand``,
    ``tf.random.normal``, ``random.random``): different in the student's kernel and the judge."""
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name in ("np.random.default_rng", "numpy.random.default_rng"):
            if not node.args and not node.keywords:
                out.add(name + "()")
        elif name.startswith(("np.random.", "numpy.random.", "tf.random.", "random.")) and \
                not name.endswith(("default_rng", "Generator", "set_seed", "seed")):
            out.add(name)
    return out


def _loads(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def isolation_problems(nb: Any) -> list[str]:
    """Cells that read a name bound only by check cells: while a student works a check binds its names in the
    kernel, but a graded check runs in a namespace of its own (:func:`xlalab.grading.probe.run_check`), so a
    later cell, or another check's probing part, would not find them when grading."""
    trees: list[tuple[int, Any, ast.Module]] = []
    check_bound: set[str] = set()
    other_bound: set[str] = set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            tree = _parse(cell.source)
        except SyntaxError:
            continue
        trees.append((i, cell, tree))
        (check_bound if "check" in labformat.xmeta(cell) else other_bound).update(top_bound(tree))
    only_checks = check_bound - other_bound - BUILTINS
    problems: list[str] = []
    after_check = False
    for i, cell, tree in trees:
        cid = labformat.xmeta(cell).get("check")
        if cid is not None:
            try:
                probing = _parse(probing_part(cell.source))
            except SyntaxError:
                continue
            others = sorted({_dotted(n.args[0]) if not isinstance(n.args[0], ast.Constant) else repr(n.args[0].value)
                             for n in ast.walk(probing) if isinstance(n, ast.Call) and _dotted(n.func).split(".")[-1]
                             == "check_rng" and n.args and not (isinstance(n.args[0], ast.Constant)
                                                                  and n.args[0].value == cid)})
            if others:
                problems.append(f"check {cid!r} calls check_rng with {', '.join(others)}: a graded check draws only "
                                f"its own inputs, check_rng({cid!r})")
            bad = sorted((_loads(probing) - bound_names(probing)) & only_checks)
            if bad:
                problems.append(f"check {cid!r} reads {', '.join(bad)} in its probing part, bound only by another "
                                "check: each graded check runs in a namespace of its own (bind it in a given cell, "
                                "or in this check)")
            after_check = True
        elif after_check:
            bad = sorted((_loads(tree) - bound_names(tree)) & only_checks)
            if bad:
                problems.append(f"cell {cell.get('id') or i!r} reads {', '.join(bad)}, bound only by a check cell: a "
                                "graded check runs in a namespace of its own, so it binds nothing in the kernel")
    return problems


def _probe_name(node: ast.expr) -> str:
    """A probe call's name as written: the string, or an f-string's text with ``{}`` for each value."""
    if isinstance(node, ast.Constant):
        return repr(node.value)
    if isinstance(node, ast.JoinedStr):
        return "f" + repr("".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values))
    return ast.unparse(node)


def shared_probe_names(nb: Any) -> list[str]:
    """Probe names that more than one check uses. The judge replays a name's records in the order of the calls,
    and its checks run in the source's order, while the student's notebook runs the hidden checks last: a name
    shared by two checks could be replayed to the wrong one."""
    users: dict[str, list[str]] = {}
    for cell in nb.cells:
        cid = labformat.xmeta(cell).get("check")
        if cell.cell_type != "code" or cid is None:
            continue
        try:
            tree = _parse(probing_part(cell.source))
        except SyntaxError:
            continue
        for name in {_probe_name(n.args[0]) for n in ast.walk(tree) if _is_probe_call(n) and n.args}:
            users.setdefault(name, []).append(str(cid))
    return [f"probe name {name} is used by the checks {', '.join(repr(c) for c in cids)}: give each check its own "
            "probe names" for name, cids in users.items() if len(cids) > 1]


def check_problems(nb: Any) -> list[str]:
    """Why each check of a solution notebook could judge with state the student controls (empty: none).

    A check must have a ``# JUDGE`` line, and outside ``probe`` it may read only builtins, the names the judge
    binds (setup and clean given cells) and names it or an earlier check binds, never a name an answer binds.
    """
    p = plan(nb)
    problems = []
    earlier: set[str] = set()
    for i in p.checks:
        cell = nb.cells[i]
        cid = labformat.xmeta(cell).get("check")
        if split_check(cell.source) is None:
            problems.append(f"check {cid!r}: no '{JUDGE_MARKER}' line between its probing and judging parts")
        try:
            tree = _parse(cell.source)
        except SyntaxError as err:
            problems.append(f"check {cid!r}: {err}")
            continue
        own = bound_names(tree)
        reads = reads_outside_probe(tree)
        bad = sorted(n for n in reads if n in p.student_names and n not in own and n not in earlier)
        unknown = sorted(n for n in reads - own - earlier - p.judge_names - BUILTINS - p.student_names)
        unseeded = sorted(_unseeded(tree))
        if unseeded:
            problems.append(f"check {cid!r} draws random inputs with {', '.join(unseeded)}: the student's kernel and "
                            "the judge would draw different ones; use check_rng(check id) or a fixed seed")
        if bad:
            problems.append(f"check {cid!r} reads {', '.join(bad)} outside probe(): a name the student defines")
        if unknown:
            problems.append(f"check {cid!r} reads {', '.join(unknown)}, which the judge does not define")
        earlier |= top_bound(tree)
    return problems + isolation_problems(nb) + shared_probe_names(nb)


def build_judge(lab: Any, init_source: str) -> Any:
    """The judge notebook of a lab: a first cell (``init_source``: the probe's replay mode), the released setup
    cell, the given cells the checks need and every check whole, in the source's order (ids and metadata as
    the graded notebook's, so that per-check results are read the same way). Each check's second line says which
    check runs (:func:`xlalab.grading.probe.judging`: a probe with no record is recorded against it), its last line
    records that it ran to its end (:func:`xlalab.grading.probe.passed`)."""
    src = lab.source
    p = plan(src)
    released_setup = next((c for c in lab.released.cells if labformat.xmeta(c).get("setup")), None)
    cells = [nbformat.v4.new_code_cell(source=init_source, id="xlalab-judge-init")]
    check_index = {c.index: k for k, c in enumerate(lab.checks)}
    for i in sorted(set(p.given) | set(p.checks) | ({p.setup} if p.setup is not None else set())):
        cell = src.cells[i]
        if i == p.setup:
            source = released_setup.source if released_setup is not None else cell.source
            cells.append(nbformat.v4.new_code_cell(source=source, id=cell.get("id") or "setup",
                                                   metadata={"xlalab": {"setup": True}}))
        elif i in check_index:
            check = lab.checks[check_index[i]]
            header, _, body = check.source.strip().partition("\n")
            cells.append(nbformat.v4.new_code_cell(
                source=f"{header}\nxlalab.grading.probe.judging({check.check!r})\n{body}\n"
                       f"xlalab.grading.probe.passed({check.check!r})\n",
                id=f"xlalab-check-{check_index[i]}",
                metadata={"xlalab": {"check": check.check, "points": check.points, "hidden": check.hidden}}))
        else:
            cells.append(nbformat.v4.new_code_cell(source=cell.source, id=f"given-{i}"))
    return nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": dict(labformat.KERNELSPEC),
                                                           "xlalab": {"lab": lab.name, "judge": True}})
