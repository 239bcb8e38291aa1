"""Count the FLOPs a compiled program performs in its matrix products, read from its HLO.

XLA's HLO names every matrix product and convolution with its shapes, so the FLOPs of a forward pass
and of its gradient can be counted from what the compiler will actually run (for example, the gradient
of a first layer's input is never computed when nobody asks for it). The products are found with
:func:`xlalab.hlo.matrix_ops`, so a CPU ``dot``, a cuBLAS custom-call and a Triton GEMM fusion all count.
"""

from __future__ import annotations

from typing import Any

from .matrix import matrix_ops
from .parser import Module


def dot_flops(module_or_text: Module | str) -> dict[str, Any]:
    """FLOPs of every matrix product in an HLO module: ``{"total": int, "dots": [{"name", "shape", "flops",
    "impl"}, ...]}``.

    A product of result shape ``[m, n]`` contracting ``k`` elements performs ``2 * m * n * k`` FLOPs (one
    multiply and one add per term); batch dimensions multiply in through the result's element count.
    Products inside fusions are counted once each (``name`` is the launching instruction). Convolutions
    are not counted here (see :func:`matrix_flops`).

    Example:
        >>> text = hlo.hlo_text(lambda a, b: a @ b, tf.ones([4, 8]), tf.ones([8, 2]))
        >>> dot_flops(text)["total"]   # 2 * 4 * 2 * 8
        128
    """
    dots = [{"name": op.name, "shape": str(op.out), "flops": op.flops, "impl": op.impl}
            for op in matrix_ops(module_or_text) if op.kind == "dot"]
    return {"total": sum(d["flops"] for d in dots), "dots": dots}


def matrix_flops(module_or_text: Module | str) -> dict[str, Any]:
    """FLOPs of every matrix product and convolution: ``{"total", "dot", "convolution", "ops": [MatrixOp]}``."""
    ops = matrix_ops(module_or_text)
    by_kind = {k: sum(op.flops for op in ops if op.kind == k) for k in ("dot", "convolution")}
    return {"total": sum(by_kind.values()), **by_kind, "ops": ops}
