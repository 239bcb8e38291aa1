"""Read what XLA made of a function: HLO text at each stage, a parser, a summary of launches and bytes.

``hlo_text`` asks TensorFlow for the HLO of a ``tf.function`` (through ``experimental_get_compiler_ir``);
``parse`` turns HLO text from any backend (CPU, GPU dumps, TPU layouts) into plain objects; ``summary``
counts what a module launches and the bytes each launch must read and write; ``matrix_ops`` finds its
matrix products and convolutions whatever the backend made of them (a ``dot``, a cuBLAS call, a Triton
GEMM fusion, a cuDNN convolution). ``dump_passes`` runs a script with ``XLA_FLAGS`` set so that XLA writes
a snapshot after every pass, and ``list_dump`` names them.

What :func:`summary` counts:

* **A launch** is an instruction of the entry computation, or of a computation that a ``while``,
  ``conditional`` or ``call`` runs, that does work of its own: not ``parameter``, ``constant``,
  ``tuple``, ``get-tuple-element``, ``bitcast``, ``reshape``, ``after-all``, ``add-dependency``,
  ``opt-barrier``, ``domain``, ``partition-id``, ``replica-id``, and not the control flow instruction
  itself. A fusion is one launch (its body is what was fused); a library custom-call is one. An async
  pair or triple (``all-reduce-start``/``-done``, ``all-gather-*``, ``collective-permute-*``,
  ``copy-start``/``-done``, ``custom-call-start``/``-update``/``-done``, ``async-start``/``-update``/
  ``-done``, ``fusion-start``/``-done``, ``send``/``recv`` and their dones) is one launch, counted at its
  start under the opcode of what it wraps; the called computation of a ``fusion-start`` (or of an
  ``async-start`` wrapping a fusion) is read as a fusion.
* **Bytes** of a launch are each distinct operand read once plus the result written once, from the
  shapes (dense; tiling padding ignored; a sub-byte type takes a whole byte unless its layout packs it
  with ``E(bits)``, as XLA stores it). Not counted: the trailing ``s8``/``u8`` workspace element of a
  cuBLAS/cuDNN custom-call's result. A ``slice``, ``dynamic-slice`` or ``gather`` is charged what it
  reads (its output and its indices), not its whole operand, and so is a fusion parameter that is read
  only through them (a ``dynamic-update-slice`` is still charged its whole operand and result, which an
  in-place update does not move). An async operation's data is counted once. An unbounded dynamic
  dimension makes a launch's bytes unknown (``None``, counted in ``bytes_unknown``); a bounded one
  (``<=8``) counts its bound.
* **Per step**: ``kernels``, ``kernel_list`` and ``bytes_moved`` count each launch site once (a loop
  body once, every branch of a conditional once). ``per_step`` is one run of the entry: a ``while``
  body (and condition) multiplied by the loop's ``known_trip_count``, and for a ``conditional`` its
  costliest branch (``per_step["exact"]`` is False when a loop has no known trip count, when branches
  differ, or when some bytes are unknown); ``loops`` and ``conditionals`` give the per-iteration and
  per-branch figures.

Without a GPU, set ``XLALAB_FAKE_GPU`` to a device name (``"NVIDIA A100-SXM4-40GB"``): ``hlo_text(...,
stage="optimized_hlo")`` then compiles the program on the CPU (so errors still surface) and returns a
real XLA:GPU module recorded in ``tests/data/hlo/`` in its place (see :func:`fake_gpu_module`).
"""

from __future__ import annotations

import json
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
FAKE_GPU_ENV = "XLALAB_FAKE_GPU"
CORPUS_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "hlo"
# Recorded XLA:GPU modules (files of CORPUS_DIR, sources in its README) standing in for a GPU compile.
FAKE_GPU_MODULES = {
    "conv": "gpu_cudnn_conv_custom_call.txt",
    "gemm": "gpu_cublas_gemm.txt",
    "elementwise": "gpu_loop_fusion.txt",
}


def as_jit(fn: Callable) -> Any:
    """Return ``fn`` as a ``tf.function(jit_compile=True)``; a plain or non-jit function is wrapped."""
    import tensorflow as tf

    if getattr(fn, "_jit_compile", None) is True and hasattr(fn, "experimental_get_compiler_ir"):
        return fn
    python_fn = getattr(fn, "python_function", fn)
    return tf.function(python_fn, jit_compile=True)


def fake_gpu_module(category: str) -> str:
    """A real XLA:GPU module text from the recorded corpus for a program of ``category``.

    ``"conv"``: a module with a cuDNN convolution custom-call; ``"gemm"``: one with a cuBLAS GEMM
    custom-call; ``"elementwise"``: one made of a loop fusion. The texts come from XLA's own GPU tests
    (sources in ``tests/data/hlo/README.md``); their shapes are not the program's.
    """
    if category not in FAKE_GPU_MODULES:
        raise ValueError(f"category={category!r}; expected one of {tuple(FAKE_GPU_MODULES)}")
    # The corpus lives in the repository, next to the package (an installed copy looks in the working
    # directory and its parents, or in $XLALAB_HLO_CORPUS).
    places = [Path(os.environ["XLALAB_HLO_CORPUS"])] if os.environ.get("XLALAB_HLO_CORPUS") else []
    places += [CORPUS_DIR] + [d / "tests" / "data" / "hlo" for d in (Path.cwd(), *Path.cwd().parents)]
    for directory in places:
        path = directory / FAKE_GPU_MODULES[category]
        if path.exists():
            return path.read_text()
    raise FileNotFoundError(f"{FAKE_GPU_MODULES[category]} not found in {CORPUS_DIR}: the fake-GPU hook needs "
                            "the repository's tests/data/hlo (or XLALAB_HLO_CORPUS pointing at a copy)")


def program_category(module_or_text: "Module | str") -> str:
    """``"conv"`` if a module runs a convolution, else ``"gemm"`` if it runs a matrix product, else
    ``"elementwise"`` (the categories of :func:`fake_gpu_module`)."""
    kinds = {op.kind for op in matrix_ops(module_or_text)}
    return "conv" if "convolution" in kinds else "gemm" if "dot" in kinds else "elementwise"


def hlo_text(fn: Callable, *args: Any, stage: str = "optimized_hlo") -> str:
    """The HLO of ``fn(*args)`` as text, at ``stage``.

    Args:
        fn: a Python function or ``tf.function``; it is compiled with ``jit_compile=True``.
        *args: concrete tensors (XLA needs static shapes) or ``tf.TensorSpec`` with full shapes.
        stage: ``"hlo"`` (as lowered from the TensorFlow graph, before XLA's passes),
            ``"optimized_hlo"`` (after every pass: fusions, layouts, buffer-friendly copies),
            ``"optimized_hlo_dot"`` (alias ``"dot"``: the optimized graph in Graphviz dot), or ``"stablehlo"``.

    When the environment variable ``XLALAB_FAKE_GPU`` names a GPU, ``"optimized_hlo"`` compiles for real
    on the CPU and then returns :func:`fake_gpu_module` of the program's :func:`program_category`.

    Example:
        >>> print(hlo_text(lambda x: tf.nn.relu(x) * 2.0, tf.ones([4]), stage="hlo"))
    """
    stage = _STAGE_ALIASES.get(stage, stage)
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}; expected one of {STAGES} or {tuple(_STAGE_ALIASES)}")
    text = as_jit(fn).experimental_get_compiler_ir(*args)(stage=stage)
    if stage == "optimized_hlo" and os.environ.get(FAKE_GPU_ENV):
        return fake_gpu_module(program_category(text))
    return text


# ---------------------------------------------------------------------------------------------
# Shapes.

# Bits per element of every PrimitiveType XLA prints (xla/xla_data.proto). In memory an element takes
# whole bytes (XLA's ByteWidth: 1 for the sub-byte types) unless the layout packs it with ``E(bits)``.
DTYPE_BITS: dict[str, int] = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
    "s32": 32, "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f8e3m4": 8,
    "f8e8m0fnu": 8, "f4e2m1fn": 4, "f6e2m3fn": 6, "f6e3m2fn": 6, "token": 0, "opaque": 0,
}
# Bytes one element occupies in memory when the layout does not pack it (kept for callers of the old table).
DTYPE_BYTES: dict[str, int] = {k: (0 if v == 0 else max(1, v // 8)) for k, v in DTYPE_BITS.items()}


def _bits_of(dtype: str) -> int:
    try:
        return DTYPE_BITS[dtype]
    except KeyError:
        raise ValueError(f"unknown HLO element type {dtype!r} (known: {', '.join(sorted(DTYPE_BITS))})") from None


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array (``dtype``, ``dims``, ``layout``) or a tuple of shapes (``tuple_shapes``).

    A dynamic dimension keeps its bound in ``dims`` (``f32[<=8,784]`` has ``dims == (8, 784)``) and is
    marked in ``dynamic``; an unbounded one (``?``) is ``-1`` in ``dims``, and then ``elements`` and
    ``bytes`` are ``None`` (unknown).
    """

    dtype: str = ""
    dims: tuple[int, ...] = ()
    layout: str = ""
    tuple_shapes: tuple["Shape", ...] | None = None
    dynamic: tuple[bool, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def is_dynamic(self) -> bool:
        return any(self.dynamic) or (self.is_tuple and any(s.is_dynamic for s in self.tuple_shapes or ()))

    @property
    def elements(self) -> int | None:
        """Number of elements of an array shape (1 for a scalar); the sum over a tuple's leaves.

        A bounded dynamic dimension counts its bound; an unbounded one makes the count ``None``.
        """
        if self.is_tuple:
            parts = [s.elements for s in self.tuple_shapes or ()]
            return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]
        n = 1
        for d in self.dims:
            if d < 0:
                return None
            n *= d
        return n

    @property
    def element_bits(self) -> int:
        """Bits one element occupies in memory: ``E(n)`` of a packed layout, else whole bytes."""
        bits = _bits_of(self.dtype)
        m = re.search(r"E\((\d+)\)", self.layout)
        if m:
            return int(m.group(1))
        return 0 if bits == 0 else 8 * max(1, (bits + 7) // 8)

    @property
    def memory_space(self) -> int:
        """The layout's memory space ``S(n)`` (0, the default device memory, when there is none)."""
        m = re.search(r"S\((\d+)\)", self.layout)
        return int(m.group(1)) if m else 0

    @property
    def bytes(self) -> int | None:
        """Bytes the value occupies (no tiling padding); a tuple's is the sum of its leaves; ``None`` if unknown."""
        if self.is_tuple:
            parts = [s.bytes for s in self.tuple_shapes or ()]
            return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]
        n = self.elements
        if n is None:
            return None
        return (n * self.element_bits + 7) // 8

    def leaves(self) -> list["Shape"]:
        """The array shapes of a (nested) tuple, in order; ``[self]`` for an array."""
        if not self.is_tuple:
            return [self]
        return [leaf for s in self.tuple_shapes or () for leaf in s.leaves()]

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(map(str, self.tuple_shapes or ())) + ")"
        dims = []
        for d, dyn in zip(self.dims, self.dynamic or (False,) * len(self.dims)):
            dims.append("?" if d < 0 else (f"<={d}" if dyn else str(d)))
        return f"{self.dtype}[{','.join(dims)}]"


_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_DTYPE_WORD = re.compile(r"[a-z][a-z0-9]*")


# A double-quoted string (backslash escapes inside), or an unclosed one running to the end of the text.
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*(?:"|$)', re.S)


def _mask_quotes(text: str) -> str:
    """``text`` with every quoted string blanked to spaces of the same length (indices stay valid)."""
    return _QUOTED.sub(lambda m: " " * len(m.group()), text) if '"' in text else text


def _match_brackets(text: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index just past the bracket that closes ``text[start]`` (quotes respected)."""
    depth = 0
    for m in re.finditer(re.escape(open_ch) + "|" + re.escape(close_ch), _mask_quotes(text[start:])):
        depth += 1 if m.group() == open_ch else -1
        if depth == 0:
            return start + m.end()
    raise ValueError(f"unbalanced {open_ch}{close_ch} in: {text[start:start + 120]}")


def _depth_change(text: str) -> int:
    """Net bracket depth of ``text`` (all of ``([{`` count), brackets inside quotes ignored."""
    masked = _mask_quotes(text)
    return sum(masked.count(c) for c in "([{") - sum(masked.count(c) for c in ")]}")


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and quotes."""
    parts, depth, last = [], 0, 0
    for m in re.finditer(r"[()\[\]{}" + re.escape(sep) + "]", _mask_quotes(text)):
        c = m.group()
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            parts.append(text[last:m.start()].strip())
            last = m.end()
    tail = text[last:].strip()
    if tail:
        parts.append(tail)
    return parts


def _read_dim(d: str) -> tuple[int, bool]:
    d = d.strip()
    if d == "?":
        return -1, True
    if d.startswith("<="):
        return int(d[2:].strip()), True
    return int(d), False


def read_shape(text: str, pos: int = 0) -> tuple[Shape, int]:
    """Read one shape starting at ``text[pos]``; return it and the index just past it.

    Raises ``ValueError`` naming the element type when it is not one of XLA's types.
    """
    while pos < len(text) and text[pos] == " ":
        pos += 1
    if text.startswith("(", pos):
        end = _match_brackets(text, pos, "(", ")")
        inner = text[pos + 1:end - 1]
        elems = tuple(read_shape(p)[0] for p in _split_top(inner)) if inner.strip() else ()
        return Shape(tuple_shapes=elems), end
    m = _ARRAY_SHAPE.match(text, pos)
    if not m:
        m2 = _DTYPE_WORD.match(text, pos)  # token, opaque (older printers wrote them without brackets)
        if not m2:
            raise ValueError(f"no shape at: {text[pos:pos + 80]!r}")
        _bits_of(m2.group(0))
        return Shape(dtype=m2.group(0)), m2.end()
    dtype = m.group(1)
    _bits_of(dtype)
    read = [_read_dim(d) for d in m.group(2).split(",") if d.strip()]
    dims = tuple(d for d, _ in read)
    dynamic = tuple(dyn for _, dyn in read) if any(dyn for _, dyn in read) else ()
    end = m.end()
    layout = ""
    if text.startswith("{", end):
        lend = _match_brackets(text, end, "{", "}")
        layout = text[end + 1:lend - 1]
        end = lend
    return Shape(dtype, dims, layout, dynamic=dynamic), end


def parse_shape(text: str) -> Shape:
    """Parse a shape such as ``f32[4,16]{1,0}``, ``(f32[4]{0}, s32[])``, ``pred[]`` or ``f32[<=8,?]``."""
    return read_shape(text.strip())[0]


# ---------------------------------------------------------------------------------------------
# Instructions, computations, modules.

@dataclass
class Instruction:
    """One HLO instruction.

    Attributes:
        name: its name without ``%``, e.g. ``"add.3"``.
        opcode: e.g. ``"add"``, ``"dot"``, ``"fusion"``, ``"custom-call"``.
        shape: its result shape (``shape.dtype``, ``shape.dims``; tuples in ``shape.tuple_shapes``). An
            instruction printed without a shape (XLA's parser accepts some in tests) gets its first
            operand's shape for an elementwise opcode, else an empty ``Shape()``; ``has_shape`` is then False.
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
    has_shape: bool = True
    parameter_number: int = -1

    @property
    def dtype(self) -> str:
        return self.shape.dtype

    @property
    def custom_call_target(self) -> str:
        """The ``custom_call_target`` of a custom-call (without quotes), else ``""``."""
        return self.attrs.get("custom_call_target", "").strip('"')

    @property
    def backend_config(self) -> dict[str, Any]:
        """``backend_config`` as a dict when it is JSON (GPU), else ``{}``."""
        raw = self.attrs.get("backend_config", "")
        if raw.startswith('"'):
            try:
                raw = json.loads(raw)
            except ValueError:
                return {}
        if not raw.startswith("{"):
            return {}
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def backend_kind(self) -> str:
        """The GPU backend's fusion kind from ``backend_config`` (``"__triton_gemm"``, ``"__triton"``,
        ``"__cudnn$fusion"``, ...), or ``""``."""
        raw = self.attrs.get("backend_config", "")
        if "fusion_backend_config" not in raw:
            return ""
        kind = self.backend_config.get("fusion_backend_config", {}).get("kind")
        if kind:
            return str(kind)
        # XLA's parser also accepts unquoted keys and trailing commas, which JSON does not.
        m = re.search(r'fusion_backend_config"?\s*:\s*\{[^{}]*?"?kind"?\s*:\s*"([^"]+)"', raw)
        return m.group(1) if m else ""

    @property
    def known_trip_count(self) -> int | None:
        """A ``while``'s ``known_trip_count`` from its ``backend_config``, else ``None``."""
        raw = self.attrs.get("backend_config", "")
        if "known_trip_count" not in raw:
            return None
        m = re.search(r'known_trip_count"?\s*:\s*\{\s*"?n"?\s*:\s*"?(\d+)', raw)
        return int(m.group(1)) if m else None


@dataclass
class Computation:
    """A named list of instructions; ``is_entry`` marks the one that runs first."""

    name: str
    instructions: list[Instruction] = field(default_factory=list)
    is_entry: bool = False
    execution_thread: str = ""

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
# An instruction: [ROOT] name = (shape opcode( | opcode( ). A continuation line that starts with an
# attribute (``kind=kLoop, calls=f``) has no shape or opcode after its ``=``.
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([A-Za-z0-9_.\-$]+)\s*=\s*(.*)$")
_RHS_START = re.compile(r"(\(|[a-z][a-z0-9]*\[|(?:token|opaque)\s+[a-z]|[a-z][a-z0-9\-_]*\()")
_HEADER = re.compile(r"^\s*(ENTRY\s+)?%?([^\s(={}]+)\s*(\(.*\)\s*->\s*.*?)?\s*"
                     r"(,\s*execution_thread=\"([^\"]*)\"\s*)?\{\s*$")
_CLOSER = re.compile(r"^\}\s*(,\s*execution_thread=\"(?P<thread>[^\"]*)\"\s*)?(//.*)?$")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-_]*)\(")
_CALL_ATTRS = ("calls", "to_apply", "body", "condition", "true_computation", "false_computation",
               "branch_computations", "called_computations", "scatter", "select", "comparator")
_NO_OPERANDS = {"parameter", "constant", "iota", "partition-id", "replica-id", "rng-get-and-update-state"}
ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "copy", "cosine", "divide", "erf", "exponential",
    "exponential-minus-one", "floor", "imag", "is-finite", "log", "log-plus-one", "logistic", "maximum",
    "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "real", "remainder", "round-nearest-afz",
    "round-nearest-even", "rsqrt", "select", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "sign", "sine", "sqrt", "subtract", "tan", "tanh", "xor", "reduce-precision"})


def _is_instruction_line(line: str) -> bool:
    m = _INSTR.match(line)
    return bool(m) and bool(_RHS_START.match(m.group(3)))


def _parse_instruction(line: str, shapes: dict[str, Shape] | None = None) -> Instruction:
    m = _INSTR.match(line)
    if not m:
        raise ValueError(f"not an HLO instruction: {line[:120]!r}")
    is_root, name, rest = bool(m.group(1)), m.group(2), m.group(3)
    has_shape = not _OPCODE.match(rest) or _ARRAY_SHAPE.match(rest.lstrip()) is not None
    if has_shape:
        shape, pos = read_shape(rest)
    else:
        shape, pos = Shape(), 0
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
    if not has_shape and shapes is not None and opcode in ELEMENTWISE and operands and operands[0] in shapes:
        shape = shapes[operands[0]]
        if opcode == "compare":
            shape = Shape("pred", shape.dims, shape.layout, dynamic=shape.dynamic)
    meta = attrs.get("metadata", "")
    op_name = re.search(r'op_name="((?:[^"\\]|\\.)*)"', meta)
    op_type = re.search(r'op_type="((?:[^"\\]|\\.)*)"', meta)
    return Instruction(name=name, opcode=opcode, shape=shape, operands=operands, attrs=attrs, is_root=is_root,
                       fusion_kind=attrs.get("kind") if opcode in ("fusion", "fusion-start") else None,
                       called=called, op_name=op_name.group(1) if op_name else "",
                       op_type=op_type.group(1) if op_type else "", has_shape=has_shape,
                       parameter_number=int(operand_text) if opcode == "parameter" and operand_text.strip().isdigit()
                       else -1)


def _clean_lines(text: str) -> Iterator[str]:
    """Lines of HLO text with ``/*...*/`` markers (``/*index=5*/``) removed, blank and ``//`` lines dropped."""
    for raw in text.splitlines():
        line = _COMMENT.sub("", raw).rstrip() if "/*" in raw else raw.rstrip()
        stripped = line.strip()
        if stripped and not stripped.startswith("//"):
            yield line


def instruction_lines(text: str) -> int:
    """Count the instructions of HLO text independently of :func:`parse`: lines that start an instruction
    (``[ROOT] name = shape opcode(...)``), not counting lines that continue one."""
    n, depth = 0, 0
    for line in _clean_lines(text):
        if depth == 0 and _is_instruction_line(line) and not line.lstrip().startswith("HloModule"):
            n += 1
        if depth > 0 or _is_instruction_line(line):
            depth += _depth_change(line)
    return n


def parse(text: str) -> Module:
    """Parse HLO text (as printed by XLA, before or after optimization, any backend) into a :class:`Module`.

    Reads tuples, layouts (tiled, with memory spaces), scalars, dynamic dimensions, every element type of
    XLA's ``PrimitiveType`` (an unknown type raises ``ValueError`` naming it), nested fusions,
    while/conditional/async computations, ``/*index=N*/`` markers, ``metadata``, ``frontend_attributes``
    and JSON ``backend_config``. A computation may be closed by ``}``, ``} // name`` or
    ``}, execution_thread="..."``. An instruction continued over several lines is joined: a line
    continues the previous instruction when that one's brackets are still open or when it does not
    start with ``name = shape opcode(`` (``    kind=kLoop, calls=f``). Names may carry ``%`` or not.

    Example:
        >>> m = parse(hlo_text(f, x))
        >>> [i.opcode for i in m.entry]
    """
    module = Module(name="")
    current: Computation | None = None
    pending: list[str] = []
    depth = 0
    shapes: dict[str, Shape] = {}

    def flush() -> None:
        if pending and current is not None:
            inst = _parse_instruction(" ".join(pending), shapes)
            shapes[inst.name] = inst.shape
            current.instructions.append(inst)
        pending.clear()

    for line in _clean_lines(text):
        stripped = line.strip()
        if pending and depth > 0:
            pending.append(stripped)
            depth += _depth_change(stripped)
            continue
        if current is None:
            if stripped.startswith("HloModule"):
                module.name = stripped.split()[1].rstrip(",") if len(stripped.split()) > 1 else ""
                continue
            hm = _HEADER.match(line)
            if hm:
                current = Computation(name=hm.group(2), is_entry=bool(hm.group(1)),
                                      execution_thread=hm.group(5) or "")
                shapes = {}
            continue  # module attributes continued over lines, stray text between computations
        closer = _CLOSER.match(stripped)
        if closer:
            flush()
            current.execution_thread = closer.group("thread") or current.execution_thread
            if current.name in module.computations:
                raise ValueError(f"computation {current.name} defined twice")
            module.computations[current.name] = current
            if current.is_entry:
                module.entry_name = current.name
            current = None
            continue
        if _is_instruction_line(stripped):
            flush()
            pending.append(stripped)
            depth = _depth_change(stripped)
        elif pending:
            pending.append(stripped)  # continuation that starts with an attribute
            depth += _depth_change(stripped)
        elif _HEADER.match(line):
            raise ValueError(f"computation {current.name} is not closed before {stripped[:80]!r}")
        else:
            raise ValueError(f"unexpected line in computation {current.name}: {line[:120]!r}")
    if current is not None:
        raise ValueError(f"computation {current.name} is not closed")
    if not module.entry_name and module.computations:
        module.entry_name = list(module.computations)[-1]
    return module


def _as_module(module_or_text: "Module | str") -> Module:
    return parse(module_or_text) if isinstance(module_or_text, str) else module_or_text


# ---------------------------------------------------------------------------------------------
# Summary: launches, fusions and bytes moved.

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


def _is_async_start(inst: Instruction) -> bool:
    return bool(_ASYNC_START.match(inst.opcode)) or inst.opcode in ("send", "recv")


def _is_async_continuation(inst: Instruction) -> bool:
    return inst.opcode.endswith(ASYNC_DONE_SUFFIXES)


def _wrapped(module: Module, inst: Instruction) -> Instruction | None:
    """What an async ``*-start`` runs: the root of its wrapped computation (``async-start``), else itself."""
    if inst.opcode in ("async-start",) and inst.called:
        comp = module.computations.get(inst.called[0])
        return comp.root if comp is not None else None
    return None


def launch_opcode(module: Module, inst: Instruction) -> str:
    """The opcode a launch is counted under: an async start counts as what it wraps
    (``all-reduce-start`` -> ``all-reduce``, ``async-start`` of a fusion -> ``fusion``)."""
    wrapped = _wrapped(module, inst)
    if wrapped is not None:
        return wrapped.opcode
    m = _ASYNC_START.match(inst.opcode)
    if m and m.group("base") != "async":
        return m.group("base")
    return inst.opcode


def _fusion_of(module: Module, inst: Instruction) -> Instruction | None:
    """The fusion instruction a launch runs (itself, a ``fusion-start``, or the fusion an ``async-start`` wraps)."""
    if inst.opcode in ("fusion", "fusion-start"):
        return inst
    wrapped = _wrapped(module, inst)
    if wrapped is not None and wrapped.opcode == "fusion":
        return wrapped
    return None


def _executed_computations(module: Module) -> list[Computation]:
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


def _fused_instructions(module: Module, inst: Instruction, _seen: set[str] | None = None) -> Iterator[Instruction]:
    """The instructions inside a fusion, nested fusions expanded (each computation at most once: a cycle guard)."""
    seen = set() if _seen is None else _seen
    for cname in inst.called:
        if cname in seen:
            continue
        seen.add(cname)
        for inner in module.computations.get(cname, Computation(cname)):
            if inner.opcode in ("fusion", "fusion-start"):
                yield from _fused_instructions(module, inner, seen)
            elif inner.opcode != "parameter":
                yield inner


def _workspace_free(inst: Instruction, shape: Shape) -> Shape:
    """A library custom-call's result without its trailing ``s8``/``u8`` scratch element."""
    if inst.opcode in ("custom-call", "custom-call-start") and shape.is_tuple and shape.tuple_shapes and \
            _WORKSPACE_TARGETS.match(inst.custom_call_target) and shape.tuple_shapes[-1].dtype in ("s8", "u8") \
            and not shape.tuple_shapes[-1].is_tuple:
        return Shape(tuple_shapes=shape.tuple_shapes[:-1])
    return shape


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


def kernel_traffic(module: Module, comp: Computation, inst: Instruction) -> tuple[list[tuple[str, int | None]], int | None]:
    """What one launch reads and writes: ``([(operand name, bytes read), ...], bytes written)``.

    Each distinct operand appears once, in operand order; the rules are those of :func:`kernel_bytes`
    (which sums them). ``None`` for bytes a shape with an unbounded dynamic dimension makes unknown.
    """
    shapes = {i.name: i.shape for i in comp}
    operands = list(dict.fromkeys(inst.operands))
    opcode = launch_opcode(module, inst)
    # What the launch writes.
    if _is_async_start(inst):
        out_shape = _async_result(comp, inst)
    else:
        out_shape = inst.shape
    wrapped = _wrapped(module, inst)
    target = wrapped if wrapped is not None else inst
    out_shape = _workspace_free(target, out_shape)
    written = out_shape.bytes
    if inst.opcode == "send":
        written = 0
    # What it reads.
    reads: list[tuple[str, int | None]] = []
    if inst.opcode == "recv":
        return reads, written
    if opcode in PARTIAL_READ:
        reads.append((operands[0] if operands else "", out_shape.bytes))
        reads += [(o, shapes[o].bytes) for o in operands[1:] if o in shapes]
    else:
        fusion = _fusion_of(module, inst)
        partial = _partial_reads(module, fusion) if fusion is not None else {}
        for k, o in enumerate(inst.operands):
            if o not in shapes or o in inst.operands[:k]:
                continue
            reads.append((o, partial[k] if k in partial else shapes[o].bytes))
    return reads, written


def kernel_bytes(module: Module, comp: Computation, inst: Instruction) -> int | None:
    """Bytes one launch must move: each distinct operand read once plus the result written once.

    A library call's scratch workspace is not counted; a ``slice``, ``dynamic-slice`` or ``gather`` (and
    a fusion's parameter read only through them) is charged the bytes it reads, not its whole operand;
    an async start is charged its operands and the result its ``*-done`` returns. ``None`` when a shape
    has an unbounded dynamic dimension.
    """
    reads, written = kernel_traffic(module, comp, inst)
    return _sum_bytes([b for _, b in reads] + [written])


def _async_result(comp: Computation, start: Instruction) -> Shape:
    """The shape an async operation finally returns: that of its ``*-done`` (following ``*-update``s)."""
    chain = {start.name}
    for inst in comp:
        if inst.operands and inst.operands[0] in chain and _is_async_continuation(inst):
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
    for inst in comp:
        if inst.opcode in FREE_OPCODES or inst.opcode in CONTROL_FLOW or _is_async_continuation(inst):
            continue
        fusion = _fusion_of(module, inst)
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
            branches = []
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
    ``get-tuple-element``, ``bitcast``, ``reshape``, ``after-all``, ...) and not control flow itself. A
    fusion is one launch; a library ``custom-call`` (cuBLAS, cuDNN) is one. An async pair or triple
    (``all-reduce-start``/``-done``, ``copy-start``/``-done``, ``async-start``/``-update``/``-done``,
    ``send``/``send-done`` ...) is one launch, counted under the opcode of what it wraps; a wrapped
    fusion counts as a fusion. On unoptimized HLO every op is its own launch.

    **Bytes** of a launch: each distinct operand read once plus the result written once, from shapes.
    Not counted: the trailing ``s8``/``u8`` scratch workspace of a cuBLAS/cuDNN custom-call. A ``slice``,
    ``dynamic-slice`` or ``gather`` reads what it outputs (plus its indices), not its whole operand, and a
    fusion parameter read only through them is charged what they read. An async operation's data is
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
    module = _as_module(module_or_text)
    ops: Counter[str] = Counter()
    fused: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    backend_kinds: Counter[str] = Counter()
    kernels: list[dict[str, Any]] = []
    for comp in _executed_computations(module):
        for inst in comp:
            if _is_async_continuation(inst):
                continue
            ops[launch_opcode(module, inst)] += 1
            fusion = _fusion_of(module, inst)
            if fusion is not None:
                kinds[fusion.fusion_kind or "unknown"] += 1
                if fusion.backend_kind:
                    backend_kinds[fusion.backend_kind] += 1
                fused.update(i.opcode for i in _fused_instructions(module, fusion))
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


# ---------------------------------------------------------------------------------------------
# Pictures (the code is in xlalab.hlo_draw, which imports this module).

class GraphvizMissing(RuntimeError):
    """Graphviz (the ``dot`` program or the ``graphviz`` Python package) is not installed."""


def draw(module_or_text: "Module | str", **kwargs: Any) -> Any:
    """Draw a module as a graph of its kernels and the bytes between them: see :func:`xlalab.hlo_draw.draw`
    (``before=`` the unoptimized module for a before/after picture; SVG by default, ``format="png"``).

    Raises :class:`GraphvizMissing` (a ``RuntimeError``) naming the install command where Graphviz is absent.
    """
    from xlalab import hlo_draw

    return hlo_draw.draw(module_or_text, **kwargs)


# ---------------------------------------------------------------------------------------------
# Matrix products and convolutions, whatever the backend.

@dataclass(frozen=True)
class MatrixOp:
    """One matrix product or convolution that a module runs.

    Attributes:
        name: the launching instruction (the ``dot``, the fusion, the custom-call).
        kind: ``"dot"`` or ``"convolution"``.
        impl: ``"xla"`` (a bare ``dot``/``convolution`` that XLA emits itself), ``"fusion"`` (inside an XLA
            fusion), ``"triton"`` (a Triton GEMM fusion), ``"cublas"`` (``__cublas$gemm``), ``"cublaslt"``
            (``__cublas$lt$matmul*``), ``"cudnn"`` (a cuDNN convolution custom-call or ``__cudnn$fusion``),
            ``"onednn"`` (a oneDNN custom-call on a CPU), ``"library"`` (another library fusion).
        lhs, rhs, out: operand and result shapes (a library call's result without its workspace).
        flops: ``2*M*N*K`` for a product (batch dimensions included, through the result's elements);
            ``2 * output elements * kernel spatial size * input features per group`` for a convolution.
        computation: the computation the launching instruction is in.
    """

    name: str
    kind: str
    impl: str
    lhs: Shape
    rhs: Shape
    out: Shape
    flops: int
    computation: str


# Opcodes that are matrix products or convolutions (a ``scaled-dot`` is a product with block scales).
MATRIX_OPCODES = frozenset({"dot", "convolution", "scaled-dot", "ragged-dot", "sparse-dot"})


def _int_list(text: str) -> list[int]:
    return [int(d) for d in re.findall(r"-?\d+", text)]


def _first_leaf(shape: Shape) -> Shape:
    return shape.leaves()[0] if shape.is_tuple and shape.leaves() else shape


def _dot_flops(lhs: Shape, out: Shape, contracting: list[int]) -> int:
    k = 1
    for d in contracting:
        if 0 <= d < len(lhs.dims) and lhs.dims[d] > 0:
            k *= lhs.dims[d]
    return 2 * (out.elements or 0) * k


def _conv_flops(lhs: Shape, rhs: Shape, out: Shape, dim_labels: str) -> int:
    """FLOPs of a convolution of input ``lhs`` and kernel ``rhs`` into ``out`` with ``dim_labels``
    such as ``b01f_01io->b01f``: 2 * output elements * kernel spatial size * kernel input features."""
    try:
        kernel_labels = dim_labels.split("_")[1].split("->")[0]
    except IndexError:
        kernel_labels = ""
    if len(kernel_labels) != len(rhs.dims):
        # No labels: XLA's default is b,f,spatial... for the input and o,i,spatial... for the kernel.
        kernel_labels = "oi" + "".join(str(i) for i in range(max(0, len(rhs.dims) - 2)))
    per_output = 1
    for label, d in zip(kernel_labels, rhs.dims):
        if label != "o" and d > 0:
            per_output *= d
    return 2 * (out.elements or 0) * per_output


def _shape_of(comp: Computation | None, name: str) -> Shape:
    if comp is not None:
        for inst in comp:
            if inst.name == name:
                return inst.shape
    return Shape()


def _library_op(module: Module, comp: Computation, inst: Instruction) -> MatrixOp | None:
    """A cuBLAS/cuBLASLt/cuDNN/oneDNN custom-call as a MatrixOp, or None."""
    target = inst.custom_call_target
    if not target:
        return None
    lhs = _shape_of(comp, inst.operands[0]) if inst.operands else Shape()
    rhs = _shape_of(comp, inst.operands[1]) if len(inst.operands) > 1 else Shape()
    out = _first_leaf(_workspace_free(inst, inst.shape))
    if target.startswith(("__cublas$gemm", "__cublas$lt$matmul", "__hipblas", "__rocblas")) or \
            target in ("__onednn$matmul", "__xla_cpu_runtime_EigenMatMul"):
        impl = "cublaslt" if target.startswith("__cublas$lt") else \
            "onednn" if "onednn" in target else "cublas"
        cfg = inst.backend_config
        dnums = (cfg.get("gemm_backend_config") or cfg).get("dot_dimension_numbers") or {}
        contracting = [int(d) for d in dnums.get("lhs_contracting_dimensions", [])]
        if not contracting and len(lhs.dims) >= 1:
            contracting = [len(lhs.dims) - 1]
        return MatrixOp(inst.name, "dot", impl, lhs, rhs, out, _dot_flops(lhs, out, contracting), comp.name)
    if target.startswith(("__cudnn$conv", "__miopen$conv")) or target == "__onednn$convolution":
        impl = "onednn" if "onednn" in target else "cudnn"
        labels = inst.attrs.get("dim_labels", "")
        if "BackwardInput" in target:
            x, w, y = out, rhs, lhs
        elif "BackwardFilter" in target:
            x, w, y = lhs, out, rhs
        else:
            x, w, y = lhs, rhs, out
        return MatrixOp(inst.name, "convolution", impl, lhs, rhs, out, _conv_flops(x, w, y, labels), comp.name)
    return None


def _inner_op(module: Module, body: Computation | None, inner: Instruction, launcher: Instruction,
              comp: Computation, impl: str) -> MatrixOp:
    lhs = _shape_of(body, inner.operands[0]) if inner.operands else Shape()
    rhs = _shape_of(body, inner.operands[1]) if len(inner.operands) > 1 else Shape()
    if inner.opcode != "convolution":
        flops = _dot_flops(lhs, inner.shape, _int_list(inner.attrs.get("lhs_contracting_dims", "")))
        kind = "dot"
    else:
        flops = _conv_flops(lhs, rhs, inner.shape, inner.attrs.get("dim_labels", ""))
        kind = "convolution"
    return MatrixOp(launcher.name, kind, impl, lhs, rhs, inner.shape, flops, comp.name)


def _fusion_matrix_ops(module: Module, comp: Computation, launcher: Instruction,
                       fusion: Instruction) -> list[MatrixOp]:
    kind = fusion.backend_kind
    if "triton" in kind:
        impl = "triton"
    elif "cudnn" in kind:
        impl = "cudnn"
    elif kind.startswith("__custom") or "cutlass" in kind:
        impl = "library"
    else:
        impl = "fusion"
    out: list[MatrixOp] = []
    seen: set[str] = set()
    stack = list(fusion.called)
    while stack:
        cname = stack.pop(0)
        if cname in seen or cname not in module.computations:
            continue
        seen.add(cname)
        body = module.computations[cname]
        for inner in body:
            if inner.opcode in MATRIX_OPCODES:
                out.append(_inner_op(module, body, inner, launcher, comp, impl))
            elif inner.opcode in ("fusion", "fusion-start", "call"):
                stack.extend(inner.called)
            elif inner.opcode == "custom-call":
                op = _library_op(module, body, inner)
                if op is not None:
                    out.append(MatrixOp(launcher.name, op.kind, op.impl, op.lhs, op.rhs, op.out, op.flops, comp.name))
    return out


def matrix_ops(module_or_text: Module | str) -> list[MatrixOp]:
    """Every matrix product and convolution a module runs, whatever the backend.

    Finds a ``dot`` or ``convolution`` in an executed computation (``impl="xla"``) or inside a fusion
    (``"fusion"``; nested fusions included), a Triton GEMM fusion (``"triton"``), a cuBLAS or cuBLASLt
    GEMM custom-call (``"cublas"``, ``"cublaslt"``), a cuDNN convolution custom-call or cuDNN fusion
    (``"cudnn"``), and async-wrapped ones. Each :class:`MatrixOp` has the operand and result shapes
    (``op.lhs.dtype``, ``op.out.dims``) and its FLOPs. A loop body's operations are listed once.

    Example:
        >>> ops = matrix_ops(hlo_text(lambda a, b: a @ b, tf.ones([4, 8]), tf.ones([8, 2])))
        >>> [(op.kind, op.impl, op.flops) for op in ops]    # on a CPU
        [('dot', 'xla', 128)]
    """
    module = _as_module(module_or_text)
    out: list[MatrixOp] = []
    for comp in _executed_computations(module):
        for inst in comp:
            target = inst
            wrapped = _wrapped(module, inst)
            if wrapped is not None:
                target = wrapped
            elif _is_async_continuation(inst):
                continue
            fusion = _fusion_of(module, inst)
            if fusion is not None:
                out += _fusion_matrix_ops(module, comp, inst, fusion)
            elif target.opcode in MATRIX_OPCODES:
                body = module.computations.get(inst.called[0]) if wrapped is not None else comp
                out.append(_inner_op(module, body, target, inst, comp, "xla"))
            elif target.opcode in ("custom-call", "custom-call-start"):
                body = module.computations.get(inst.called[0]) if wrapped is not None else comp
                op = _library_op(module, body or comp, target)
                if op is not None:
                    out.append(MatrixOp(inst.name, op.kind, op.impl, op.lhs, op.rhs, op.out, op.flops, comp.name))
    return out


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
