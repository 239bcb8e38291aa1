"""Summary of a module: launches, fusions and the bytes each launch moves.

What :func:`summary` counts:

* **A launch** is an instruction of the entry computation, or of a computation that a ``while``,
  ``conditional`` or ``call`` runs, that does work of its own: not ``parameter``, ``constant``, ``tuple``,
  ``get-tuple-element``, ``bitcast``, a ``reshape`` that is a bitcast under its layouts, a ``convert`` to
  the type it already has (``f32`` to ``f32``), ``after-all``, ``add-dependency``, ``opt-barrier``,
  ``domain``, ``partition-id``, ``replica-id``, and not the control flow instruction itself (a ``reshape``
  that changes the order of elements in memory is a copy: a launch). A fusion is one launch (its body is
  what was fused); a library custom-call is one. An async pair or triple (``all-reduce-start``/``-done``,
  ``all-gather-*``, ``collective-permute-*``, ``copy-start``/``-done``,
  ``custom-call-start``/``-update``/``-done``, ``async-start``/``-update``/ ``-done``,
  ``fusion-start``/``-done``, ``send``/``recv`` and their dones) is one launch, counted at its start under
  the opcode of what it wraps; the called computation of a ``fusion-start`` (or of an ``async-start``
  wrapping a fusion) is read as a fusion.
* **Bytes** of a launch are each distinct operand read once plus the result written once, from the shapes
  (dense; tiling padding ignored; a sub-byte type takes a whole byte unless its layout packs it with
  ``E(bits)``, as XLA stores it). Not counted: the trailing ``s8``/``u8`` workspace element of a
  cuBLAS/cuDNN custom-call's result. A ``slice``, ``dynamic-slice`` or ``gather`` is charged what it reads
  (its output and its indices), not its whole operand, and so is a fusion parameter that is read only
  through them. A ``dynamic-update-slice`` or ``scatter`` (bare, or the root of a fusion updating one of its
  parameters that nothing else in the fusion reads) writes in place into its operand's buffer: it is charged
  its update(s) read and written and its indices, nothing for the operand it updates. An async operation's
  data is counted once. An unbounded dynamic dimension makes a launch's bytes unknown (``None``, counted in
  ``bytes_unknown``); a bounded one (``<=8``) counts its bound.
* **Per step**: ``kernels``, ``kernel_list`` and ``bytes_moved`` count each launch site once (a loop
  body once, every branch of a conditional once). ``per_step`` is one run of the entry: a ``while``
  body (and condition) multiplied by the loop's ``known_trip_count``, and for a ``conditional`` its
  costliest branch (``per_step["exact"]`` is False when a loop has no known trip count, when branches
  differ, or when some bytes are unknown); ``loops`` and ``conditionals`` give the per-iteration and
  per-branch figures.

Without a GPU, set ``XLALAB_FAKE_GPU`` to a device name (``"NVIDIA A100-SXM4-40GB"``): ``hlo_text(...,
stage="optimized_hlo")`` then compiles the program on the CPU (so errors still surface) and returns a
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .matrix import matrix_ops
from .parser import Computation, Instruction, Module, Shape, as_module
from .walk import (
    CONTROL_FLOW,
    PARTIAL_READ,
    async_wrapped,
    executed_computations,
    fused_instructions,
    fusion_of,
    is_async_continuation,
    is_async_start,
    launch_opcode,
    launches_nothing,
    workspace_free,
)

# ---------------------------------------------------------------------------------------------
# Summary: launches, fusions and bytes moved.

def _sum_bytes(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]


def _partial_reads(module: Module, fusion: Instruction) -> dict[int, int | None]:
    """For each parameter of a fusion that is read only through slices, dynamic slices or gathers (possibly
    through bitcasts), the bytes those read; other parameters are absent."""
    comp = module.computations.get(fusion.called[0]) if fusion.called else None
    if comp is None:
        return {}
    users: dict[str, list[Instruction]] = {}
    for inst in comp:
        for o in dict.fromkeys(inst.operands):
            users.setdefault(o, []).append(inst)
    out: dict[int, int | None] = {}
    for inst in comp:
        if inst.opcode != "parameter":
            continue
        index = inst.parameter_number
        reads: list[int | None] = []
        ok = True
        frontier = [inst.name]
        while frontier and ok:
            name = frontier.pop()
            for user in users.get(name, []):
                if user.opcode in ("bitcast", "reshape"):
                    frontier.append(user.name)
                elif user.opcode in PARTIAL_READ and user.operands and user.operands[0] == name and \
                        name not in user.operands[1:]:
                    reads.append(user.shape.bytes)
                else:
                    ok = False
                    break
            if comp.root is not None and name == comp.root.name:
                ok = False
        if ok and reads:
            out[index] = _sum_bytes(reads)
    return out


def _in_place_update(module: Module, comp: Computation, inst: Instruction) -> tuple[set[int], int | None] | None:
    """For a ``dynamic-update-slice`` or ``scatter``, or a fusion whose root is one updating fusion parameters, the
    operand indices of the buffers it updates in place and the bytes it writes (the update, or the scatter's
    updates); else ``None``.

    XLA gives a dynamic-update-slice's or scatter's result the buffer of its operand (an in-place input/output
    pair: ``HloDataflowAnalysis::GetInPlaceInputOutputPairs``), so the kernel reads the update (and indices) and
    writes that many bytes; the rest of the operand is neither read nor written. Inside a fusion this holds only
    when the updated operand is a fusion parameter (through bitcasts) that nothing else in the fusion reads.
    """
    target: Instruction | None
    if inst.opcode in ("dynamic-update-slice", "scatter"):
        target, body = inst, None
    else:
        fusion = fusion_of(module, inst)
        body = module.computations.get(fusion.called[0]) if fusion is not None and fusion.called else None
        target = body.root if body is not None else None
        if target is None or target.opcode not in ("dynamic-update-slice", "scatter"):
            return None
    if len(target.operands) < 2:
        return None
    if target.opcode == "scatter":
        n = (len(target.operands) - 1) // 2           # variadic scatter: n operands, the indices, n updates
        updated, updates = target.operands[:n], target.operands[n + 1:]
    else:
        updated, updates = target.operands[:1], target.operands[1:2]
    shapes = {i.name: i for i in (body if body is not None else comp)}
    update_insts = [shapes.get(u) for u in updates]
    if any(u is None for u in update_insts):
        return None
    written = _sum_bytes([u.shape.bytes for u in update_insts])  # type: ignore[union-attr]
    if body is None:
        return set(range(len(updated))), written
    users: dict[str, int] = {}
    for i in body:
        for o in i.operands:
            users[o] = users.get(o, 0) + 1
    indices: set[int] = set()
    for name in updated:
        base = shapes.get(name)
        while base is not None and base.opcode in ("bitcast", "reshape") and base.operands and \
                users.get(base.name, 0) == 1:
            base = shapes.get(base.operands[0])
        if base is None or base.opcode != "parameter" or users.get(base.name, 0) != 1:
            return None
        indices.add(base.parameter_number)
    return indices, written


def kernel_traffic(module: Module, comp: Computation,
                   inst: Instruction) -> tuple[list[tuple[str, int | None]], int | None]:
    """What one launch reads and writes: ``([(operand name, bytes read), ...], bytes written)``.

    Each distinct operand appears once, in operand order; the rules are those of :func:`kernel_bytes`
    (which sums them). ``None`` for bytes a shape with an unbounded dynamic dimension makes unknown.
    """
    shapes = {i.name: i.shape for i in comp}
    operands = list(dict.fromkeys(inst.operands))
    opcode = launch_opcode(module, inst)
    # What the launch writes.
    if is_async_start(inst):
        out_shape = _async_result(comp, inst)
    else:
        out_shape = inst.shape
    wrapped = async_wrapped(module, inst)
    target = wrapped if wrapped is not None else inst
    out_shape = workspace_free(target, out_shape)
    written = out_shape.bytes
    if inst.opcode == "send":
        written = 0
    # What it reads.
    reads: list[tuple[str, int | None]] = []
    if inst.opcode == "recv":
        return reads, written
    in_place = _in_place_update(module, comp, inst)
    if in_place is not None:
        updated, update = in_place
        fusion = fusion_of(module, inst)
        partial = _partial_reads(module, fusion) if fusion is not None else {}
        for k, o in enumerate(inst.operands):
            if o not in shapes or o in inst.operands[:k]:
                continue
            reads.append((o, 0 if k in updated else partial[k] if k in partial else shapes[o].bytes))
        return reads, update
    if opcode in PARTIAL_READ:
        reads.append((operands[0] if operands else "", out_shape.bytes))
        reads += [(o, shapes[o].bytes) for o in operands[1:] if o in shapes]
    else:
        fusion = fusion_of(module, inst)
        partial = _partial_reads(module, fusion) if fusion is not None else {}
        for k, o in enumerate(inst.operands):
            if o not in shapes or o in inst.operands[:k]:
                continue
            reads.append((o, partial[k] if k in partial else shapes[o].bytes))
    return reads, written


def kernel_bytes(module: Module, comp: Computation, inst: Instruction) -> int | None:
    """Bytes one launch must move: each distinct operand read once plus the result written once.

    A library call's scratch workspace is not counted; a ``slice``, ``dynamic-slice`` or ``gather`` (and
    a fusion's parameter read only through them) is charged the bytes it reads, not its whole operand; a
    ``dynamic-update-slice`` or ``scatter`` (or a fusion rooted in one) updates its operand in place and is
    charged its update read and written and its indices, not the operand;
    an async start is charged its operands and the result its ``*-done`` returns. ``None`` when a shape
    has an unbounded dynamic dimension.
    """
    reads, written = kernel_traffic(module, comp, inst)
    return _sum_bytes([b for _, b in reads] + [written])


def _async_result(comp: Computation, start: Instruction) -> Shape:
    """The shape an async operation finally returns: that of its ``*-done`` (following ``*-update``s)."""
    chain = {start.name}
    for inst in comp:
        if inst.operands and inst.operands[0] in chain and is_async_continuation(inst):
            if inst.opcode.endswith("-done"):
                if inst.opcode == "send-done":
                    return Shape(tuple_shapes=())
                if inst.opcode == "recv-done" and inst.shape.is_tuple and inst.shape.tuple_shapes:
                    return inst.shape.tuple_shapes[0]
                return inst.shape
            chain.add(inst.name)
    # No done found: an async start's shape is ((operands), result, context...); take the result.
    shape = start.shape
    if shape.is_tuple and len(shape.tuple_shapes or ()) >= 2:
        return (shape.tuple_shapes or ())[1]
    return shape


def _launches(module: Module, comp: Computation) -> list[dict[str, Any]]:
    """The launches of one computation (not descending into control flow)."""
    out = []
    shapes = {i.name: i.shape for i in comp}
    for inst in comp:
        if launches_nothing(inst, shapes) or inst.opcode in CONTROL_FLOW or is_async_continuation(inst):
            continue
        fusion = fusion_of(module, inst)
        out.append({"name": inst.name, "opcode": launch_opcode(module, inst),
                    "kind": fusion.fusion_kind if fusion is not None else None,
                    "backend_kind": fusion.backend_kind if fusion is not None else "",
                    "bytes": kernel_bytes(module, comp, inst), "computation": comp.name})
    return out


def _per_step(module: Module, comp_name: str, loops: list[dict[str, Any]], conds: list[dict[str, Any]],
              stack: tuple[str, ...] = ()) -> tuple[int, int, bool]:
    """Launches and bytes of one run of a computation: loop bodies times their trip count, the costliest
    branch of a conditional. Returns (launches, bytes, exact)."""
    comp = module.computations.get(comp_name)
    if comp is None or comp_name in stack:
        return 0, 0, False
    stack = stack + (comp_name,)
    launches = _launches(module, comp)
    n = len(launches)
    b = sum(k["bytes"] or 0 for k in launches)
    exact = all(k["bytes"] is not None for k in launches)
    for inst in comp:
        if inst.opcode == "while":
            body = inst.attrs.get("body", "").lstrip("%")
            cond = inst.attrs.get("condition", "").lstrip("%")
            bn, bb, be = _per_step(module, body, loops, conds, stack)
            cn, cb, ce = _per_step(module, cond, loops, conds, stack)
            trips = inst.known_trip_count
            loops.append({"name": inst.name, "computation": comp_name, "trip_count": trips,
                          "body_kernels": bn, "body_bytes": bb, "condition_kernels": cn})
            t = trips if trips is not None else 1
            n += t * bn + (t + 1) * cn
            b += t * bb + (t + 1) * cb
            exact = exact and be and ce and trips is not None
        elif inst.opcode == "conditional":
            branches: list[dict[str, Any]] = []
            for name in inst.called:
                bn, bb, be = _per_step(module, name, loops, conds, stack)
                branches.append({"computation": name, "kernels": bn, "bytes": bb})
            conds.append({"name": inst.name, "computation": comp_name, "branches": branches})
            if branches:
                worst = max(branches, key=lambda x: (x["bytes"], x["kernels"]))
                n += worst["kernels"]
                b += worst["bytes"]
            exact = exact and len({(x["kernels"], x["bytes"]) for x in branches}) <= 1
        elif inst.opcode == "call":
            for name in inst.called:
                cn, cb, ce = _per_step(module, name, loops, conds, stack)
                n, b, exact = n + cn, b + cb, exact and ce
    return n, b, exact


def summary(module_or_text: Module | str) -> dict[str, Any]:
    """Count what a module launches and what it moves.

    **A launch** is an executed instruction (in the entry, or in a computation that a ``while``,
    ``conditional`` or ``call`` runs) that is not free (``parameter``, ``constant``, ``tuple``,
    ``get-tuple-element``, ``bitcast``, a bitcast ``reshape``, a same-type ``convert``, ``after-all``, ...; see
    :func:`xlalab.hlo.launches_nothing`) and not control flow itself. A
    fusion is one launch; a library ``custom-call`` (cuBLAS, cuDNN) is one. An async pair or triple
    (``all-reduce-start``/``-done``, ``copy-start``/``-done``, ``async-start``/``-update``/``-done``,
    ``send``/``send-done`` ...) is one launch, counted under the opcode of what it wraps; a wrapped
    fusion counts as a fusion. On unoptimized HLO every op is its own launch.

    **Bytes** of a launch: each distinct operand read once plus the result written once, from shapes.
    Not counted: the trailing ``s8``/``u8`` scratch workspace of a cuBLAS/cuDNN custom-call. A ``slice``,
    ``dynamic-slice`` or ``gather`` reads what it outputs (plus its indices), not its whole operand, and a
    fusion parameter read only through them is charged what they read. A ``dynamic-update-slice`` or
    ``scatter`` (or a fusion rooted in one, updating a parameter in place) is charged its update(s) read and
    written and its indices, not the operand it updates. An async operation's data is
    counted once (its operands and the result of its ``-done``). A shape with an unbounded dynamic
    dimension (``?``) has unknown bytes: such launches are counted in ``bytes_unknown`` and add nothing.

    **Per step**: ``kernels``, ``kernel_list`` and ``bytes_moved`` count each launch site once (a loop
    body once, every branch of a conditional). ``per_step`` gives one run of the entry: each ``while``
    body and condition multiplied by its ``known_trip_count`` (a loop without one counts once, and
    ``exact`` is False), and for each ``conditional`` its costliest branch (``exact`` False when branches
    differ). ``loops`` and ``conditionals`` give the per-iteration and per-branch figures.

    Returns a dict with:
        ``instructions``: instruction count over all computations;
        ``ops_by_opcode``: opcodes of the executed computations (async starts under what they wrap;
        ``-update``/``-done`` not counted);
        ``fused_ops_by_opcode``: opcodes inside fusions (what was fused);
        ``fusions``: fusion launches; ``fusions_by_kind``: by XLA kind (``kLoop``/``kInput``/``kOutput``/
        ``kCustom``); ``fusions_by_backend_kind``: by the GPU backend's kind (``__triton_gemm``,
        ``__triton``, ``__cudnn$fusion``, ...; fusions without one are absent);
        ``matmuls_by_impl``: the :func:`matrix_ops` launches by implementation (``cublas``, ``triton``, ...);
        ``kernels``: launches; ``kernel_list``: one ``{"name", "opcode", "kind", "backend_kind", "bytes",
        "computation"}`` per launch; ``bytes_moved``: the sum of the known bytes; ``bytes_unknown``;
        ``per_step``: ``{"kernels", "bytes", "exact"}``; ``loops``: ``{"name", "trip_count",
        "body_kernels", "body_bytes", ...}`` per while; ``conditionals``: ``{"name", "branches"}``.
    """
    module = as_module(module_or_text)
    ops: Counter[str] = Counter()
    fused: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    backend_kinds: Counter[str] = Counter()
    kernels: list[dict[str, Any]] = []
    for comp in executed_computations(module):
        for inst in comp:
            if is_async_continuation(inst):
                continue
            ops[launch_opcode(module, inst)] += 1
            fusion = fusion_of(module, inst)
            if fusion is not None:
                kinds[fusion.fusion_kind or "unknown"] += 1
                if fusion.backend_kind:
                    backend_kinds[fusion.backend_kind] += 1
                fused.update(i.opcode for i in fused_instructions(module, fusion))
        kernels += _launches(module, comp)
    loops: list[dict[str, Any]] = []
    conds: list[dict[str, Any]] = []
    n, b, exact = _per_step(module, module.entry_name, loops, conds)
    impls = Counter(op.impl for op in {(op.name, op.computation): op for op in matrix_ops(module)}.values())
    return {
        "instructions": sum(len(c.instructions) for c in module.computations.values()),
        "ops_by_opcode": dict(ops),
        "fused_ops_by_opcode": dict(fused),
        "fusions": sum(kinds.values()),
        "fusions_by_kind": dict(kinds),
        "fusions_by_backend_kind": dict(backend_kinds),
        "matmuls_by_impl": dict(impls),
        "kernels": len(kernels),
        "kernel_list": kernels,
        "bytes_moved": sum(k["bytes"] or 0 for k in kernels),
        "bytes_unknown": sum(1 for k in kernels if k["bytes"] is None),
        "per_step": {"kernels": n, "bytes": b, "exact": exact and all(k["bytes"] is not None for k in kernels)},
        "loops": loops,
        "conditionals": conds,
    }

