"""xlalab.hlo on the corpus of real HLO text in tests/data/hlo (sources in its README).

Every file parses; the instruction count equals an independent count of instruction lines; computations and
entry are right; on the small GPU modules the launch and byte figures are checked by hand (each figure's
arithmetic is written next to it).
"""

import re

import pytest

from xlalab import hlo

from helpers.hlo import CORPUS, load

FILES = sorted(p for p in CORPUS.glob("*.txt"))
MODULE_FILES = [p for p in FILES if "buffer_assignment" not in p.name]

# An instruction line, counted without the parser: optional ROOT, a name, "=", then a shape ("(" of a tuple,
# or dtype "[") or, for shapeless instructions, an opcode and "(". Comment lines do not count; a line that
# continues an instruction starts with an attribute (name=value without a shape) or an operand, so it does
# not match.
_LINE = re.compile(r"^\s*(ROOT\s+)?%?[\w.\-$]+\s*=\s*(\(|[a-z][a-z0-9]*\[|[a-z][a-z0-9\-]*\()")


def independent_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if not line.lstrip().startswith("//") and _LINE.match(line))


def test_corpus_is_small_and_documented():
    readme = (CORPUS / "README.md").read_text()
    total = sum(p.stat().st_size for p in CORPUS.iterdir())
    assert total < 5 * 2**20
    for p in FILES:
        assert p.name in readme, f"{p.name} has no source in tests/data/hlo/README.md"
        assert p.stat().st_size < 250_000


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_file_parses_and_counts_match(path):
    text = path.read_text()
    module = hlo.parse(text)
    n = sum(len(c.instructions) for c in module.computations.values())
    assert n == independent_count(text) == hlo.instruction_lines(text)
    if path in MODULE_FILES:
        assert module.entry_name in module.computations
        # Every called computation exists, and every operand is an instruction of the same computation.
        for comp in module.computations.values():
            names = {i.name for i in comp}
            for inst in comp:
                assert all(c in module.computations for c in inst.called), (inst.name, inst.called)
                assert all(o in names for o in inst.operands), (comp.name, inst.name, inst.operands)
        s = hlo.summary(module)
        assert s["kernels"] == len(s["kernel_list"]) and s["bytes_moved"] >= 0
        hlo.matrix_ops(module)


def computations(name):
    m = hlo.parse(load(name))
    return m.entry_name, sorted(m.computations)


def test_computations_and_entry():
    assert computations("xla_dump_closers_slices.txt") == ("main", ["fused_computation", "main"])
    assert computations("xla_parallel_thread_async.txt") == ("Entry", ["Entry", "async_builder"])
    assert hlo.parse(load("xla_parallel_thread_async.txt")).computations["async_builder"].execution_thread == \
        "parallel_thread"
    assert computations("gpu_triton_gemm_fusion.txt") == ("e", ["e", "fusion1"])  # no ENTRY: the last one
    assert computations("gpu_while_loop_fusions.txt")[0] == "main.18"
    assert len(computations("gpu_while_loop_fusions.txt")[1]) == 6
    assert computations("gpu_conditional_branches.txt")[0] == "main.17"
    assert len(computations("gpu_conditional_branches.txt")[1]) == 8


def test_cublas_gemm_by_hand():
    s = hlo.summary(load("gpu_cublas_gemm.txt"))
    # Launches: the cuBLAS custom-call, exponential, negate (parameters and get-tuple-element are free).
    assert [k["opcode"] for k in s["kernel_list"]] == ["custom-call", "exponential", "negate"]
    # custom-call reads f32[16,32] + f32[32,16] = 2 * 2048 B and writes f32[16,16] = 1024 B; its s8[1028]
    # workspace is not traffic. exponential and negate each read and write 1024 B.
    assert [k["bytes"] for k in s["kernel_list"]] == [4096 + 1024, 2048, 2048]
    assert s["bytes_moved"] == 9216
    (op,) = hlo.matrix_ops(load("gpu_cublas_gemm.txt"))
    assert (op.kind, op.impl, op.name) == ("dot", "cublas", "custom-call.3")
    assert op.flops == 2 * 16 * 16 * 32 and op.out.dims == (16, 16) and op.lhs.dtype == "f32"
    assert s["matmuls_by_impl"] == {"cublas": 1}


def test_cudnn_conv_custom_call_by_hand():
    text = load("gpu_cudnn_conv_custom_call.txt")
    s = hlo.summary(text)
    assert s["kernels"] == 1
    # Reads f32[3,56,56,16] (602112 B) and f32[3,3,3,64] (6912 B); writes f32[54,54,16,64] (11943936 B);
    # the u8[0] workspace adds nothing.
    assert s["bytes_moved"] == 602112 + 6912 + 11943936
    (op,) = hlo.matrix_ops(text)
    assert (op.kind, op.impl) == ("convolution", "cudnn")
    # dim_labels f01b_i01o->01bf: 3 input features, a 3x3 window; output 54*54*16*64 elements.
    assert op.flops == 2 * (54 * 54 * 16 * 64) * (3 * 3 * 3)


def test_triton_and_cudnn_fusions_by_hand():
    s = hlo.summary(load("gpu_triton_gemm_fusion.txt"))
    assert s["fusions_by_kind"] == {"kCustom": 1} and s["fusions_by_backend_kind"] == {"__triton_gemm": 1}
    (op,) = hlo.matrix_ops(load("gpu_triton_gemm_fusion.txt"))
    # f32[3,28,32] x f32[3,28,32] contracting 28, batch 3 -> f32[3,32,32]: 2*3*32*32*28.
    assert (op.impl, op.flops, op.name) == ("triton", 2 * 3 * 32 * 32 * 28, "_")
    g = hlo.summary(load("gpu_cudnn_fusions_graph.txt"))
    assert g["kernels"] == 3 and g["fusions_by_backend_kind"] == {"__cudnn$fusion": 2}
    assert g["fusions_by_kind"] == {"kCustom": 2, "kLoop": 1} and g["matmuls_by_impl"] == {"cudnn": 2}
    # Three f32[64,64] launches, each reading two distinct 16 KiB operands (the add reads d0 once) or one, and
    # writing 16 KiB: 48 + 32 + 48 KiB.
    assert g["bytes_moved"] == (3 + 2 + 3) * 16384
    nested = hlo.summary(load("gpu_triton_nested_gemm.hlo.txt"))
    assert nested["fusions_by_backend_kind"] == {"__triton_nested_gemm_fusion": 1}
    (op,) = hlo.matrix_ops(load("gpu_triton_nested_gemm.hlo.txt"))
    assert op.impl == "triton" and op.flops == 2 * 16 * 32 * 512 * 256
    naming = hlo.matrix_ops(load("gpu_triton_naming.hlo.txt"))
    assert [(o.impl, o.lhs.dtype, o.rhs.dtype, o.out.dtype) for o in naming] == [("triton", "f16", "f16", "f16")]
    conv = hlo.matrix_ops(load("gpu_cudnn_conv_fusion.txt"))
    assert [(o.kind, o.impl) for o in conv] == [("convolution", "cudnn")]
    f8 = hlo.matrix_ops(load("gpu_scaled_dot_f8.txt"))
    assert [(o.impl, o.lhs.dtype, o.flops) for o in f8] == [("triton", "f8e4m3fn", 2 * 256 * 384 * 128)]


def test_async_pairs_counted_once_by_hand():
    ar = hlo.summary(load("gpu_all_reduce_start.txt"))
    # Two all-reduce-start/-done pairs: two all-reduce launches, each reading and writing s32[4] = 16 B.
    assert ar["ops_by_opcode"]["all-reduce"] == 2 and "all-reduce-done" not in ar["ops_by_opcode"]
    assert ar["kernels"] == 2 and ar["bytes_moved"] == 2 * (16 + 16)
    ag = hlo.summary(load("gpu_all_gather_start.txt"))
    assert ag["kernels"] == 1 and ag["bytes_moved"] == 8 + 16  # reads s32[2], the done returns s32[4]
    a2a = hlo.summary(load("gpu_async_all_to_all.txt"))
    # async-start wrapping an all-to-all of f32[4,8,128] (16 KiB in, 16 KiB out) counts as one all-to-all.
    assert a2a["ops_by_opcode"].get("all-to-all") == 1 and a2a["kernels"] == 1 and a2a["bytes_moved"] == 32768
    cc = hlo.summary(load("gpu_async_custom_call_cublas.txt"))
    # Two custom-call-start/-done cuBLAS calls on f32[2,2] (16 B read once, 16 B written, s8[4] workspace
    # not counted) and the add (2 x 16 B read, 16 B written).
    assert cc["kernels"] == 3 and cc["bytes_moved"] == 2 * (16 + 16) + 48
    assert [(o.impl, o.flops) for o in hlo.matrix_ops(load("gpu_async_custom_call_cublas.txt"))] == \
        [("cublas", 2 * 2 * 2 * 2)] * 2
    fs = hlo.summary(load("gpu_fusion_start.txt"))
    # fusion-start/-done read as fusions: two kLoop fusions of two s32 scalars into one (8 + 4 B each).
    assert fs["fusions"] == 2 and fs["fusions_by_kind"] == {"kLoop": 2} and fs["bytes_moved"] == 24
    assert fs["fused_ops_by_opcode"] == {"add": 2}
    cp = hlo.summary(load("gpu_copy_start_memory_space.txt"))
    # 4 copy-start/-done pairs of f32[1024] (4 KiB each way) and 9 adds/tanhs.
    assert cp["ops_by_opcode"]["copy"] == 4 and cp["kernels"] == 13
    pt = hlo.summary(load("xla_parallel_thread_async.txt"))
    # async-start of a shapeless add on f32[10]: one add launch, 2 x 40 B read, 40 B written.
    assert pt["kernel_list"] == [{"name": "async-start", "opcode": "add", "kind": None, "backend_kind": "",
                                  "bytes": 120, "computation": "Entry"}]
    sr = hlo.summary(load("xla_send_recv.txt"))
    assert sorted(k["opcode"] for k in sr["kernel_list"]) == ["recv", "send"] and sr["bytes_moved"] == 4 + 4


def test_dynamic_slice_reads_what_it_outputs_by_hand():
    s = hlo.summary(load("gpu_async_dynamic_slice.txt"))
    # dynamic-slice-start of f32[1,128,128] (64 KiB) out of f32[256,128,128] (16 MiB) with s32 indices:
    # reads 64 KiB + one distinct 4 B index, writes 64 KiB.
    assert s["kernels"] == 1 and s["bytes_moved"] == 65536 + 4 + 65536
    closers = hlo.summary(load("xla_dump_closers_slices.txt"))
    # The fusion reads its f32[1,5] parameter only through five 1x1 slices (5 x 4 B) and writes f32[1,3].
    assert closers["bytes_moved"] == 5 * 4 + 12


def test_loops_and_branches_by_hand():
    w = hlo.summary(load("gpu_while_loop_fusions.txt"))
    # Entry copy fusion (4 B in, 4 B out), body add fusion (4 + 4 in, 4 out), condition compare fusion
    # (4 + 4 in, pred[1] 1 B out); no known_trip_count, so per_step counts one iteration and is not exact.
    assert w["kernels"] == 3 and w["bytes_moved"] == 8 + 12 + 9
    assert w["loops"][0]["trip_count"] is None and w["per_step"]["exact"] is False
    c = hlo.summary(load("gpu_conditional_branches.txt"))
    assert c["kernels"] == 4  # the index fusion and one fusion per branch, each site once
    assert [b["kernels"] for b in c["conditionals"][0]["branches"]] == [1, 1, 1]
    assert [b["bytes"] for b in c["conditionals"][0]["branches"]] == [40, 40, 40]  # s32[5] in and out
    # One run: the index fusion (s64 in 8 B, s32 out 4 B) and one branch, not three.
    assert c["per_step"] == {"kernels": 2, "bytes": 12 + 40, "exact": True}
    tf = hlo.summary(load("tf_cpu_step_after_optimizations.txt"))
    (loop,) = tf["loops"]
    assert loop["trip_count"] == 5
    outside = tf["kernels"] - loop["body_kernels"] - loop["condition_kernels"]
    assert tf["per_step"]["kernels"] == outside + 5 * loop["body_kernels"] + 6 * loop["condition_kernels"]


def test_tf_cpu_modules():
    step = hlo.parse(load("tf_cpu_step_after_optimizations.txt"))
    assert {i.dtype for i in step.instructions()} >= {"bf16", "f32", "s32", "pred"}
    s = hlo.summary(step)
    # The gather reads 4 rows of the f32[1000,64] table (4 x 256 B), not the 256000 B table.
    gathers = [k for k in s["kernel_list"] if "gather" in k["name"]]
    assert gathers and all(k["bytes"] < 256000 for k in gathers)
    assert [(o.kind, o.impl, o.flops) for o in hlo.matrix_ops(step)] == [("dot", "xla", 2 * 8 * 32 * 16)]
    conv = hlo.matrix_ops(load("tf_cpu_conv_after_optimizations.txt"))
    assert [(o.kind, o.flops) for o in conv] == [("convolution", 2 * (2 * 8 * 8 * 4) * (3 * 3 * 3))]
    assert hlo.parse(load("tf_cpu_step_buffer_assignment.txt")).computations == {}


def test_fake_gpu_modules_are_gpu_modules():
    assert {o.impl for o in hlo.matrix_ops(hlo.fake_gpu_module("conv"))} == {"cudnn"}
    assert {o.kind for o in hlo.matrix_ops(hlo.fake_gpu_module("conv"))} == {"convolution"}
    assert {o.impl for o in hlo.matrix_ops(hlo.fake_gpu_module("gemm"))} <= {"cublas", "cublaslt", "triton"}
    elementwise = hlo.fake_gpu_module("elementwise")
    assert hlo.matrix_ops(elementwise) == [] and hlo.summary(elementwise)["fusions"] >= 1
    assert hlo.program_category(hlo.fake_gpu_module("conv")) == "conv"
    assert hlo.program_category(hlo.fake_gpu_module("gemm")) == "gemm"
    assert hlo.program_category(elementwise) == "elementwise"
    with pytest.raises(ValueError):
        hlo.fake_gpu_module("nonsense")
