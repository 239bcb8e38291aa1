"""No chapter or lab finds matrix products by comparing an opcode with "dot" or "convolution" itself.

On a GPU the entry computation has no bare `dot` (XLA emits a cuBLAS custom-call or a Triton GEMM fusion) and no
bare `convolution` (a cuDNN custom-call), so such a cell raises StopIteration or divides by zero there. Notebooks
find them with `xlalab.hlo.matrix_ops`, whatever the backend (issue 10).
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted([*ROOT.glob("book/*.ipynb"), *ROOT.glob("solutions/*.ipynb")])

_NAME = r"""["'](?:dot|convolution)["']"""
PATTERNS = [
    re.compile(rf"(?:==|!=)\s*{_NAME}"),                      # opcode == "dot"
    re.compile(rf"{_NAME}\s*(?:==|!=)"),                      # "dot" == opcode
    re.compile(rf"\bin\s*[\(\[\{{][^\)\]\}}]*{_NAME}"),       # opcode in ("dot", ...)
    re.compile(rf"\[\s*{_NAME}\s*\]"),                        # ops_by_opcode["dot"]
    re.compile(rf"\.get\(\s*{_NAME}"),                        # ops_by_opcode.get("dot", 0)
    re.compile(r"""["'](?:__)?(?:cudnn\$conv|cublas)[^"']*["']\s+in\b"""),  # "cudnn$conv" in target
]


_KIND = re.compile(rf"\.kind\s*(?:==|!=)\s*{_NAME}")  # a MatrixOp's kind is not an opcode


def offending_lines(source: str) -> list[str]:
    out = []
    for line in source.splitlines():
        code = _KIND.sub("", line.split("#", 1)[0])
        if any(p.search(code) for p in PATTERNS):
            out.append(line.strip())
    return out


def test_patterns_catch_the_forms_and_spare_matrix_ops():
    bad = ['k = next(i for i in m.entry if i.opcode == "dot")', "if inst.opcode in ('dot', 'convolution'):",
           's["ops_by_opcode"]["dot"]', 'n = ops.get("convolution", 0)',
           'if inst.opcode == "custom-call" and "cudnn$conv" in target:', "x = 'dot' == inst.opcode"]
    good = ["ops = hlo.matrix_ops(text)", 'dots = [o for o in ops if o.kind == "dot"]',
            "print(op.kind, op.impl)", '# opcode == "dot" in a comment']
    assert all(offending_lines(b) for b in bad)
    # Comparing a MatrixOp's kind with "dot" is how a notebook should filter; comments do not count.
    assert not any(offending_lines(g) for g in good)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_notebook_compares_an_opcode_with_dot_or_convolution(path):
    nb = json.loads(path.read_text())
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", []))
        found += [f"cell {i}: {line}" for line in offending_lines(source)]
    assert not found, (f"{path.relative_to(ROOT)} looks for matrix products by opcode; use "
                       f"xlalab.hlo.matrix_ops(...) instead:\n" + "\n".join(found))
