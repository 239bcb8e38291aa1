"""Every pass of XLA over one function, as frames: the module after each pass that changed it, what changed, and
XLA's own record of its fusion decisions.

:func:`passes` saves the function (with its variables) and compiles it again in a fresh process, because XLA reads
``XLA_FLAGS`` once per process. That process runs with

* ``--xla_dump_to=DIR --xla_dump_hlo_pass_re=.*``: XLA writes the module at the start of every pass pipeline and
  after every pass that reports a change (with the regex exactly ``.*``, a pass that changed nothing writes nothing:
  ``HloPassPipeline::RunPassesInternal`` in ``xla/hlo/pass/hlo_pass_pipeline.cc``), plus the module before and after
  optimization;
* ``TF_CPP_VMODULE=hlo_pass_pipeline=2,instruction_fusion=5,cpu_instruction_fusion=5``: the log names every pass
  that ran, in order, with a hash of the module before it (so the passes that changed nothing are known too), and,
  from ``InstructionFusion`` (``xla/service/instruction_fusion.cc``, XLA:CPU's fusion pass), every decision:
  "Fusing X into Y", "not fusing operand X because <reason>". XLA:GPU's ``PriorityFusion`` instead writes its
  decisions to a ``*priority_fusion_dump*`` file (``FusionProcessDumpProto``: fusions made, producers ineligible
  and why) whenever dumping is on for that pass; :func:`passes` reads that file when it exists.

What each TensorFlow emits (checked on XLA:CPU with TensorFlow 2.19.1 and 2.21.0): both write the per-pass
snapshots and log the passes and ``InstructionFusion``'s decisions, 2.19.1 in TensorFlow's own log layout and 2.21.0
in absl's (both are read). ``--xla_dump_fusion_visualization`` exists in both, but their flag help says it is
implemented only for XLA:GPU and needs a URL-renderer plugin that TensorFlow does not register, so it writes nothing
here; the log and XLA:GPU's ``priority_fusion_dump`` are what
the installed compiler records.

:func:`frames_from_dump` builds the frames from a dump directory and the log, so recorded dumps need no TensorFlow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .dumps import list_dump
from .launches import summary
from .parser import Module, parse
from .walk import executed_computations, fused_instructions, fusion_of

# The log switches that name every pass and every fusion decision (absl/TF VLOG module=level pairs).
VMODULE = "hlo_pass_pipeline=2,instruction_fusion=5,cpu_instruction_fusion=5,priority_fusion=2"


@dataclass(frozen=True)
class PassRun:
    """One pass that ran: its ``pipeline``, its ``name``, and ``changed`` (the module's hash differed after it;
    ``None`` when the log does not say)."""

    pipeline: str
    name: str
    changed: bool | None = None


@dataclass(frozen=True)
class Decision:
    """One fusion decision XLA recorded: ``kind`` is ``"fused"`` (``producer`` into ``consumer``),
    ``"not fused"`` (with XLA's ``reason``) or ``"not fusible"`` (the operand cannot be fused at all:
    a parameter, for instance); ``fusion`` the fusion instruction it created or grew, when known."""

    kind: str
    producer: str
    consumer: str = ""
    reason: str = ""
    fusion: str = ""

    def __str__(self) -> str:
        if self.kind == "fused":
            return (f"fused {self.producer} into {self.consumer or self.fusion}"
                    + (f" ({self.reason})" if self.reason else ""))
        return f"{self.kind}: {self.producer}" + (f" into {self.consumer}" if self.consumer else "") + \
            (f": {self.reason}" if self.reason else "")


@dataclass
class Change:
    """What a pass changed, comparing the instructions that run (entry, loop bodies, branches; not fusion
    bodies) by name, and each fusion by the number of instructions inside it.

    Attributes:
        added, removed: opcode -> how many instructions of that opcode appeared or disappeared.
        fusions_created: names of fusion instructions that are new.
        fusions_grown: names of fusions that now hold more instructions than before.
        copies_inserted: names of new ``copy`` instructions.
        rewired: names of instructions that kept their opcode but read other operands (a bypassed no-op).
        highlight: names of the instructions to mark in a drawing (new ones and grown fusions).
    """

    added: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    fusions_created: list[str] = field(default_factory=list)
    fusions_grown: list[str] = field(default_factory=list)
    copies_inserted: list[str] = field(default_factory=list)
    highlight: list[str] = field(default_factory=list)
    rewired: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line: ``"+2 fusion, -6 add/multiply/...; created fusion.1; grew fusion.2; 1 copy inserted"``."""
        parts = []
        if self.added:
            parts.append("added " + ", ".join(f"{n} {op}" for op, n in sorted(self.added.items())))
        if self.removed:
            parts.append("removed " + ", ".join(f"{n} {op}" for op, n in sorted(self.removed.items())))
        if self.fusions_created:
            parts.append("created " + ", ".join(self.fusions_created))
        if self.fusions_grown:
            parts.append("grew " + ", ".join(self.fusions_grown))
        if self.copies_inserted:
            parts.append(f"{len(self.copies_inserted)} copy inserted" if len(self.copies_inserted) == 1
                         else f"{len(self.copies_inserted)} copies inserted")
        if self.rewired and not (self.added or self.removed):
            parts.append(f"rewired the operands of {', '.join(self.rewired[:4])}"
                         + (" …" if len(self.rewired) > 4 else ""))
        return "; ".join(parts) or "attributes, layouts or order only (no instruction added, removed or rewired)"


@dataclass
class Frame:
    """The module after one pass that changed it.

    Attributes:
        index: position in the frames (0: the module before any pass).
        pipeline, pass_name: the pipeline and the pass after which XLA wrote this module.
        text: the module's HLO text.
        change: what changed since the previous frame (empty for frame 0).
        counters: :func:`xlalab.hlo.summary`'s ``instructions`` (every computation), ``kernels``, ``fusions`` and
            ``bytes`` (``bytes_moved``) of this module.
        passes: the passes that ran since the previous frame, in order; the last one that changed the module is
            ``pass_name``, the others changed nothing (folded here, not drawn), except those of ``folded`` frames.
        decisions: the fusion decisions XLA logged during those passes.
        folded: the frames :meth:`Frames.keep` dropped just before this one, in order, as they were: their passes
            and decisions are at the start of ``passes`` and ``decisions``, and ``change`` and the counters'
            deltas include what they changed (``index`` stays the frame's place among all the frames).
    """

    index: int
    pipeline: str
    pass_name: str
    text: str
    change: Change
    counters: dict[str, Any]
    passes: list[PassRun] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    folded: list[Frame] = field(default_factory=list)

    @property
    def module(self) -> Module:
        return parse(self.text)

    @property
    def own_passes(self) -> list[PassRun]:
        """The passes that ran after the last ``folded`` frame (all of ``passes`` when none was folded)."""
        return self.passes[sum(len(f.passes) for f in self.folded):]

    def changed_passes(self) -> list[int]:
        """Positions in ``passes`` of the passes that changed the module: each folded frame's pass and this frame's
        own (the last of a frame's passes, when it is named as the frame's ``pass_name``); where the log named no
        pass of a frame, that frame adds none."""
        out, start = [], 0
        for f in self.folded:
            if f.passes and f.passes[-1].name == f.pass_name:
                out.append(start + len(f.passes) - 1)
            start += len(f.passes)
        own = self.passes[start:]
        if own and own[-1].name == self.pass_name:
            out.append(len(self.passes) - 1)
        return out

    def unfolded(self) -> Frame:
        """This frame without its folded frames: its own passes and decisions only (``change`` as it is)."""
        skip = sum(len(f.decisions) for f in self.folded)
        return replace(self, passes=self.own_passes, decisions=self.decisions[skip:], folded=[])


class Frames(list):
    """A list of :class:`Frame` in pipeline order, with ``backend`` (``"cpu"``/``"gpu"`` as XLA named its
    final dump), ``tensorflow`` (the version that compiled, or for a GPU target the one that gave the HLO),
    ``decision_source`` (where the fusion decisions came from, or ``""``), ``passes_run`` (every pass that ran, in
    order) and ``trailing`` (the passes that ran after the last frame was written and changed nothing). Compiled
    for a GPU target without a GPU (``passes(..., target=...)``): ``target``, ``compiler`` (its version) and
    ``autotuning`` (``"not run: ..."``)."""

    backend: str = ""
    tensorflow: str = ""
    target: str = ""
    compiler: str = ""
    autotuning: str = ""
    decision_source: str = ""
    passes_run: list[PassRun]
    trailing: list[PassRun]

    def __init__(self, frames=(), **attrs: Any) -> None:
        super().__init__(frames)
        self.passes_run = []
        self.trailing = []
        for k, v in attrs.items():
            setattr(self, k, v)

    def keep(self, indices: Iterable[int]) -> Frames:
        """Only the frames whose ``index`` is in ``indices``, and the first and the last, each measured against the
        previous frame kept: the frames dropped in between are folded into the next one kept (:attr:`Frame.folded`),
        their passes and decisions put before its own, its ``change`` taken again from the previous frame kept. So a
        flipbook of the result (:func:`xlalab.hlo.flipbook`) attributes every change to a frame it shows and still
        lists every pass. ``backend``, ``tensorflow``, ``decision_source``, ``passes_run`` and ``trailing`` are
        copied.

        Example:
            >>> fusion = frames.keep(f.index for f in frames if f.change.fusions_created)
        """
        if not self:
            return Frames([], backend=self.backend, tensorflow=self.tensorflow, decision_source=self.decision_source)
        wanted = set(indices) | {self[0].index, self[-1].index}
        out = Frames(backend=self.backend, tensorflow=self.tensorflow, decision_source=self.decision_source)
        out.passes_run, out.trailing = list(self.passes_run), list(self.trailing)
        dropped: list[Frame] = []
        for f in self:
            if f.index not in wanted:
                dropped += [*f.folded, f.unfolded()]
                continue
            if out and dropped:
                folded = [*dropped, *f.folded]
                own = f.unfolded()
                f = replace(own, change=diff(out[-1].module, f.module), folded=folded,
                            passes=[p for d in folded for p in d.passes] + own.passes,
                            decisions=[d for x in folded for d in x.decisions] + own.decisions)
            out.append(f)
            dropped = []
        return out

    def find(self, pass_name: str) -> Frame:
        """The first frame written after a pass named ``pass_name`` (``LookupError`` if none)."""
        for f in self:
            if f.pass_name == pass_name:
                return f
        raise LookupError(f"no frame after a pass named {pass_name!r}; passes: {[f.pass_name for f in self]}")

    def first_creating(self, opcode: str = "fusion") -> Frame:
        """The first frame in which an instruction with ``opcode`` runs (its ``pass_name`` made it)."""
        for f in self:
            if any(i.opcode == opcode for c in executed_computations(f.module) for i in c):
                return f
        raise LookupError(f"no frame has a {opcode!r} instruction")


# ---------------------------------------------------------------------------------------------
# Comparing two modules.

_METADATA = re.compile(r",?\s*metadata=\{[^{}]*\}")
_COMMENT = re.compile(r"/\*.*?\*/")


def normalized(text: str) -> str:
    """HLO text without its ``HloModule`` line, metadata and comments: two frames that differ only there are one."""
    lines = [_COMMENT.sub("", _METADATA.sub("", ln)).rstrip() for ln in text.splitlines()
             if not ln.startswith("HloModule")]
    return "\n".join(ln for ln in lines if ln.strip())


def _fusion_sizes(module: Module) -> dict[str, int]:
    out = {}
    for comp in executed_computations(module):
        for inst in comp:
            fusion = fusion_of(module, inst)
            if fusion is not None:
                out[inst.name] = sum(1 for i in fused_instructions(module, fusion) if i.opcode != "parameter")
    return out


def _opcodes(module: Module) -> dict[str, str]:
    return {i.name: i.opcode for c in executed_computations(module) for i in c}


def _operands(module: Module) -> dict[str, list[str]]:
    return {i.name: list(i.operands) for c in executed_computations(module) for i in c}


def diff(before: Module | str | None, after: Module | str) -> Change:
    """What changed from ``before`` to ``after`` (two versions of one module): see :class:`Change`."""
    after_m = parse(after) if isinstance(after, str) else after
    if before is None:
        return Change()
    before_m = parse(before) if isinstance(before, str) else before
    old, new = _opcodes(before_m), _opcodes(after_m)
    added = Counter(op for n, op in new.items() if old.get(n) != op)
    removed = Counter(op for n, op in old.items() if new.get(n) != op)
    old_f, new_f = _fusion_sizes(before_m), _fusion_sizes(after_m)
    created = [n for n in new_f if n not in old_f]
    grown = [n for n, k in new_f.items() if n in old_f and k > old_f[n]]
    copies = [n for n, op in new.items() if op == "copy" and old.get(n) != "copy"]
    old_ops, new_ops = _operands(before_m), _operands(after_m)
    rewired = [n for n, op in new.items() if old.get(n) == op and old_ops.get(n) != new_ops.get(n)]
    highlight = list(dict.fromkeys([n for n, op in new.items() if old.get(n) != op] + grown + rewired))
    return Change(dict(added), dict(removed), created, grown, copies, highlight, rewired)


def counters(module: Module | str) -> dict[str, Any]:
    """``{"instructions", "kernels", "fusions", "bytes"}`` of a module, from :func:`xlalab.hlo.summary`."""
    s = summary(module)
    return {"instructions": s["instructions"], "kernels": s["kernels"], "fusions": s["fusions"],
            "bytes": s["bytes_moved"]}


# ---------------------------------------------------------------------------------------------
# Reading the log.

# Two layouts of TensorFlow's C++ log: absl's ("I0000 00:00:1.5  123 file.cc:45] msg", TensorFlow 2.20 and later)
# and TensorFlow's own ("2026-01-01 00:00:00.000: I external/.../file.cc:45] msg", 2.19 and earlier).
_LOG_LINE = re.compile(r"^(?:[IWEF]\d{4} [\d:.]+\s+\d+ |\d{4}-\d\d-\d\d [\d:.]+: [IWEF] (?:\S*/)?)"
                       r"(?P<file>[\w.]+):\d+\] (?P<msg>.*)$")
_NAME = re.compile(r"%([\w.\-]+) = ")


def _inst_name(text: str) -> str:
    m = _NAME.search(text)
    return m.group(1) if m else text.strip().split(" ")[0].lstrip("%")


@dataclass
class _Event:
    kind: str            # "pipeline" or "pass"
    pipeline: str
    name: str
    hash: str = ""
    decisions: list[Decision] = field(default_factory=list)
    changed: bool | None = None


def read_log(log: str, module_name: str) -> list[_Event]:
    """Pipelines and passes that ran on ``module_name``, in order, each pass with the fusion decisions logged
    while it ran (XLA's VLOG lines of ``hlo_pass_pipeline.cc``, ``instruction_fusion.cc``,
    ``cpu_instruction_fusion.cc``)."""
    events: list[_Event] = []
    current: _Event | None = None
    in_module = False
    stack: list[str] = []   # pipelines running; a nested one ends with the timing line of the pass named as it
    consumer = ""
    reason = ""
    for line in log.splitlines():
        m = _LOG_LINE.match(line)
        if not m:
            continue
        src, msg = m["file"], m["msg"]
        if src == "hlo_pass_pipeline.cc":
            p = re.match(r"Running HLO pass pipeline on module (\S+): (.*)$", msg)
            if p:
                in_module = p.group(1) == module_name
                if in_module:
                    stack.append(p.group(2).strip())
                    events.append(_Event("pipeline", stack[-1], stack[-1]))
                current = None
                continue
            if not in_module:
                continue
            p = re.match(r"\s*HLO pass: (.+?) time:", msg)
            if p:
                if len(stack) > 1 and stack[-1] == p.group(1):
                    stack.pop()
                continue
            p = re.match(r"\s*HLO pass ([^:\s].*?)\s*$", msg)
            if p:
                current = _Event("pass", stack[-1] if stack else "", p.group(1))
                events.append(current)
                continue
            p = re.match(r"\s*Module hash (\S+)", msg)
            if p and current is not None:
                current.hash = p.group(1)
            continue
        if not in_module or current is None:
            continue
        if src == "instruction_fusion.cc":
            if msg.startswith("Considering fusion of: "):
                consumer = _inst_name(msg[len("Considering fusion of: "):])
                reason = ""
            elif msg.startswith("Fusing ") and " into " in msg:
                producer_text, consumer_text = msg[len("Fusing "):].split(" into ", 1)
                current.decisions.append(Decision("fused", _inst_name(producer_text), _inst_name(consumer_text),
                                                  reason))
            elif "created new fusion:" in msg or "fused into existing fusion" in msg:
                if current.decisions and current.decisions[-1].kind == "fused":
                    d = current.decisions[-1]
                    current.decisions[-1] = Decision(d.kind, d.producer, d.consumer, d.reason,
                                                     _inst_name(msg.split(":", 1)[-1]))
            elif msg.startswith("not fusing operand ") and " because " in msg:
                what, why = msg[len("not fusing operand "):].split(" because ", 1)
                current.decisions.append(Decision("not fused", _inst_name(what), consumer, why.strip()))
            elif msg.startswith("Operand (") and msg.endswith("is not fusible"):
                current.decisions.append(Decision("not fusible", _inst_name(msg), consumer, "operand is not fusible"))
        elif src == "cpu_instruction_fusion.cc":
            if msg.startswith("Fusing: ") or msg.startswith("Not fusing: "):
                reason = msg.split(": ", 1)[1].strip().rstrip(".")
    # A pass changed the module when the hash before the next pass of the same run differs.
    passes = [e for e in events if e.kind == "pass"]
    for a, b in zip(passes, passes[1:]):
        if a.hash and b.hash:
            a.changed = a.hash != b.hash
    return events


def read_priority_fusion_dump(text: str) -> list[Decision]:
    """Decisions of XLA:GPU's PriorityFusion from its ``FusionProcessDumpProto`` text: ``fusion { fusion_name
    producer_name consumer_names }`` steps and ``producer_ineligible { producer_name reason }`` steps."""
    out: list[Decision] = []
    for kind, body in re.findall(r"(fusion|producer_ineligible)\s*\{([^{}]*)\}", text):
        fields: dict[str, list[str]] = {}
        for k, v in re.findall(r'(\w+):\s*"((?:[^"\\]|\\.)*)"', body):
            fields.setdefault(k, []).append(v)
        producer = (fields.get("producer_name") or [""])[0]
        if kind == "fusion":
            out.append(Decision("fused", producer, ", ".join(fields.get("consumer_names", [])),
                                fusion=(fields.get("fusion_name") or [""])[0]))
        else:
            out.append(Decision("not fused", producer, reason=(fields.get("reason") or [""])[0]))
    return out


# ---------------------------------------------------------------------------------------------
# Frames from a dump directory.

def _pick_module(directory: Path) -> str:
    files = list_dump(directory)
    count = Counter(f.module for f in files if f.stage == "pass")
    if not count:
        raise LookupError(f"{directory} holds no per-pass dump (was --xla_dump_hlo_pass_re set?)")
    size = {f.module: f.path.stat().st_size for f in files if f.stage == "before_optimizations"}
    return max(count, key=lambda m: (count[m], size.get(m, 0)))


def frames_from_dump(directory: str | os.PathLike, log: str = "", module: str | None = None) -> Frames:
    """Frames of one module from an ``--xla_dump_to`` directory written with ``--xla_dump_hlo_pass_re=.*``.

    Args:
        directory: the dump directory.
        log: the compiling process's stderr with :data:`VMODULE` logging on ("" if none: then the frames have
            no folded passes and no decisions, except XLA:GPU's dump file).
        module: part of the module name to pick (default: the module with the most pass snapshots).

    Returns:
        :class:`Frames`: frame 0 is the module before optimization, then one frame per snapshot whose text
        (without metadata) differs from the previous frame, then the module after optimization if it differs.
    """
    directory = Path(directory)
    files = list_dump(directory)
    name = _pick_module(directory) if module is None else next(
        (f.module for f in files if f.stage == "pass" and module in f.module), None)
    if name is None:
        raise LookupError(f"no module matching {module!r} in {directory}")
    mine = [f for f in files if f.module == name]
    snaps = sorted((f for f in mine if f.stage == "pass"), key=lambda f: f.index)
    before = next((f for f in mine if f.stage == "before_optimizations"), None)
    after = next((f for f in mine if f.stage == "after_optimizations"), None)
    # The module name in the log is the one inside the dump (the file name adds the program id).
    header = (before or snaps[0]).path.read_text().split("\n", 1)[0]
    mod_name = header.split()[1].rstrip(",") if header.startswith("HloModule") else name
    events = read_log(log, mod_name) if log else []

    out = Frames(backend=after.path.name.split("_after_optimizations")[0].rsplit(".", 1)[-1] if after else "")
    out.passes_run = [PassRun(e.pipeline, e.name, e.changed) for e in events if e.kind == "pass"]
    pending: list[_Event] = []
    pos = 0

    def take(snap_pipeline: str, after_pass: str) -> list[_Event]:
        """The log events up to the one that wrote this snapshot (none if the log does not have it)."""
        nonlocal pos
        for j in range(pos, len(events)):
            e = events[j]
            # File names spell a pipeline's spaces as underscores.
            if (after_pass == "pipeline-start" and e.kind == "pipeline" and
                re.sub(r"[^\w.\-]", "_", e.name) == snap_pipeline) or \
                    (after_pass != "pipeline-start" and e.kind == "pass" and e.name == after_pass):
                got, pos = events[pos:j + 1], j + 1
                return got
        return []

    def add(pipeline: str, pass_name: str, text: str, ran: list[_Event]) -> None:
        prev = out[-1] if out else None
        runs = [PassRun(e.pipeline, e.name, e.changed) for e in ran if e.kind == "pass"]
        decisions = [d for e in ran for d in e.decisions]
        if prev is not None and normalized(prev.text) == normalized(text):
            pending.extend(ran)     # nothing changed: these passes fold into the next frame's list
            return
        runs = [PassRun(e.pipeline, e.name, e.changed) for e in pending if e.kind == "pass"] + runs
        decisions = [d for e in pending for d in e.decisions] + decisions
        pending.clear()
        module = parse(text)
        if runs and runs[-1].name == pass_name and runs[-1].pipeline:
            pipeline = runs[-1].pipeline        # the log spells the pipeline's name as XLA does (spaces kept)
        out.append(Frame(len(out), pipeline, pass_name, text, diff(prev.module if prev else None, module),
                         counters(module), runs, decisions))

    first = before or snaps[0]
    add("", "before optimizations", first.path.read_text(), [])
    for s in snaps:
        add(s.pipeline, s.after, s.path.read_text(), take(s.pipeline, s.after))
    if after is not None:
        add("", "after optimizations", after.path.read_text(), events[pos:])
        pos = len(events)
    out.trailing = [PassRun(e.pipeline, e.name, e.changed) for e in pending if e.kind == "pass"]
    if out:
        out[-1].decisions += [d for e in pending for d in e.decisions]
    sources = []
    if any(e.decisions for e in events):
        sources.append("XLA's log (instruction_fusion.cc)")
    gpu = [f for f in directory.glob("*priority_fusion_dump*") if name in f.name or mod_name in f.name]
    if gpu:
        decisions = [d for f in sorted(gpu) for d in read_priority_fusion_dump(f.read_text(errors="replace"))]
        target = next((f for f in out if f.pass_name == "priority-fusion"), None)
        if target is not None and decisions:
            target.decisions += decisions
            sources.append("XLA:GPU's priority_fusion_dump")
    out.decision_source = " and ".join(sources)
    return out


# ---------------------------------------------------------------------------------------------
# Compiling in a child process.

_CHILD = r'''
import json
import sys
import tensorflow as tf
loaded = tf.saved_model.load(sys.argv[1])
specs = [tf.TensorSpec(shape, dtype) for shape, dtype in json.loads(sys.argv[2])]
f = tf.function(lambda *a: loaded.f(*a), jit_compile=True)
f.experimental_get_compiler_ir(*specs)(stage="optimized_hlo")
print(tf.__version__)
'''


def _spec(arg: Any) -> Any:
    import tensorflow as tf

    if isinstance(arg, tf.TensorSpec):
        return arg
    if isinstance(arg, (tf.Tensor, tf.Variable)) or hasattr(arg, "shape") and hasattr(arg, "dtype"):
        return tf.TensorSpec(arg.shape, tf.as_dtype(arg.dtype))
    raise TypeError(f"passes() takes tensors or tf.TensorSpec as arguments, not {type(arg).__name__}; "
                    "close over other values in the function")


def passes(fn: Callable, *args: Any, timeout: float = 600, keep: str | os.PathLike | None = None,
           target: str | None = None) -> Frames:
    """Compile ``fn(*args)`` with XLA in a fresh process and return the module after every pass that changed it.

    Args:
        fn: a Python function or ``tf.function`` of tensors (it may read ``tf.Variable`` objects, a Keras model's
            weights for instance); it is compiled with ``jit_compile=True``.
        *args: tensors or ``tf.TensorSpec`` with full shapes (their shapes and dtypes are what is compiled).
        timeout: seconds the compiling process may take.
        keep: a directory to keep the dump in (XLA's files at its top, as :func:`xlalab.hlo.list_dump` reads
            them), with the saved function (``saved/``) and the log (``compile.log``); default: a temporary
            directory, removed.
        target: a GPU target of :mod:`xlalab.hlo.gpu_compile` (``"H100-SXM"``, ``"T4"``...): XLA:GPU compiles
            TensorFlow's HLO of the function for it, without a GPU (no autotuning), and the frames are its passes,
            with priority fusion's decisions. Default: this machine's XLA, through TensorFlow.

    Returns:
        :class:`Frames` (a list of :class:`Frame`): see :func:`frames_from_dump`. The last frame's module is the
        one ``experimental_get_compiler_ir(*args)(stage="optimized_hlo")`` returns, up to names and metadata.

    Raises:
        RuntimeError: the compiling process failed (its stderr's end is in the message).

    Example:
        >>> frames = passes(lambda x: tf.nn.relu(x * 2.0 + 1.0), tf.ones([4, 8]))
        >>> [(f.pass_name, f.counters["kernels"]) for f in frames]
    """
    specs = [_spec(a) for a in args]
    if target is not None:
        return _gpu_passes(fn, specs, target, timeout, keep)
    work = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="xlalab_passes_"))
    try:
        _save_for_child(fn, specs, work)
        return _compile_in_child(work, specs, keep, timeout)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def passes_side_by_side(*calls: tuple[Any, ...], timeout: float = 600) -> list[Frames]:
    """``[passes(fn, *args) for fn, *args in calls]``, with the compiling processes running side by side.

    Each function is saved here, one after the other; the fresh processes that compile them then run at the same
    time, up to one per core (nothing is timed: each only compiles and writes its dump). For two or more functions
    whose passes a page shows together, e.g. ``hlo.passes_side_by_side((chain, x), (centre_rows, a))``.
    """
    from xlalab.threads import side_by_side

    jobs: list[tuple[Path, list[Any]]] = []       # (work folder, argument specs) per call
    try:
        for fn, *args in calls:
            jobs.append((Path(tempfile.mkdtemp(prefix="xlalab_passes_")), [_spec(a) for a in args]))
            _save_for_child(fn, jobs[-1][1], jobs[-1][0])
        return side_by_side(lambda job: _compile_in_child(job[0], job[1], None, timeout), jobs)
    finally:
        for work, _ in jobs:
            shutil.rmtree(work, ignore_errors=True)


def _save_for_child(fn: Callable, specs: list[Any], work: Path) -> None:
    """Save ``fn`` on ``specs`` (with the variables it reads) as ``work/saved``, for :data:`_CHILD` to load."""
    import tensorflow as tf

    python_fn = getattr(fn, "python_function", fn)
    work.mkdir(parents=True, exist_ok=True)
    saved = tf.Module()
    saved.f = tf.function(python_fn, input_signature=specs)
    # Variables the function reads must be tracked to be saved with it.
    saved.variables_read = list(saved.f.get_concrete_function().variables)
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")        # "Assets written to ..." is not news
    try:
        tf.saved_model.save(saved, str(work / "saved"))
    finally:
        logger.setLevel(level)


def _compile_in_child(work: Path, specs: list[Any], keep: str | os.PathLike | None, timeout: float) -> Frames:
    """Compile ``work/saved`` in a fresh process with XLA dumping every pass and logging its decisions; the frames."""
    dump = _dump_folder(work, keep)
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_pass_re=.*".strip()
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    env["TF_CPP_VMODULE"] = VMODULE
    log_path = work / "compile.log"
    with open(log_path, "w") as log:
        done = subprocess.run([sys.executable, "-c", _CHILD, str(work / "saved"),
                               json.dumps([[s.shape.as_list(), s.dtype.name] for s in specs])], env=env,
                              stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout)
    log_text = log_path.read_text(errors="replace")
    if done.returncode != 0:
        raise RuntimeError(f"compiling in a child process failed ({done.returncode}):\n{log_text[-3000:]}")
    frames = frames_from_dump(dump, log_text)
    frames.tensorflow = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return frames


def _dump_folder(work: Path, keep: str | os.PathLike | None) -> Path:
    """The folder XLA dumps into (``work`` itself when the caller keeps it, else ``work/dump``), made, and cleared of
    an earlier run's snapshots, which would mix with this one's."""
    work.mkdir(parents=True, exist_ok=True)
    dump = work if keep is not None else work / "dump"
    for old in dump.glob("module_*"):
        if old.is_file():
            old.unlink()
    return dump


def _gpu_passes(fn: Callable, specs: list[Any], target: str, timeout: float,
                keep: str | os.PathLike | None) -> Frames:
    """:func:`passes` for a GPU target: TensorFlow's HLO here, XLA:GPU's passes in the deviceless compiler's process."""
    import tensorflow as tf

    from . import gpu_compile
    from .source import hlo_text

    gpu_compile.target(target)          # an unknown name fails before TensorFlow compiles anything
    hlo = hlo_text(fn, *specs, stage="hlo")
    work = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="xlalab_passes_"))
    try:
        dump = _dump_folder(work, keep)
        result, log = gpu_compile.compile_with_dump(hlo, target, dump, vmodule=VMODULE, timeout=timeout)
        (work / "compile.log").write_text(log)
        frames = frames_from_dump(dump, log)
        frames.backend, frames.tensorflow = "gpu", tf.__version__
        frames.target, frames.compiler, frames.autotuning = result.target, result.compiler, result.autotuning
        return frames
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
