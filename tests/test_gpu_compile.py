"""xlalab.hlo.gpu_compile: XLA:GPU compiles for T4 ... B200 targets on a machine without a GPU.

The heavy tests run the real compiler (JAX's CUDA plugin, in a subprocess); the others check targets, errors and
the kernel table on recorded modules.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from xlalab.hlo import gpu_compile as g
from xlalab.hlo.parser import parse
from xlalab.hw import GPU_COMPUTE_CAPABILITY, GPU_PEAKS

TESTS = Path(__file__).resolve().parent
CORPUS = TESTS / "data" / "hlo"
ISSUE_TARGETS = {"T4", "L4", "A100-SXM-40GB", "A100-SXM-80GB", "H100-SXM", "H200", "B200"}
TRITON_TARGETS = {"L4", "A100-SXM-40GB", "A100-SXM-80GB", "H100-SXM", "H200", "B200"}

needs_extra = pytest.mark.skipif(bool(g.missing_packages()), reason=f"the {g.EXTRA!r} extra is not installed")


# ---------------------------------------------------------------------------------------------
# Targets as data.

def test_shipped_targets_are_gpu_peaks_rows_with_their_compute_capability_and_source():
    shipped = g.targets()
    assert ISSUE_TARGETS <= set(shipped), ISSUE_TARGETS - set(shipped)
    for name, t in shipped.items():
        assert name in GPU_PEAKS, name
        assert t.compute_capability == GPU_COMPUTE_CAPABILITY[name], name
        assert "openxla/xla" in t.source or "datasheet" in t.source, (name, t.source)
        for rejected in ("collective_memory_granularity", "mem_clock_ghz", "max_blocks_per_multiprocessor"):
            assert re.search(rf"^\s*{rejected}:", t.config_text, re.M) is None, (name, rejected)


def test_unknown_target_names_the_shipped_ones():
    with pytest.raises(g.UnknownTarget, match="H100-SXM"):
        g.target("Z100")
    assert g.target("h100_sxm").name == "H100-SXM"


# ---------------------------------------------------------------------------------------------
# Errors.

def test_missing_package_names_the_extra(monkeypatch):
    real = g.importlib.util.find_spec
    monkeypatch.setattr(g.importlib.util, "find_spec",
                        lambda name, *a: None if name == "jax_plugins.xla_cuda12" else real(name, *a))
    assert g.missing_packages() == ["jax-cuda12-plugin"]
    with pytest.raises(g.GpuCompileMissing, match=r"'gpu-compile' extra.*jax-cuda12-plugin"):
        g.compile_hlo("HloModule m\nENTRY e { ROOT p = f32[2] parameter(0) }", "T4")


def test_a_compile_past_its_timeout_is_killed_with_a_clear_error(monkeypatch, tmp_path):
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(120)\n")
    monkeypatch.setattr(g, "WORKER", sleeper)
    monkeypatch.setattr(g, "missing_packages", lambda: [])
    # Only subprocess's TimeoutExpired gives this error: the child (asleep for 120 s) was killed at the 2 s timeout,
    # a margin no load on the machine can invert (no bound on the real clock needed).
    with pytest.raises(g.GpuCompileTimeout, match="timeout of 2 s and was killed"):
        g.compile_hlo("HloModule m", "T4", timeout=2)


def test_worker_env_is_set_in_one_place_and_drops_the_callers_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/somewhere")
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    env = g.worker_env(["--xla_gpu_enable_triton_gemm=false"])
    assert env["JAX_PLATFORMS"] == "cpu"
    assert env["XLA_FLAGS"] == "--xla_gpu_enable_triton_gemm=false"


# ---------------------------------------------------------------------------------------------
# The kernel table on recorded XLA:GPU modules (no compiler needed).

def test_kernel_table_of_a_recorded_cublas_module():
    module = parse((CORPUS / "gpu_cublas_gemm.txt").read_text())
    peaks = GPU_PEAKS["A100-SXM-40GB"]
    kernels = g.kernels_of(module, peaks)
    by_name = {k.name: k for k in kernels}
    gemm = by_name["custom-call.3"]
    assert gemm.backend == "cuBLAS call"
    assert gemm.flops == 2 * 16 * 16 * 32
    # f32[16,32] and f32[32,16] read, f32[16,16] written (the s8 workspace not counted).
    assert gemm.bytes == (16 * 32 + 32 * 16 + 16 * 16) * 4
    assert gemm.lower_bound_s == pytest.approx(max(gemm.bytes / 1555e9, gemm.flops / 156e12))
    assert {k.backend for k in kernels} - {"cuBLAS call"}, "the exp/negate launches are listed too"


def test_kernel_table_of_a_recorded_triton_gemm_module():
    module = parse((CORPUS / "gpu_triton_gemm_fusion.txt").read_text())
    kernels = g.kernels_of(module, GPU_PEAKS["H100-SXM"])
    assert any(k.backend == "Triton GEMM fusion" and k.flops > 0 for k in kernels), kernels


# ---------------------------------------------------------------------------------------------
# The real compiler (subprocess).

def _programs():
    """Fusion chain, softmax, matmul + bias + ReLU: TensorFlow's HLO of each (computed here, in TF's process)."""
    import tensorflow as tf

    x = tf.zeros([1024, 256])
    chain = g.tf_hlo(lambda v: tf.tanh(((v * 2.0 + 1.0) * v - 3.0) / (v + 4.0)) * 0.5 + v, x)
    softmax = g.tf_hlo(lambda v: tf.nn.softmax(v, axis=-1), x)
    dense = g.tf_hlo(lambda v, w, b: tf.nn.relu(v @ w + b), x, tf.zeros([256, 512]), tf.zeros([512]))
    return {"chain": chain, "softmax": softmax, "dense": dense}


@pytest.fixture(scope="module")
def compiled_all():
    """Every shipped target x the three programs, in one subprocess."""
    if g.missing_packages():
        pytest.skip(f"the {g.EXTRA!r} extra is not installed")
    programs = _programs()
    per = g.compile_jobs([{"hlo": h} for h in programs.values()], list(g.targets()))
    return {t: dict(zip(programs, results)) for t, results in per.items()}


@pytest.mark.heavy
@needs_extra
def test_every_target_compiles_the_three_programs(compiled_all):
    assert set(compiled_all) == set(g.targets())
    for name, results in compiled_all.items():
        for program, r in results.items():
            assert r.kernels, (name, program)
            assert r.versions["jaxlib"] == "0.10.2" and "release" in r.versions["ptxas"], r.versions
            assert r.autotuning.startswith("not run") and "no time here is a measurement" in g.header(r)
            assert name in g.header(r) and "jaxlib 0.10.2" in g.header(r)
        # Eight elementwise ops: one loop fusion on every GPU.
        assert [k.backend for k in results["chain"].kernels] == ["loop fusion"], (name, results["chain"].kernels)
        # Arguments as planned = the inputs' bytes; read from the executable.
        assert results["dense"].memory["argument"] == (1024 * 256 + 256 * 512 + 512) * 4
        assert not any(k.flops for k in results["softmax"].kernels)


@pytest.mark.heavy
@needs_extra
def test_products_are_triton_gemm_from_ampere_on_and_cublaslt_on_t4(compiled_all):
    for name, results in compiled_all.items():
        backends = {k.backend for k in results["dense"].kernels}
        flops = sum(k.flops for k in results["dense"].kernels)
        assert flops == 2 * 1024 * 512 * 256, name
        if name in TRITON_TARGETS:
            assert "Triton GEMM fusion" in backends, (name, backends)
            assert not {"cuBLAS call", "cuBLASLt call"} & backends, (name, backends)
        if name == "T4":
            assert "cuBLASLt call" in backends and "Triton GEMM fusion" not in backends, backends
        # Without a GPU the configuration is XLA's default: cuBLASLt's algorithm 0, a Triton GEMM's default tile.
        for k in results["dense"].kernels:
            if k.backend == "cuBLASLt call":
                assert k.config.startswith("algorithm 0"), k
            if k.backend == "Triton GEMM fusion":
                assert re.match(r"tile \d+(x\d+)+, \d+ warps, \d+ stages", k.config), k


@pytest.mark.heavy
@needs_extra
def test_triton_gemm_off_gives_cublaslt_on_h100():
    hlo = _programs()["dense"]
    r = g.compile_hlo(hlo, "H100-SXM", xla_flags=["--xla_gpu_enable_triton_gemm=false"])["H100-SXM"]
    backends = {k.backend for k in r.kernels}
    assert "cuBLASLt call" in backends and "Triton GEMM fusion" not in backends, backends
    assert "--xla_gpu_enable_triton_gemm=false" in r.xla_flags and "triton_gemm=false" in g.header(r)


def _structure(r: g.GpuCompiled) -> list[tuple[str, tuple[str, ...]]]:
    """Per kernel, in schedule order: its backend and the opcodes fused into it (parameters, bitcasts aside)."""
    from xlalab.hlo import fused_instructions, fusion_of

    insts = {i.name: i for c in r.module.computations.values() for i in c}
    out = []
    for k in r.kernels:
        fusion = fusion_of(r.module, insts[k.name])
        ops = {i.opcode for i in fused_instructions(r.module, fusion)} if fusion is not None else set()
        out.append((k.backend, tuple(sorted(ops - {"parameter", "bitcast", "reshape", "transpose", "copy"}))))
    return out


@pytest.mark.heavy
@needs_extra
def test_tensorflow_function_has_the_fusion_structure_of_its_jax_twin():
    import tensorflow as tf

    def mlp_softmax(x, w1, b1, w2, b2):
        h = tf.nn.relu(x @ w1 + b1)
        return tf.nn.softmax(h @ w2 + b2, axis=-1)

    shapes = [(64, 256), (256, 512), (512,), (512, 128), (128,)]
    jobs: list[dict[str, Any]] = [{"hlo": g.tf_hlo(mlp_softmax, *[tf.zeros(s) for s in shapes])},
            {"jax": "helpers.gpu_jax_programs:mlp_softmax", "args": [[list(s), "float32"] for s in shapes],
             "path": [str(TESTS)]}]
    tf_result, jax_result = g.compile_jobs(jobs, ["H100-SXM"])["H100-SXM"]
    assert _structure(tf_result) == _structure(jax_result)
    assert sum(k.backend == "Triton GEMM fusion" for k in tf_result.kernels) == 2, _structure(tf_result)
    assert tf_result.memory == jax_result.memory


@pytest.mark.heavy
@needs_extra
def test_training_step_memory_with_and_without_recompute_grad_is_read_from_the_executable():
    import tensorflow as tf

    ws = [tf.Variable(tf.zeros([512, 512])) for _ in range(4)]
    x = tf.zeros([1024, 512])

    def block(h):
        for w in ws:
            h = tf.tanh(h @ w)
        return h

    def step(body):
        def f(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(body(x) ** 2)
            return tape.gradient(loss, ws)
        return f

    hlos = [g.tf_hlo(step(block), x), g.tf_hlo(step(tf.recompute_grad(block)), x)]
    plain, remat = g.compile_jobs([{"hlo": h} for h in hlos], ["H100-SXM"])["H100-SXM"]
    for r in (plain, remat):
        assert r.memory["argument"] == (4 * 512 * 512 + 1024 * 512) * 4
        assert r.memory["temp"] > 0
    # The recomputed forward pass: exactly four more 1024x512x512 products.
    assert remat.totals()["flops"] - plain.totals()["flops"] == 4 * 2 * 1024 * 512 * 512
    print(f"H100 temporaries: plain {plain.memory['temp']} B, recompute_grad {remat.memory['temp']} B")


@pytest.mark.heavy
@needs_extra
def test_private_jaxlib_calls_are_all_there():
    problems = g.private_api_check()
    assert problems == [], "the deviceless compile's private jaxlib calls moved: " + "; ".join(problems)


@pytest.mark.heavy
@needs_extra
def test_cli_prints_tables_and_json(tmp_path, capsys):
    from xlalab.cli import main

    hlo_file = tmp_path / "dense.hlo"
    hlo_file.write_text(_programs()["dense"])
    assert main(["gpu-compile", str(hlo_file), "--target", "T4", "--target", "H100-SXM"]) == 0
    text = capsys.readouterr().out
    for needle in ("== dense.hlo on T4", "== dense.hlo on H100-SXM", "cuBLASLt call", "Triton GEMM fusion",
                   "autotuning: not run", "not a measurement", "jaxlib 0.10.2"):
        assert needle in text, needle
    assert main(["gpu-compile", str(hlo_file), "--target", "A100-SXM-40GB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["target"] == "A100-SXM-40GB" and data[0]["autotuning"].startswith("not run")
    assert data[0]["totals"]["kernels"] == len(data[0]["kernels"]) and "text" not in data[0]
    assert main(["gpu-compile", str(hlo_file), "--target", "Z100"]) == 1
    assert "no GPU target 'Z100'" in capsys.readouterr().err


@pytest.mark.heavy
@needs_extra
def test_compile_failure_carries_xlas_message():
    with pytest.raises(g.GpuCompileFailed, match=r"(?i)pars|syntax|expect"):
        g.compile_hlo("HloModule broken\nENTRY e { ROOT x = f32[2] bogus-op() }", "T4")


def test_importing_the_module_imports_neither_jax_nor_tensorflow():
    import subprocess

    code = "import sys, xlalab.hlo.gpu_compile; print(sorted({'jax', 'tensorflow'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------------------------------------
# The pass pipeline on a GPU target.

def test_list_dump_reads_xla_gpu_final_module_names(tmp_path):
    from xlalab.hlo import list_dump

    stem = "module_0001.a_inference_f_18__.3"
    for suffix in (".before_optimizations.txt", ".sm_9.0a_gpu_after_optimizations.txt",
                   ".sm_9.0a_gpu_after_optimizations-live-range.txt",
                   ".sm_9.0a_gpu_after_optimizations-buffer-assignment.txt", ".priority_fusion_dump.txt"):
        (tmp_path / (stem + suffix)).write_text("HloModule m\n")
    stages = {(f.stage, f.module) for f in list_dump(tmp_path)}
    assert ("after_optimizations", "a_inference_f_18__.3") in stages
    assert ("buffer-assignment", "a_inference_f_18__.3") in stages
    finals = [f for f in list_dump(tmp_path) if f.stage == "after_optimizations"]
    assert [f.path.name for f in finals] == [stem + ".sm_9.0a_gpu_after_optimizations.txt"]


@pytest.mark.heavy
@needs_extra
def test_passes_and_flipbook_for_h100_show_xla_gpu_passes_and_priority_fusion_decisions():
    import tensorflow as tf

    from xlalab import hlo

    frames = hlo.passes(lambda x, w: tf.nn.softmax(tf.nn.relu(x @ w) * 2.0 + 1.0), tf.zeros([64, 128]),
                        tf.zeros([128, 256]), target="H100-SXM")
    assert frames.target == "H100-SXM" and frames.autotuning.startswith("not run") and "jaxlib" in frames.compiler
    names = [f.pass_name for f in frames]
    assert "triton-gemm-rewriter" in names and "priority-fusion" in names, names
    fusion = frames.find("priority-fusion")
    assert any(d.kind == "fused" for d in fusion.decisions), fusion.decisions
    assert "priority_fusion_dump" in frames.decision_source
    assert fusion.counters["kernels"] < frames[0].counters["kernels"]
    book = hlo.flipbook(frames)
    assert "XLA:GPU&#x27;s passes for H100-SXM" in book.html and "autotuning not run" in book.html


# ---------------------------------------------------------------------------------------------
# A machine whose TensorFlow sees the target's GPU compiles there (simulated: no GPU here).

def test_the_local_gpu_is_compiled_on_the_device_and_says_so(monkeypatch):
    import tensorflow as tf

    calls: list[Any] = []

    class Jit:   # TensorFlow's compile of the function, as g.as_jit gives it: records the stage asked for
        def experimental_get_compiler_ir(self, *args):
            def ir(stage):
                calls.append(stage)
                return "HloModule m\n\nENTRY e {\n  p = f32[8] parameter(0)\n  ROOT n = f32[8] negate(p)\n}\n"
            return ir

    monkeypatch.setattr(g, "local_gpu_target", lambda: "H100-SXM")
    monkeypatch.setattr(g, "as_jit", lambda fn: Jit())

    def deviceless(hlo, names, **kw):
        calls.append(("deviceless", tuple(names)))
        return {n: f"compiled without a GPU for {n}" for n in names}

    monkeypatch.setattr(g, "compile_hlo", deviceless)
    got = g.compile_tf(lambda x: -x, tf.zeros([8]), targets=["H100-SXM"])
    assert calls == ["optimized_hlo"], calls
    r = got["H100-SXM"]
    assert r.autotuning == g.ON_DEVICE and "autotuned" in g.header(r) and "without a GPU" not in g.header(r)
    assert r.memory == {} and "not read" in r.extra["memory"]
    assert [k.bytes for k in r.kernels] == [64]
    calls.clear()
    both = g.compile_tf(lambda x: -x, tf.zeros([8]), targets=["T4", "H100-SXM"])
    assert ("deviceless", ("T4",)) in calls and "optimized_hlo" in calls
    assert list(both) == ["T4", "H100-SXM"] and both["T4"] == "compiled without a GPU for T4"


# ---------------------------------------------------------------------------------------------
# TensorFlow's copies (one per returned variable): jaxlib's HLO-to-StableHLO path rejects them as they are.

def _worker_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("xlalab_gpu_worker", g.WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_copies_become_same_shape_reshapes_and_nothing_else_changes():
    text = ("ENTRY %e (p: f32[4,8]) -> (f32[4,8], f32[4,8]) {\n"
            "  %p = f32[4,8]{1,0} parameter(0)\n"
            "  %copy.1 = f32[4,8]{1,0} copy(f32[4,8]{1,0} %p), metadata={op_name=\"XLA_Retvals\"}\n"
            "  %cs = (f32[4,8], f32[4,8], u32[]) copy-start(f32[4,8]{1,0} %p)\n"
            "  %t = (f32[4,8], f32[4,8]) copy((f32[4,8], f32[4,8]) %tu)\n"
            "  ROOT %r.2 = f32[4,8]{0,1} copy(f32[4,8]{1,0} %copy.1)\n}\n")
    out, n = _worker_module().without_copies(text)
    assert n == 2
    assert "%copy.1 = f32[4,8]{1,0} reshape(f32[4,8]{1,0} %p)" in out
    assert "ROOT %r.2 = f32[4,8]{0,1} reshape(f32[4,8]{1,0} %copy.1)" in out
    assert "copy-start(" in out and "(f32[4,8], f32[4,8]) copy((" in out


@pytest.mark.heavy
@needs_extra
def test_a_training_step_that_updates_variables_compiles_and_aliases_them():
    import tensorflow as tf

    w1, w2 = tf.Variable(tf.zeros([784, 512])), tf.Variable(tf.zeros([512, 10]))

    def step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(x @ w1) @ w2
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        g1, g2 = tape.gradient(loss, [w1, w2])
        w1.assign_sub(0.1 * g1)
        w2.assign_sub(0.1 * g2)
        return loss

    hlo = g.tf_hlo(step, tf.zeros([256, 784]), tf.zeros([256], tf.int32))
    assert " copy(" in hlo, "TensorFlow's HLO returns its variables through copies"
    results = g.compile_hlo(hlo, ["T4", "H100-SXM"])
    for name, r in results.items():
        # Both variables are updated in place: their buffers are the outputs' (aliased), as planned by XLA.
        assert r.memory["alias"] == (784 * 512 + 512 * 10) * 4, (name, r.memory)
        assert sum(k.flops for k in r.kernels) == 2 * 256 * (784 * 512 + 512 * 10) + 2 * 2 * 256 * 512 * 10 + \
            2 * 256 * 784 * 512, name
