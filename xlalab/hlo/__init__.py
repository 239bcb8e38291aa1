"""Read what XLA made of a function: HLO text at each stage, a parser, a summary of launches and bytes.

``hlo_text`` asks TensorFlow for the HLO of a ``tf.function`` (through ``experimental_get_compiler_ir``);
``parse`` turns HLO text from any backend (CPU, GPU dumps, TPU layouts) into plain objects; ``summary``
counts what a module launches and the bytes each launch must read and write; ``matrix_ops`` finds its
matrix products and convolutions whatever the backend made of them (a ``dot``, a cuBLAS call, a Triton
GEMM fusion, a cuDNN convolution). ``dump_passes`` runs a script with ``XLA_FLAGS`` set so that XLA writes
a snapshot after every pass, and ``list_dump`` names them. ``draw`` pictures a module as a graph of kernels,
``peak_live_bytes`` estimates its live memory, ``dot_flops``/``matrix_flops`` count its matrix FLOPs.

The package's modules: ``parser`` (shapes, instructions, modules), ``source`` (HLO text from TensorFlow),
``walk`` (what runs: free ops, fusions, async wrappers), ``launches`` (``summary``), ``matrix``
(``matrix_ops``), ``dumps`` (per-pass dumps), ``graph`` (``draw``), ``memory`` (``peak_live_bytes``),
``flops``, ``pipeline`` (``passes``: the module after every pass that changed it), ``viewer``
(``flipbook``: those frames stepped through in one HTML block), and ``census`` (kernel and fusion counts of
five functions per TensorFlow version). Every public name is re-exported here. The older
``xlalab.hlo_memory`` and ``xlalab.flops`` still import, with a ``DeprecationWarning``, for one term.

What :func:`summary` counts (a launch, its bytes, per step) is defined once, in :mod:`xlalab.hlo.launches`.

Without a GPU, set ``XLALAB_FAKE_GPU`` to a device name (``"NVIDIA A100-SXM4-40GB"``): ``hlo_text(...,
stage="optimized_hlo")`` then returns XLA:GPU's module of the program for that GPU, compiled without one
(:mod:`xlalab.hlo.gpu_compile`, the ``gpu-compile`` extra; no autotuning), or, for a GPU without a shipped target
or without the extra, a real XLA:GPU module recorded in ``tests/data/hlo/`` in its place (see
:func:`fake_gpu_module`; :func:`fake_gpu_stand_in` says which).
"""

from __future__ import annotations

from .dumps import DumpFile, dump_passes, first_pass_creating, list_dump
from .flops import dot_flops, matrix_flops
from .graph import Drawing, GraphvizMissing, draw, draw_stages
from .launches import kernel_bytes, kernel_traffic, summary
from .matrix import MATRIX_OPCODES, MatrixOp, matrix_ops
from .memory import LiveBytes, peak_live_bytes
from .parser import (
    DTYPE_BITS,
    DTYPE_BYTES,
    ELEMENTWISE,
    Computation,
    Instruction,
    Module,
    Shape,
    _depth_change as _depth_change,
    _match_brackets as _match_brackets,
    _split_top as _split_top,
    as_module,
    instruction_lines,
    parse,
    parse_shape,
    read_shape,
)
from .pipeline import Change, Decision, Frame, Frames, PassRun, frames_from_dump, passes, passes_side_by_side
from .source import (
    CORPUS_DIR,
    FAKE_GPU_ENV,
    FAKE_GPU_MODULES,
    STAGES,
    as_jit,
    deviceless_gpu_module,
    fake_gpu_module,
    fake_gpu_stand_in,
    fake_gpu_target,
    hlo_text,
    program_category,
)
from .viewer import Flipbook, flipbook
from .walk import (
    ASYNC_DONE_SUFFIXES,
    CONTROL_FLOW,
    FREE_OPCODES,
    PARTIAL_READ,
    async_wrapped,
    executed_computations,
    fused_instructions,
    fusion_of,
    is_async_continuation,
    is_async_start,
    launch_opcode,
    launches_nothing,
    reinterprets,
    reshape_is_bitcast,
    workspace_free,
)

__all__ = [
    "ASYNC_DONE_SUFFIXES", "CONTROL_FLOW", "CORPUS_DIR", "Change", "Computation", "DTYPE_BITS", "DTYPE_BYTES",
    "Decision", "Drawing", "DumpFile", "ELEMENTWISE", "FAKE_GPU_ENV", "FAKE_GPU_MODULES", "FREE_OPCODES", "Flipbook",
    "Frame", "Frames", "GraphvizMissing", "Instruction", "LiveBytes", "MATRIX_OPCODES", "MatrixOp", "Module",
    "PARTIAL_READ", "PassRun", "STAGES", "Shape", "as_jit", "as_module", "async_wrapped", "deviceless_gpu_module",
    "dot_flops", "draw", "draw_stages", "dump_passes", "executed_computations", "fake_gpu_module", "fake_gpu_stand_in",
    "fake_gpu_target", "first_pass_creating", "flipbook", "frames_from_dump", "fused_instructions", "fusion_of",
    "hlo_text", "instruction_lines", "is_async_continuation", "is_async_start", "kernel_bytes", "kernel_traffic",
    "launch_opcode", "launches_nothing", "list_dump", "matrix_flops", "matrix_ops", "parse", "parse_shape", "passes",
    "passes_side_by_side", "peak_live_bytes", "program_category", "read_shape", "reinterprets", "reshape_is_bitcast",
    "summary", "workspace_free",
]
