"""Elementwise chains: the smallest programs where fusion is the whole story.

Three bodies on a float32 tensor of ``n`` elements (GPU 64M, CPU 4M, tiny 64K):

- :func:`memory_chain`: 8 cheap ops (mul, add, abs, mul, sub, relu, mul, add). Unfused, each op reads
  and writes the whole tensor (16 passes over memory); fused, the chain reads ``x`` once and writes
  the result once (2 passes). XLA makes it one loop fusion.
- :func:`transcendental_chain`: 8 ops of which three are ``sin``, ``exp`` and ``tanh``, whose cost is
  in the arithmetic, so that fusion saves less and the quality of each op's code shows.
- :func:`layer_norm_rows`: a layer-norm-like row op on ``[rows, 1024]`` (two row reductions, then an
  elementwise tail): a reduction inside the chain.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from . import Case, Runner, wrap

COLS = 1024
EPS = 1e-5


def sizes(profile: str | None = None) -> dict[str, int]:
    """``{"n": elements, "rows": n // 1024, "cols": 1024}`` for ``profile`` (``None``: :func:`xlalab.hw.profile`)."""
    from .. import hw

    n = {"gpu": 64 * 2**20, "cpu": 4 * 2**20, "tiny": 64 * 2**10}[profile or hw.profile()]
    return {"n": n, "rows": n // COLS, "cols": COLS}


def make_inputs(n: int, seed: int = 0) -> np.ndarray:
    """A seeded float32 vector ``[n]``, standard normal."""
    return np.random.default_rng(seed).standard_normal(n, dtype=np.float32)


def make_rows(rows: int, cols: int = COLS, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded float32 ``x [rows, cols]``, ``gamma [cols]`` (near 1) and ``beta [cols]`` (near 0)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols), dtype=np.float32) * 2 + 1
    gamma = 1 + 0.1 * rng.standard_normal(cols, dtype=np.float32)
    beta = 0.1 * rng.standard_normal(cols, dtype=np.float32)
    return x, gamma.astype(np.float32), beta.astype(np.float32)


def memory_chain(x: Any) -> Any:
    """Eight cheap elementwise ops on ``x [n]`` (any float dtype); returns ``[n]`` of the same dtype."""
    import tensorflow as tf

    y = x * 1.5
    y = y + 0.5
    y = tf.abs(y)
    y = y * 0.9
    y = y - 0.1
    y = tf.nn.relu(y)
    y = y * 2.0
    return y + 1.0


def transcendental_chain(x: Any) -> Any:
    """Eight elementwise ops on ``x [n]``, three of them transcendental (sin, exp, tanh); returns ``[n]``."""
    import tensorflow as tf

    y = x * 0.5
    y = tf.sin(y)
    y = y + 1.0
    y = tf.exp(y)
    y = y * 0.1
    y = tf.tanh(y)
    y = y * 2.0
    return y - 0.5


def layer_norm_rows(x: Any, gamma: Any, beta: Any) -> Any:
    """Normalize each row of ``x [rows, cols]`` to mean 0 and variance 1, then scale by ``gamma [cols]`` and shift
    by ``beta [cols]``."""
    import tensorflow as tf

    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    centered = x - mean
    var = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
    return centered * tf.math.rsqrt(var + EPS) * gamma + beta


def flops(kind: str, n: int) -> float:
    """FLOPs of one call on ``n`` elements, counting each elementwise op (transcendentals included) as one.

    ``"memory"`` and ``"transcendental"``: 8 per element. ``"layer_norm"``: 8 per element (sum, subtract,
    square, sum, multiply by the inverse deviation, by gamma, add beta, and the mean's division folded in).
    """
    return {"memory": 8.0, "transcendental": 8.0, "layer_norm": 8.0}[kind] * n


def min_bytes(kind: str, n: int, itemsize: int = 4, cols: int = COLS) -> float:
    """Fewest bytes of one call: read ``x`` once and write the result once (plus gamma and beta for layer norm)."""
    extra = 2 * cols * itemsize if kind == "layer_norm" else 0
    return float(2 * n * itemsize + extra)


def unfused_bytes(kind: str, n: int, itemsize: int = 4) -> float:
    """Bytes moved when every op is its own kernel: 8 ops each reading and writing ``n`` elements."""
    return float(8 * 2 * n * itemsize)


def reference(kind: str, *arrays: np.ndarray) -> np.ndarray:
    """The same computation in float64 NumPy."""
    a = [np.asarray(v, dtype=np.float64) for v in arrays]
    if kind == "memory":
        y = np.abs(a[0] * 1.5 + 0.5) * 0.9 - 0.1
        return np.maximum(y, 0) * 2.0 + 1.0
    if kind == "transcendental":
        return np.tanh(np.exp(np.sin(a[0] * 0.5) + 1.0) * 0.1) * 2.0 - 0.5
    x, gamma, beta = a
    c = x - x.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c**2).mean(axis=-1, keepdims=True) + EPS) * gamma + beta


BODIES: dict[str, Callable[..., Any]] = {
    "memory": memory_chain, "transcendental": transcendental_chain, "layer_norm": layer_norm_rows}


def _runner(kind: str, arrays: tuple[np.ndarray, ...], mode: str) -> Runner:
    import tensorflow as tf

    from .. import hw

    body = BODIES[kind]
    n = arrays[0].size
    if mode == "xla_mixed":
        dtype = tf.bfloat16 if hw.mixed_policy() == "mixed_bfloat16" else tf.float16
        args = tuple(tf.constant(a, dtype=dtype) for a in arrays)
        return Runner(wrap(body, mode), args, lambda out: {"out": tf.cast(out, tf.float32).numpy()},
                      dtype=dtype.name, min_bytes=min_bytes(kind, n, itemsize=2))
    return Runner(wrap(body, mode), tuple(tf.constant(a) for a in arrays))


def cases(profile: str) -> list[Case]:
    """The memory-bound chain, the transcendental chain and the layer-norm row op at ``profile`` size."""
    s = sizes(profile)
    n = s["n"]
    x = make_inputs(n)
    rows = make_rows(s["rows"])
    out = []
    for kind, arrays, desc in [
        ("memory", (x,), f"memory_chain(x [{n}] float32): mul, add, abs, mul, sub, relu, mul, add"),
        ("transcendental", (x,), f"transcendental_chain(x [{n}] float32): mul, sin, add, exp, mul, tanh, mul, sub"),
        ("layer_norm", rows, f"layer_norm_rows(x [{s['rows']}, {COLS}] float32, gamma, beta)"),
    ]:
        out.append(Case(
            "fusion", kind, desc, flops(kind, n), min_bytes(kind, n), n, "elements/s",
            build=functools.partial(_runner, kind, arrays),
            params={"n": n, "unfused_bytes": unfused_bytes(kind, n)} if kind != "layer_norm"
            else {"rows": s["rows"], "cols": COLS},
            min_time=2.0, reference=functools.partial(reference, kind, *arrays),
            skip_reason="NumPy is not a peer here (it runs each op as its own pass, like graph mode)"))
    return out
