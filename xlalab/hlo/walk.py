"""Which instructions of a module run, and as what: free ops, control flow, async wrappers, fusions."""

from __future__ import annotations

import re
from collections.abc import Iterator

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




def _minor_to_major(shape: Shape) -> tuple[int, ...]:
    """A shape's layout as dimension numbers from minor to major; the default (row-major) when it has none."""
    rank = len(shape.dims)
    text = shape.layout.split(":")[0].strip()
    try:
        order = tuple(int(t) for t in text.split(",")) if text else ()
    except ValueError:
        order = ()
    return order if sorted(order) == list(range(rank)) else tuple(range(rank - 1, -1, -1))


def _physical_atoms(dims: tuple[int, ...], order: tuple[int, ...],
                    atoms: dict[int, list[object]]) -> list[object] | None:
    """The atoms of a shape from physically major to minor (``atoms``: each dimension's, major to minor); a
    group that does not split evenly counts as one atom when its dimensions lie together in logical order."""
    seq: list[object] = []
    for d in reversed(order):
        if dims[d] != 1:
            seq += atoms[d]
    out: list[object] = []
    i = 0
    while i < len(seq):
        tok = seq[i]
        if isinstance(tok, tuple) and tok[0] == "part":
            _, group, first, count = tok
            run = [("part", group, first + k, count) for k in range(count)]
            if first != 0 or seq[i:i + count] != run:
                return None
            out.append(("group", group))
            i += count
        else:
            out.append(tok)
            i += 1
    return out


def reshape_is_bitcast(src: Shape, dst: Shape) -> bool:
    """Whether a ``reshape`` from ``src`` to ``dst`` keeps every element at the same place in memory under the
    two shapes' layouts (XLA then emits no kernel for it: a bitcast), as XLA's ``ShapeUtil::ReshapeIsBitcast``
    decides. Shapes without a layout (unoptimized HLO) are row-major, where a reshape is always a bitcast.
    Tiling is ignored.

    Method: the logical (row-major) reshape splits and merges dimensions; split both shapes into the common
    factors ("atoms") of each group of dimensions whose sizes multiply to the same number, and compare the
    order in which the two layouts store those atoms.
    """
    if src.is_tuple or dst.is_tuple or src.dtype != dst.dtype or src.elements is None or \
            src.elements != dst.elements or src.elements == 0:
        return src.elements == 0 == dst.elements
    a = [i for i, d in enumerate(src.dims) if d != 1]
    b = [i for i, d in enumerate(dst.dims) if d != 1]
    atoms_a: dict[int, list[object]] = {}
    atoms_b: dict[int, list[object]] = {}
    i = j = 0
    group = 0
    while i < len(a) and j < len(b):
        ga, gb = [a[i]], [b[j]]
        pa, pb = src.dims[a[i]], dst.dims[b[j]]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ga.append(a[i])
                pa *= src.dims[a[i]]
                i += 1
            else:
                gb.append(b[j])
                pb *= dst.dims[b[j]]
                j += 1
        # Suffix products (from the logically minor end) of each side; their union must be a divisibility chain.
        def suffixes(dims: tuple[int, ...], group_dims: list[int]) -> list[int]:
            out, p = [], 1
            for d in reversed(group_dims):
                p *= dims[d]
                out.append(p)
            return out
        sa, sb = suffixes(src.dims, ga), suffixes(dst.dims, gb)
        cuts = sorted(set(sa) | set(sb))
        if all(hi % lo == 0 for lo, hi in zip(cuts, cuts[1:])):
            for _dims, group_dims, suf, atoms in ((src.dims, ga, sa, atoms_a), (dst.dims, gb, sb, atoms_b)):
                lower = 1
                for d, upper in zip(reversed(group_dims), suf):
                    # This dimension holds the atoms between cuts lower (exclusive) and upper: major first.
                    atoms[d] = [("atom", group, c) for c in reversed(cuts) if lower < c <= upper]
                    lower = upper
        else:
            for group_dims, atoms in ((ga, atoms_a), (gb, atoms_b)):
                for k, d in enumerate(group_dims):
                    atoms[d] = [("part", group, k, len(group_dims))]
        group += 1
    seq_a = _physical_atoms(src.dims, _minor_to_major(src), atoms_a)
    seq_b = _physical_atoms(dst.dims, _minor_to_major(dst), atoms_b)
    return seq_a is not None and seq_a == seq_b


def reinterprets(inst: Instruction, operand_shapes: dict[str, Shape]) -> bool:
    """Whether a ``reshape`` or ``convert`` only reinterprets its operand's buffer, so that it neither runs a
    kernel nor allocates: a ``reshape`` that is a bitcast (:func:`reshape_is_bitcast`; any other reshape is a
    copy into a new buffer), or a ``convert`` to the type it already has (``f32`` to ``f32``: unoptimized HLO of
    ``tf.reduce_mean`` has them). ``operand_shapes`` maps the computation's instruction names to their shapes; a
    reshape of an operand whose shape is not there counts as a bitcast. Any other opcode: ``False``.

    :func:`launches_nothing` (kernels and bytes, :func:`xlalab.hlo.summary`) and :func:`xlalab.hlo.memory.live_curve`
    (live bytes) both decide with this one test."""
    src = operand_shapes.get(inst.operands[0]) if inst.operands else None
    if inst.opcode == "reshape":
        return src is None or reshape_is_bitcast(src, inst.shape)
    if inst.opcode == "convert":
        return src is not None and not src.is_tuple and src.dtype == inst.shape.dtype and src.dims == inst.shape.dims
    return False


def launches_nothing(inst: Instruction, operand_shapes: dict[str, Shape]) -> bool:
    """Whether an instruction runs no kernel of its own: a free opcode (``FREE_OPCODES``) other than ``reshape``,
    or a ``reshape``/``convert`` that only reinterprets its operand (:func:`reinterprets`: a bitcast reshape, a
    convert to the same type). ``operand_shapes`` maps the computation's instruction names to their shapes."""
    if inst.opcode in ("reshape", "convert"):
        return reinterprets(inst, operand_shapes)
    return inst.opcode in FREE_OPCODES
