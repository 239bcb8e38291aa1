"""Read what XLA made of a function: HLO text at each stage, a parser, a summary of fusions and kernels.

``hlo_text`` asks TensorFlow for the HLO of a ``tf.function`` (through ``experimental_get_compiler_ir``);
``parse`` turns HLO text into plain objects; ``summary`` counts what the entry computation launches and
the bytes each launch must read and write. ``dump_passes`` runs a script with ``XLA_FLAGS`` set so that
XLA writes a snapshot after every pass, and ``list_dump`` names them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

# ---------------------------------------------------------------------------------------------
# Getting HLO text from TensorFlow.

STAGES = ("hlo", "optimized_hlo", "optimized_hlo_dot", "stablehlo")
_STAGE_ALIASES = {"dot": "optimized_hlo_dot", "graph": "optimized_hlo_dot", "before": "hlo", "after": "optimized_hlo"}


def as_jit(fn: Callable) -> Any:
    """Return ``fn`` as a ``tf.function(jit_compile=True)``; a plain or non-jit function is wrapped."""
    import tensorflow as tf

    if getattr(fn, "_jit_compile", None) is True and hasattr(fn, "experimental_get_compiler_ir"):
        return fn
    python_fn = getattr(fn, "python_function", fn)
    return tf.function(python_fn, jit_compile=True)


def hlo_text(fn: Callable, *args: Any, stage: str = "optimized_hlo") -> str:
    """The HLO of ``fn(*args)`` as text, at ``stage``.

    Args:
        fn: a Python function or ``tf.function``; it is compiled with ``jit_compile=True``.
        *args: concrete tensors (XLA needs static shapes) or ``tf.TensorSpec`` with full shapes.
        stage: ``"hlo"`` (as lowered from the TensorFlow graph, before XLA's passes),
            ``"optimized_hlo"`` (after every pass: fusions, layouts, buffer-friendly copies),
            ``"optimized_hlo_dot"`` (alias ``"dot"``: the optimized graph in Graphviz dot), or ``"stablehlo"``.

    Example:
        >>> print(hlo_text(lambda x: tf.nn.relu(x) * 2.0, tf.ones([4]), stage="hlo"))
    """
    stage = _STAGE_ALIASES.get(stage, stage)
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}; expected one of {STAGES} or {tuple(_STAGE_ALIASES)}")
    return as_jit(fn).experimental_get_compiler_ir(*args)(stage=stage)


# ---------------------------------------------------------------------------------------------
# Shapes.

DTYPE_BYTES: dict[str, float] = {
    "pred": 1, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2,
    "s32": 4, "u32": 4, "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16,
    "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3b11fnuz": 1, "f8e4m3": 1, "f8e3m4": 1,
    "f8e8m0fnu": 1, "f4e2m1fn": 0.5, "token": 0, "opaque": 0,
}


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array (``dtype``, ``dims``, ``layout``) or a tuple of shapes (``tuple_shapes``)."""

    dtype: str = ""
    dims: tuple[int, ...] = ()
    layout: str = ""
    tuple_shapes: tuple["Shape", ...] | None = None

    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def elements(self) -> int:
        """Number of elements of an array shape (1 for a scalar); the sum over a tuple's leaves."""
        if self.is_tuple:
            return sum(s.elements for s in self.tuple_shapes or ())
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def bytes(self) -> int:
        """Bytes the value occupies (dense, no padding); a tuple's is the sum of its leaves."""
        if self.is_tuple:
            return sum(s.bytes for s in self.tuple_shapes or ())
        return int(self.elements * DTYPE_BYTES.get(self.dtype, 0))

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(map(str, self.tuple_shapes or ())) + ")"
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


def _match_brackets(text: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index just past the bracket that closes ``text[start]`` (quotes respected)."""
    depth = 0
    i = start
    in_str = False
    while i < len(text):
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced {open_ch}{close_ch} in: {text[start:start + 120]}")


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and quotes."""
    parts, depth, in_str, cur = [], 0, False, []
    i = 0
    while i < len(text):
        c = text[i]
        if in_str:
            cur.append(c)
            if c == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur.append(c)
        elif c in "([{":
            depth += 1
            cur.append(c)
        elif c in ")]}":
            depth -= 1
            cur.append(c)
        elif c == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


def read_shape(text: str, pos: int = 0) -> tuple[Shape, int]:
    """Read one shape starting at ``text[pos]``; return it and the index just past it."""
    while pos < len(text) and text[pos] == " ":
        pos += 1
    if text.startswith("(", pos):
        end = _match_brackets(text, pos, "(", ")")
        inner = text[pos + 1:end - 1]
        elems = tuple(read_shape(p)[0] for p in _split_top(inner)) if inner.strip() else ()
        return Shape(tuple_shapes=elems), end
    m = _ARRAY_SHAPE.match(text, pos)
    if not m:
        # token, opaque and other dimensionless types.
        m2 = re.compile(r"[a-z][a-z0-9]*").match(text, pos)
        if not m2:
            raise ValueError(f"no shape at: {text[pos:pos + 80]!r}")
        return Shape(dtype=m2.group(0)), m2.end()
    dims = tuple(int(d.replace("<=", "").strip()) if d.replace("<=", "").strip().isdigit() else -1
                 for d in m.group(2).split(",") if d.strip())
    end = m.end()
    layout = ""
    if text.startswith("{", end):
        lend = _match_brackets(text, end, "{", "}")
        layout = text[end + 1:lend - 1]
        end = lend
    return Shape(m.group(1), dims, layout), end


def parse_shape(text: str) -> Shape:
    """Parse a shape such as ``f32[4,16]{1,0}``, ``(f32[4]{0}, s32[])`` or ``pred[]``."""
    return read_shape(text.strip())[0]


# ---------------------------------------------------------------------------------------------
# Instructions, computations, modules.

@dataclass
class Instruction:
    """One HLO instruction.

    Attributes:
        name: its name without ``%``, e.g. ``"add.3"``.
        opcode: e.g. ``"add"``, ``"dot"``, ``"fusion"``, ``"custom-call"``.
        shape: its result shape (``shape.dtype``, ``shape.dims``; tuples in ``shape.tuple_shapes``).
        operands: names of the instructions it reads.
        attrs: the ``key=value`` attributes as raw strings.
        is_root: whether it is its computation's ``ROOT``.
        fusion_kind: ``"kLoop"``, ``"kInput"``, ``"kOutput"``, ``"kCustom"`` for a fusion, else ``None``.
        called: names of the computations it calls (fusion body, reducer, loop body and condition, branches).
        op_name: TensorFlow's op name from the metadata, e.g. ``"dense/MatMul"``.
        op_type: TensorFlow's op type from the metadata, e.g. ``"MatMul"``.
    """

    name: str
    opcode: str
    shape: Shape
    operands: list[str] = field(default_factory=list)
    attrs: dict[str, str] = field(default_factory=dict)
    is_root: bool = False
    fusion_kind: str | None = None
    called: list[str] = field(default_factory=list)
    op_name: str = ""
    op_type: str = ""

    @property
    def dtype(self) -> str:
        return self.shape.dtype


@dataclass
class Computation:
    """A named list of instructions; ``is_entry`` marks the one that runs first."""

    name: str
    instructions: list[Instruction] = field(default_factory=list)
    is_entry: bool = False

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    @property
    def root(self) -> Instruction | None:
        for inst in self.instructions:
            if inst.is_root:
                return inst
        return self.instructions[-1] if self.instructions else None


@dataclass
class Module:
    """A parsed HLO module: ``computations`` by name, ``entry`` the computation that runs first."""

    name: str
    computations: dict[str, Computation] = field(default_factory=dict)
    entry_name: str = ""

    @property
    def entry(self) -> Computation:
        return self.computations[self.entry_name]

    def instructions(self) -> Iterator[Instruction]:
        """Every instruction of every computation."""
        for comp in self.computations.values():
            yield from comp.instructions

    def find(self, name: str) -> Instruction:
        """The instruction called ``name`` (without ``%``)."""
        for inst in self.instructions():
            if inst.name == name:
                return inst
        raise KeyError(name)


_COMMENT = re.compile(r"/\*.*?\*/")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([^\s=(){}]+)\s*=\s*(.*)$")
_HEADER = re.compile(r"^\s*(ENTRY\s+)?%?([^\s(]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_HEADER_NOARGS = re.compile(r"^\s*(ENTRY\s+)?%?([^\s(]+)\s*\{\s*$")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-_]*)\(")
_CALL_ATTRS = ("calls", "to_apply", "body", "condition", "true_computation", "false_computation",
               "branch_computations", "called_computations", "scatter", "select", "comparator")
_NO_OPERANDS = {"parameter", "constant", "iota", "partition-id", "replica-id", "after-all", "rng-get-and-update-state"}


def _parse_instruction(line: str) -> Instruction:
    m = _INSTR.match(line)
    if not m:
        raise ValueError(f"not an HLO instruction: {line[:120]!r}")
    is_root, name, rest = bool(m.group(1)), m.group(2), m.group(3)
    shape, pos = read_shape(rest)
    om = _OPCODE.match(rest, pos)
    if not om:
        raise ValueError(f"no opcode in: {line[:160]!r}")
    opcode = om.group(1)
    open_at = om.end() - 1
    close_at = _match_brackets(rest, open_at, "(", ")")
    operand_text = rest[open_at + 1:close_at - 1]
    operands: list[str] = []
    if opcode not in _NO_OPERANDS:
        for part in _split_top(operand_text):
            token = part.split()[-1] if part.split() else ""
            if token:
                operands.append(token.lstrip("%"))
    attrs: dict[str, str] = {}
    for part in _split_top(rest[close_at:]):
        if "=" in part:
            key, value = part.split("=", 1)
            attrs[key.strip()] = value.strip()
    called: list[str] = []
    for key in _CALL_ATTRS:
        if key in attrs:
            called += [c.strip().lstrip("%") for c in attrs[key].strip("{}").split(",") if c.strip()]
    meta = attrs.get("metadata", "")
    op_name = re.search(r'op_name="((?:[^"\\]|\\.)*)"', meta)
    op_type = re.search(r'op_type="((?:[^"\\]|\\.)*)"', meta)
    return Instruction(name=name, opcode=opcode, shape=shape, operands=operands, attrs=attrs, is_root=is_root,
                       fusion_kind=attrs.get("kind") if opcode == "fusion" else None, called=called,
                       op_name=op_name.group(1) if op_name else "", op_type=op_type.group(1) if op_type else "")


def instruction_lines(text: str) -> int:
    """Count the instruction lines of HLO text (lines of the form ``[ROOT] name = shape opcode(...)``)."""
    return sum(1 for line in text.splitlines() if _INSTR.match(line) and not line.lstrip().startswith("HloModule"))


def parse(text: str) -> Module:
    """Parse HLO text (as printed by XLA, before or after optimization) into a :class:`Module`.

    Reads tuples, layouts, scalars, every dtype, nested fusions and while/conditional computations;
    names may carry ``%`` or not. An instruction continued over several lines is joined.

    Example:
        >>> m = parse(hlo_text(f, x))
        >>> [i.opcode for i in m.entry]
    """
    module = Module(name="")
    current: Computation | None = None
    pending: list[str] = []

    def flush() -> None:
        if pending and current is not None:
            current.instructions.append(_parse_instruction(" ".join(pending)))
        pending.clear()

    for raw in text.splitlines():
        line = _COMMENT.sub("", raw).rstrip()  # long tuples carry /*index=N*/ markers
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if stripped.startswith("HloModule"):
            module.name = stripped.split()[1].rstrip(",")
            continue
        if current is None:
            hm = _HEADER.match(line) or _HEADER_NOARGS.match(line)
            if hm:
                current = Computation(name=hm.group(2), is_entry=bool(hm.group(1)))
                continue
            continue
        if stripped == "}":
            flush()
            module.computations[current.name] = current
            if current.is_entry:
                module.entry_name = current.name
            current = None
            continue
        if _INSTR.match(line):
            flush()
            pending.append(stripped)
        elif pending:
            pending.append(stripped)  # continuation of a long instruction
        else:
            raise ValueError(f"unexpected line in computation {current.name}: {line[:120]!r}")
    if current is not None:
        raise ValueError(f"computation {current.name} is not closed")
    if not module.entry_name and module.computations:
        module.entry_name = list(module.computations)[-1]
    return module


# ---------------------------------------------------------------------------------------------
# Summary: fusions, kernels and bytes moved.

# Instructions that launch no work of their own: they name, group or reinterpret existing buffers.
FREE_OPCODES = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape",
                          "after-all", "add-dependency", "opt-barrier", "partition-id", "replica-id", "domain"})
CONTROL_FLOW = frozenset({"while", "conditional", "call", "async-start", "async-done"})


def _executed_computations(module: Module) -> list[Computation]:
    """The entry and the computations it runs through control flow (not fusion bodies or reducers)."""
    seen: list[str] = []
    stack = [module.entry_name]
    while stack:
        name = stack.pop()
        if name in seen or name not in module.computations:
            continue
        seen.append(name)
        for inst in module.computations[name]:
            if inst.opcode in CONTROL_FLOW:
                stack.extend(inst.called)
    return [module.computations[n] for n in seen]


def _fused_instructions(module: Module, inst: Instruction) -> Iterator[Instruction]:
    """The instructions inside a fusion, nested fusions expanded."""
    for cname in inst.called:
        for inner in module.computations.get(cname, Computation(cname)):
            if inner.opcode == "fusion":
                yield from _fused_instructions(module, inner)
            elif inner.opcode != "parameter":
                yield inner


def kernel_bytes(module: Module, comp: Computation, inst: Instruction) -> int:
    """Bytes one launch must move: each distinct operand read once plus the result written once."""
    shapes = {i.name: i.shape for i in comp}
    read = sum(shapes[o].bytes for o in dict.fromkeys(inst.operands) if o in shapes)
    return read + inst.shape.bytes


def summary(module_or_text: Module | str) -> dict[str, Any]:
    """Count what a module launches and what it moves.

    Returns a dict with:
        ``instructions``: instruction count over all computations;
        ``ops_by_opcode``: opcodes of the executed computations (entry and loop/branch bodies);
        ``fused_ops_by_opcode``: opcodes inside fusions (what was fused);
        ``fusions``: fusion instructions executed; ``fusions_by_kind``: by ``kLoop``/``kInput``/...;
        ``kernels``: launches (every executed instruction that is not free or control flow);
        ``kernel_list``: one ``{"name", "opcode", "kind", "bytes"}`` per launch;
        ``bytes_moved``: the sum of each launch's reads and writes, from shapes.
    On unoptimized HLO every op is its own launch, so ``bytes_moved`` is the traffic without fusion.
    """
    module = parse(module_or_text) if isinstance(module_or_text, str) else module_or_text
    ops: Counter[str] = Counter()
    fused: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    kernels: list[dict[str, Any]] = []
    for comp in _executed_computations(module):
        for inst in comp:
            ops[inst.opcode] += 1
            if inst.opcode == "fusion":
                kinds[inst.fusion_kind or "unknown"] += 1
                fused.update(i.opcode for i in _fused_instructions(module, inst))
            if inst.opcode in FREE_OPCODES or inst.opcode in CONTROL_FLOW:
                continue
            kernels.append({"name": inst.name, "opcode": inst.opcode, "kind": inst.fusion_kind,
                            "bytes": kernel_bytes(module, comp, inst)})
    return {
        "instructions": sum(len(c.instructions) for c in module.computations.values()),
        "ops_by_opcode": dict(ops),
        "fused_ops_by_opcode": dict(fused),
        "fusions": sum(kinds.values()),
        "fusions_by_kind": dict(kinds),
        "kernels": len(kernels),
        "kernel_list": kernels,
        "bytes_moved": sum(k["bytes"] for k in kernels),
    }


# ---------------------------------------------------------------------------------------------
# Dumps of every pass.

@dataclass(frozen=True)
class DumpFile:
    """One file of an ``--xla_dump_to`` directory.

    ``stage`` is ``"before_optimizations"``, ``"after_optimizations"``, ``"buffer-assignment"``,
    ``"pass"`` (a per-pass snapshot) or ``"other"``; a pass snapshot has ``index`` (its order),
    ``pipeline``, ``after`` (the pass that just ran) and ``before`` (the pass about to run).
    """

    path: Path
    module: str
    stage: str
    index: int = -1
    pipeline: str = ""
    after: str = ""
    before: str = ""


_PASS_FILE = re.compile(r"^module_\d+\.(?P<module>.+)\.(?P<index>\d{4})\.(?P<pipeline>[^.]+)\.after_(?P<after>.+?)"
                        r"(?:\.before_(?P<before>.+))?\.txt$")


def list_dump(directory: str | os.PathLike) -> list[DumpFile]:
    """List an XLA dump directory: module snapshots in pass order, then the other text files."""
    out: list[DumpFile] = []
    for p in sorted(Path(directory).glob("module_*.txt")):
        m = _PASS_FILE.match(p.name)
        if m:
            out.append(DumpFile(p, m["module"], "pass", int(m["index"]), m["pipeline"], m["after"], m["before"] or ""))
            continue
        name = p.name[len("module_0000."):-len(".txt")]
        for suffix, stage in ((".before_optimizations", "before_optimizations"),
                              ("-buffer-assignment", "buffer-assignment"),
                              ("-memory-usage-report", "memory-usage-report"),
                              ("_after_optimizations", "after_optimizations")):
            if suffix in name:
                module = re.sub(r"\.\w+_after_optimizations$", "", name.split(suffix)[0])
                if stage == "after_optimizations":
                    module = module.rsplit(".", 1)[0]
                out.append(DumpFile(p, module, stage))
                break
        else:
            out.append(DumpFile(p, name, "other"))
    out.sort(key=lambda f: (f.module, f.stage != "before_optimizations", f.stage != "pass", f.index))
    return out


def first_pass_creating(directory: str | os.PathLike, opcode: str = "fusion", module: str | None = None) -> DumpFile:
    """The first per-pass snapshot in which an instruction with ``opcode`` appears (``after`` names the pass)."""
    needle = re.compile(rf"=\s*\S.*?\s{re.escape(opcode)}\(")
    for f in list_dump(directory):
        if f.stage == "pass" and (module is None or module in f.module) and needle.search(f.path.read_text()):
            return f
    raise LookupError(f"no pass snapshot in {directory} contains a {opcode!r} instruction")


def dump_passes(source: str, directory: str | os.PathLike, pass_re: str = ".*", timeout: float = 300) -> list[DumpFile]:
    """Run Python ``source`` in a fresh process with XLA dumping every pass into ``directory``.

    XLA reads ``XLA_FLAGS`` once per process, so a dump needs a new process. ``source`` must build and
    call the jit-compiled function itself. Returns :func:`list_dump` of the directory.

    Example:
        >>> files = dump_passes("import tensorflow as tf\\n"
        ...                     "f = tf.function(lambda x: tf.nn.relu(x * 2 + 1), jit_compile=True)\\n"
        ...                     "f(tf.ones([8]))", "/tmp/xla_dump")
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={directory} --xla_dump_hlo_pass_re={pass_re}".strip()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    done = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"dump script failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return list_dump(directory)
