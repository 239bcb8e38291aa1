"""Draw an HLO module as a graph of kernels: what XLA fused, and the bytes that cross memory between kernels.

:func:`draw` reads a module with :func:`xlalab.hlo.parse` and takes its kernels and their bytes from
:func:`xlalab.hlo.summary` (the same launches and the same byte accounting), then lays the graph out with
Graphviz's ``dot`` program (through the PyPI ``graphviz`` package). What the picture shows:

* each **kernel** (a launch of :func:`~xlalab.hlo.summary`) as one cluster: a fusion is a box headed by its
  kind (``kLoop``, ``kInput``, ``kOutput``, ``kCustom``; Triton, cuDNN for a GPU backend's fusions) with the
  ops inside it (past ``max_ops`` of them, a count by opcode); a library call is labelled with its library
  (cuBLAS, cuBLASLt, cuDNN, oneDNN); each header gives the bytes the kernel moves;
* each **edge between kernels** labelled with the bytes the consumer reads from memory (solid); edges inside
  a fusion dashed and unlabelled (those values stay in registers or on chip);
* the entry's **parameters** (at the top) and its **result** (at the bottom) drawn apart;
* **free ops** (``bitcast``, ``tuple``, ``get-tuple-element``, ``reshape``, constants, async ``-done``)
  hidden unless ``show_free=True``: edges pass through them;
* a ``while``'s body and condition and a ``conditional``'s branches as sub-clusters, with the trip count
  when XLA knows it.

With ``before=`` the unoptimized module is drawn beside the optimized one in the same picture (so at the
same scale), each with its kernel count and bytes from :func:`~xlalab.hlo.summary` underneath.

The same text always gives the same bytes out (SVG by default, PNG with ``format="png"``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..fmt import byte_size as format_bytes
from .launches import kernel_traffic, summary
from .parser import Computation, Instruction, Module, Shape, as_module
from .source import hlo_text
from .walk import (
    CONTROL_FLOW,
    FREE_OPCODES,
    async_wrapped,
    fused_instructions,
    fusion_of,
    is_async_continuation,
    launch_opcode,
)

__all__ = ["Drawing", "GraphvizMissing", "INSTALL_HINT", "draw", "draw_stages", "format_bytes",
           "kernel_label", "forward_to_backward", "is_backward"]

INSTALL_HINT = ("install Graphviz's `dot` program (Debian/Ubuntu/Colab: `apt-get install -y graphviz`; macOS: "
                "`brew install graphviz`; conda: `conda install graphviz`) and the Python package "
                "(`pip install graphviz`)")

# Opcodes drawn only with show_free=True: they name, group or reinterpret buffers (hlo.FREE_OPCODES) or
# finish an async operation that the start already accounts for.
_HIDDEN = FREE_OPCODES - {"parameter"}
# Fill colours by kernel kind (Graphviz colour names, readable on a white page and in print).
_FILL = {"kLoop": "#dbe9f6", "kInput": "#dcf0dc", "kOutput": "#fbe3c8", "kCustom": "#eadcf4",
         "library": "#eadcf4", "op": "#f2f2f2", "collective": "#f8f0c0"}
_MARK = "#d62728"       # marked ops (e.g. convert) and highlighted edges
_CHANGED = "#ff7f0e"    # kernels that a pass just added or grew (xlalab.hlo.flipbook)
_LIBRARIES = (("__cublas$lt", "cuBLASLt"), ("__cublas", "cuBLAS"), ("__cudnn", "cuDNN"), ("__hipblas", "hipBLAS"),
              ("__miopen", "MIOpen"), ("__rocblas", "rocBLAS"), ("__onednn", "oneDNN"),
              ("__xla_cpu_runtime", "XLA:CPU runtime"))


class GraphvizMissing(RuntimeError):
    """Graphviz (the ``dot`` program or the ``graphviz`` Python package) is not installed."""


def _library(target: str) -> str:
    for prefix, name in _LIBRARIES:
        if target.startswith(prefix):
            return name
    return target


def _backend_kind_label(kind: str) -> str:
    if kind == "__triton_gemm":
        return "Triton GEMM"
    if kind.startswith("__triton"):
        return "Triton"
    if "cudnn" in kind:
        return "cuDNN fusion"
    if "ynn" in kind:
        return "YNNPACK"
    return kind.strip("_")


def kernel_label(module: Module, inst: Instruction) -> str:
    """The kind a drawing gives a kernel: ``"kLoop"``, ``"kInput"``, ``"kOutput"``, ``"kCustom · Triton GEMM"``,
    ``"cuBLAS"`` (a library custom-call), else its opcode (``"dot"``, ``"all-reduce"``).

    Example:
        >>> m = hlo.parse(text); kernel_label(m, m.find("fusion.3"))
        'kLoop'
    """
    fusion = fusion_of(module, inst)
    if fusion is not None:
        kind = fusion.fusion_kind or "fusion"
        if fusion.backend_kind:
            return f"{kind} · {_backend_kind_label(fusion.backend_kind)}"
        # XLA:CPU names its library fusions in backend_config.fusion_config.kind ("__ynn_fusion": YNNPACK).
        cpu_kind = fusion.backend_config.get("fusion_config", {})
        if isinstance(cpu_kind, dict) and cpu_kind.get("kind"):
            return f"{kind} · {_backend_kind_label(str(cpu_kind['kind']))}"
        return kind
    target = async_wrapped(module, inst) or inst
    if target.opcode in ("custom-call", "custom-call-start") and target.custom_call_target:
        return _library(target.custom_call_target)
    return launch_opcode(module, inst)


def _fill(label: str, opcode: str) -> str:
    head = label.split(" ")[0]
    if head in _FILL:
        return _FILL[head]
    if opcode in ("custom-call",) or label != opcode:
        return _FILL["library"]
    if opcode.startswith(("all-", "reduce-scatter", "collective", "send", "recv")):
        return _FILL["collective"]
    return _FILL["op"]


@dataclass
class Drawing:
    """A rendered HLO graph: ``data`` (SVG text as UTF-8 bytes, or PNG bytes), ``source`` (the dot text it
    was laid out from), ``format`` (``"svg"`` or ``"png"``). Jupyter displays it inline; ``save(path)``
    writes ``data``."""

    source: str
    format: str
    data: bytes
    kernels: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)

    @property
    def svg(self) -> str:
        if self.format != "svg":
            raise ValueError(f"this drawing is {self.format}; draw it with format='svg' for SVG text")
        return self.data.decode("utf-8")

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.data)

    def html(self) -> str:
        """The SVG inline in a ``<div class="xlalab-hlo-graph">`` (scrolls sideways when wider than the page), so
        that its text is part of the page: searchable, selectable, crisp at any zoom."""
        svg = self.svg
        svg = svg[svg.index("<svg"):]
        return f'<div class="xlalab-hlo-graph" style="overflow:auto;max-width:100%;max-height:85vh">\n{svg}</div>'

    def _repr_html_(self) -> str | None:
        return self.html() if self.format == "svg" else None

    def highlighted_totals(self) -> dict[str, int]:
        """What the edges that ``highlight`` accepted carry: ``tensors`` (distinct producers: with
        :func:`forward_to_backward`, the forward results the backward pass reads), ``edges``, ``bytes`` (read through
        them; an edge of unknown size adds 0), and ``kernels`` (all kernels drawn)."""
        red = [e for e in self.edges if e["highlighted"]]
        return {"tensors": len({(e["stage"], e["from"]) for e in red}), "edges": len(red),
                "bytes": sum(e["bytes"] or 0 for e in red), "kernels": len(self.kernels)}

    def __repr__(self) -> str:
        return f"<Drawing {self.format}, {len(self.data):,} bytes, {len(self.kernels)} kernels>"

    def _repr_png_(self) -> bytes | None:
        return self.data if self.format == "png" else None


def _q(text: str) -> str:
    """A dot string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(**kw: Any) -> str:
    items = [f"{k}={_q(str(v))}" for k, v in kw.items() if v is not None]
    return " [" + " ".join(items) + "]" if items else ""


def _shape_text(shape: Shape) -> str:
    if shape.is_tuple:
        leaves = shape.leaves()
        return f"tuple of {len(leaves)}" if len(leaves) > 2 else "(" + ", ".join(_shape_text(s) for s in leaves) + ")"
    return f"{shape.dtype}[{','.join(str(d) for d in shape.dims)}]" if shape.dtype else "?"


def _trim(text: str, width: int = 28) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# A predicate on edges: (module, producer, consumer) -> highlight this edge?
EdgePredicate = Callable[[Module, Instruction, Instruction], bool]


_TAPE = re.compile(r"(^|/)(gradient_tape|gradients)(/|$)")


def _op_names(module: Module, inst: Instruction) -> list[str]:
    fusion = fusion_of(module, inst)
    names = [inst.op_name] if inst.op_name else []
    if fusion is not None:
        names += [i.op_name for i in fused_instructions(module, fusion) if i.op_name]
    return names


# Ops that read no data: never downstream of a gradient, whatever op name XLA's CSE left on them.
_DATA_FREE = frozenset({"parameter", "constant", "iota", "rng-get-and-update-state", "partition-id", "replica-id"})
Flags = tuple[bool, ...]     # per element of an instruction's result (one for an array): downstream of a gradient op?


class _Sides:
    """Which instructions of a module compute part of a gradient (see :func:`is_backward`)."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.flags: dict[int, Flags] = {}       # id(instruction) -> per-element flags (data dependence)
        self.backward: set[int] = set()         # id(instruction) of everything classed backward
        self.by_name: dict[str, bool] = {}
        entry = module.entry
        values = self.evaluate(entry, [])
        for comp in module.computations.values():
            for inst in comp:
                if any(self.flags.get(id(inst), ())):
                    self.backward.add(id(inst))
        self.gradient_only(entry, values)
        for comp in module.computations.values():
            for inst in comp:
                self.by_name.setdefault(inst.name, id(inst) in self.backward)

    @staticmethod
    def _width(inst: Instruction) -> int:
        return len(inst.shape.tuple_shapes or ()) if inst.shape.is_tuple else 1

    def evaluate(self, comp: Computation, params: list[Flags], depth: int = 0) -> dict[str, Flags]:
        """The flags of every instruction of ``comp`` whose parameters carry ``params``: an instruction is
        downstream of a gradient op when it is one (a ``gradient_tape/`` op name) or reads one; a tuple, a
        ``get-tuple-element`` and a multi-output fusion keep one flag per element."""
        values: dict[str, Flags] = {}
        for inst in comp:
            n = self._width(inst)
            ins = [values.get(o, (False,)) for o in inst.operands]
            own = inst.opcode not in _DATA_FREE and bool(inst.op_name) and bool(_TAPE.search(inst.op_name))
            if inst.opcode in _DATA_FREE - {"parameter"}:
                out = (False,) * n        # XLA shares one constant among every op that used it, under any op's name
            elif inst.opcode == "parameter":
                k = inst.parameter_number
                got = params[k] if 0 <= k < len(params) else (False,)
                out = got if len(got) == n else (any(got),) * n
            elif inst.opcode == "tuple":
                out = tuple(any(f) for f in ins)
            elif inst.opcode == "get-tuple-element" and ins:
                try:
                    index = int(inst.attrs.get("index", "0"))
                except ValueError:
                    index = -1
                out = (ins[0][index],) if 0 <= index < len(ins[0]) else (any(ins[0]),)
            elif inst.called and depth < 32 and inst.opcode in ("fusion", "call", "async-start"):
                body = self.module.computations.get(inst.called[0])
                root = body.root if body is not None else None
                out = self.evaluate(body, ins, depth + 1)[root.name] if body is not None and root is not None \
                    else (any(any(f) for f in ins),)
                if own and not any(i.op_name for i in fused_instructions(self.module, inst)
                                   if i.opcode not in _DATA_FREE):
                    out = (True,) * len(out)
                out = out if len(out) == n else (any(out),) * n
            elif inst.opcode == "while" and depth < 32:
                out = self._loop(inst, ins, depth)
            elif inst.opcode == "conditional" and depth < 32:
                out = self._branches(inst, ins, depth)
            else:
                out = (own or any(any(f) for f in ins),) * n
            values[inst.name] = out
            self.flags[id(inst)] = out
        return values

    def _loop(self, inst: Instruction, ins: list[Flags], depth: int) -> Flags:
        """A ``while``: its state carries what the body makes of it, until that no longer changes."""
        n = self._width(inst)
        state = ins[0] if ins and len(ins[0]) == n else (any(any(f) for f in ins),) * n
        body = self.module.computations.get(inst.attrs.get("body", "").lstrip("%"))
        cond = self.module.computations.get(inst.attrs.get("condition", "").lstrip("%"))
        for _ in range(n + 2):
            if cond is not None:
                self.evaluate(cond, [state], depth + 1)
            if body is None or body.root is None:
                break
            out = self.evaluate(body, [state], depth + 1)[body.root.name]
            grown = tuple(a or b for a, b in zip(state, out)) if len(out) == n else (any(out) or any(state),) * n
            if grown == state:
                break
            state = grown
        return state

    def _branches(self, inst: Instruction, ins: list[Flags], depth: int) -> Flags:
        """A ``conditional``: each branch on its operand; the result also depends on the predicate."""
        n = self._width(inst)
        out = [any(ins[0]) if ins else False] * n
        for b, cname in enumerate(inst.called):
            body = self.module.computations.get(cname)
            if body is None or body.root is None:
                continue
            got = self.evaluate(body, [ins[b + 1]] if b + 1 < len(ins) else [], depth + 1)[body.root.name]
            got = got if len(got) == n else (any(got),) * n
            out = [a or g for a, g in zip(out, got)]
        return tuple(out)

    def gradient_only(self, entry: Computation, values: dict[str, Flags]) -> None:
        """Class as backward what the program computes only for its gradients: when the entry returns gradients and a
        forward result computed from the inputs (a loss), an instruction the gradients depend on and that result
        does not. Forward ops that ``tf.recompute_grad`` runs again in the backward pass carry no ``gradient_tape/``
        name, and may read no op that does (their dependence on the upstream gradient can pass through ops
        TensorFlow names outside it)."""
        by_name = {i.name: i for i in entry}
        root = entry.root
        if root is None:
            return
        outputs = root.operands if root.opcode == "tuple" else [root.name]
        forward = [o for o in outputs if o in by_name and not any(values.get(o, (False,)))]

        def ancestors(names: list[str]) -> set[str]:
            seen: set[str] = set()
            stack = list(names)
            while stack:
                name = stack.pop()
                if name in seen or name not in by_name:
                    continue
                seen.add(name)
                stack.extend(by_name[name].operands)
            return seen

        gradients = [o for o in outputs if o in by_name and any(values.get(o, (False,)))]
        computed = [o for o in forward if any(by_name[a].opcode not in FREE_OPCODES for a in ancestors([o]))]
        if not computed or not gradients:
            return      # no gradient, or only gradients come out (or inputs passed through): the data cannot tell
        keep, needed = ancestors(computed), ancestors(gradients)
        for inst in entry:
            if inst.name in keep or inst.name not in needed or inst.opcode in ("parameter", "constant"):
                continue
            self.backward.add(id(inst))
            for comp in self._called(inst):
                self.backward.update(id(i) for i in comp)

    def _called(self, inst: Instruction) -> list[Computation]:
        """Every computation an instruction runs, nested ones included."""
        out: list[Computation] = []
        stack = list(inst.called)
        while stack:
            comp = self.module.computations.get(stack.pop())
            if comp is None or comp in out:
                continue
            out.append(comp)
            stack.extend(c for i in comp for c in i.called)
        return out

    def is_backward(self, inst: Instruction) -> bool:
        if id(inst) in self.flags:
            return id(inst) in self.backward
        return self.by_name.get(inst.name, False)


_SIDES: list[_Sides] = []      # the last few modules classified (draw asks once per edge)


def _sides(module: Module) -> _Sides:
    for sides in _SIDES:
        if sides.module is module:
            return sides
    sides = _Sides(module)
    _SIDES.insert(0, sides)
    del _SIDES[8:]
    return sides


def is_backward(module: Module, inst: Instruction) -> bool:
    """Whether a kernel computes part of a gradient, decided from the data, with TensorFlow's op names as seeds:

    * an op whose TensorFlow op name is under ``gradient_tape/`` (or ``gradients/``) in its metadata is backward,
      and so is every op that reads one, directly or through other ops (a multi-output fusion or a tuple keeps one
      answer per element, so a forward value that leaves a fusion beside a gradient stays forward);
    * when the entry returns a forward result computed from its inputs (the loss) beside gradients, every op the
      gradients depend on and that result does not is backward too: it runs only for the gradients. This classes the
      forward ops that ``tf.recompute_grad`` runs again in the backward pass, whose op names (``matmul_3``,
      ``Tanh_3``) carry no ``gradient_tape/`` and whose dependence on the upstream gradient may pass only through
      ops TensorFlow names outside it (the tape's ``AddN``).

    A kernel counts as backward when any of its results is. A program that returns only gradients gives the
    second rule nothing to go on: there, recomputed forward ops count as forward.
    """
    return _sides(module).is_backward(inst)


def forward_to_backward(module: Module, producer: Instruction, consumer: Instruction) -> bool:
    """An edge predicate for :func:`draw`'s ``highlight``: a tensor that a forward kernel writes and a backward
    kernel reads (an activation saved for the gradient). Forward and backward are told apart by
    :func:`is_backward` (TensorFlow's op names and the data flow from them; recomputed forward ops are backward);
    a kernel with no op name inside is neither."""
    return bool(_op_names(module, producer)) and not is_backward(module, producer) and is_backward(module, consumer)


class _Builder:
    """Writes the dot text of one module inside a prefix (so two modules can share one graph)."""

    def __init__(self, module: Module, prefix: str, *, max_ops: int, show_free: bool,
                 highlight: EdgePredicate | None, mark: frozenset[str], changed: frozenset[str] = frozenset()) -> None:
        self.module = module
        self.changed = changed
        self.prefix = prefix
        self.max_ops = max_ops
        self.show_free = show_free
        self.highlight = highlight
        self.mark = mark
        self.lines: list[str] = []
        self.summary = summary(module)
        self.kernels = {(k["computation"], k["name"]): k for k in self.summary["kernel_list"]}
        self.drawn: list[dict[str, Any]] = []
        self.edges: list[dict[str, Any]] = []
        self._ids: dict[tuple[str, str], str] = {}
        self._cluster_of: dict[str, str] = {}
        self._n = 0
        # Tuple values by element: name -> [producers of element 0, of element 1, ...].
        self._parts: dict[str, list[list[tuple[str, Any]]]] = {}
        self._root_parts: list[list[tuple[str, Any]]] | None = None
        self._while_parts: list[list[tuple[str, Any]]] | None = None

    def node_id(self, comp: str, name: str) -> str:
        key = (comp, name)
        if key not in self._ids:
            self._ids[key] = f"{self.prefix}n{len(self._ids)}"
        return self._ids[key]

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("  " * depth + line)

    # -- one computation ------------------------------------------------------------------------
    def computation(self, comp: Computation, depth: int, inputs: dict[int, list[tuple[str, Any]]] | None = None,
                    entry: bool = False, loop: bool = False) -> list[tuple[str, Instruction | None]]:
        """Draw ``comp``'s kernels; return the drawn producers of its root (node id, instruction)."""
        # producers[name]: the drawn (node id, instruction) pairs whose values the instruction carries.
        producers: dict[str, list[tuple[str, Instruction | None]]] = {}
        for inst in comp:
            k = self.kernels.get((comp.name, inst.name))
            if inst.opcode == "parameter":
                nid = self.node_id(comp.name, inst.name)
                role = "parameter" if entry else "loop state" if loop else "in"
                label = f"{role} {inst.parameter_number}\n{_trim(_shape_text(inst.shape))}"
                self.emit(f"{nid}" + _attrs(label=label, shape="invhouse" if entry else "ellipse",
                                            style="filled", fillcolor="#ffffff" if entry else "#f7f7f7",
                                            fontsize=10 if entry else 9, tooltip=f"{inst.name}: {inst.shape}"), depth)
                producers[inst.name] = [(nid, inst)]
                if inputs is not None:
                    for src, src_inst in inputs.get(inst.parameter_number, []):
                        self.edge(src, nid, None, src_inst, inst, depth, style="dotted")
                continue
            if k is not None:
                nid = self.kernel(comp, inst, k, depth)
                reads, _ = kernel_traffic(self.module, comp, inst)
                read_bytes = dict(reads)
                self.edges_into(nid, inst, producers, read_bytes, depth, kernel=True)
                producers[inst.name] = [(nid, inst)]
            elif inst.opcode in CONTROL_FLOW:
                producers[inst.name] = self.control_flow(comp, inst, producers, depth)
                if inst.opcode == "while" and self._while_parts is not None:
                    self._parts[inst.name] = self._while_parts
            elif self.show_free and inst.opcode in _HIDDEN | {"constant"} or \
                    (self.show_free and is_async_continuation(inst)):
                nid = self.node_id(comp.name, inst.name)
                self.emit(f"{nid}" + _attrs(label=inst.opcode, shape="plain", fontsize=9, fontcolor="#666666",
                                            tooltip=f"{inst.name}: {inst.shape}"), depth)
                self.edges_into(nid, inst, producers, {}, depth, kernel=False)
                producers[inst.name] = [(nid, inst)]
            elif inst.opcode == "get-tuple-element" and inst.operands and inst.operands[0] in self._parts:
                try:
                    index = int(inst.attrs.get("index", "0"))
                except ValueError:
                    index = -1
                parts = self._parts[inst.operands[0]]
                producers[inst.name] = list(parts[index]) if 0 <= index < len(parts) else \
                    list(producers.get(inst.operands[0], []))
            else:
                # Hidden: passes on what its operands carry (a constant carries nothing).
                merged: list[tuple[str, Any]] = []
                for o in inst.operands:
                    for p in producers.get(o, []):
                        if p not in merged:
                            merged.append(p)
                producers[inst.name] = merged
                if inst.opcode == "tuple":
                    self._parts[inst.name] = [list(producers.get(o, [])) for o in inst.operands]
        root = comp.root
        self._root_parts = self._parts.get(root.name) if root is not None else None
        return list(producers.get(root.name, [])) if root is not None else []

    def edges_into(self, nid: str, inst: Instruction, producers: dict[str, list[tuple[str, Any]]],
                   read_bytes: dict[str, int | None], depth: int, kernel: bool) -> None:
        # One edge per producer, labelled with the bytes read through every operand it reaches.
        per_source: dict[str, list[Any]] = {}
        order: list[str] = []
        for o in dict.fromkeys(inst.operands):
            for src, src_inst in producers.get(o, []):
                if src not in per_source:
                    per_source[src] = [src_inst, []]
                    order.append(src)
                if o in read_bytes and o not in per_source[src][1]:
                    per_source[src][1].append(o)
        for src in order:
            src_inst, ops = per_source[src]
            if kernel:
                values = [read_bytes[o] for o in ops]
                b = None if any(v is None for v in values) else sum(v for v in values if v is not None)
                self.edge(src, nid, b, src_inst, inst, depth, unknown=any(v is None for v in values))
            else:
                self.edge(src, nid, None, src_inst, inst, depth, style="dotted")

    def edge(self, src: str, dst: str, nbytes: int | None, src_inst: Any, dst_inst: Any, depth: int,
             style: str | None = None, unknown: bool = False) -> None:
        kw: dict[str, Any] = {}
        if style is None:
            kw["label"] = format_bytes(None if unknown else nbytes)
            kw["fontsize"] = 9
            kw["tooltip"] = f"{'?' if unknown or nbytes is None else nbytes} bytes read from memory"
        else:
            kw["style"] = style
            kw["color"] = "#888888"
        if src in self._cluster_of:
            kw["ltail"] = self._cluster_of[src]
        if dst in self._cluster_of:
            kw["lhead"] = self._cluster_of[dst]
        marked = self.highlight is not None and isinstance(src_inst, Instruction) and \
            isinstance(dst_inst, Instruction) and src_inst.opcode != "parameter" and \
            self.highlight(self.module, src_inst, dst_inst)
        if marked:
            kw.update(color=_MARK, penwidth=2.5, fontcolor=_MARK)
        if style is None:
            self.edges.append({"from": getattr(src_inst, "name", ""), "from_opcode": getattr(src_inst, "opcode", ""),
                               "to": getattr(dst_inst, "name", ""), "bytes": None if unknown else nbytes,
                               "highlighted": bool(marked)})
        self.emit(f"{src} -> {dst}" + _attrs(**kw), depth)

    # -- one kernel -----------------------------------------------------------------------------
    def kernel(self, comp: Computation, inst: Instruction, k: dict[str, Any], depth: int) -> str:
        self._n += 1
        cname = f"cluster_{self.prefix}k{self._n}"
        label = kernel_label(self.module, inst)
        nid = self.node_id(comp.name, inst.name)
        self._cluster_of[nid] = cname
        fusion = fusion_of(self.module, inst)
        inner = [i for i in fused_instructions(self.module, fusion)] if fusion is not None else []
        shown = [i for i in inner if self.show_free or i.opcode not in _HIDDEN]
        marked = sorted({i.opcode for i in shown if i.opcode in self.mark} |
                        ({inst.opcode} if inst.opcode in self.mark else set()))
        self.drawn.append({"name": inst.name, "computation": comp.name, "label": label, "bytes": k["bytes"],
                           "cluster": cname, "node": nid, "ops": len(shown),
                           "opcodes": sorted({i.opcode for i in inner} | ({inst.opcode} if fusion is None else set()))})
        fill = _fill(label, k["opcode"])
        is_changed = inst.name in self.changed
        self.drawn[-1]["changed"] = is_changed
        self.emit(f"subgraph {_q(cname)} {{", depth)
        border = _CHANGED if is_changed else ('#555555' if fusion is not None else fill)
        self.emit(f"id={_q(cname)} label=\"\" style=\"rounded,filled\" fillcolor={_q(fill)} "
                  f"color={_q(border)}{' penwidth=4' if is_changed else ''} margin=6", depth + 1)
        head = f"{_trim(inst.name)}\n{label}"
        if fusion is None and label != k["opcode"]:
            head += f" · {_trim(k['opcode'], 16)}"
        head += f"\n{_trim(_shape_text(inst.shape))}\nmoves {format_bytes(k['bytes'])}"
        self.emit(f"{nid}" + _attrs(label=head, shape="box",
                                    style="rounded,filled,bold" if marked else "rounded,filled",
                                    fillcolor="#ffffff", color=_MARK if marked else "#333333", fontsize=10,
                                    tooltip=f"kernel {inst.name}: {label}; "
                                            f"{k['bytes'] if k['bytes'] is not None else '?'} bytes moved"),
                  depth + 1)
        if shown and len(shown) <= self.max_ops:
            ids: dict[int, str] = {}
            for i in shown:
                iid = f"{nid}_{len(ids)}"
                ids[id(i)] = iid
                is_marked = i.opcode in self.mark
                self.emit(f"{iid}" + _attrs(label=i.opcode, shape="ellipse", fontsize=9, height=0.3,
                                            style="filled", fillcolor="#ffd6d6" if is_marked else "#ffffff",
                                            color=_MARK if is_marked else "#777777",
                                            tooltip=f"{i.name}: {i.shape}"), depth + 1)
            self._inner_edges(shown, ids, nid, depth + 1)
        elif shown:
            counts = Counter(i.opcode for i in shown)
            top = sorted(counts.items(), key=lambda kv: (kv[0] not in self.mark, -kv[1], kv[0]))
            rows = [f"{op} ×{n}" if n > 1 else op for op, n in top[:4]]
            if len(top) > 4:
                rows.append(f"+{sum(n for _, n in top[4:])} more")
            iid = f"{nid}_ops"
            self.emit(f"{iid}" + _attrs(label=f"{len(shown)} ops\n" + "\n".join(rows), shape="note", fontsize=9,
                                        style="filled", fillcolor="#ffd6d6" if marked else "#ffffff",
                                        color=_MARK if marked else "#777777"), depth + 1)
            self.emit(f"{nid} -> {iid}" + _attrs(style="dashed", color="#777777", arrowhead="none"), depth + 1)
        self.emit("}", depth)
        return nid

    def _inner_edges(self, shown: list[Instruction], ids: dict[int, str], head: str, depth: int) -> None:
        """Dashed edges between the ops of a fusion (through its hidden free ops); the header points at the
        ops that read only the fusion's parameters or constants."""
        shown_ids = {id(i) for i in shown}
        for comp in self.module.computations.values():
            if not any(id(i) in shown_ids for i in comp):
                continue
            carried: dict[str, list[str]] = {}    # within this computation: name -> drawn ops it carries
            for i in comp:
                sources: list[str] = []
                for o in dict.fromkeys(i.operands):
                    for src in carried.get(o, []):
                        if src not in sources:
                            sources.append(src)
                if id(i) in shown_ids:
                    for src in sources or [head]:
                        self.emit(f"{src} -> {ids[id(i)]}" + _attrs(style="dashed", color="#777777", arrowsize=0.6),
                                  depth)
                    carried[i.name] = [ids[id(i)]]
                else:
                    carried[i.name] = [] if i.opcode == "parameter" else sources

    # -- control flow ---------------------------------------------------------------------------
    def control_flow(self, comp: Computation, inst: Instruction,
                     producers: dict[str, list[tuple[str, Any]]], depth: int) -> list[tuple[str, Any]]:
        self._n += 1
        outer = f"cluster_{self.prefix}cf{self._n}"
        if inst.opcode == "while":
            trips = inst.known_trip_count
            title = (f"{inst.name}: while, {trips} trips" if trips is not None
                     else f"{inst.name}: while (trip count unknown)")
        else:
            title = f"{inst.name}: {inst.opcode}"
        self.emit(f"subgraph {_q(outer)} {{", depth)
        self.emit(f"id={_q(outer)} label={_q(title)} labeljust=l style=\"dashed,rounded\" color=\"#444444\" "
                  f"fontsize=11", depth + 1)
        result: list[tuple[str, Any]] = []
        self._while_parts = None
        if inst.opcode == "while":
            state = [p for o in inst.operands for p in producers.get(o, [])]
            parts = [("body", inst.attrs.get("body", "")), ("condition", inst.attrs.get("condition", ""))]
            for role, cname in parts:
                body = self.module.computations.get(cname.lstrip("%"))
                if body is None:
                    continue
                self._n += 1
                self.emit(f"subgraph {_q(f'cluster_{self.prefix}cf{self._n}')} {{", depth + 1)
                self.emit(f"label={_q(f'{role}: {body.name}')} labeljust=l style=rounded color=\"#999999\" fontsize=10",
                          depth + 2)
                out = self.computation(body, depth + 2, inputs={0: state}, loop=True)
                self.emit("}", depth + 1)
                if role == "body":
                    result = out
                    self._while_parts = self._root_parts
        else:
            for b, cname in enumerate(inst.called):
                body = self.module.computations.get(cname)
                if body is None:
                    continue
                self._n += 1
                branch_in = (inst.operands[b + 1] if inst.opcode == "conditional" and b + 1 < len(inst.operands)
                             else None)
                if inst.opcode == "call":
                    inputs = {j: producers.get(o, []) for j, o in enumerate(inst.operands)}
                else:
                    inputs = {0: producers.get(branch_in, []) if branch_in else []}
                self.emit(f"subgraph {_q(f'cluster_{self.prefix}cf{self._n}')} {{", depth + 1)
                role = f"branch {b}" if inst.opcode == "conditional" else "calls"
                self.emit(f"label={_q(f'{role}: {body.name}')} labeljust=l style=rounded color=\"#999999\" fontsize=10",
                          depth + 2)
                for p in self.computation(body, depth + 2, inputs=inputs):
                    if p not in result:
                        result.append(p)
                self.emit("}", depth + 1)
        self.emit("}", depth)
        return result

    # -- the whole module -----------------------------------------------------------------------
    def module_graph(self, depth: int) -> None:
        entry = self.module.entry
        roots = self.computation(entry, depth, entry=True)
        root = entry.root
        out = f"{self.prefix}result"
        shape = _trim(_shape_text(root.shape)) if root is not None else ""
        self.emit(f"{out}" + _attrs(label=f"result\n{shape}", shape="house", style="filled", fillcolor="#ffffff",
                                    fontsize=10), depth)
        for src, _src_inst in roots:
            kw: dict[str, Any] = {"color": "#333333"}
            if src in self._cluster_of:
                kw["ltail"] = self._cluster_of[src]
            self.emit(f"{src} -> {out}" + _attrs(**kw), depth)


def _totals(summary: dict[str, Any], stage: str) -> str:
    n = summary["kernels"]
    line = f"{stage}: {n} kernel{'s' if n != 1 else ''}, {format_bytes(summary['bytes_moved'])} moved"
    step = summary["per_step"]
    if summary["loops"] or summary["conditionals"]:
        line += (f"\n(one run: {step['kernels']} launches, {format_bytes(step['bytes'])}"
                 f"{'' if step['exact'] else ', estimate'})")
    if summary["bytes_unknown"]:
        line += f"\n{summary['bytes_unknown']} kernel(s) of unknown size"
    return line


def _source(modules: list[tuple[Module, str]], *, max_ops: int, show_free: bool,
            highlight: EdgePredicate | None, mark: frozenset[str], title: str | None,
            rankdir: str, changed: frozenset[str] = frozenset(),
            stack: bool = False) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    lines = ["digraph hlo {",
             f"  graph [rankdir={rankdir} compound=true newrank=true fontname=\"Helvetica\" nodesep=0.25 ranksep=0.35"
             f"{' label=' + _q(title) + ' labelloc=t fontsize=14' if title else ''}]",
             "  node [fontname=\"Helvetica\"]",
             "  edge [fontname=\"Helvetica\" color=\"#333333\"]"]
    drawn: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    first_nodes: list[str] = []
    for index, (module, stage) in enumerate(modules):
        prefix = f"m{index}_"
        b = _Builder(module, prefix, max_ops=max_ops, show_free=show_free, highlight=highlight, mark=mark,
                     changed=changed if index == len(modules) - 1 else frozenset())
        if len(modules) > 1:
            lines.append(f"  subgraph {_q(f'cluster_{prefix}module')} {{")
            lines.append(f"    label={_q(_totals(b.summary, stage))} labelloc=b fontsize=12 style=rounded "
                         f"color=\"#bbbbbb\"")
            b.module_graph(2)
            lines += b.lines
            lines.append("  }")
            first_nodes += [m.group(1) for m in (re.match(rf"\s+({prefix}\w+) \[", line) for line in b.lines) if m][:1]
        else:
            b.module_graph(1)
            lines += b.lines
            lines.append(f"  {prefix}totals" + _attrs(label=_totals(b.summary, stage), shape="plaintext", fontsize=11))
            lines.append(f"  {prefix}result -> {prefix}totals [style=invis]")
        for d in b.drawn + b.edges:
            d["stage"] = stage
        drawn += b.drawn
        edges += b.edges
    if stack and len(modules) > 1 and len(first_nodes) == len(modules):
        # An invisible edge from each module's result to the next module's first node: one after the other.
        lines += [f"  m{i}_result -> {first_nodes[i + 1]} [style=invis]" for i in range(len(modules) - 1)]
    lines.append("}")
    return "\n".join(lines) + "\n", drawn, edges


def _render(source: str, fmt: str) -> bytes:
    try:
        import graphviz
    except ImportError as e:
        raise GraphvizMissing(f"xlalab.hlo.draw needs the Python package graphviz: {INSTALL_HINT}") from e
    if shutil.which("dot") is None:
        raise GraphvizMissing(f"xlalab.hlo.draw needs Graphviz's dot program, not found on PATH: {INSTALL_HINT}")
    try:
        return graphviz.Source(source).pipe(format=fmt)
    except graphviz.ExecutableNotFound as e:
        raise GraphvizMissing(f"xlalab.hlo.draw could not run Graphviz's dot: {INSTALL_HINT}") from e
    except subprocess.CalledProcessError as e:   # dot itself failed (a crash on one graph): no picture, say why
        raise GraphvizMissing(f"Graphviz's dot failed on this graph ({e}); the HLO text above says the same") from e


def _entry_module(module_or_text: Module | str, what: str) -> Module:
    if not isinstance(module_or_text, (str, Module)):
        raise TypeError(f"{what} must be HLO text or an xlalab.hlo.Module, not {type(module_or_text).__name__}")
    module = as_module(module_or_text)
    if module.entry_name not in module.computations:
        raise ValueError(f"{what} has no ENTRY computation: is it an HLO module (hlo.hlo_text(...)), not a "
                         "buffer assignment or another dump file?")
    return module


def draw(module_or_text: Module | str, *, before: Module | str | None = None, format: str = "svg",
         max_ops: int = 6, show_free: bool = False, highlight: EdgePredicate | None = None,
         mark: Iterable[str] = (), title: str | None = None, stage: str = "optimized",
         before_stage: str = "before optimization", rankdir: str = "TB", changed: Iterable[str] = (),
         stack: bool = False) -> Drawing:
    """Draw one HLO module as a graph of its kernels (fusions, library calls, other launches).

    Args:
        module_or_text: HLO text (any stage, any backend) or a :class:`xlalab.hlo.Module`.
        before: the same program's unoptimized module (``hlo_text(..., stage="hlo")``): drawn beside the
            first, at the same scale, each with its kernel and byte totals from :func:`xlalab.hlo.summary`.
        format: ``"svg"`` (default) or ``"png"``; ``"dot"`` returns the dot text as ``data`` without
            running Graphviz.
        max_ops: a fusion with more ops than this shows a count by opcode instead of its op graph.
        show_free: also draw the free ops (``bitcast``, ``tuple``, ``get-tuple-element``, constants...).
        highlight: a predicate ``(module, producer, consumer) -> bool`` on edges between kernels; those it
            accepts are drawn thick and red (:func:`forward_to_backward` marks saved activations).
        mark: opcodes to mark in red wherever they are (``mark=("convert",)`` shows where casts landed).
        title: a line above the picture; ``stage``/``before_stage``: the names under each module's totals.
        rankdir: Graphviz's direction, ``"TB"`` (top to bottom, default) or ``"LR"``.
        changed: names of launching instructions to outline thick and orange (what a pass just added or grew, as
            :func:`xlalab.hlo.flipbook` draws it); ``.kernels`` entries get ``"changed": True``.
        stack: with ``before``, draw the two modules one after the other along ``rankdir`` (one above the
            other for ``"TB"``) instead of side by side: narrower when one module is wide. Same scale either way.

    Returns:
        A :class:`Drawing` (``.data`` bytes, ``.source`` dot text, ``.kernels``: one ``{"name", "label",
        "bytes", "cluster", "node", "stage", ...}`` per drawn kernel: the launches of ``hlo.summary``'s
        ``kernel_list``, in drawing order; ``.edges``: one ``{"from", "to", "bytes", "highlighted", "stage"}`` per
        labelled edge into a kernel, ``from`` a kernel or parameter name); Jupyter shows it inline (as HTML
        holding the SVG, ``.html()``).

    Raises:
        GraphvizMissing: Graphviz (``dot`` or the ``graphviz`` package) is not installed; the message says
            how to install it.

    Example:
        >>> after = hlo.hlo_text(chain, x)                  # optimized_hlo
        >>> hlo.draw(after, before=hlo.hlo_text(chain, x, stage="hlo"))
    """
    if format not in ("svg", "png", "dot"):
        raise ValueError(f"format={format!r}; expected 'svg', 'png' or 'dot'")
    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise ValueError(f"rankdir={rankdir!r}; expected 'TB', 'LR', 'BT' or 'RL'")
    if not isinstance(max_ops, int) or max_ops < 0:
        raise ValueError(f"max_ops={max_ops!r}; expected a non-negative int")
    modules = [(_entry_module(module_or_text, "module_or_text"), stage)]
    if before is not None:
        modules.insert(0, (_entry_module(before, "before"), before_stage))
    source, drawn, edges = _source(modules, max_ops=max_ops, show_free=show_free, highlight=highlight,
                            mark=frozenset(mark), title=title, rankdir=rankdir, changed=frozenset(changed),
                            stack=stack)
    data = source.encode() if format == "dot" else _render(source, format)
    return Drawing(source=source, format=format, data=data, kernels=drawn, edges=edges)


def draw_stages(fn: Callable, *args: Any, **kwargs: Any) -> Drawing:
    """Draw ``fn(*args)`` before and after XLA's passes: ``draw(hlo_text(fn, *args), before=hlo_text(fn,
    *args, stage="hlo"), **kwargs)``."""
    after = hlo_text(fn, *args, stage="optimized_hlo")
    before = hlo_text(fn, *args, stage="hlo")
    return draw(after, before=before, **kwargs)
