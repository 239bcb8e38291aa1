"""What am I running on: CPU and GPU, the size profile, published GPU peaks and measured CPU ceilings.

Every chapter and lab reads its problem sizes from :func:`profile` and its hardware limits from
:func:`peaks`, so that no two pages disagree about a constant.

The package's modules, each re-exported here: :mod:`~xlalab.hw.datasheet` (the published peaks of each GPU
model, :data:`GPU_PEAKS`, and the names that find a row), :mod:`~xlalab.hw.detect` (this machine: CPU, GPUs or
the one ``XLALAB_FAKE_GPU`` names, backend, memory, :func:`profile`, :func:`mixed_policy`, :func:`summary`) and
:mod:`~xlalab.hw.measure` (measured bandwidth and matmul rates, their cache, and :func:`peaks`). A test that
replaces a function replaces it where it is looked up: ``monkeypatch.setattr(hw.measure, "backend", ...)`` for
:func:`peaks`.
"""

from xlalab.hw import datasheet, detect, measure
from xlalab.hw.datasheet import GPU_COMPUTE_CAPABILITY, GPU_PEAKS, DevicePeaks, gpu_key, gpu_peaks
from xlalab.hw.detect import (  # _compute_capability: the fusion chapter reads hw._compute_capability()
    FAKE_GPU_CC_ENV,
    FAKE_GPU_ENV,
    PROFILES,
    Backend,
    Summary,
    _compute_capability as _compute_capability,
    backend,
    cpu_count,
    cpu_flags,
    cpu_name,
    fake_gpu,
    gpus,
    load_average,
    memory_device,
    memory_info,
    memory_stats_available,
    mixed_policy,
    mixed_policy_for,
    onednn_enabled,
    pick,
    profile,
    reset_memory_stats,
    summary,
    supports_bf16,
)
from xlalab.hw.measure import (
    cpu_peaks,
    measure_bandwidth,
    measure_matmul_flops,
    measure_matmul_rates,
    measured_gpu_peaks,
    missing_row_note,
    peaks,
    run,
)

__all__ = ["FAKE_GPU_CC_ENV", "FAKE_GPU_ENV", "GPU_COMPUTE_CAPABILITY", "GPU_PEAKS", "PROFILES", "Backend",
           "DevicePeaks", "Summary", "backend", "cpu_count", "cpu_flags", "cpu_name", "cpu_peaks", "datasheet",
           "detect", "fake_gpu", "gpu_key", "gpu_peaks", "gpus", "load_average", "measure", "measure_bandwidth",
           "measure_matmul_flops", "measure_matmul_rates", "measured_gpu_peaks", "memory_device", "memory_info",
           "memory_stats_available", "missing_row_note", "mixed_policy", "mixed_policy_for", "onednn_enabled", "peaks",
           "pick", "profile", "reset_memory_stats", "run", "summary", "supports_bf16"]

