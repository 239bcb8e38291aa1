"""Matrix products and convolutions that a module runs, whatever the backend made of them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .parser import Computation, Instruction, Module, Shape, as_module
from .walk import async_wrapped, executed_computations, fusion_of, is_async_continuation, workspace_free

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
    out = _first_leaf(workspace_free(inst, inst.shape))
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
    module = as_module(module_or_text)
    out: list[MatrixOp] = []
    for comp in executed_computations(module):
        for inst in comp:
            target = inst
            wrapped = async_wrapped(module, inst)
            if wrapped is not None:
                target = wrapped
            elif is_async_continuation(inst):
                continue
            fusion = fusion_of(module, inst)
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

