"""What am I running on: CPU and GPU, the size profile, published GPU peaks and measured CPU ceilings.

Every chapter and lab reads its problem sizes from :func:`profile` and its hardware limits from
:func:`peaks`, so that no two pages disagree about a constant.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from xlalab.files import atomic_write

PROFILES = ("gpu", "cpu", "tiny")


@dataclass(frozen=True)
class DevicePeaks:
    """Peak rates of one device.

    Attributes:
        name: device name, e.g. ``"A100 SXM4 40GB"`` or the CPU model.
        bandwidth_gbps: the memory roof in GB/s (10**9 bytes per second): the datasheet figure on a GPU,
            the measured multi-threaded copy bandwidth on a CPU.
        tflops: dense peak in TFLOP/s per dtype key (``"fp32"``, ``"tf32"``, ``"fp16"``, ``"bf16"``);
            a dtype the device has no fast path for is absent.
        source: where the numbers come from (a datasheet, or what was measured and which figure is the roof).
        measured: figures measured on this machine beside the roof, e.g. ``{"copy_gbps": ...}``
            (empty for a table entry).
        roof: where the roof itself comes from: ``"datasheet"`` (a :data:`GPU_PEAKS` row) or ``"measured"``
            (a CPU, or a GPU without a row: see :func:`measured_gpu_peaks`).
        note: one line for the reader where the roof is not what the page would expect (a GPU without a
            datasheet row: which row is missing and how to add it); ``""`` otherwise.
    """

    name: str
    bandwidth_gbps: float
    tflops: dict[str, float]
    source: str
    measured: dict[str, float] = field(default_factory=dict)
    roof: str = "datasheet"
    note: str = ""

    @property
    def is_measured(self) -> bool:
        """True when the roof was measured on this machine (no datasheet figure): a floor under the true peak."""
        return self.roof == "measured"

    def peak_flops(self, dtype: str = "fp32") -> float:
        """Peak FLOP/s for ``dtype``; falls back to fp32 where the device has no faster path."""
        return self.tflops.get(dtype, self.tflops["fp32"]) * 1e12

    @property
    def bandwidth(self) -> float:
        """Memory bandwidth in bytes per second."""
        return self.bandwidth_gbps * 1e9

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the fp32 compute roof meets the memory roof."""
        return self.peak_flops("fp32") / self.bandwidth


_SPARSE = "tensor-core rates halved from the datasheet's 'with sparsity' figures"
_T4 = "NVIDIA T4 Tensor Core GPU datasheet (2019), https://www.nvidia.com/en-us/data-center/tesla-t4/"
_V100 = ("NVIDIA Tesla V100 GPU datasheet (2020), "
         "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf")
_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (2021), https://www.nvidia.com/content/dam/en-zz/Solutions/"
         "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf; " + _SPARSE)
_L4 = "NVIDIA L4 Tensor Core GPU datasheet (2023), https://www.nvidia.com/en-us/data-center/l4/; " + _SPARSE
_L40 = "NVIDIA L40 GPU datasheet (2022), https://www.nvidia.com/en-us/data-center/l40/; " + _SPARSE
_L40S = "NVIDIA L40S GPU datasheet (2023), https://www.nvidia.com/en-us/data-center/l40s/; " + _SPARSE
_H100 = ("NVIDIA H100 Tensor Core GPU datasheet (2023), https://www.nvidia.com/en-us/data-center/h100/; "
         + _SPARSE)
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024), https://www.nvidia.com/en-us/data-center/h200/; " + _SPARSE
_P100 = ("NVIDIA Tesla P100 datasheet (2016), "
         "https://images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-PCIe-datasheet.pdf; no tensor cores, fp16 is "
         "the half-precision rate")
_P100_SXM = ("NVIDIA Tesla P100 datasheet (2016), https://images.nvidia.com/content/tesla/pdf/"
             "nvidia-tesla-p100-datasheet.pdf; no tensor cores, fp16 is the half-precision rate")
# GeForce cards run fp16/bf16 tensor-core math with an fp32 accumulator (what TensorFlow's matmuls use) at half the
# fp16-accumulate rate; the whitepapers list both, and the fp32-accumulate figure is stored.
_FP32_ACC = "fp16/bf16: the 'with FP32 Accumulate' tensor rate"
_RTX3090 = ("NVIDIA Ampere GA102 GPU Architecture whitepaper (2021), Table: GeForce RTX 3090, https://www.nvidia.com/"
            "content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf; " + _SPARSE + "; " + _FP32_ACC)
_RTX4090 = ("NVIDIA Ada GPU Architecture whitepaper (2023), Table: GeForce RTX 4090, https://images.nvidia.com/aem-dam/"
            "Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf; " + _SPARSE + "; " + _FP32_ACC)
_RTX5090 = ("NVIDIA RTX Blackwell GPU Architecture whitepaper (2025), Table: GeForce RTX 5090, https://images.nvidia.com/"
            "aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf; " + _SPARSE + "; "
            + _FP32_ACC)
_A6000 = ("NVIDIA RTX A6000 datasheet (2021), specifications at https://www.nvidia.com/en-us/design-visualization/"
          "rtx-a6000/; " + _SPARSE)
_B200 = ("NVIDIA Blackwell Architecture Technical Brief (2024), HGX B200 (1000 W) per-GPU rates, "
         "https://resources.nvidia.com/en-us-blackwell-architecture; " + _SPARSE)


def _ampere_plus(fp32: float, tf32: float, bf16: float) -> dict[str, float]:
    return {"fp32": fp32, "tf32": tf32, "fp16": bf16, "bf16": bf16}


class _PeaksTable(dict):
    """The GPU table; the keys of earlier versions (``"A100-40GB"``, ``"V100"``) still look up their SXM entry."""

    _OLD_KEYS = {"A100-40GB": "A100-SXM-40GB", "A100-80GB": "A100-SXM-80GB", "V100": "V100-SXM2"}

    def __missing__(self, key: str) -> DevicePeaks:
        if key in self._OLD_KEYS:
            return self[self._OLD_KEYS[key]]
        raise KeyError(key)


# Dense (no sparsity) datasheet peaks, one entry per exact model: PCIe and SXM boards of one chip differ in
# clocks, power and memory, so they differ in peaks. NVIDIA quotes Ampere and later tensor-core figures
# "with sparsity", twice the dense rate; the dense halves are stored. fp16 on T4/V100 is the tensor-core rate.
GPU_PEAKS: dict[str, DevicePeaks] = _PeaksTable({
    "T4": DevicePeaks("T4", 320, {"fp32": 8.1, "fp16": 65.0}, _T4),
    "V100-PCIE": DevicePeaks("V100 PCIe", 900, {"fp32": 14.0, "fp16": 112.0}, _V100 + ", PCIe"),
    "V100-SXM2": DevicePeaks("V100 SXM2", 900, {"fp32": 15.7, "fp16": 125.0}, _V100 + ", SXM2"),
    "A100-PCIE-40GB": DevicePeaks("A100 PCIe 40GB", 1555, _ampere_plus(19.5, 156.0, 312.0), _A100 + "; PCIe 40GB"),
    "A100-PCIE-80GB": DevicePeaks("A100 PCIe 80GB", 1935, _ampere_plus(19.5, 156.0, 312.0), _A100 + "; PCIe 80GB"),
    "A100-SXM-40GB": DevicePeaks("A100 SXM4 40GB", 1555, _ampere_plus(19.5, 156.0, 312.0), _A100 + "; SXM 40GB"),
    "A100-SXM-80GB": DevicePeaks("A100 SXM4 80GB", 2039, _ampere_plus(19.5, 156.0, 312.0), _A100 + "; SXM 80GB"),
    "L4": DevicePeaks("L4", 300, _ampere_plus(30.3, 60.0, 121.0), _L4),
    "L40": DevicePeaks("L40", 864, _ampere_plus(90.5, 90.5, 181.0), _L40),
    "L40S": DevicePeaks("L40S", 864, _ampere_plus(91.6, 183.0, 362.0), _L40S),
    "H100-PCIE": DevicePeaks("H100 PCIe", 2000, _ampere_plus(51.0, 378.0, 756.0), _H100 + "; PCIe"),
    "H100-SXM": DevicePeaks("H100 SXM5", 3350, _ampere_plus(67.0, 494.5, 989.5), _H100 + "; SXM"),
    "H100-NVL": DevicePeaks("H100 NVL", 3900, _ampere_plus(60.0, 417.5, 835.5), _H100 + "; NVL (one GPU)"),
    "H200": DevicePeaks("H200 SXM", 4800, _ampere_plus(67.0, 494.5, 989.5), _H200 + "; SXM"),
    "H200-NVL": DevicePeaks("H200 NVL", 4800, _ampere_plus(60.0, 417.5, 835.5), _H200 + "; NVL (one GPU)"),
    "B200": DevicePeaks("B200 (HGX)", 8000, _ampere_plus(80.0, 1100.0, 2250.0), _B200),
    "P100-PCIE-16GB": DevicePeaks("Tesla P100 PCIe 16GB", 732, {"fp32": 9.3, "fp16": 18.7}, _P100 + "; PCIe 16GB"),
    "P100-PCIE-12GB": DevicePeaks("Tesla P100 PCIe 12GB", 549, {"fp32": 9.3, "fp16": 18.7}, _P100 + "; PCIe 12GB"),
    "P100-SXM2": DevicePeaks("Tesla P100 SXM2", 732, {"fp32": 10.6, "fp16": 21.2}, _P100_SXM + "; SXM2 (NVLink)"),
    "RTX-A6000": DevicePeaks("RTX A6000", 768, _ampere_plus(38.7, 77.4, 154.8), _A6000),
    "RTX-3090": DevicePeaks("GeForce RTX 3090", 936, _ampere_plus(35.6, 35.6, 71.0), _RTX3090),
    "RTX-4090": DevicePeaks("GeForce RTX 4090", 1008, _ampere_plus(82.6, 82.6, 165.2), _RTX4090),
    "RTX-5090": DevicePeaks("GeForce RTX 5090", 1792, _ampere_plus(104.8, 104.8, 209.5), _RTX5090),
})

# Compute capability of each table entry (CUDA C Programming Guide, "Compute Capabilities").
GPU_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "T4": (7, 5), "V100-PCIE": (7, 0), "V100-SXM2": (7, 0),
    "A100-PCIE-40GB": (8, 0), "A100-PCIE-80GB": (8, 0), "A100-SXM-40GB": (8, 0), "A100-SXM-80GB": (8, 0),
    "L4": (8, 9), "L40": (8, 9), "L40S": (8, 9),
    "H100-PCIE": (9, 0), "H100-SXM": (9, 0), "H100-NVL": (9, 0), "H200": (9, 0), "H200-NVL": (9, 0),
    "B200": (10, 0), "P100-PCIE-16GB": (6, 0), "P100-PCIE-12GB": (6, 0), "P100-SXM2": (6, 0),
    "RTX-A6000": (8, 6), "RTX-3090": (8, 6), "RTX-4090": (8, 9), "RTX-5090": (12, 0),
}

# Patterns over the normalized device name (upper case, every run of non-alphanumerics one space), first
# match wins. Recorded names: nvidia-smi --query-gpu=name and TensorFlow's device_name, e.g.
# "Tesla T4", "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 PCIe",
# "NVIDIA H100 80GB HBM3" (the SXM board), "NVIDIA H100 NVL", "NVIDIA L40S", "NVIDIA H200".
_GPU_PATTERNS: list[tuple[str, str]] = [
    (r"\bH200\b.*\bNVL\b", "H200-NVL"),
    (r"\bH200\b", "H200"),
    (r"\bH100\b.*\bNVL\b", "H100-NVL"),
    (r"\bH100\b.*\bPCIE\b", "H100-PCIE"),
    (r"\bH100\b.*\b(SXM5?|HBM3)\b", "H100-SXM"),
    (r"\bA100\b(?=.*\bSXM4?\b).*\b80GB\b", "A100-SXM-80GB"),
    (r"\bA100\b(?=.*\bSXM4?\b).*\b40GB\b", "A100-SXM-40GB"),
    (r"\bA100\b(?=.*\bPCIE\b).*\b80GB\b", "A100-PCIE-80GB"),
    (r"\bA100\b(?=.*\b80GB\b).*\bPCIE\b", "A100-PCIE-80GB"),
    (r"\bA100\b(?=.*\bPCIE\b).*\b40GB\b", "A100-PCIE-40GB"),
    (r"\bV100\b.*\bSXM2\b", "V100-SXM2"),
    (r"\bV100\b.*\bPCIE\b", "V100-PCIE"),
    (r"\bL40S\b", "L40S"),
    (r"\bL40\b", "L40"),
    (r"\bL4\b", "L4"),
    (r"\bT4\b", "T4"),
    # "NVIDIA B200"; never the GB200 superchip (its own token) or the B200A.
    (r"\bB200$", "B200"),
    # "Tesla P100-PCIE-16GB" (Kaggle), "Tesla P100-PCIE-12GB", "Tesla P100-SXM2-16GB".
    (r"\bP100\b.*\bPCIE\b.*\b12GB\b", "P100-PCIE-12GB"),
    (r"\bP100\b.*\bPCIE\b", "P100-PCIE-16GB"),
    (r"\bP100\b.*\bSXM2\b", "P100-SXM2"),
    # "NVIDIA RTX A6000"; the desktop GeForce boards exactly ("NVIDIA GeForce RTX 4090"), never a Ti, a D or a
    # Laptop GPU, which differ in clocks and memory.
    (r"\bRTX A6000$", "RTX-A6000"),
    (r"\bRTX 3090$", "RTX-3090"),
    (r"\bRTX 4090$", "RTX-4090"),
    (r"\bRTX 5090$", "RTX-5090"),
]


def _normalize_gpu_name(name: str) -> str:
    import re

    return " ".join(re.sub(r"[^A-Za-z0-9]+", " ", name).upper().split())


def gpu_key(name: str) -> str | None:
    """The :data:`GPU_PEAKS` key of a device name as nvidia-smi or TensorFlow reports it, else ``None``.

    Example:
        >>> gpu_key("NVIDIA A100-SXM4-40GB"), gpu_key("NVIDIA H100 80GB HBM3"), gpu_key("NVIDIA L40S")
        ('A100-SXM-40GB', 'H100-SXM', 'L40S')
    """
    import re

    norm = _normalize_gpu_name(name)
    for pattern, key in _GPU_PATTERNS:
        if re.search(pattern, norm):
            return key
    return None


def cpu_name() -> str:
    """The CPU model as the operating system reports it, e.g. ``"AMD EPYC"``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The CPU feature flags (Linux ``/proc/cpuinfo``), e.g. ``{"avx2", "avx512_bf16", ...}``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_count() -> int:
    """Cores this process may use (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def gpus() -> list[dict[str, Any]]:
    """The visible GPUs: one dict each with ``name``, ``compute_capability`` (tuple) and ``memory_gb``.

    Empty on a machine without a GPU. Imports TensorFlow; the CUDA probe's messages on a machine without a GPU
    (``failed call to cuInit``) are held back (:func:`xlalab.compat.held_probe_messages`), any other line shown.
    """
    from xlalab.compat import held_probe_messages

    with held_probe_messages():
        import tensorflow as tf

        devices = tf.config.list_physical_devices("GPU")
    found = []
    for dev in devices:
        details = tf.config.experimental.get_device_details(dev)
        found.append({
            "name": details.get("device_name", dev.name),
            "compute_capability": tuple(details.get("compute_capability", (0, 0))),
            "memory_gb": _nvidia_smi_memory_gb(),
        })
    return found


def _nvidia_smi_memory_gb() -> float | None:
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.split()
        return round(float(out[0]) / 1024, 1) if out else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


FAKE_GPU_ENV = "XLALAB_FAKE_GPU"
FAKE_GPU_CC_ENV = "XLALAB_FAKE_GPU_CC"


def fake_gpu() -> str | None:
    """The device name in ``XLALAB_FAKE_GPU`` (e.g. ``"NVIDIA A100-SXM4-40GB"``), or ``None`` when unset.

    With it set, :func:`backend`, :func:`peaks`, :func:`mixed_policy` and :func:`supports_bf16` answer for
    that GPU while TensorFlow still runs on the CPU: it tests the GPU branches of chapters and labs on a
    machine without one. A name missing from :data:`GPU_PEAKS` stands for a GPU without a datasheet row: its
    roofs are measured (:func:`measured_gpu_peaks`, on the CPU that stands in for it) and its compute
    capability is ``XLALAB_FAKE_GPU_CC`` (e.g. ``"8.6"``; default ``"8.0"``).
    """
    name = os.environ.get(FAKE_GPU_ENV, "").strip()
    return name or None


def _fake_compute_capability(name: str) -> tuple[int, int]:
    key = gpu_key(name)
    if key is not None:
        return GPU_COMPUTE_CAPABILITY[key]
    raw = os.environ.get(FAKE_GPU_CC_ENV, "").strip() or "8.0"
    try:
        major, minor = (int(x) for x in raw.split("."))
    except ValueError:
        raise ValueError(f"{FAKE_GPU_CC_ENV}={raw!r}; expected a compute capability like '8.6'") from None
    return major, minor


@dataclass(frozen=True)
class Backend:
    """The device the course's work runs on, as :func:`backend` reports it.

    Attributes:
        kind: ``"gpu"`` or ``"cpu"``.
        name: the GPU's name as TensorFlow reports it (``"NVIDIA A100-SXM4-40GB"``), or the CPU model.
        xla: the XLA backend that compiles for it, ``"XLA:GPU"`` or ``"XLA:CPU"``.
        device: the TensorFlow device string, ``"/GPU:0"`` or ``"/CPU:0"``.
        fake: True when ``XLALAB_FAKE_GPU`` names the GPU while TensorFlow runs on the CPU.
    """

    kind: str
    name: str
    xla: str
    device: str
    fake: bool = False

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def describe(self) -> str:
        """A phrase for prose, e.g. ``"the GPU (NVIDIA A100-SXM4-40GB)"`` or ``"the CPU (AMD EPYC 7B13)"``."""
        return f"the {self.kind.upper()} ({self.name})"


def backend() -> Backend:
    """The device the work runs on: the first GPU TensorFlow sees, else the CPU (``XLALAB_FAKE_GPU`` overrides).

    Example:
        >>> b = backend()
        >>> f"{b.xla} on {b.name}"          # 'XLA:CPU on AMD EPYC 7B13' or 'XLA:GPU on Tesla T4'
    """
    fake = fake_gpu()
    if fake:
        return Backend("gpu", fake, "XLA:GPU", "/GPU:0", fake=True)
    devices = gpus()
    if devices:
        return Backend("gpu", devices[0]["name"], "XLA:GPU", "/GPU:0")
    return Backend("cpu", cpu_name(), "XLA:CPU", "/CPU:0")


def _compute_capability() -> tuple[int, int] | None:
    """The compute capability of the GPU in use (the fake one included), ``None`` on a CPU."""
    fake = fake_gpu()
    if fake:
        return _fake_compute_capability(fake)
    devices = gpus()
    if devices:
        return min(d["compute_capability"] for d in devices)
    return None


def memory_device() -> str:
    """Where the tensors live, for ``tf.config.experimental.get_memory_info``: ``"GPU:0"`` or ``"CPU:0"``.

    Under ``XLALAB_FAKE_GPU`` the tensors are still on the CPU, so this is ``"CPU:0"``.
    """
    return "GPU:0" if gpus() else "CPU:0"


def memory_info() -> dict[str, int]:
    """``{"current": bytes, "peak": bytes}`` allocated by TensorFlow on the device the tensors live on.

    Reads ``tf.config.experimental.get_memory_info`` of :func:`memory_device`. On a CPU, TensorFlow tracks
    these statistics only for some allocators; where it does not, both are 0 (check before dividing).

    Example:
        >>> reset_memory_stats(); y = step(x); memory_info()["peak"]
    """
    import tensorflow as tf

    try:
        info = tf.config.experimental.get_memory_info(memory_device())
    except ValueError:  # an allocator without statistics
        return {"current": 0, "peak": 0}
    return {"current": int(info["current"]), "peak": int(info["peak"])}


def memory_stats_available() -> bool:
    """Whether TensorFlow's allocator on :func:`memory_device` keeps statistics (``get_memory_info`` works).

    Always true on a GPU. On a CPU only the oneDNN allocator (:func:`onednn_enabled`) keeps them; TensorFlow's plain
    CPU allocator collects none unless told to, and then :func:`memory_info` reads 0 whatever was allocated, so
    a page must not print or compare those zeros.

    Example:
        >>> if memory_stats_available(): print(memory_info()["peak"])
    """
    import tensorflow as tf

    try:
        tf.config.experimental.get_memory_info(memory_device())
    except ValueError:  # "Allocator stats not available for device ..."
        return False
    return True


def onednn_enabled() -> bool:
    """Whether this TensorFlow runs its oneDNN CPU kernels (``_MklMatMul`` and friends) and allocator.

    TensorFlow decides at start-up: on Linux x86 it turns oneDNN on by default only where the CPU has AVX512_VNNI,
    AVX512_BF16, AVX_VNNI or AMX; ``TF_ENABLE_ONEDNN_OPTS=0`` or ``=1`` overrides it. False where TensorFlow
    cannot say.
    """
    import tensorflow  # noqa: F401  (loads the library the check lives in)

    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # pragma: no cover - a TensorFlow without the check
        return False
    return bool(_pywrap_util_port.IsMklEnabled())


def reset_memory_stats() -> None:
    """Reset the peak of :func:`memory_info` to the current allocation (the device the tensors live on)."""
    import tensorflow as tf

    try:
        tf.config.experimental.reset_memory_stats(memory_device())
    except ValueError:
        pass


def profile() -> str:
    """The size profile: ``"gpu"`` (full sizes), ``"cpu"`` (small sizes) or ``"tiny"`` (tests).

    ``XLALAB_PROFILE`` overrides the choice; otherwise it is ``"gpu"`` when TensorFlow sees a GPU.
    Under ``XLALAB_FAKE_GPU`` it is never ``"gpu"`` unless forced: the work really runs on the CPU.
    """
    forced = os.environ.get("XLALAB_PROFILE", "").strip().lower()
    if forced:
        if forced not in PROFILES:
            raise ValueError(f"XLALAB_PROFILE={forced!r}; expected one of {PROFILES}")
        return forced
    return "gpu" if gpus() else "cpu"


def pick(gpu: Any, cpu: Any, tiny: Any) -> Any:
    """The value for the current :func:`profile`, e.g. ``n = pick(gpu=1_000_000, cpu=100_000, tiny=1000)``."""
    return {"gpu": gpu, "cpu": cpu, "tiny": tiny}[profile()]


def supports_bf16() -> bool:
    """True when the device has native bfloat16 arithmetic.

    A GPU of compute capability 8.0 or newer (A100, L4, H100) has bf16 tensor cores; a CPU needs
    AVX512-BF16 or AMX-BF16. T4 (7.5) and V100 (7.0) have fp16 tensor cores only. Under
    ``XLALAB_FAKE_GPU`` the answer is the named GPU's.
    """
    cc = _compute_capability()
    if cc is not None:
        return cc >= (8, 0)
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def mixed_policy() -> str | None:
    """The Keras mixed-precision policy worth trying here, or ``None`` where none is expected to help.

    ``"mixed_bfloat16"`` on GPUs with bf16 tensor cores (no loss scaling needed),
    ``"mixed_float16"`` on fp16-only tensor-core GPUs (V100, T4), ``"mixed_bfloat16"`` on a CPU with
    native bf16 instructions, ``None`` otherwise (a CPU that would emulate the narrow type). Under
    ``XLALAB_FAKE_GPU`` the answer is the named GPU's.
    """
    cc = _compute_capability()
    if cc is not None:
        if cc >= (8, 0):
            return "mixed_bfloat16"
        if cc >= (7, 0):
            return "mixed_float16"
        return None
    return "mixed_bfloat16" if supports_bf16() else None


def gpu_peaks(name: str) -> DevicePeaks | None:
    """The datasheet peaks of the GPU model a device name names exactly (see :func:`gpu_key`), else ``None``."""
    key = gpu_key(name)
    return GPU_PEAKS[key] if key else None


# ---------------------------------------------------------------------------------------------
# Measured CPU ceilings (cached per machine).

def _cache_path() -> Path:
    root = Path(os.environ.get("XLALAB_CACHE", Path.home() / ".cache" / "xlalab"))
    key = hashlib.sha1(f"{socket.gethostname()}|{cpu_name()}|{cpu_count()}".encode()).hexdigest()[:12]
    return root / f"ceilings-{key}.json"


def _load_cache() -> dict[str, Any]:
    try:
        return json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _store_cache(key: str, value: Any) -> None:
    data = _load_cache()
    data[key] = value
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data, indent=1))
    except OSError:
        pass


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _threaded_copy_s(dst, src, threads: int, repeats: int) -> float:
    """Best time of copying ``src`` into ``dst`` with ``threads`` threads, each one contiguous slice (NumPy frees
    the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    bounds = np.linspace(0, src.size, threads + 1).astype(int)
    parts = [(dst[a:b], src[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda p: np.copyto(*p), parts))
        return _best_of(lambda: list(pool.map(lambda p: np.copyto(*p), parts)), repeats)


def _device_copy_gbps(device: str, megabytes: int, repeats: int) -> float:
    """Read-plus-write bandwidth of one compiled elementwise kernel (``x + 1``) on ``device``, in GB/s."""
    import tensorflow as tf

    n = megabytes * 2**20 // 4
    with tf.device(device):
        x = tf.zeros([n], tf.float32)
        step = tf.function(lambda v: v + 1.0, jit_compile=True)
        step(x)
        tf.test.experimental.sync_devices()

        def once() -> None:
            step(x)
            tf.test.experimental.sync_devices()

        seconds = _best_of(once, repeats)
    return round(2 * 4 * n / seconds / 1e9, 2)


def measure_bandwidth(megabytes: int = 256, repeats: int = 5, refresh: bool = False,
                      device: str | None = None, cache: bool = True) -> dict[str, Any]:
    """Measure memory bandwidth in GB/s; cached per machine unless ``refresh`` is true.

    ``cache=False`` measures without reading or writing the cache (a second opinion that leaves the
    ceilings other pages use alone).

    Host (``device`` None): ``copy_gbps`` (one NumPy thread copies ``megabytes``: ``2 * n`` float32 moved,
    read plus write), ``copy_threads_gbps`` (the same copy split over ``threads`` = :func:`cpu_count`
    threads, as XLA:CPU and TensorFlow's CPU kernels split their work over a thread pool) and
    ``triad_gbps`` (STREAM-style ``a = b + s * c`` in two NumPy passes, ``5 * n`` moved).
    A device (``device="/GPU:0"``): ``copy_gbps`` of a compiled ``x + 1`` on that device (device memory
    to device memory, read plus write), timed with a device barrier. The best of ``repeats`` runs is kept.

    Example:
        >>> measure_bandwidth()["copy_threads_gbps"]         # the CPU's memory roof
        >>> measure_bandwidth(device="/GPU:0")["copy_gbps"]  # what a GPU kernel reaches
    """
    import numpy as np

    key = f"bandwidth_v2_{megabytes}" + (f"_{device}" if device else "")
    cached = _load_cache().get(key) if cache else None
    if cached and not refresh:
        return cached
    if device is not None:
        result = {"copy_gbps": _device_copy_gbps(device, megabytes, repeats), "device": device}
        if cache:
            _store_cache(key, result)
        return result
    n = megabytes * 2**20 // 4
    a = np.empty(n, np.float32)
    b = np.ones(n, np.float32)
    c = np.full(n, 2.0, np.float32)
    np.copyto(a, b)  # touch every page once
    copy_s = _best_of(lambda: np.copyto(a, b), repeats)

    def triad() -> None:
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)

    # The two-pass triad reads c and writes a, then reads a and b and writes a: 5n values moved.
    triad_s = _best_of(triad, repeats)
    threads = cpu_count()
    threads_s = _threaded_copy_s(a, b, threads, repeats)
    result = {"copy_gbps": round(2 * 4 * n / copy_s / 1e9, 2),
              "copy_threads_gbps": round(2 * 4 * n / threads_s / 1e9, 2), "threads": threads,
              "triad_gbps": round(5 * 4 * n / triad_s / 1e9, 2)}
    if cache:
        _store_cache(key, result)
    return result


def measure_matmul_flops(n: int = 2048, repeats: int = 5, refresh: bool = False,
                         cache: bool = True) -> dict[str, float]:
    """Measure dense float32 matmul throughput: ``{"numpy_tflops": ..., "tensorflow_tflops": ...}``.

    Times ``[n, n] @ [n, n]`` (``2 * n**3`` FLOPs) with NumPy's BLAS and with TensorFlow's CPU kernel;
    the best of ``repeats`` runs each, cached per machine unless ``refresh`` is true (``cache=False``: neither
    read nor written).
    """
    import numpy as np

    key = f"matmul_{n}"
    cached = _load_cache().get(key) if cache else None
    if cached and not refresh:
        return cached
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    np_s = _best_of(lambda: a @ b, repeats)

    import tensorflow as tf

    with tf.device("/CPU:0"):
        ta, tb = tf.constant(a), tf.constant(b)
        tf.matmul(ta, tb).numpy()
        tf_s = _best_of(lambda: tf.matmul(ta, tb).numpy(), repeats)
    flops = 2 * n**3
    result = {"numpy_tflops": round(flops / np_s / 1e12, 4), "tensorflow_tflops": round(flops / tf_s / 1e12, 4)}
    if cache:
        _store_cache(key, result)
    return result


def cpu_peaks(refresh: bool = False) -> DevicePeaks:
    """This CPU's ceilings as :class:`DevicePeaks`: the multi-threaded copy bandwidth and the best measured matmul rate.

    The memory roof is the faster of two copies: one split over :func:`cpu_count` threads (XLA:CPU and TensorFlow's
    CPU kernels run on a thread pool) and the single-threaded NumPy copy. On a busy machine the single thread can
    come out higher, since the threads then compete with other processes for the cores, and a roof that one copy
    beats is no upper bound. Both figures stay in ``measured``.
    """
    bw = measure_bandwidth(refresh=refresh)
    mm = measure_matmul_flops(refresh=refresh)
    fp32 = max(mm["numpy_tflops"], mm["tensorflow_tflops"])
    roof = max(bw["copy_threads_gbps"], bw["copy_gbps"])
    used = (f"NumPy copy split over {bw['threads']} threads" if roof == bw["copy_threads_gbps"]
            else "single-threaded NumPy copy")
    return DevicePeaks(
        f"{cpu_name()} ({cpu_count()} cores)", roof, {"fp32": fp32}, roof="measured", source=
        f"measured on this machine: memory roof = the faster of a NumPy copy split over {bw['threads']} threads "
        f"({bw['copy_threads_gbps']} GB/s; XLA:CPU and TensorFlow run their kernels multi-threaded) and a "
        f"single-threaded one ({bw['copy_gbps']} GB/s): the {used}; fp32 roof = best of NumPy and "
        "TensorFlow 2048x2048 matmul (xlalab.hw.measure_bandwidth, measure_matmul_flops)",
        measured={"copy_gbps": bw["copy_gbps"], "copy_threads_gbps": bw["copy_threads_gbps"],
                  "threads": bw["threads"], "triad_gbps": bw["triad_gbps"], **mm})


def measure_matmul_rates(device: str, dtypes: tuple[str, ...] = ("fp32",), n: int = 4096, repeats: int = 5,
                         refresh: bool = False, cache: bool = True) -> dict[str, float]:
    """Dense matmul rate in TFLOP/s per dtype key on ``device``: a compiled ``[n, n] @ [n, n]`` (``2 * n**3`` FLOPs).

    Keys as in :attr:`DevicePeaks.tflops`: ``"fp32"`` runs with TensorFloat-32 off, ``"tf32"`` with it on (Ampere
    and later GPUs), ``"fp16"`` and ``"bf16"`` in that type. The best of ``repeats`` runs after a warm-up, each
    timed with a device barrier; cached per machine, device and size unless ``refresh`` (``cache=False``: the
    cache is neither read nor written). TensorFlow's TF32 setting is restored afterwards.

    Example:
        >>> measure_matmul_rates("/GPU:0", ("fp32", "tf32", "bf16"))   # {"fp32": 17.9, "tf32": 98.1, ...}
    """
    import tensorflow as tf

    key = f"matmul_rates_{device}_{n}_{'-'.join(dtypes)}"
    cached = _load_cache().get(key) if cache else None
    if cached and not refresh:
        return cached
    types = {"fp32": tf.float32, "tf32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}
    tf32_was = tf.config.experimental.tensor_float_32_execution_enabled()
    out: dict[str, float] = {}
    try:
        for dtype in dtypes:
            tf.config.experimental.enable_tensor_float_32_execution(dtype == "tf32")
            with tf.device(device):
                a = tf.cast(tf.random.stateless_uniform([n, n], seed=(1, 2)), types[dtype])
                b = tf.cast(tf.random.stateless_uniform([n, n], seed=(3, 4)), types[dtype])
                step = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=True)
                step(a, b)
                tf.test.experimental.sync_devices()

                def once() -> None:
                    step(a, b)  # noqa: B023  (called only within this iteration)
                    tf.test.experimental.sync_devices()

                out[dtype] = round(2 * n**3 / _best_of(once, repeats) / 1e12, 4)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32_was)
    if cache:
        _store_cache(key, out)
    return out


def missing_row_note(name: str) -> str:
    """The one line a page prints when GPU ``name`` has no datasheet row: what the roof is instead, how to add it."""
    return (f"No datasheet row for the GPU {name!r}: its roofs here are measured (a compiled copy and a dense "
            "matmul per type), not its datasheet peaks. To add it: its exact model to xlalab.hw.GPU_PEAKS, "
            "GPU_COMPUTE_CAPABILITY and _GPU_PATTERNS, with the datasheet's URL.")


def measured_gpu_peaks(name: str, device: str = "/GPU:0", refresh: bool = False, fake: bool = False) -> DevicePeaks:
    """Roofs measured on ``device`` for a GPU missing from :data:`GPU_PEAKS` (``roof="measured"``).

    Memory roof: the compiled device-to-device copy of :func:`measure_bandwidth`; compute roof per dtype: the
    compiled dense matmul of :func:`measure_matmul_rates` (fp32; tf32 from compute capability 8.0; fp16 from
    6.0; bf16 where :func:`supports_bf16`). Measured rates are what this TensorFlow reaches, a floor under the
    datasheet peaks, so a kernel can come near or above them; :attr:`DevicePeaks.note` says so in one line.
    ``fake`` (``XLALAB_FAKE_GPU`` naming a GPU without a row): measured on ``device`` (the CPU), small sizes.
    """
    cc = _compute_capability() or (0, 0)
    dtypes = ("fp32",) + (("tf32",) if cc >= (8, 0) else ()) + (("fp16",) if cc >= (6, 0) else ()) \
        + (("bf16",) if supports_bf16() else ())
    size = (16, 256) if fake else (256, 4096)  # megabytes copied, matmul side
    copy = measure_bandwidth(megabytes=size[0], device=device, refresh=refresh)["copy_gbps"]
    rates = measure_matmul_rates(device, dtypes, n=size[1], refresh=refresh)
    where = (f"on {device}, which stands in for it under XLALAB_FAKE_GPU" if fake else f"on this GPU ({device})")
    return DevicePeaks(
        name, copy, dict(rates),
        f"measured {where}, no datasheet row in xlalab.hw.GPU_PEAKS: memory roof = compiled device-to-device copy "
        f"({copy} GB/s), compute roof per type = best compiled {size[1]}x{size[1]} matmul "
        "(xlalab.hw.measure_bandwidth, measure_matmul_rates)",
        measured={"copy_gbps": copy, **{f"matmul_{k}_tflops": v for k, v in rates.items()}},
        roof="measured", note=missing_row_note(name))


_NOTED: set[str] = set()


def peaks(refresh: bool = False) -> DevicePeaks:
    """The ceilings of the device the work runs on (:func:`backend`).

    A GPU: its datasheet entry in :data:`GPU_PEAKS` (the roof), plus the device-to-device copy bandwidth
    measured now in ``measured["copy_gbps"]``. Under ``XLALAB_FAKE_GPU``: the named GPU's entry, nothing
    measured. A CPU: :func:`cpu_peaks`. A GPU missing from the table (a real one, or a fake name without a
    row): :func:`measured_gpu_peaks`, labelled ``roof="measured"`` with a one-line :attr:`DevicePeaks.note`
    naming the missing row, printed the first time in a process; never a neighbour's numbers.
    """
    b = backend()
    if b.kind == "cpu":
        return cpu_peaks(refresh=refresh)
    entry = gpu_peaks(b.name)
    if entry is None:
        measured = measured_gpu_peaks(b.name, "/CPU:0" if b.fake else b.device, refresh=refresh, fake=b.fake)
        if b.name not in _NOTED:  # once per process: the first page or cell that reads the roofs says why
            _NOTED.add(b.name)
            print(measured.note)
        return measured
    if b.fake:
        return entry
    copy = measure_bandwidth(device=b.device, refresh=refresh)["copy_gbps"]
    return replace(entry, measured={"copy_gbps": copy},
                   source=entry.source + f"; device-to-device copy measured on this GPU: {copy} GB/s "
                   "(xlalab.hw.measure_bandwidth on /GPU:0)")


@dataclass
class Summary:
    """What this machine is, as plain data (see :func:`summary`)."""

    hostname: str
    cpu: str
    cores: int
    gpus: list[dict[str, Any]] = field(default_factory=list)
    profile: str = "cpu"
    mixed_policy: str | None = None
    tensorflow: str = ""
    keras: str = ""
    python: str = ""
    backend: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line naming the hardware, e.g. ``"AMD EPYC, 2 cores, no GPU"``."""
        if self.gpus:
            g = self.gpus[0]
            cc = ".".join(map(str, g["compute_capability"]))
            gpu = f"{g['name']} (compute capability {cc})"
        else:
            gpu = "no GPU"
        if self.backend.get("fake"):
            gpu += f" (XLALAB_FAKE_GPU stands in for {self.backend['name']})"
        return f"{self.cpu}, {self.cores} cores, {gpu}"


def summary() -> Summary:
    """This machine's hardware and library versions, e.g. ``summary().describe()``."""
    import keras
    import tensorflow as tf

    return Summary(hostname=socket.gethostname(), cpu=cpu_name(), cores=cpu_count(),
                   gpus=[{**g, "compute_capability": list(g["compute_capability"])} for g in gpus()],
                   profile=profile(), mixed_policy=mixed_policy(), tensorflow=tf.__version__,
                   keras=keras.__version__, python=platform.python_version(), backend=asdict(backend()))


def run(args: Any) -> int:
    """``xlalab hw``: print this machine's summary and measured ceilings (``args``: ``options.HwOptions``)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    s = summary()
    bw = measure_bandwidth(refresh=args.refresh)
    mm = measure_matmul_flops(refresh=args.refresh)
    if args.json:
        print(json.dumps({"summary": s.to_dict(), "bandwidth": bw, "matmul": mm}, indent=1))
        return 0
    print(f"machine      {s.describe()}")
    print(f"software     TensorFlow {s.tensorflow}, Keras {s.keras}, Python {s.python}")
    print(f"profile      {s.profile}   mixed policy: {s.mixed_policy}   bf16 native: {supports_bf16()}")
    print(f"backend      {s.backend['xla']} on {s.backend['name']}" + (" (fake)" if s.backend["fake"] else ""))
    print(f"bandwidth    copy {bw['copy_gbps']:.1f} GB/s (1 thread), {bw['copy_threads_gbps']:.1f} GB/s "
          f"({bw['threads']} threads), triad {bw['triad_gbps']:.1f} GB/s (NumPy, measured)")
    print(f"matmul fp32  NumPy {mm['numpy_tflops'] * 1e3:.0f} GFLOP/s, TensorFlow {mm['tensorflow_tflops'] * 1e3:.0f}"
          " GFLOP/s (2048x2048, measured)")
    if s.backend["kind"] == "gpu":
        p = peaks(refresh=args.refresh)
        print(f"{p.roof:<12} {p.name}: {p.bandwidth_gbps} GB/s, {p.tflops} TFLOP/s ({p.source})")
        if p.note:
            print(f"note         {p.note}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m xlalab.hw``, the older form of ``xlalab hw``."""
    from xlalab import cli

    print("note: `python -m xlalab.hw` is now `xlalab hw`; this form keeps working", file=sys.stderr)
    return cli.main(["hw", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
