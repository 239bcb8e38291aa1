"""JAX twins of TensorFlow functions, for tests/test_gpu_compile.py.

Imported only by the deviceless compiler's subprocess (xlalab/hlo/_gpu_worker.py), never by pytest's process:
TensorFlow and JAX never share a process.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def mlp_softmax(x, w1, b1, w2, b2):
    """``softmax(relu(x @ w1 + b1) @ w2 + b2)``, as the TensorFlow twin in the test writes it."""
    h = jax.nn.relu(x @ w1 + b1)
    return jax.nn.softmax(h @ w2 + b2, axis=-1)


def fusion_chain(x):
    """Eight elementwise operations in a chain."""
    return jnp.tanh(((x * 2.0 + 1.0) * x - 3.0) / (x + 4.0)) * 0.5 + x
