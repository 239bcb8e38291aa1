"""Scaled dot-product attention, naive and blocked with an online softmax, and the bytes each must move.

Both functions take queries, keys and values ``q, k, v`` of shape ``[b, t, d]`` (``b`` batch times heads,
``t`` sequence length, ``d`` head width; float32 or bfloat16, all the same dtype) and return ``[b, t, d]`` in
that dtype: ``softmax(q k^T / sqrt(d)) v``, without a mask.

:func:`naive_attention` materializes the ``[b, t, t]`` scores and probabilities. :func:`blocked_attention`
walks the keys in ``t / block`` blocks and keeps, per query row, a running maximum ``m``, a running
denominator ``l`` and an unnormalized output ``acc``, rescaling them when a block raises the maximum: the
online softmax of Milakov and Gimelshein (2018), as FlashAttention (Dao et al., 2022) uses it. The blocks are
a Python loop over a static count, so under ``tf.function(jit_compile=True)`` XLA sees them unrolled.

The byte counts (:func:`naive_bytes`, :func:`fused_bytes`) are the traffic to and from main memory that each
schedule needs at least, in the model used throughout the course: each kernel reads its operands once and
writes its result once.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def make_inputs(b: int, t: int, d: int, seed: int = 0, dtype: str = "float32") -> tuple[Any, Any, Any]:
    """Seeded standard-normal ``q, k, v``, each a ``tf.Tensor`` of shape ``[b, t, d]`` and ``dtype``."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    return tuple(tf.constant(rng.standard_normal((b, t, d), dtype=np.float32), dtype=dtype) for _ in range(3))


def naive_attention(q: Any, k: Any, v: Any) -> Any:
    """``softmax(q k^T / sqrt(d)) v`` with the ``[b, t, t]`` scores materialized.

    Args:
        q, k, v: ``[b, t, d]`` tensors of one float dtype.

    Returns:
        ``[b, t, d]`` in the inputs' dtype.

    Example:
        >>> q, k, v = make_inputs(2, 256, 64)
        >>> tf.function(naive_attention, jit_compile=True)(q, k, v).shape
        TensorShape([2, 256, 64])
    """
    import tensorflow as tf

    d = q.shape[-1]
    scores = tf.matmul(q, k, transpose_b=True) * tf.cast(1.0 / math.sqrt(d), q.dtype)   # [b, t, t]
    return tf.matmul(tf.nn.softmax(scores, axis=-1), v)                                # [b, t, d]


def blocked_attention(q: Any, k: Any, v: Any, block: int = 128) -> Any:
    """The same result as :func:`naive_attention`, over key blocks of ``block`` with an online softmax.

    For each block ``j`` of keys: scores ``s = q k_j^T / sqrt(d)`` (``[b, t, block]``), a new running
    maximum ``m' = max(m, rowmax(s))``, then ``l = l exp(m - m') + rowsum(exp(s - m'))`` and
    ``acc = acc exp(m - m') + exp(s - m') v_j``; the result is ``acc / l``. Only one ``[b, t, block]`` tile of
    scores exists at a time. The running statistics are kept in float32 whatever the inputs' dtype.

    Args:
        q, k, v: ``[b, t, d]`` tensors of one float dtype, with a static ``t`` divisible by ``block``.
        block: keys per block.

    Returns:
        ``[b, t, d]`` in the inputs' dtype.
    """
    import tensorflow as tf

    b, t, d = q.shape
    if t % block:
        raise ValueError(f"sequence length {t} is not a multiple of block={block}")
    dtype = q.dtype
    scale = tf.cast(1.0 / math.sqrt(d), dtype)
    m = tf.fill([b, t, 1], tf.constant(-np.inf, tf.float32))
    l = tf.zeros([b, t, 1], tf.float32)  # noqa: E741  (FlashAttention's name for the running softmax sum)
    acc = tf.zeros([b, t, d], tf.float32)
    for j in range(t // block):                                    # static: unrolled under XLA
        kj = k[:, j * block:(j + 1) * block]
        vj = v[:, j * block:(j + 1) * block]
        s = tf.cast(tf.matmul(q, kj, transpose_b=True) * scale, tf.float32)     # [b, t, block]
        m_new = tf.maximum(m, tf.reduce_max(s, axis=-1, keepdims=True))
        p = tf.exp(s - m_new)                                                   # [b, t, block]
        correction = tf.exp(m - m_new)
        l = l * correction + tf.reduce_sum(p, axis=-1, keepdims=True)  # noqa: E741
        acc = acc * correction + tf.cast(tf.matmul(tf.cast(p, dtype), vj), tf.float32)
        m = m_new
    return tf.cast(acc / l, dtype)


def flops(b: int, t: int, d: int) -> int:
    """FLOPs of the two matrix products, ``2 * (2 b t^2 d)``; the softmax's ``O(b t^2)`` is left out."""
    return 4 * b * t * t * d


def naive_bytes(b: int, t: int, d: int, itemsize: int = 4) -> int:
    """Bytes naive attention moves with a one-pass softmax: ``(4 b t d + 4 b t^2) * itemsize``.

    ``q k^T`` reads ``q`` and ``k`` and writes the scores (``2btd + bt^2`` elements); the softmax reads the
    scores and writes the probabilities (``2bt^2``); ``P v`` reads them and ``v`` and writes the output
    (``bt^2 + 2btd``).
    """
    return (4 * b * t * d + 4 * b * t * t) * itemsize


def fused_bytes(b: int, t: int, d: int, itemsize: int = 4, block_q: int | None = None) -> int:
    """Bytes a single fused attention kernel moves: ``q`` read, ``o`` written, ``k`` and ``v`` read per query block.

    With query blocks of ``block_q`` rows (default: all ``t`` rows at once), each of the ``t / block_q``
    blocks streams all of ``k`` and ``v`` through on-chip memory: ``(2 b t d + 2 b t d * t / block_q) * itemsize``.
    The ``[t, t]`` scores never reach main memory.
    """
    passes = 1 if block_q is None else math.ceil(t / block_q)
    return (2 * b * t * d + 2 * b * t * d * passes) * itemsize


def score_tile_bytes(b: int, t: int, block: int, itemsize: int = 4) -> int:
    """Bytes of one ``[b, t, block]`` tile of scores (``block = t`` gives naive attention's whole matrix)."""
    return b * t * block * itemsize
