"""xlalab.hw: profiles, the peaks table, measured ceilings, the command line."""

import subprocess
import sys
from typing import Any

import pytest

from xlalab import hw


def test_profile_override(monkeypatch):
    monkeypatch.setenv("XLALAB_PROFILE", "tiny")
    assert hw.profile() == "tiny"
    assert hw.pick(gpu=3, cpu=2, tiny=1) == 1
    monkeypatch.setenv("XLALAB_PROFILE", "bogus")
    with pytest.raises(ValueError):
        hw.profile()


def test_profile_without_gpu_is_cpu(monkeypatch):
    monkeypatch.delenv("XLALAB_PROFILE", raising=False)
    assert hw.profile() == ("gpu" if hw.gpus() else "cpu")


# Device names as recorded from `nvidia-smi --query-gpu=name --format=csv,noheader` and from TensorFlow's
# tf.config.experimental.get_device_details(gpu)["device_name"] on each model.
RECORDED_NAMES = {
    "Tesla T4": "T4",
    "Tesla V100-SXM2-16GB": "V100-SXM2",
    "Tesla V100-SXM2-32GB": "V100-SXM2",
    "Tesla V100-PCIE-16GB": "V100-PCIE",
    "NVIDIA A100-SXM4-40GB": "A100-SXM-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-SXM-80GB",
    "NVIDIA A100-PCIE-40GB": "A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe": "A100-PCIE-80GB",
    "NVIDIA H100 PCIe": "H100-PCIE",
    "NVIDIA H100 80GB HBM3": "H100-SXM",
    "NVIDIA H100 NVL": "H100-NVL",
    "NVIDIA H200": "H200",
    "NVIDIA H200 NVL": "H200-NVL",
    "NVIDIA L4": "L4",
    "NVIDIA L40": "L40",
    "NVIDIA L40S": "L40S",
    # Issue 26: the GPUs students bring (Kaggle's P100, workstation and gaming cards, a B200).
    "Tesla P100-PCIE-16GB": "P100-PCIE-16GB",
    "Tesla P100-PCIE-12GB": "P100-PCIE-12GB",
    "Tesla P100-SXM2-16GB": "P100-SXM2",
    "NVIDIA RTX A6000": "RTX-A6000",
    "NVIDIA GeForce RTX 3090": "RTX-3090",
    "NVIDIA GeForce RTX 4090": "RTX-4090",
    "NVIDIA GeForce RTX 5090": "RTX-5090",
    "NVIDIA B200": "B200",
}


@pytest.mark.parametrize("name,key", sorted(RECORDED_NAMES.items()))
def test_recorded_device_names_find_their_exact_model(name, key):
    assert hw.gpu_key(name) == key
    assert hw.gpu_peaks(name) is hw.GPU_PEAKS[key]


@pytest.mark.parametrize("name", ["Radeon RX 7900", "NVIDIA GH200 480GB", "NVIDIA A100 40GB", "NVIDIA GB200",
                                  "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 3090 Ti",
                                  "NVIDIA GeForce RTX 4090 D", "NVIDIA A10G"])
def test_unknown_or_ambiguous_names_match_nothing(name):
    assert hw.gpu_key(name) is None


def test_lookalike_models_get_their_own_peaks():
    def gbps(name: str) -> float:
        peaks = hw.gpu_peaks(name)
        assert peaks is not None, name
        return peaks.bandwidth_gbps

    assert gbps("NVIDIA L40S") != gbps("NVIDIA L4")
    assert gbps("NVIDIA H100 PCIe") < gbps("NVIDIA H100 80GB HBM3")
    assert gbps("NVIDIA A100 80GB PCIe") < gbps("NVIDIA A100-SXM4-80GB")


def test_peaks_table_is_complete_and_sourced():
    assert set(hw.GPU_PEAKS) == set(hw.GPU_COMPUTE_CAPABILITY)
    for key, entry in hw.GPU_PEAKS.items():
        assert entry.bandwidth_gbps > 0 and entry.tflops["fp32"] > 0
        assert "datasheet" in entry.source and "https://" in entry.source, key
    assert "bf16" not in hw.GPU_PEAKS["T4"].tflops  # Turing has no bf16 tensor cores
    assert hw.GPU_PEAKS["A100-SXM-40GB"].peak_flops("bf16") == pytest.approx(312e12)
    assert hw.GPU_PEAKS["A100-40GB"] is hw.GPU_PEAKS["A100-SXM-40GB"]  # the key of earlier versions


def test_fake_gpu_reports_that_gpu(monkeypatch):
    monkeypatch.setenv("XLALAB_FAKE_GPU", "NVIDIA A100-SXM4-40GB")
    monkeypatch.delenv("XLALAB_PROFILE", raising=False)
    b = hw.backend()
    assert (b.kind, b.xla, b.device, b.fake) == ("gpu", "XLA:GPU", "/GPU:0", True)
    assert b.name == "NVIDIA A100-SXM4-40GB"
    assert hw.peaks() is hw.GPU_PEAKS["A100-SXM-40GB"]
    assert hw.mixed_policy() == "mixed_bfloat16" and hw.supports_bf16()
    assert hw.profile() in ("cpu", "gpu") and (hw.profile() == "gpu") == bool(hw.gpus())
    assert hw.memory_device() == ("GPU:0" if hw.gpus() else "CPU:0")
    monkeypatch.setenv("XLALAB_FAKE_GPU", "Tesla T4")
    assert hw.mixed_policy() == "mixed_float16" and not hw.supports_bf16()
    monkeypatch.setenv("XLALAB_PROFILE", "tiny")
    assert hw.profile() == "tiny"
    # A name without a datasheet row is a GPU too (issue 26): measured roofs, the compute capability it is given.
    monkeypatch.setenv("XLALAB_FAKE_GPU", "NVIDIA GeForce GTX 1660 SUPER")
    monkeypatch.setenv("XLALAB_FAKE_GPU_CC", "7.5")
    assert hw.backend().is_gpu and hw.mixed_policy() == "mixed_float16" and not hw.supports_bf16()
    monkeypatch.setenv("XLALAB_FAKE_GPU_CC", "7.x")
    with pytest.raises(ValueError, match="XLALAB_FAKE_GPU_CC"):
        hw.mixed_policy()


def test_backend_without_gpu_is_the_cpu(monkeypatch):
    monkeypatch.delenv("XLALAB_FAKE_GPU", raising=False)
    b = hw.backend()
    if not hw.gpus():
        assert (b.kind, b.xla, b.device, b.fake) == ("cpu", "XLA:CPU", "/CPU:0", False)
        assert b.name == hw.cpu_name()


def _fake_measurements(monkeypatch, seen):
    def bandwidth(megabytes=256, repeats=5, refresh=False, device=None, cache=True):
        seen["copy_device"] = device
        return {"copy_gbps": 700.0, "device": device}

    def rates(device, dtypes=("fp32",), n=4096, repeats=5, refresh=False, cache=True):
        seen["matmul_device"], seen["dtypes"] = device, dtypes
        return {d: {"fp32": 20.0, "tf32": 60.0, "fp16": 120.0, "bf16": 118.0}[d] for d in dtypes}

    monkeypatch.setattr(hw.measure, "measure_bandwidth", bandwidth)
    monkeypatch.setattr(hw.measure, "measure_matmul_rates", rates)


def test_unknown_gpu_gets_a_measured_roof_labelled_as_measured(monkeypatch, capsys):
    """A GPU without a datasheet row (here a laptop RTX 4090) is measured, never refused (main raised LookupError)
    and never given a neighbour's row (the desktop RTX 4090's)."""
    name = "NVIDIA GeForce RTX 4090 Laptop GPU"
    seen: dict[str, Any] = {}
    _fake_measurements(monkeypatch, seen)
    monkeypatch.delenv("XLALAB_FAKE_GPU", raising=False)
    monkeypatch.setattr(hw.measure, "backend", lambda: hw.Backend("gpu", name, "XLA:GPU", "/GPU:0"))
    monkeypatch.setattr(hw.measure, "_compute_capability", lambda: (8, 9))
    monkeypatch.setattr(hw.measure, "supports_bf16", lambda: True)
    monkeypatch.setattr(hw.measure, "_NOTED", set())
    p = hw.peaks()
    assert capsys.readouterr().out == p.note + "\n"       # said once, where the roofs are first read
    hw.peaks()
    assert capsys.readouterr().out == ""
    assert p.is_measured and p.roof == "measured" and p.name == name
    assert seen == {"copy_device": "/GPU:0", "matmul_device": "/GPU:0", "dtypes": ("fp32", "tf32", "fp16", "bf16")}
    assert p.bandwidth_gbps == 700.0 and p.peak_flops("tf32") == pytest.approx(60e12)
    assert p.bandwidth_gbps != hw.GPU_PEAKS["RTX-4090"].bandwidth_gbps
    assert "measured on this GPU" in p.source and "no datasheet row" in p.source
    assert name in p.note and "xlalab.hw.GPU_PEAKS" in p.note and "\n" not in p.note
    assert p.ridge == pytest.approx(20e12 / 700e9)


def test_unknown_fake_gpu_is_measured_on_the_cpu_standing_in(monkeypatch):
    seen: dict[str, Any] = {}
    _fake_measurements(monkeypatch, seen)
    monkeypatch.setenv("XLALAB_FAKE_GPU", "NVIDIA GeForce GTX 1660 SUPER")
    monkeypatch.setenv("XLALAB_FAKE_GPU_CC", "7.5")
    p = hw.peaks()
    assert p.is_measured and seen["copy_device"] == seen["matmul_device"] == "/CPU:0"
    assert seen["dtypes"] == ("fp32", "fp16")            # Turing: no TF32, no bf16
    assert "XLALAB_FAKE_GPU" in p.source and p.note


def test_datasheet_rows_are_not_measured(monkeypatch):
    monkeypatch.setenv("XLALAB_FAKE_GPU", "NVIDIA GeForce RTX 4090")
    p = hw.peaks()
    assert p is hw.GPU_PEAKS["RTX-4090"] and not p.is_measured and p.note == ""
    assert hw.cpu_peaks.__doc__ and hw.GPU_PEAKS["B200"].roof == "datasheet"


@pytest.mark.slow
def test_measure_matmul_rates_times_each_type(tmp_path, monkeypatch):
    monkeypatch.setenv("XLALAB_CACHE", str(tmp_path))
    import tensorflow as tf

    before = tf.config.experimental.tensor_float_32_execution_enabled()
    rates = hw.measure_matmul_rates("/CPU:0", ("fp32", "tf32", "bf16"), n=128, repeats=2)
    assert set(rates) == {"fp32", "tf32", "bf16"} and all(0 < v < 1000 for v in rates.values())
    assert tf.config.experimental.tensor_float_32_execution_enabled() == before
    assert hw.measure_matmul_rates("/CPU:0", ("fp32", "tf32", "bf16"), n=128, repeats=2) == rates  # cached


def test_memory_info_reads_the_device_in_use():
    import tensorflow as tf

    hw.reset_memory_stats()
    with tf.device(hw.memory_device()):
        x = tf.ones([1 << 20])
    info = hw.memory_info()
    assert set(info) == {"current", "peak"} and info["peak"] >= info["current"] >= 0
    del x


def test_memory_stats_available_says_whether_the_counts_mean_anything(monkeypatch):
    import tensorflow as tf

    if hw.memory_stats_available():
        hw.reset_memory_stats()
        start = hw.memory_info()["current"]
        with tf.device(hw.memory_device()):
            x = tf.zeros([1 << 20])                 # 4 MiB
        assert hw.memory_info()["current"] - start >= 4 << 20
        del x
    else:
        assert hw.memory_info() == {"current": 0, "peak": 0}
        assert not hw.gpus(), "a GPU allocator always keeps statistics"
    assert hw.onednn_enabled() in (True, False)

    def no_stats(device):
        raise ValueError(f"Allocator stats not available for device '{device}'")

    monkeypatch.setattr(tf.config.experimental, "get_memory_info", no_stats)
    assert hw.memory_stats_available() is False and hw.memory_info() == {"current": 0, "peak": 0}


def test_mixed_policy_matches_bf16_support():
    policy = hw.mixed_policy()
    assert policy in (None, "mixed_float16", "mixed_bfloat16")
    if not hw.gpus():
        assert (policy == "mixed_bfloat16") == hw.supports_bf16()


def test_measured_ceilings_are_plausible_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XLALAB_CACHE", str(tmp_path))
    bw = hw.measure_bandwidth(megabytes=64, repeats=2)
    assert 0.5 < bw["copy_gbps"] < 2000 and 0.5 < bw["copy_threads_gbps"] < 4000
    assert bw["threads"] == hw.cpu_count()
    assert hw.measure_bandwidth(megabytes=64, repeats=2) == bw  # second call reads the cache
    assert list(tmp_path.glob("ceilings-*.json"))
    before = [f.read_text() for f in tmp_path.glob("ceilings-*.json")]
    hw.measure_bandwidth(megabytes=16, repeats=1, cache=False)  # a second opinion leaves the cache alone
    assert [f.read_text() for f in tmp_path.glob("ceilings-*.json")] == before


def test_cpu_peaks_roof_is_the_multithreaded_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("XLALAB_CACHE", str(tmp_path))
    monkeypatch.setattr(hw.measure, "measure_bandwidth", lambda refresh=False: {
        "copy_gbps": 10.0, "copy_threads_gbps": 30.0, "threads": 4, "triad_gbps": 12.0})
    monkeypatch.setattr(hw.measure, "measure_matmul_flops",
                        lambda refresh=False: {"numpy_tflops": 0.5, "tensorflow_tflops": 0.4})
    p = hw.cpu_peaks()
    assert p.bandwidth_gbps == 30.0 and p.measured["copy_gbps"] == 10.0
    assert "4 threads" in p.source and "multi-threaded" in p.source
    assert p.ridge == pytest.approx(0.5e12 / 30e9)
    # Review s3 N4: where one thread beats the pool (a busy machine), the roof is the single-threaded copy.
    monkeypatch.setattr(hw.measure, "measure_bandwidth", lambda refresh=False: {
        "copy_gbps": 30.0, "copy_threads_gbps": 15.0, "threads": 2, "triad_gbps": 12.0})
    p = hw.cpu_peaks()
    assert p.bandwidth_gbps == 30.0 and "single-threaded NumPy copy;" in p.source


def test_summary_describes_machine():
    s = hw.summary()
    assert s.cores >= 1 and s.tensorflow.startswith("2.")
    assert "cores" in s.describe()


@pytest.mark.heavy   # a subprocess imports TensorFlow and measures the machine
def test_command_line_prints_summary():
    out = subprocess.run([sys.executable, "-m", "xlalab", "hw"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "bandwidth" in out.stdout and "machine" in out.stdout


def test_mixed_policy_for_compute_capability():
    """The rule the mixed-precision chapter's GPU table uses is mixed_policy()'s (book-review-s5, S5-5): no policy
    below 7.0 (a P100's FP16 is not tensor-core), float16 on 7.x, bfloat16 from 8.0."""
    cc = hw.GPU_COMPUTE_CAPABILITY
    assert hw.mixed_policy_for(cc["P100-PCIE-16GB"]) is None
    assert hw.mixed_policy_for(cc["T4"]) == hw.mixed_policy_for(cc["V100-SXM2"]) == "mixed_float16"
    assert hw.mixed_policy_for(cc["A100-SXM-40GB"]) == hw.mixed_policy_for(cc["H100-SXM"]) == "mixed_bfloat16"


def test_load_average_is_three_numbers_or_nans(monkeypatch):
    """The intro prints the build's load from hw.load_average(): three numbers, or NaNs where the OS keeps none."""
    import math
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 2.0, 0.25))
    assert hw.load_average() == (1.5, 2.0, 0.25)

    def missing():
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", missing)
    assert all(math.isnan(x) for x in hw.load_average())
