"""Which instructions of a module run, and as what: free ops, control flow, async wrappers, fusions."""

from __future__ import annotations

import re
from typing import Iterator

from .parser import Computation, Instruction, Module, Shape

# Instructions that launch no work of their own: they name, group or reinterpret existing buffers.
FREE_OPCODES = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape",
                          "after-all", "add-dependency", "opt-barrier", "partition-id", "replica-id", "domain"})
# Instructions that run other computations; what those computations launch is counted instead.
CONTROL_FLOW = frozenset({"while", "conditional", "call"})
# The first instruction of an async pair or triple; the rest (``*-update``, ``*-done``) launch nothing.
ASYNC_DONE_SUFFIXES = ("-done", "-update")
_ASYNC_START = re.compile(r"^(?P<base>[a-z\-]+)-start$")
# Custom-call targets of library calls whose trailing ``s8``/``u8`` tuple element is scratch space.
_WORKSPACE_TARGETS = re.compile(r"^__(cublas|cudnn|hipblas|miopen|rocblas)")
# Opcodes that read only the part of their first operand that they output.
PARTIAL_READ = frozenset({"slice", "dynamic-slice", "gather"})


def is_async_start(inst: Instruction) -> bool:
    return bool(_ASYNC_START.match(inst.opcode)) or inst.opcode in ("send", "recv")


def is_async_continuation(inst: Instruction) -> bool:
    return inst.opcode.endswith(ASYNC_DONE_SUFFIXES)


def async_wrapped(module: Module, inst: Instruction) -> Instruction | None:
    """What an async ``*-start`` runs: the root of its wrapped computation (``async-start``), else itself."""
    if inst.opcode in ("async-start",) and inst.called:
        comp = module.computations.get(inst.called[0])
        return comp.root if comp is not None else None
    return None


def launch_opcode(module: Module, inst: Instruction) -> str:
    """The opcode a launch is counted under: an async start counts as what it wraps
    (``all-reduce-start`` -> ``all-reduce``, ``async-start`` of a fusion -> ``fusion``)."""
    wrapped = async_wrapped(module, inst)
    if wrapped is not None:
        return wrapped.opcode
    m = _ASYNC_START.match(inst.opcode)
    if m and m.group("base") != "async":
        return m.group("base")
    return inst.opcode


def fusion_of(module: Module, inst: Instruction) -> Instruction | None:
    """The fusion instruction a launch runs (itself, a ``fusion-start``, or the fusion an ``async-start`` wraps)."""
    if inst.opcode in ("fusion", "fusion-start"):
        return inst
    wrapped = async_wrapped(module, inst)
    if wrapped is not None and wrapped.opcode == "fusion":
        return wrapped
    return None


def executed_computations(module: Module) -> list[Computation]:
    """The entry and the computations it runs through control flow (not fusion bodies, reducers or async
    wrapped computations, whose work is counted at the instruction that launches them)."""
    seen: list[str] = []
    stack = [module.entry_name]
    while stack:
        name = stack.pop()
        if name in seen or name not in module.computations:
            continue
        seen.append(name)
        for inst in module.computations[name]:
            if inst.opcode in CONTROL_FLOW:
                stack.extend(reversed(inst.called))
    return [module.computations[n] for n in seen]


def fused_instructions(module: Module, inst: Instruction, _seen: set[str] | None = None) -> Iterator[Instruction]:
    """The instructions inside a fusion, nested fusions expanded (each computation at most once: a cycle guard)."""
    seen = set() if _seen is None else _seen
    for cname in inst.called:
        if cname in seen:
            continue
        seen.add(cname)
        for inner in module.computations.get(cname, Computation(cname)):
            if inner.opcode in ("fusion", "fusion-start"):
                yield from fused_instructions(module, inner, seen)
            elif inner.opcode != "parameter":
                yield inner


def workspace_free(inst: Instruction, shape: Shape) -> Shape:
    """A library custom-call's result without its trailing ``s8``/``u8`` scratch element."""
    if inst.opcode in ("custom-call", "custom-call-start") and shape.is_tuple and shape.tuple_shapes and \
            _WORKSPACE_TARGETS.match(inst.custom_call_target) and shape.tuple_shapes[-1].dtype in ("s8", "u8") \
            and not shape.tuple_shapes[-1].is_tuple:
        return Shape(tuple_shapes=shape.tuple_shapes[:-1])
    return shape


