"""A decoder-only Transformer (GPT-style, pre-layer-norm) and one training step.

Each block: ``x + attention(layer_norm(x))`` with causal multi-head self-attention, then
``x + mlp(layer_norm(x))`` with a 4x GELU MLP. Token and position embeddings in, a final layer norm
and a dense projection to the vocabulary out. The step: forward, next-token softmax cross-entropy,
gradients, one Adam update.

Sizes (:func:`sizes`): GPU 12 layers, d_model 768, 12 heads, sequence 512, batch 16, vocabulary 32,768;
CPU 2 layers, d_model 256, 4 heads, sequence 128, batch 8, vocabulary 4,096; tiny 1 layer, d_model 32,
2 heads, sequence 16, batch 2, vocabulary 64. Tokens and labels int32 ``[batch, seq]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import TRAINING_TOLERANCE, Case, cross_entropy_step, training_setup

LEARNING_RATE = 1e-3


def sizes(profile: str | None = None) -> dict[str, int]:
    """``{"layers", "d_model", "heads", "seq", "batch", "vocab"}`` for ``profile``
    (``None``: :func:`xlalab.hw.profile`)."""
    from .. import hw

    return dict({
        "gpu": {"layers": 12, "d_model": 768, "heads": 12, "seq": 512, "batch": 16, "vocab": 32768},
        "cpu": {"layers": 2, "d_model": 256, "heads": 4, "seq": 128, "batch": 8, "vocab": 4096},
        "tiny": {"layers": 1, "d_model": 32, "heads": 2, "seq": 16, "batch": 2, "vocab": 64},
    }[profile or hw.profile()])


def make_inputs(batch: int, seq: int, vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded tokens ``[batch, seq]`` int32 and next-token labels ``[batch, seq]`` int32 (tokens shifted by one)."""
    rng = np.random.default_rng(seed)
    stream = rng.integers(0, vocab, size=(batch, seq + 1)).astype(np.int32)
    return stream[:, :-1], stream[:, 1:]


def decoder_block(x: Any, d_model: int, heads: int, name: str) -> Any:
    """One pre-layer-norm decoder block on ``x [b, seq, d_model]``: causal attention, then the MLP, each residual."""
    from keras import layers

    h = layers.LayerNormalization(epsilon=1e-5, name=f"{name}_ln1")(x)
    h = layers.MultiHeadAttention(heads, d_model // heads, name=f"{name}_attn")(h, h, use_causal_mask=True)
    x = layers.Add(name=f"{name}_res1")([x, h])
    h = layers.LayerNormalization(epsilon=1e-5, name=f"{name}_ln2")(x)
    h = layers.Dense(4 * d_model, activation="gelu", name=f"{name}_mlp_in")(h)
    h = layers.Dense(d_model, name=f"{name}_mlp_out")(h)
    return layers.Add(name=f"{name}_res2")([x, h])


def _position_layer() -> Any:
    import keras

    class PositionEmbedding(keras.layers.Layer):
        """Adds a learned position embedding ``[seq, d_model]`` to ``x [b, seq, d_model]``."""

        def build(self, input_shape: Any) -> None:
            self.table = self.add_weight(shape=tuple(input_shape[1:]), initializer="random_normal", name="table")

        def call(self, x: Any) -> Any:
            return x + keras.ops.cast(self.table, x.dtype)[None]

    return PositionEmbedding


def build_decoder(vocab: int, seq: int, d_model: int, heads: int, layers: int) -> Any:
    """A decoder-only Transformer: tokens ``[b, seq]`` int32 -> next-token logits ``[b, seq, vocab]``.

    Example:
        >>> model = build_decoder(**{k: v for k, v in sizes("cpu").items() if k != "batch"})
    """
    import keras
    from keras import layers as kl

    tokens = keras.Input((seq,), dtype="int32", name="tokens")
    x = kl.Embedding(vocab, d_model, name="token_embedding")(tokens)
    x = _position_layer()(name="position_embedding")(x)
    for i in range(layers):
        x = decoder_block(x, d_model, heads, name=f"block{i}")
    x = kl.LayerNormalization(epsilon=1e-5, name="ln_f")(x)
    logits = kl.Dense(vocab, name="lm_head")(x)
    return keras.Model(tokens, logits, name="decoder")


def build(s: dict[str, int]) -> Any:
    """The model ``sizes()`` describes."""
    return build_decoder(s["vocab"], s["seq"], s["d_model"], s["heads"], s["layers"])


def make_optimizer(model: Any) -> Any:
    """Adam (learning rate 1e-3), its two slots built for ``model``'s weights."""
    import keras

    opt = keras.optimizers.Adam(learning_rate=LEARNING_RATE)
    opt.build(model.trainable_variables)
    return opt


def make_train_step(model: Any, optimizer: Any) -> Callable[[Any, Any], Any]:
    """The body of one step: ``step(tokens [b, seq] int32, labels [b, seq] int32) -> loss`` (float32 scalar)."""
    return cross_entropy_step(model, optimizer)


def forward_flops(batch: int, seq: int, d_model: int, layers: int, vocab: int) -> float:
    """Forward matmul FLOPs: per layer ``24 * T * d^2`` (QKV 6, output 2, MLP 16) plus ``4 * b * seq^2 * d``
    for the scores and the weighted sum, with ``T = b * seq`` tokens; plus ``2 * T * d * vocab`` for the head.

    The causal mask is not used to skip work: the full ``seq x seq`` score matrix is counted, as it is computed.
    """
    tokens = batch * seq
    per_layer = 24.0 * tokens * d_model**2 + 4.0 * batch * seq**2 * d_model
    return layers * per_layer + 2.0 * tokens * d_model * vocab


def flops(batch: int, seq: int, d_model: int, layers: int, vocab: int) -> float:
    """FLOPs of one training step: 3x :func:`forward_flops` (the backward pass does two matmuls per forward one)."""
    return 3.0 * forward_flops(batch, seq, d_model, layers, vocab)


def min_bytes(params: int, batch: int, seq: int, slots: int = 2, itemsize: int = 4) -> float:
    """Fewest bytes one step moves: weights, gradients and Adam's two slots, each read and written once, plus tokens
    and labels.

    Activations are not counted (a lower bound; the intensity is an upper bound).
    """
    return float(itemsize * params * (4 + 2 * slots) + 2 * 4 * batch * seq)


def cases(profile: str) -> list[Case]:
    """One case: the training step of the profile's decoder."""
    s = sizes(profile)
    setup = training_setup(lambda: build(s), make_optimizer, make_train_step,
                           make_inputs(s["batch"], s["seq"], s["vocab"]))
    params, build_mode = setup.params, setup.build_mode
    del setup

    n_tokens = s["batch"] * s["seq"]
    return [Case(
        "transformer", f"decoder_{s['layers']}x{s['d_model']}",
        f"decoder training step (Adam): {s['layers']} layers, d_model {s['d_model']}, {s['heads']} heads, "
        f"tokens [{s['batch']}, {s['seq']}] int32, vocabulary {s['vocab']}, {params:,} parameters",
        flops(s["batch"], s["seq"], s["d_model"], s["layers"], s["vocab"]),
        min_bytes(params, s["batch"], s["seq"]), n_tokens, "tokens/s",
        build=build_mode, training=True, min_time=3.0 if profile != "tiny" else 0.3,
        tolerance=TRAINING_TOLERANCE,
        params={**s, "parameters": params}, skip_reason="NumPy has no training step")]
