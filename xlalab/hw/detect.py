"""What this machine is: CPU, GPUs (or the one ``XLALAB_FAKE_GPU`` names), the XLA backend, memory, the size
profile and the mixed-precision policy; :func:`summary` as plain data.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xlalab import env
from xlalab.hw.datasheet import GPU_COMPUTE_CAPABILITY, gpu_key

PROFILES = ("gpu", "cpu", "tiny")


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


def load_average() -> tuple[float, float, float]:
    """The load average over 1, 5 and 15 minutes: how many processes were running or waiting for a core
    (``os.getloadavg``); NaNs where the OS keeps none. Compare it with :func:`cpu_count`: above it, timings wait."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return float("nan"), float("nan"), float("nan")
    return one, five, fifteen


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


FAKE_GPU_ENV = env.FAKE_GPU
FAKE_GPU_CC_ENV = env.FAKE_GPU_CC


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
    forced = os.environ.get(env.PROFILE, "").strip().lower()
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
        return mixed_policy_for(cc)
    return "mixed_bfloat16" if supports_bf16() else None


def mixed_policy_for(cc: tuple[int, int]) -> str | None:
    """:func:`mixed_policy`'s rule for an NVIDIA GPU of compute capability ``cc``: ``"mixed_bfloat16"`` from 8.0
    (bf16 tensor cores), ``"mixed_float16"`` on 7.x (fp16 tensor cores only), ``None`` below 7.0 (no tensor cores).
    Example: ``mixed_policy_for(GPU_COMPUTE_CAPABILITY["T4"]) == "mixed_float16"``."""
    if tuple(cc) >= (8, 0):
        return "mixed_bfloat16"
    if tuple(cc) >= (7, 0):
        return "mixed_float16"
    return None


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
