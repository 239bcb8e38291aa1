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

from dataclasses import dataclass

from .parser import Module, parse

# Instructions whose result is (a view of) their operands' buffers, not a new allocation.
ALIASING_OPCODES = frozenset({"bitcast", "get-tuple-element", "tuple", "reshape", "opt-barrier",
                              "add-dependency", "domain"})


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


def peak_live_bytes(module_or_text: Module | str) -> LiveBytes:
    """Peak of live buffer bytes over the entry computation's schedule (optimized HLO text or Module).

    Example:
        >>> text = f.experimental_get_compiler_ir(x)(stage="optimized_hlo")
        >>> peak_live_bytes(text).peak_bytes / 2**20   # MiB
    """
    module = parse(module_or_text) if isinstance(module_or_text, str) else module_or_text
    entry = module.entry.instructions
    owners: dict[str, set[str]] = {}   # value name -> the buffers it lives in
    size: dict[str, int] = {}
    params = 0
    for inst in entry:
        if inst.opcode == "parameter":
            params += inst.shape.bytes or 0
            owners[inst.name] = set()
        elif inst.opcode in ALIASING_OPCODES:
            owners[inst.name] = set().union(*(owners.get(o, set()) for o in inst.operands)) if inst.operands else set()
        else:
            owners[inst.name] = {inst.name}
            size[inst.name] = inst.shape.bytes or 0
    last_use: dict[str, int] = {b: i for i, inst in enumerate(entry) for b in owners[inst.name] if b == inst.name}
    for i, inst in enumerate(entry):
        for o in inst.operands:
            for b in owners.get(o, ()):
                last_use[b] = max(last_use.get(b, i), i)
    root = module.entry.root
    for b in owners.get(root.name, ()) if root else ():
        last_use[b] = len(entry)
    live = peak = 0
    peak_at = ""
    for i, inst in enumerate(entry):
        if inst.name in size:
            live += size[inst.name]
            if live > peak:
                peak, peak_at = live, inst.name
        for b in [b for b, last in last_use.items() if last == i]:
            live -= size.get(b, 0)
            del last_use[b]
    return LiveBytes(peak, params, peak_at, len(size))
