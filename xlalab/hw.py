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
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROFILES = ("gpu", "cpu", "tiny")


@dataclass(frozen=True)
class DevicePeaks:
    """Peak rates of one device.

    Attributes:
        name: device name, e.g. ``"A100 40GB"`` or the CPU model.
        bandwidth_gbps: main-memory bandwidth in GB/s (10**9 bytes per second).
        tflops: dense peak in TFLOP/s per dtype key (``"fp32"``, ``"tf32"``, ``"fp16"``, ``"bf16"``);
            a dtype the device has no fast path for is absent.
        source: where the numbers come from (a datasheet, or "measured on this machine").
    """

    name: str
    bandwidth_gbps: float
    tflops: dict[str, float]
    source: str

    def peak_flops(self, dtype: str = "fp32") -> float:
        """Peak FLOP/s for ``dtype``; falls back to fp32 where the device has no faster path."""
        return self.tflops.get(dtype, self.tflops["fp32"]) * 1e12

    @property
    def bandwidth(self) -> float:
        """Memory bandwidth in bytes per second."""
        return self.bandwidth_gbps * 1e9


# Dense (no sparsity) datasheet peaks. NVIDIA's headline tensor-core figures for Ampere and later
# are quoted "with sparsity", twice the dense rate; the dense halves are stored here.
GPU_PEAKS: dict[str, DevicePeaks] = {
    "T4": DevicePeaks("T4", 320, {"fp32": 8.1, "fp16": 65.0},
                      "NVIDIA T4 Tensor Core GPU datasheet (2019)"),
    "L4": DevicePeaks("L4", 300, {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
                      "NVIDIA L4 Tensor Core GPU datasheet (2023); tensor rates halved from 'with sparsity'"),
    "V100": DevicePeaks("V100 SXM2", 900, {"fp32": 15.7, "fp16": 125.0},
                        "NVIDIA Tesla V100 GPU datasheet (2020), SXM2 module"),
    "A100-40GB": DevicePeaks("A100 40GB", 1555, {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
                             "NVIDIA A100 Tensor Core GPU datasheet (2021), 40 GB SXM"),
    "A100-80GB": DevicePeaks("A100 80GB", 2039, {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
                             "NVIDIA A100 Tensor Core GPU datasheet (2021), 80 GB SXM"),
    "H100-SXM": DevicePeaks("H100 SXM", 3350, {"fp32": 67.0, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0},
                            "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM; tensor rates halved from 'with sparsity'"),
    "H200": DevicePeaks("H200", 4800, {"fp32": 67.0, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0},
                        "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM; tensor rates halved from 'with sparsity'"),
}

# Substrings of a device name (as TensorFlow or nvidia-smi reports it) that identify a table entry.
_GPU_NAME_KEYS: list[tuple[str, str]] = [
    ("H200", "H200"), ("H100", "H100-SXM"), ("A100-SXM4-80GB", "A100-80GB"), ("A100 80GB", "A100-80GB"),
    ("A100", "A100-40GB"), ("V100", "V100"), ("T4", "T4"), ("L4", "L4"),
]


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

    Empty on a machine without a GPU. Imports TensorFlow.
    """
    import tensorflow as tf

    found = []
    for dev in tf.config.list_physical_devices("GPU"):
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


def profile() -> str:
    """The size profile: ``"gpu"`` (full sizes), ``"cpu"`` (small sizes) or ``"tiny"`` (tests).

    ``XLALAB_PROFILE`` overrides the choice; otherwise it is ``"gpu"`` when TensorFlow sees a GPU.
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
    AVX512-BF16 or AMX-BF16. T4 (7.5) and V100 (7.0) have fp16 tensor cores only.
    """
    devices = gpus()
    if devices:
        return min(d["compute_capability"] for d in devices) >= (8, 0)
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def mixed_policy() -> str | None:
    """The Keras mixed-precision policy worth trying here, or ``None`` where none is expected to help.

    ``"mixed_bfloat16"`` on GPUs with bf16 tensor cores (no loss scaling needed),
    ``"mixed_float16"`` on fp16-only tensor-core GPUs (V100, T4), ``"mixed_bfloat16"`` on a CPU with
    native bf16 instructions, ``None`` otherwise (a CPU that would emulate the narrow type).
    """
    devices = gpus()
    if devices:
        cc = min(d["compute_capability"] for d in devices)
        if cc >= (8, 0):
            return "mixed_bfloat16"
        if cc >= (7, 0):
            return "mixed_float16"
        return None
    return "mixed_bfloat16" if supports_bf16() else None


def gpu_peaks(name: str) -> DevicePeaks | None:
    """The datasheet peaks for a GPU whose reported name contains a known model, else ``None``."""
    for key, entry in _GPU_NAME_KEYS:
        if key.lower() in name.lower():
            return GPU_PEAKS[entry]
    return None


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
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    except OSError:
        pass


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_bandwidth(megabytes: int = 256, repeats: int = 5, refresh: bool = False) -> dict[str, float]:
    """Measure main-memory bandwidth with NumPy: ``{"copy_gbps": ..., "triad_gbps": ...}``.

    Copy moves ``2 * n`` float32 values (read + write); the STREAM-style triad ``a = b + s * c``
    moves ``3 * n``. Arrays of ``megabytes`` each are far larger than any cache. The best of
    ``repeats`` runs is kept, and the result is cached per machine unless ``refresh`` is true.
    """
    import numpy as np

    key = f"bandwidth_{megabytes}"
    cached = _load_cache().get(key)
    if cached and not refresh:
        return cached
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
    result = {"copy_gbps": round(2 * 4 * n / copy_s / 1e9, 2),
              "triad_gbps": round(5 * 4 * n / triad_s / 1e9, 2)}
    _store_cache(key, result)
    return result


def measure_matmul_flops(n: int = 2048, repeats: int = 5, refresh: bool = False) -> dict[str, float]:
    """Measure dense float32 matmul throughput: ``{"numpy_tflops": ..., "tensorflow_tflops": ...}``.

    Times ``[n, n] @ [n, n]`` (``2 * n**3`` FLOPs) with NumPy's BLAS and with TensorFlow's CPU kernel;
    the best of ``repeats`` runs each, cached per machine unless ``refresh`` is true.
    """
    import numpy as np

    key = f"matmul_{n}"
    cached = _load_cache().get(key)
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
    _store_cache(key, result)
    return result


def cpu_peaks(refresh: bool = False) -> DevicePeaks:
    """This CPU's ceilings as :class:`DevicePeaks`: measured copy bandwidth and best measured matmul rate."""
    bw = measure_bandwidth(refresh=refresh)
    mm = measure_matmul_flops(refresh=refresh)
    fp32 = max(mm["numpy_tflops"], mm["tensorflow_tflops"])
    return DevicePeaks(f"{cpu_name()} ({cpu_count()} cores)", bw["copy_gbps"], {"fp32": fp32},
                       "measured on this machine (xlalab.hw.measure_bandwidth, measure_matmul_flops)")


def peaks() -> DevicePeaks:
    """The ceilings of the device the course runs on: the first GPU's datasheet, else the measured CPU.

    A GPU missing from :data:`GPU_PEAKS` raises ``LookupError``, naming the device, so that nobody
    divides by a made-up number.
    """
    devices = gpus()
    if devices:
        found = gpu_peaks(devices[0]["name"])
        if found is None:
            raise LookupError(f"No datasheet peaks for GPU {devices[0]['name']!r}; add it to xlalab.hw.GPU_PEAKS")
        return found
    return cpu_peaks()


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
        return f"{self.cpu}, {self.cores} cores, {gpu}"


def summary() -> Summary:
    """This machine's hardware and library versions, e.g. ``summary().describe()``."""
    import keras
    import tensorflow as tf

    return Summary(hostname=socket.gethostname(), cpu=cpu_name(), cores=cpu_count(),
                   gpus=[{**g, "compute_capability": list(g["compute_capability"])} for g in gpus()],
                   profile=profile(), mixed_policy=mixed_policy(), tensorflow=tf.__version__,
                   keras=keras.__version__, python=platform.python_version())


def main() -> None:
    """``python -m xlalab.hw``: print this machine's summary and measured ceilings."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--refresh", action="store_true", help="measure again instead of using the cache")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    s = summary()
    bw = measure_bandwidth(refresh=args.refresh)
    mm = measure_matmul_flops(refresh=args.refresh)
    if args.json:
        print(json.dumps({"summary": s.to_dict(), "bandwidth": bw, "matmul": mm}, indent=1))
        return
    print(f"machine      {s.describe()}")
    print(f"software     TensorFlow {s.tensorflow}, Keras {s.keras}, Python {s.python}")
    print(f"profile      {s.profile}   mixed policy: {s.mixed_policy}   bf16 native: {supports_bf16()}")
    print(f"bandwidth    copy {bw['copy_gbps']:.1f} GB/s, triad {bw['triad_gbps']:.1f} GB/s (NumPy, measured)")
    print(f"matmul fp32  NumPy {mm['numpy_tflops'] * 1e3:.0f} GFLOP/s, TensorFlow {mm['tensorflow_tflops'] * 1e3:.0f}"
          " GFLOP/s (2048x2048, measured)")
    for g in s.gpus:
        p = gpu_peaks(g["name"])
        if p:
            print(f"datasheet    {p.name}: {p.bandwidth_gbps} GB/s, {p.tflops} TFLOP/s ({p.source})")


if __name__ == "__main__":
    main()
