"""Getting HLO text from TensorFlow: ``hlo_text`` at each stage, and the fake-GPU hook for machines without one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xlalab import env

from .gpu_compile import as_jit
from .matrix import matrix_ops
from .parser import Module

# ---------------------------------------------------------------------------------------------
# Getting HLO text from TensorFlow.

STAGES = ("hlo", "optimized_hlo", "optimized_hlo_dot", "stablehlo")
_STAGE_ALIASES = {"dot": "optimized_hlo_dot", "graph": "optimized_hlo_dot", "before": "hlo", "after": "optimized_hlo"}
FAKE_GPU_ENV = env.FAKE_GPU
CORPUS_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "hlo"
# Recorded XLA:GPU modules (files of CORPUS_DIR, sources in its README) standing in for a GPU compile.
FAKE_GPU_MODULES = {
    "conv": "gpu_cudnn_conv_custom_call.txt",
    "gemm": "gpu_cublas_gemm.txt",
    "elementwise": "gpu_loop_fusion.txt",
}


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
    places = [Path(os.environ[env.HLO_CORPUS])] if os.environ.get(env.HLO_CORPUS) else []
    places += [CORPUS_DIR] + [d / "tests" / "data" / "hlo" for d in (Path.cwd(), *Path.cwd().parents)]
    for directory in places:
        path = directory / FAKE_GPU_MODULES[category]
        if path.exists():
            return path.read_text()
    raise FileNotFoundError(f"{FAKE_GPU_MODULES[category]} not found in {CORPUS_DIR}: the fake-GPU hook needs "
                            "the repository's tests/data/hlo (or XLALAB_HLO_CORPUS pointing at a copy)")


def program_category(module_or_text: Module | str) -> str:
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

    When the environment variable ``XLALAB_FAKE_GPU`` names a GPU, ``"optimized_hlo"`` is XLA:GPU's module of
    the program for that GPU, compiled without one (:func:`deviceless_gpu_module`: a shipped target and the
    ``gpu-compile`` extra needed); for another GPU, or without the extra, :func:`fake_gpu_module` of the
    program's :func:`program_category` (a recorded module) stands in.

    Example:
        >>> print(hlo_text(lambda x: tf.nn.relu(x) * 2.0, tf.ones([4]), stage="hlo"))
    """
    stage = _STAGE_ALIASES.get(stage, stage)
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}; expected one of {STAGES} or {tuple(_STAGE_ALIASES)}")
    if stage == "optimized_hlo" and os.environ.get(FAKE_GPU_ENV):
        compiled = deviceless_gpu_module(fn, *args)
        if compiled is not None:
            return compiled
        return fake_gpu_module(program_category(as_jit(fn).experimental_get_compiler_ir(*args)(stage=stage)))
    return as_jit(fn).experimental_get_compiler_ir(*args)(stage=stage)


def fake_gpu_target() -> str | None:
    """The GPU target that ``XLALAB_FAKE_GPU`` names when the deviceless compile can stand in for it: a shipped
    :mod:`xlalab.hlo.gpu_compile` target (its ``GPU_PEAKS`` key) with the ``gpu-compile`` extra installed; else
    ``None`` (then a recorded module stands in: :func:`fake_gpu_module`)."""
    from xlalab.hw import gpu_key

    from . import gpu_compile

    name = os.environ.get(FAKE_GPU_ENV, "").strip()
    key = gpu_key(name) if name else None
    if key is None or key not in gpu_compile.targets() or gpu_compile.missing_packages():
        return None
    return key


def fake_gpu_stand_in() -> str:
    """What stands in for the GPU's optimized modules under ``XLALAB_FAKE_GPU``, in words (``""`` when unset)."""
    if not os.environ.get(FAKE_GPU_ENV):
        return ""
    key = fake_gpu_target()
    if key is None:
        return "a recorded XLA:GPU module (its shapes are not the program's)"
    return f"XLA:GPU's own module for {key}, compiled without a GPU (no autotuning)"


def deviceless_gpu_module(fn: Callable, *args: Any) -> str | None:
    """XLA:GPU's optimized module of ``fn(*args)`` for the GPU ``XLALAB_FAKE_GPU`` names, compiled without a GPU
    (:func:`xlalab.hlo.gpu_compile.compile_hlo`), or ``None`` where :func:`fake_gpu_target` has no target."""
    from . import gpu_compile

    key = fake_gpu_target()
    if key is None:
        return None
    hlo = as_jit(fn).experimental_get_compiler_ir(*args)(stage="hlo")
    return gpu_compile.compile_hlo(hlo, key)[key].text

