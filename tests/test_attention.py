"""xlalab.workloads.attention: the blocked attention equals the naive one; the byte formulas add up."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from xlalab import hlo  # noqa: E402
from xlalab.workloads import attention  # noqa: E402


def reference(q, k, v):
    """NumPy float64 softmax(q k^T / sqrt(d)) v on [b, t, d]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("block", [16, 32, 128])
def test_blocked_equals_naive_and_reference_under_xla(block):
    q, k, v = attention.make_inputs(2, 128, 16, seed=3)
    want = reference(q, k, v)
    naive = tf.function(attention.naive_attention, jit_compile=True)(q, k, v).numpy()
    blocked = tf.function(lambda q, k, v: attention.blocked_attention(q, k, v, block=block), jit_compile=True)(q, k, v)
    assert blocked.shape == (2, 128, 16) and blocked.dtype == tf.float32
    np.testing.assert_allclose(naive, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(blocked.numpy(), want, rtol=1e-4, atol=1e-5)


def test_blocked_is_stable_with_large_scores():
    """The running maximum keeps exp() finite where a plain exp(s) would overflow float32."""
    q, k, v = attention.make_inputs(1, 64, 8, seed=1)
    q = q * 200.0
    blocked = attention.blocked_attention(q, k, v, block=16).numpy()
    assert np.isfinite(blocked).all()
    np.testing.assert_allclose(blocked, reference(q, k, v), rtol=1e-4, atol=1e-4)


def test_blocked_bfloat16_keeps_float32_statistics():
    q, k, v = attention.make_inputs(1, 64, 16, seed=2, dtype="bfloat16")
    out = attention.blocked_attention(q, k, v, block=16)
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(out, tf.float32).numpy(),
                               reference(*(tf.cast(x, tf.float32) for x in (q, k, v))), atol=3e-2)


def test_block_must_divide_length():
    q, k, v = attention.make_inputs(1, 48, 8)
    with pytest.raises(ValueError, match="multiple"):
        attention.blocked_attention(q, k, v, block=32)


def test_byte_formulas():
    b, t, d = 2, 1024, 64
    # q, k, v read and o written (4btd) plus the scores written, read, the probabilities written, read (4bt^2).
    assert attention.naive_bytes(b, t, d) == 4 * (4 * b * t * d + 4 * b * t * t)
    assert attention.naive_bytes(b, t, d, itemsize=2) == attention.naive_bytes(b, t, d) // 2
    # One fused kernel over all rows: each input read once, the output written once.
    assert attention.fused_bytes(b, t, d) == 4 * 4 * b * t * d
    # Query blocks of 128 rows: k and v are streamed 8 times.
    assert attention.fused_bytes(b, t, d, block_q=128) == 4 * (2 * b * t * d + 2 * b * t * d * 8)
    assert attention.score_tile_bytes(b, t, t) == 4 * b * t * t
    assert attention.flops(b, t, d) == 4 * b * t * t * d
    # The saving grows with t: naive traffic is quadratic in t, fused is linear.
    assert attention.naive_bytes(b, 2 * t, d) / attention.fused_bytes(b, 2 * t, d) > \
        attention.naive_bytes(b, t, d) / attention.fused_bytes(b, t, d)


def test_naive_hlo_moves_at_least_the_counted_bytes():
    """Every kernel boundary is in the count, so the compiled module moves no less than the model's minimum."""
    q, k, v = attention.make_inputs(1, 256, 32)
    text = hlo.hlo_text(tf.function(attention.naive_attention, jit_compile=True), q, k, v, stage="optimized_hlo")
    if os.environ.get(hlo.FAKE_GPU_ENV):
        pytest.skip("the optimized module is a recorded GPU stand-in")
    s = hlo.summary(text)
    assert len(hlo.matrix_ops(text)) == 2
    assert s["bytes_moved"] >= attention.naive_bytes(1, 256, 32) * 0.99
