"""xlalab.hlo.gpu_view: the book's rows, labels and GEMM stories of XLA:GPU modules beside XLA:CPU.

The fast tests read recorded deviceless modules (tests/data/hlo/gpu_*_dense.txt) and a mocked compiler; the heavy
ones run the real XLA:GPU compiler in its subprocess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xlalab.hlo import gpu_compile as g, gpu_view as v
from xlalab.hlo.parser import parse
from xlalab.hw import GPU_PEAKS

CORPUS = Path(__file__).resolve().parent / "data" / "hlo"
VERSIONS = {"jaxlib": "0.10.2", "cuda_plugin": "0.10.2", "ptxas": "release 12.9, V12.9.86"}
needs_extra = pytest.mark.skipif(bool(g.missing_packages()), reason=f"the {g.EXTRA!r} extra is not installed")


def recorded(file: str, target: str, *, memory: dict[str, int] | None = None,
             autotuning: str = g.AUTOTUNING) -> g.GpuCompiled:
    module = parse((CORPUS / file).read_text())
    return g.GpuCompiled(target=target, device=g.target(target).device_name, text=(CORPUS / file).read_text(),
                         module=module, kernels=g.kernels_of(module, GPU_PEAKS[target]), memory=memory or {},
                         versions=VERSIONS, autotuning=autotuning)


# ---------------------------------------------------------------------------------------------
# Labels: every GPU figure says how it was made.

def test_deviceless_label_names_target_compiler_no_autotuning_and_bounds():
    r = recorded("gpu_h100_epilogue_dense.txt", "H100-SXM")
    text = v.label(r)
    assert text.startswith("compiled for H100 (NVIDIA H100 80GB HBM3) by XLA:GPU from jaxlib 0.10.2")
    assert "without a device" in text and v.NOT_RUN in text and v.BOUNDS in text
    assert "measured" not in text.replace("not measurements", "")
    assert "without a device and without autotuning" in v.where([r])


def test_on_device_label_says_so_and_where_names_the_gpu():
    r = recorded("gpu_h100_epilogue_dense.txt", "H100-SXM", autotuning=g.ON_DEVICE)
    r.versions = {"tensorflow": "2.21.0"}
    assert v.on_device(r)
    assert "compiled on this machine's H100" in v.label(r) and "autotuned" in v.label(r)
    assert "without a device" not in v.label(r)
    assert "built on a machine with a H100" in v.where([r, recorded("gpu_t4_cublaslt_dense.txt", "T4")])


def test_labels_are_one_per_target_in_order():
    rs = [recorded("gpu_t4_cublaslt_dense.txt", "T4"), recorded("gpu_h100_epilogue_dense.txt", "H100-SXM"),
          recorded("gpu_h100_split_k_dense.txt", "H100-SXM")]
    got = v.labels(rs)
    assert len(got) == 2 and got[0].startswith("compiled for T4") and got[1].startswith("compiled for H100")
    assert str(v.labels_markdown(rs)).count("\n- ") == 1


# ---------------------------------------------------------------------------------------------
# Products: backend, epilogue, split-K, read from the module.

def test_split_k_product_and_its_reducing_kernel():
    r = recorded("gpu_h100_split_k_dense.txt", "H100-SXM")
    (gemm,) = v.gemms(r)
    assert gemm.backend == "Triton GEMM fusion" and gemm.split_k == 8
    assert gemm.epilogue == () and {"add", "maximum", "reduce"} <= set(gemm.after)
    story = v.gemm_story(gemm)
    assert "8 partial products (split-K)" in story and "add, maximum" in story and "reduce" not in story


def test_epilogue_fused_into_triton_gemm():
    (gemm,) = v.gemms(recorded("gpu_h100_epilogue_dense.txt", "H100-SXM"))
    assert (gemm.backend, gemm.split_k, gemm.epilogue, gemm.after) == ("Triton GEMM fusion", 1, ("add", "maximum"), ())
    assert v.gemm_story(gemm) == "the Triton GEMM fusion applies add, maximum to the product before writing it"


def test_cublaslt_epilogue_is_read_from_its_config():
    (gemm,) = v.gemms(recorded("gpu_t4_cublaslt_dense.txt", "T4"))
    assert gemm.backend == "cuBLASLt call" and gemm.epilogue == ("BIAS_RELU",) and gemm.split_k == 1
    assert gemm.config.startswith("algorithm 0")


def test_bare_product_story():
    gemm = v.Gemm("T4", "cuBLAS call", (), ("add",), 1, "")
    assert v.gemm_story(gemm) == "the cuBLAS call writes the bare product; the next kernel applies add"


# ---------------------------------------------------------------------------------------------
# Rows and the table.

def test_gpu_row_totals_and_table_order():
    r = recorded("gpu_h100_split_k_dense.txt", "H100-SXM", memory={"temp": 1048576})
    row = v.gpu_row("dense", r)
    assert (row.kernels, row.backends, row.temp_bytes, row.how, row.measured_s) == (
        2, {"Triton GEMM fusion": 1, "loop fusion": 1}, 1048576, "deviceless", None)
    assert row.flops == 2 * 256 * 512 * 128 and row.lower_bound_s == pytest.approx(r.totals()["lower_bound_s"])
    assert row.backends_text() == "1 Triton GEMM fusion, 1 loop fusion"
    cpu = v.Row("dense", v.CPU, 2, {"dot": 1, "loop fusion": 1}, 10, 5, None, None, "this CPU")
    t4 = v.gpu_row("dense", recorded("gpu_t4_cublaslt_dense.txt", "T4"))
    text = str(v.table([row, t4, cpu], ["T4", "H100-SXM"]))
    lines = text.splitlines()
    assert [ln.split(" | ")[1] for ln in lines[2:]] == ["XLA:CPU (this CPU)", "T4", "H100"]
    assert "measured" not in lines[0], "no measured column when nothing was measured"
    assert "| 1,024 |" in lines[4] and "| – |" in lines[2]


def test_table_shows_a_measured_column_only_with_a_measurement():
    row = v.Row("p", "H100-SXM", 1, {"loop fusion": 1}, 100, 0, 1e-6, 0, "on device", measured_s=5e-6)
    text = str(v.table([row], ["H100-SXM"]))
    assert "measured (µs)" in text and "| 5.0 |" in text and "H100 (on device)" in text


def test_compile_programs_uses_one_subprocess_and_the_local_gpu_on_device(monkeypatch):
    calls: list[Any] = []

    def fake_jobs(jobs, targets, **kw):
        calls.append((len(jobs), list(targets)))
        return {t: [recorded("gpu_t4_cublaslt_dense.txt", "T4") for _ in jobs] for t in targets}

    def fake_tf(fn, *args, targets):
        return {t: recorded("gpu_h100_epilogue_dense.txt", t, autotuning=g.ON_DEVICE) for t in targets}

    monkeypatch.setattr(g, "compile_jobs", fake_jobs)
    monkeypatch.setattr(g, "compile_tf", fake_tf)
    monkeypatch.setattr(g, "tf_hlo", lambda fn, *a: "HloModule m")
    monkeypatch.setattr(g, "local_gpu_target", lambda: "H100-SXM")
    assert v.section_targets() == ["H100-SXM", "T4", "A100-SXM-40GB"]
    out = v.compile_programs({"a": (lambda x: x, [1]), "b": (lambda x: x, [2])})
    assert calls == [(2, ["T4", "A100-SXM-40GB"])], "every deviceless target and program in one subprocess"
    assert list(out) == ["a", "b"] and list(out["a"]) == ["H100-SXM", "T4", "A100-SXM-40GB"]
    assert v.on_device(out["b"]["H100-SXM"]) and not v.on_device(out["b"]["T4"])
    monkeypatch.setattr(g, "local_gpu_target", lambda: None)
    assert v.section_targets() == list(v.DEFAULT_TARGETS)


# ---------------------------------------------------------------------------------------------
# The real compiler.

@pytest.mark.heavy
@needs_extra
def test_compiled_rows_for_cpu_t4_and_h100():
    import tensorflow as tf

    def dense(x, w, b):
        return tf.nn.relu(x @ w + b)

    programs = {"small": (dense, [tf.zeros([256, 512]), tf.zeros([512, 128]), tf.zeros([128])]),
                "large": (dense, [tf.zeros([1024, 1024]), tf.zeros([1024, 1024]), tf.zeros([1024])])}
    out = v.compile_programs(programs, ["T4", "H100-SXM"])
    for name, per in out.items():
        t4, h100 = per["T4"], per["H100-SXM"]
        assert "without a device" in v.label(h100) and v.BOUNDS in v.label(t4)
        assert {k.backend for k in t4.kernels} == {"cuBLASLt call"}
        assert "Triton GEMM fusion" in h100.backends()
        row = v.gpu_row(name, h100, measure=programs[name])
        assert row.measured_s is None and row.temp_bytes is not None and row.lower_bound_s and row.lower_bound_s > 0
    (large,) = v.gemms(out["large"]["H100-SXM"])
    assert large.split_k == 1 and {"add", "maximum"} <= set(large.epilogue), large
    cpu = v.cpu_row("large", dense, *programs["large"][1])
    assert cpu.target == v.CPU and cpu.flops == 2 * 1024 ** 3 and cpu.lower_bound_s is None


# ---------------------------------------------------------------------------------------------
# Pipeline stages, command buffers, bounds by kernel and backend, recorded CPU rows, precision, converts.

class _Frame:
    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline


class _Frames(list):
    def __init__(self, frames, runs) -> None:
        super().__init__(frames)
        self.passes_run = runs


def test_pipeline_stages_group_passes_and_frames_in_order():
    from xlalab.hlo.pipeline import PassRun

    runs = [PassRun("pre-spmd-partitioner", "a"), PassRun("layout assignment", "b"),
            PassRun("fusion", "priority-fusion"), PassRun("fusion", "dce"),
            PassRun("post-fusion optimization", "c"), PassRun("autotuner", "autotuner"),
            PassRun("latency-hiding-scheduler", "d"), PassRun("something new", "e")]
    frames = _Frames([_Frame(""), _Frame("fusion"), _Frame("fusion"), _Frame("autotuner")], runs)
    got = v.pipeline_stages(frames)
    assert [r["stage"] for r in got] == ["sharding (SPMD)", "layout", "fusion", "autotuning", "scheduling and memory",
                                         "other"]
    fusion = got[2]
    assert fusion["pipelines"] == ["fusion", "post-fusion optimization"] and fusion["passes"] == 3
    assert fusion["frames"] == 2 and got[3]["frames"] == 1 and got[0]["frames"] == 0


def test_command_buffers_counts_called_command_buffer_computations():
    r = recorded("gpu_h100_epilogue_dense.txt", "H100-SXM")
    assert v.command_buffers(r) == 0
    text = """HloModule m
%command_buffer (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}
ENTRY %e (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %c = f32[4]{0} call(%a), to_apply=%command_buffer
}
"""
    module = parse(text)
    fake = g.GpuCompiled("H100-SXM", "H100", text, module, g.kernels_of(module, GPU_PEAKS["H100-SXM"]), {}, VERSIONS)
    assert v.command_buffers(fake) == 1


def test_dominant_and_bound_by_backend_share_the_module_bound():
    r = recorded("gpu_h100_split_k_dense.txt", "H100-SXM")
    top = v.dominant(r, 5)
    assert len(top) == 2 and top[0]["bound_s"] >= top[1]["bound_s"]
    assert sum(k["share"] for k in top) == pytest.approx(1.0)
    by = v.bound_by_backend(r)
    assert {b["backend"] for b in by} == {"Triton GEMM fusion", "loop fusion"}
    assert sum(b["share"] for b in by) == pytest.approx(1.0) and by[0]["share"] >= by[1]["share"]


def test_recorded_cpu_row_reads_kernels_fusions_and_median():
    record = {"hlo": {"kernels": 390, "fusions": 312, "bytes_moved": 1000}, "flops": 17.0, "median_ms": 142.5}
    row = v.recorded_cpu_row("step", record, "cpu-vm.json, measured")
    assert (row.target, row.kernels, row.backends, row.bytes) == (v.CPU, 390, {"fusions": 312, "other kernels": 78},
                                                                   1000)
    assert row.measured_s == pytest.approx(0.1425) and row.lower_bound_s is None and row.how.startswith("cpu-vm")


def test_products_use_tf32_by_default_and_fp32_at_highest_precision():
    plain = recorded("gpu_h100_epilogue_dense.txt", "H100-SXM")
    (p,) = v.products(plain)
    assert (p["dtype"], p["precision"], p["rate"], p["tflops"]) == ("f32", "default", "tf32", 494.5)
    text = (CORPUS / "gpu_h100_epilogue_dense.txt").read_text().replace(
        "rhs_contracting_dims={0}, frontend", "rhs_contracting_dims={0}, operand_precision={highest,highest}, frontend")
    module = parse(text)
    highest = g.GpuCompiled("H100-SXM", "H100", text, module, g.kernels_of(module, GPU_PEAKS["H100-SXM"]), {},
                            VERSIONS)
    (q,) = v.products(highest)
    assert (q["precision"], q["rate"], q["tflops"]) == ("highest", "fp32", 67)
    assert q["bound_s"] == pytest.approx(2 * 1024 ** 3 / 67e12)
    (t4,) = v.products(recorded("gpu_t4_cublaslt_dense.txt", "T4"))
    assert t4["rate"] == "fp32", "a T4 has no TF32 row"
    assert v.converts(plain) == 0


def test_compile_hlos_is_one_subprocess(monkeypatch):
    calls = []

    def fake_jobs(jobs, targets, **kw):
        calls.append(([j["hlo"] for j in jobs], list(targets)))
        return {t: [recorded("gpu_t4_cublaslt_dense.txt", "T4") for _ in jobs] for t in targets}

    monkeypatch.setattr(g, "compile_jobs", fake_jobs)
    out = v.compile_hlos({"a": "A", "b": "B"}, ["T4", "H100-SXM"])
    assert calls == [(["A", "B"], ["T4", "H100-SXM"])] and list(out["b"]) == ["T4", "H100-SXM"]


def test_gpu_row_measures_only_a_compile_on_this_machines_gpu(monkeypatch):
    from xlalab import bench

    timed = []

    def fake_benchmark(fn, *args, **kw):
        timed.append(args)
        return bench.Timing("f", 1.0, [2e-6, 3e-6, 4e-6])

    monkeypatch.setattr(bench, "benchmark", fake_benchmark)
    program = (lambda x: x, [1.0])
    deviceless = v.gpu_row("p", recorded("gpu_h100_epilogue_dense.txt", "H100-SXM"), measure=program)
    assert deviceless.measured_s is None and timed == [], "a deviceless compile is never timed"
    local = recorded("gpu_h100_epilogue_dense.txt", "H100-SXM", autotuning=g.ON_DEVICE)
    row = v.gpu_row("p", local, measure=program)
    assert row.measured_s == pytest.approx(3e-6) and row.how == "on device" and timed == [(1.0,)]


def test_census_programs_and_table():
    from xlalab.hlo import census

    names = list(v.census_programs())
    assert names == [v.CENSUS + n for n in census.FUNCTIONS]
    t4, h100 = recorded("gpu_t4_cublaslt_dense.txt", "T4"), recorded("gpu_h100_split_k_dense.txt", "H100-SXM")
    compiled = {"mine": {"T4": t4, "H100-SXM": h100}, v.CENSUS + "matmul + bias + ReLU": {"T4": t4, "H100-SXM": h100}}
    lines = str(v.census_table(compiled)).splitlines()
    assert lines[0] == "| function | XLA:GPU T4, jaxlib 0.10.2 | XLA:GPU H100, jaxlib 0.10.2 |"
    assert lines[2:] == ["| matmul + bias + ReLU | 1 (0) | 2 (2) |"], "a cuBLASLt call is no fusion; split-K is two"


def test_where_names_a_gpu_that_was_not_used(monkeypatch):
    from xlalab import hw

    r = recorded("gpu_h100_epilogue_dense.txt", "H100-SXM")
    monkeypatch.setattr(hw, "fake_gpu", lambda: None)
    monkeypatch.setattr(hw, "gpus", lambda: [])
    assert v.where([r]).startswith("The machine that built this page has no GPU: every GPU module")
    monkeypatch.setattr(hw, "gpus", lambda: [{"name": "NVIDIA H200"}])
    text = v.where([r])
    assert text.startswith("The machine that built this page has a GPU (NVIDIA H200), but every GPU module")
    assert "not a measurement" in text


def test_compile_programs_can_stay_deviceless_on_a_gpu_machine(monkeypatch):
    jobs_targets: list[list[str]] = []

    def fake_jobs(jobs, targets, **kw):
        jobs_targets.append(list(targets))
        return {t: [recorded("gpu_h100_epilogue_dense.txt", "H100-SXM") for _ in jobs] for t in targets}

    monkeypatch.setattr(g, "compile_jobs", fake_jobs)
    monkeypatch.setattr(g, "compile_tf", lambda *a, **k: pytest.fail("compiled on the device"))
    monkeypatch.setattr(g, "tf_hlo", lambda fn, *a: "HloModule m")
    monkeypatch.setattr(g, "local_gpu_target", lambda: "H100-SXM")
    out = v.compile_programs({"a": (lambda x: x, [1])}, ["T4", "H100-SXM"], use_device=False)
    assert jobs_targets == [["T4", "H100-SXM"]] and not v.on_device(out["a"]["H100-SXM"])
