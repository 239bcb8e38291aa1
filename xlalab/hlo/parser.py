"""HLO text as plain objects: shapes, instructions, computations and modules, from any backend's text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

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
    tuple_shapes: tuple[Shape, ...] | None = None
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

    def leaves(self) -> list[Shape]:
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
    return m is not None and bool(_RHS_START.match(m.group(3)))


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


def as_module(module_or_text: Module | str) -> Module:
    """``module_or_text`` parsed if it is HLO text, else the :class:`Module` itself."""
    return parse(module_or_text) if isinstance(module_or_text, str) else module_or_text

