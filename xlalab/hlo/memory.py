"""Estimate the memory a compiled XLA program needs from its optimized, scheduled HLO text.

XLA's own answer is its buffer assignment (``--xla_dump_to`` writes ``*-memory-usage-report.txt``), which
needs a dump from a fresh process. :func:`peak_live_bytes` gives an in-process estimate from the text
that ``experimental_get_compiler_ir(...)(stage="optimized_hlo")`` returns: it walks the entry
computation in its schedule order, keeps each buffer alive from the instruction that defines it to its
last use, and reports the largest total. It ignores buffer sharing between non-overlapping values that
XLA may add and the temporaries inside loop bodies, so read it as an estimate of the live activations,
good for comparing two versions of one program (with and without rematerialization, say).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .parser import Instruction, Module, Shape, parse
from .walk import reinterprets

# Instructions whose result is (a view of) their operands' buffers, not a new allocation. A ``reshape`` is one only
# when it is a bitcast, and a ``convert`` only to the type it already has (:func:`xlalab.hlo.walk.reinterprets`, the
# test :func:`xlalab.hlo.summary` counts kernels with): any other reshape copies into a buffer of its own.
ALIASING_OPCODES = frozenset({"bitcast", "get-tuple-element", "tuple", "opt-barrier", "add-dependency", "domain"})


def is_view(inst: Instruction, operand_shapes: dict[str, Shape]) -> bool:
    """Whether ``inst``'s result is a view of its operands' buffers (``ALIASING_OPCODES``, a bitcast reshape, a
    convert to the same type) rather than a new allocation; ``operand_shapes``: the computation's shapes by name."""
    return inst.opcode in ALIASING_OPCODES or reinterprets(inst, operand_shapes)


@dataclass
class LiveBytes:
    """The result of :func:`peak_live_bytes` (bytes).

    Attributes:
        peak_bytes: the largest total of live non-parameter buffers at any point of the schedule.
        parameter_bytes: the entry parameters (inputs), live throughout and not counted in ``peak_bytes``.
        peak_at: the name of the instruction at which the peak is reached.
        buffers: how many buffers the walk allocated.
    """

    peak_bytes: int
    parameter_bytes: int
    peak_at: str
    buffers: int


@dataclass
class LiveStep:
    """One instruction of the entry's schedule in :func:`live_curve`.

    Attributes:
        index, name, opcode, op_name: its position in the schedule, its name, opcode and TensorFlow op name.
        live_bytes: the live non-parameter bytes once its result exists (before buffers whose last use it is
            are freed): the quantity whose maximum is the peak.
        allocated: the bytes it allocated (0 for a view, an in-place update or a write into an input).
        note: ``"view of <value>"`` (``bitcast``, ``get-tuple-element``...), ``"in place into <value>"`` (a
            ``dynamic-update-slice`` that writes into its operand's buffer), ``"into parameter <k>"`` (an output
            the module aliases to its input ``k``), or ``""``.
    """

    index: int
    name: str
    opcode: str
    op_name: str
    live_bytes: int
    allocated: int
    note: str = ""


@dataclass
class LiveCurve:
    """Live bytes over the schedule of a module's entry computation (bytes).

    Attributes:
        steps: one :class:`LiveStep` per instruction, in schedule order.
        peak_bytes, peak_at, peak_index: the largest ``live_bytes`` and the instruction where it is reached.
        alive_at_peak: ``(name, opcode, op_name, bytes)`` of every buffer live at the peak, largest first.
        parameter_bytes: the entry's inputs, live throughout and not counted.
        buffers: how many buffers the walk allocated.
    """

    steps: list[LiveStep]
    peak_bytes: int
    peak_at: str
    peak_index: int
    alive_at_peak: list[tuple[str, str, str, int]]
    parameter_bytes: int
    buffers: int = 0


_ALIAS = re.compile(r"\{(\d+(?:,\s*\d+)*)?\}:\s*\((\d+),")


def _output_aliases(text: str) -> dict[int, int]:
    """Top-level output index -> entry parameter number, from the module line's ``input_output_alias``."""
    head = text.split("\n", 1)[0]
    m = re.search(r"input_output_alias=\{(.*?)\}\s*(?:,\s*[a-z_]+=|$)", head)
    if not m:
        return {}
    out = {}
    for index, param in _ALIAS.findall(m.group(1)):
        first = int(index.split(",")[0]) if index else 0
        out[first] = int(param)
    return out


def _in_place_operand(module: Module, inst) -> int | None:
    """The operand a ``dynamic-update-slice`` (bare, or a fusion rooted in one updating a parameter) writes into."""
    if inst.opcode == "dynamic-update-slice":
        return 0
    if inst.opcode == "fusion" and inst.called:
        body = module.computations.get(inst.called[0])
        root = body.root if body is not None else None
        if body is not None and root is not None and root.opcode == "dynamic-update-slice" and root.operands:
            by_name = {i.name: i for i in body}
            base = by_name.get(root.operands[0])
            while base is not None and base.opcode in ("bitcast", "reshape") and base.operands:
                base = by_name.get(base.operands[0])
            if base is not None and base.opcode == "parameter":
                return base.parameter_number
    return None


def live_curve(module_or_text: Module | str) -> LiveCurve:
    """Live bytes after each instruction of the entry's schedule, the peak, and the buffers alive there.

    The walk of :func:`peak_live_bytes` (whose peak this is), drawn step by step: a buffer lives from the
    instruction that defines it to its last use; a view (``bitcast``, ``tuple``, a ``reshape`` that is a bitcast:
    :func:`is_view`) allocates nothing, while a reshape that moves elements allocates its result; a
    ``dynamic-update-slice`` whose operand buffer has no later use writes into it in place (XLA's in-place pair:
    ``HloDataflowAnalysis::GetInPlaceInputOutputPairs``); an output that the module aliases to an input
    (``input_output_alias`` on its first line, a variable updated by the step) writes into that input.
    """
    text = module_or_text if isinstance(module_or_text, str) else ""
    module = parse(module_or_text) if isinstance(module_or_text, str) else module_or_text
    entry = module.entry.instructions
    root = module.entry.root
    aliases = _output_aliases(text)
    owners: dict[str, set[str]] = {}
    size: dict[str, int] = {}
    note: dict[str, str] = {}
    params = 0
    param_names = {i.parameter_number: i.name for i in entry if i.opcode == "parameter"}
    # Outputs written into an input: the producers of the root tuple's aliased elements.
    into_param: dict[str, int] = {}
    if root is not None and aliases:
        elems = root.operands if root.opcode == "tuple" else [root.name]
        for index, param in aliases.items():
            if index < len(elems):
                into_param[elems[index]] = param
    shapes = {inst.name: inst.shape for inst in entry}
    for inst in entry:
        if inst.opcode == "parameter":
            params += inst.shape.bytes or 0
            owners[inst.name] = set()
        elif is_view(inst, shapes):
            owners[inst.name] = set().union(*(owners.get(o, set()) for o in inst.operands)) if inst.operands else set()
            if inst.operands:
                note[inst.name] = f"view of {inst.operands[0]}"
        elif inst.name in into_param:
            owners[inst.name] = set()
            note[inst.name] = f"into parameter {into_param[inst.name]} ({param_names.get(into_param[inst.name], '?')})"
        else:
            owners[inst.name] = {inst.name}
            size[inst.name] = inst.shape.bytes or 0

    def last_uses() -> dict[str, int]:
        last = {b: i for i, inst in enumerate(entry) for b in owners[inst.name] if b == inst.name}
        for i, inst in enumerate(entry):
            for o in inst.operands:
                for b in owners.get(o, ()):
                    last[b] = max(last.get(b, i), i)
        for b in owners.get(root.name, ()) if root else ():
            last[b] = len(entry)
        return last

    last_use = last_uses()
    # In-place updates: the operand's buffers end here, so the result takes them over.
    for i, inst in enumerate(entry):
        k = _in_place_operand(module, inst)
        if k is None or k >= len(inst.operands) or inst.name not in size:
            continue
        base = owners.get(inst.operands[k], set())
        if base and all(last_use.get(b) == i for b in base) and inst.operands.count(inst.operands[k]) == 1:
            owners[inst.name] = set(base)
            del size[inst.name]
            note[inst.name] = f"in place into {inst.operands[k]}"
            last_use = last_uses()
    live = peak = 0
    peak_at, peak_index = "", -1
    alive: dict[str, int] = {}
    alive_at_peak: dict[str, int] = {}
    steps: list[LiveStep] = []
    for i, inst in enumerate(entry):
        allocated = size.get(inst.name, 0)
        if inst.name in size:
            live += allocated
            alive[inst.name] = allocated
            if live > peak:
                peak, peak_at, peak_index = live, inst.name, i
                alive_at_peak = dict(alive)
        steps.append(LiveStep(i, inst.name, inst.opcode, inst.op_name, live, allocated, note.get(inst.name, "")))
        for b in [b for b, last in last_use.items() if last == i]:
            live -= size.get(b, 0)
            alive.pop(b, None)
            del last_use[b]
    by_name = {inst.name: inst for inst in entry}
    at_peak = sorted(((n, by_name[n].opcode, by_name[n].op_name, b) for n, b in alive_at_peak.items()),
                     key=lambda r: (-r[3], r[0]))
    return LiveCurve(steps, peak, peak_at, peak_index, at_peak, params, len(size))


def peak_live_bytes(module_or_text: Module | str) -> LiveBytes:
    """Peak of live buffer bytes over the entry computation's schedule (optimized HLO text or Module): the
    peak of :func:`live_curve`.

    Example:
        >>> text = f.experimental_get_compiler_ir(x)(stage="optimized_hlo")
        >>> peak_live_bytes(text).peak_bytes / 2**20   # MiB
    """
    curve = live_curve(module_or_text)
    return LiveBytes(curve.peak_bytes, curve.parameter_bytes, curve.peak_at, curve.buffers)
