"""xlalab.hw: profiles, the peaks table, measured ceilings, the command line."""

import subprocess
import sys

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


def test_peaks_table_is_complete_and_sourced():
    for key in ("T4", "L4", "V100", "A100-40GB", "A100-80GB", "H100-SXM", "H200"):
        entry = hw.GPU_PEAKS[key]
        assert entry.bandwidth_gbps > 0 and entry.tflops["fp32"] > 0 and entry.source
    assert "bf16" not in hw.GPU_PEAKS["T4"].tflops  # Turing has no bf16 tensor cores
    assert hw.GPU_PEAKS["A100-40GB"].peak_flops("bf16") == pytest.approx(312e12)
    assert hw.gpu_peaks("NVIDIA A100-SXM4-80GB").name == "A100 80GB"
    assert hw.gpu_peaks("Tesla T4").name == "T4"
    assert hw.gpu_peaks("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert hw.gpu_peaks("Radeon") is None


def test_mixed_policy_matches_bf16_support():
    policy = hw.mixed_policy()
    assert policy in (None, "mixed_float16", "mixed_bfloat16")
    if not hw.gpus():
        assert (policy == "mixed_bfloat16") == hw.supports_bf16()


def test_measured_ceilings_are_plausible_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XLALAB_CACHE", str(tmp_path))
    bw = hw.measure_bandwidth(megabytes=64, repeats=2)
    assert 0.5 < bw["copy_gbps"] < 2000
    assert hw.measure_bandwidth(megabytes=64, repeats=2) == bw  # second call reads the cache
    assert list(tmp_path.glob("ceilings-*.json"))


def test_summary_describes_machine():
    s = hw.summary()
    assert s.cores >= 1 and s.tensorflow.startswith("2.")
    assert "cores" in s.describe()


def test_command_line_prints_summary():
    out = subprocess.run([sys.executable, "-m", "xlalab.hw"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "bandwidth" in out.stdout and "machine" in out.stdout
