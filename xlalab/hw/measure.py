"""Measured ceilings: memory bandwidth and matmul rates on this machine (cached per machine in
``$XLALAB_CACHE``, default ``~/.cache/xlalab``), and :func:`peaks`, the roofs a page reads: a GPU's datasheet
row (:mod:`xlalab.hw.peaks`) or, for a CPU or a GPU without one, what was measured; :func:`run` prints them
(``xlalab hw``).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from xlalab import env
from xlalab.files import atomic_write
from xlalab.hw.datasheet import DevicePeaks, gpu_peaks
from xlalab.hw.detect import _compute_capability, backend, cpu_count, cpu_name, summary, supports_bf16

# ---------------------------------------------------------------------------------------------
# Measured CPU ceilings (cached per machine).

def _cache_path() -> Path:
    root = Path(os.environ.get(env.CACHE, Path.home() / ".cache" / "xlalab"))
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
