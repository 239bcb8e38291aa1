"""Count the FLOPs a compiled program performs in its matrix products, read from its HLO.

XLA's HLO names every ``dot`` and ``convolution`` with its shapes, so the FLOPs of a forward pass and
of its gradient can be counted from what the compiler will actually run (for example, the gradient of
a first layer's input is never computed when nobody asks for it).
"""

from __future__ import annotations

import math
from typing import Any

from . import hlo


def _dims(attr: str) -> list[int]:
    attr = attr.strip().strip("{}")
    return [int(d) for d in attr.split(",") if d.strip()]


def dot_flops(module_or_text: "hlo.Module | str") -> dict[str, Any]:
    """FLOPs of every ``dot`` in an HLO module: ``{"total": int, "dots": [{"name", "shape", "flops"}, ...]}``.

    A dot of result shape ``[m, n]`` contracting ``k`` elements performs ``2 * m * n * k`` FLOPs (one
    multiply and one add per term); batch dimensions multiply in through the result's element count.
    Dots inside fusions are counted once each. Convolutions are not counted.

    Example:
        >>> text = hlo.hlo_text(lambda a, b: a @ b, tf.ones([4, 8]), tf.ones([8, 2]))
        >>> dot_flops(text)["total"]   # 2 * 4 * 2 * 8
        128
    """
    module = hlo.parse(module_or_text) if isinstance(module_or_text, str) else module_or_text
    dots = []
    for comp in module.computations.values():
        shapes = {inst.name: inst.shape for inst in comp}
        for inst in comp:
            if inst.opcode != "dot":
                continue
            lhs = shapes.get(inst.operands[0]) if inst.operands else None
            contracted = 1
            if lhs is not None:
                contracted = math.prod(lhs.dims[d] for d in _dims(inst.attrs.get("lhs_contracting_dims", "{}")))
            flops = 2 * inst.shape.elements * contracted
            dots.append({"name": inst.name, "shape": str(inst.shape), "flops": flops})
    return {"total": sum(d["flops"] for d in dots), "dots": dots}
