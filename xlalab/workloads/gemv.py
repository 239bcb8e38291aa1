"""Recommendation scoring: item embeddings ``[N, d]`` times a user vector ``[d]``, then top-k.

A GEMV reads every item embedding once and does one multiply-add per element read: 2 FLOPs per
4 bytes in float32, an arithmetic intensity of 0.5 FLOP/byte, far below any machine's ridge point.
Its speed is the memory bandwidth. Scoring ``B`` users at once (``[N, d] x [d, B]``) reuses each
embedding ``B`` times and moves the problem across the ridge toward compute-bound GEMM.

Sizes (:func:`sizes`): GPU ``N = 1,000,000``, CPU ``N = 100,000``, tiny ``N = 2,000``; ``d = 128``
(tiny 32); float32 throughout except the ``xla_mixed`` mode, which stores the inputs in bfloat16.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from . import Case, Runner, wrap

K = 10


def sizes(profile: str | None = None) -> dict[str, Any]:
    """Problem sizes: ``{"n": items, "d": embedding width, "batches": users per batched call, "k": top-k}``.

    ``profile`` is ``"gpu"``, ``"cpu"`` or ``"tiny"``; ``None`` reads :func:`xlalab.hw.profile`.
    """
    from .. import hw

    table = {
        "gpu": {"n": 1_000_000, "d": 128, "batches": (8, 64, 512, 4096), "k": K},
        "cpu": {"n": 100_000, "d": 128, "batches": (8, 64, 512), "k": K},
        "tiny": {"n": 2_000, "d": 32, "batches": (8,), "k": K},
    }
    return dict(table[profile or hw.profile()])


def make_inputs(n: int, d: int, batch: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded float32 inputs: item embeddings ``[n, d]`` and a user vector ``[d]`` (or users ``[d, batch]``).

    Entries are standard normal divided by ``sqrt(d)``, so that scores are of order 1.
    """
    rng = np.random.default_rng(seed)
    items = (rng.standard_normal((n, d), dtype=np.float32) / np.sqrt(d)).astype(np.float32)
    shape = (d,) if batch is None else (d, batch)
    users = (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(d)).astype(np.float32)
    return items, users


# ---------------------------------------------------------------------------------------------
# The formulations of one GEMV. All take items [n, d] and user [d] (same dtype) and return scores [n].

def scores_matmul_col(items: Any, user: Any) -> Any:
    """``tf.matmul(items, user[:, None])[:, 0]``: the user as a ``[d, 1]`` column; scores ``[n]``."""
    import tensorflow as tf

    return tf.matmul(items, user[:, None])[:, 0]


def scores_matmul_row(items: Any, user: Any) -> Any:
    """``tf.matmul(user[None, :], items, transpose_b=True)[0]``: a ``[1, d]`` row times ``items^T``; scores ``[n]``."""
    import tensorflow as tf

    return tf.matmul(user[None, :], items, transpose_b=True)[0]


def scores_matmul_split(items: Any, user: Any, parts: int = 4) -> Any:
    """``tf.matmul`` on ``parts`` row blocks of ``items``, concatenated; scores ``[n]``.

    Under XLA on the CPU each block's slice fuses with its dot into one loop fusion that XLA emits
    itself, where the whole-matrix ``matmul_col`` stays a standalone ``dot`` (a call into the runtime's
    matrix-vector routine). Same sums in the same order per score as ``matmul_col``.
    """
    import tensorflow as tf

    n = items.shape[0]
    parts = max(1, min(parts, n))
    step = -(-n // parts)
    col = user[:, None]
    return tf.concat([tf.matmul(items[i:i + step], col)[:, 0] for i in range(0, n, step)], axis=0)


def scores_matvec(items: Any, user: Any) -> Any:
    """``tf.linalg.matvec(items, user)``; scores ``[n]``."""
    import tensorflow as tf

    return tf.linalg.matvec(items, user)


def scores_einsum(items: Any, user: Any) -> Any:
    """``tf.einsum("nd,d->n", items, user)``; scores ``[n]``."""
    import tensorflow as tf

    return tf.einsum("nd,d->n", items, user)


def scores_tensordot(items: Any, user: Any) -> Any:
    """``tf.tensordot(items, user, axes=1)``; scores ``[n]``."""
    import tensorflow as tf

    return tf.tensordot(items, user, axes=1)


def scores_reduce_sum(items: Any, user: Any) -> Any:
    """``tf.reduce_sum(items * user, axis=1)``: an elementwise product, then a row reduction; scores ``[n]``."""
    import tensorflow as tf

    return tf.reduce_sum(items * user, axis=1)


def scores(items: Any, user: Any) -> Any:
    """Scores ``[n]`` of items ``[n, d]`` float32 for one user ``[d]``: the formulation XLA compiles best on a CPU.

    That is :func:`scores_matmul_split` (four row blocks, each slice fused with its dot); under XLA on the
    2-core AMD EPYC it took about half the time of ``tf.matmul(items, user[:, None])``, a standalone
    ``dot`` (``results/cpu-vm.json``: 3.5 against 6.8 ms). ``results/*.json``
    (``targets.gemv.formulations_gbps``) has every formulation's GB/s for each run.
    """
    return scores_matmul_split(items, user)


#: Every formulation the suite times, by name.
FORMULATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "matmul_col": scores_matmul_col,
    "matmul_split": scores,
    "matmul_row": scores_matmul_row,
    "matvec": scores_matvec,
    "einsum": scores_einsum,
    "tensordot": scores_tensordot,
    "reduce_sum": scores_reduce_sum,
}


def scores_topk(items: Any, user: Any, k: int = K) -> tuple[Any, Any]:
    """The ``k`` best items for one user: ``(values [k] float32, indices [k] int32)``, best first.

    Example:
        >>> values, idx = scores_topk(tf.constant(items), tf.constant(user), 10)
    """
    import tensorflow as tf

    return tf.math.top_k(scores(items, user), k=k)


def batched_scores(items: Any, users: Any) -> Any:
    """Scores ``[n, b]`` of items ``[n, d]`` for ``b`` users given as columns ``[d, b]``: one GEMM."""
    import tensorflow as tf

    return tf.matmul(items, users)


def flops(n: int, d: int, batch: int = 1) -> float:
    """FLOPs of scoring ``n`` items of width ``d`` for ``batch`` users: one multiply and one add per product term."""
    return 2.0 * n * d * batch


def min_bytes(n: int, d: int, batch: int = 1, itemsize: int = 4) -> float:
    """Fewest bytes a scoring call moves: read the items ``[n, d]`` and users ``[d, batch]``, write scores
    ``[n, batch]``.

    Top-k adds nothing that counts at this size (it reads the ``n`` scores once more).
    """
    return float(itemsize * (n * d + d * batch + n * batch))


def reference(items: np.ndarray, users: np.ndarray) -> np.ndarray:
    """Scores in float64 with NumPy: ``items @ users`` (``[n]`` for ``users [d]``, ``[n, b]`` for ``[d, b]``)."""
    return items.astype(np.float64) @ users.astype(np.float64)


# ---------------------------------------------------------------------------------------------
# Suite cases.

def _runner(body: Callable, items: np.ndarray, users: np.ndarray, mode: str, n: int, d: int, batch: int) -> Runner:
    import tensorflow as tf

    if mode == "numpy":
        return Runner(lambda a, b: a @ b, (items, users))
    if mode == "xla_mixed":
        from .. import hw

        policy = hw.mixed_policy()
        dtype = tf.bfloat16 if policy == "mixed_bfloat16" else tf.float16
        args = (tf.constant(items, dtype=dtype), tf.constant(users, dtype=dtype))
        return Runner(wrap(body, mode), args, lambda out: {"out": tf.cast(out, tf.float32).numpy()},
                      dtype=dtype.name, min_bytes=min_bytes(n, d, batch, itemsize=2))
    return Runner(wrap(body, mode), (tf.constant(items), tf.constant(users)))


def cases(profile: str) -> list[Case]:
    """The GEMV cases: every formulation, top-k on the best one, and the batched GEMM for each batch size."""
    s = sizes(profile)
    n, d, k = s["n"], s["d"], s["k"]
    items, user = make_inputs(n, d)
    out: list[Case] = []
    modes = ("eager", "graph", "xla", "xla_mixed", "autocluster", "numpy")
    for name, body in FORMULATIONS.items():
        out.append(Case(
            "gemv", name, f"{((scores_matmul_split if body is scores else body).__doc__ or '').splitlines()[0]} "
            f"items [{n}, {d}] float32",
            flops(n, d), min_bytes(n, d), n, "items/s",
            build=functools.partial(_runner, body, items, user, n=n, d=d, batch=1),
            modes=modes, params={"n": n, "d": d, "batch": 1}, min_time=0.8,
            reference=lambda: reference(items, user)))

    def topk_body(a: Any, b: Any) -> Any:
        return scores_topk(a, b, k)[0]

    out.append(Case(
        "gemv", "topk", f"scores_topk(items [{n}, {d}], user [{d}], k={k}): values [{k}]",
        flops(n, d), min_bytes(n, d), n, "items/s",
        build=lambda mode: _runner(topk_body, items, user, mode, n, d, 1),
        modes=modes[:5], params={"n": n, "d": d, "k": k}, min_time=0.8,
        reference=lambda: np.sort(reference(items, user))[::-1][:k],
        skip_reason="NumPy has no top-k in one call; see the matmul_col case"))
    for b in s["batches"]:
        _, users = make_inputs(n, d, batch=b, seed=1)
        out.append(Case(
            "gemv", f"batched_{b}", f"tf.matmul(items [{n}, {d}], users [{d}, {b}]) float32",
            flops(n, d, b), min_bytes(n, d, b), n * b, "scores/s",
            build=functools.partial(_runner, batched_scores, items, users, n=n, d=d, batch=b),
            modes=modes, params={"n": n, "d": d, "batch": b}, min_time=0.8,
            reference=functools.partial(reference, items, users)))
    return out
