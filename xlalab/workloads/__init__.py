"""The course's four workloads, each sized by profile and able to count its own FLOPs and bytes.

``gemv`` (recommendation scoring), ``fusion`` (elementwise chains), ``resnet`` (a training step) and
``transformer`` (a decoder training step). Each module exposes plain functions (sizes, seeded input
builders, the step body, ``flops``, ``min_bytes``, a reference) and ``cases(profile)``: the list of
:class:`Case` objects that :mod:`xlalab.suite` runs in every execution mode.

Modes (the keys of :data:`MODES`): ``eager`` (the Python body as is), ``graph`` (``tf.function``),
``xla`` (``tf.function(jit_compile=True)``), ``xla_mixed`` (XLA under the device's mixed-precision
policy, :func:`xlalab.hw.mixed_policy`), ``autocluster`` (``tf.function`` in a process started with
``TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"``) and ``numpy`` (GEMV only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WORKLOADS = ("gemv", "fusion", "resnet", "transformer")
MODES = ("eager", "graph", "xla", "xla_mixed", "autocluster", "numpy")

#: Relative error (norm of the difference over norm of the graph-mode result) allowed per compute dtype,
#: for one forward computation. Training steps use their own, larger values (see each Case).
TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 1e-2}

#: Per output of a training step after one step from identical weights: the loss, and the change of every
#: trainable weight (all weights concatenated). Batch norm's backward pass subtracts nearly equal sums, which
#: amplifies rounding differences (float32 ResNet-18, XLA against graph: about 1e-3; bfloat16: about 0.3), and
#: Adam turns small gradients into updates of full size; a wrong step (another gradient) gives an update error
#: near 1 or above (about 1.4 for an unrelated update of the same size).
TRAINING_TOLERANCE = {"float32": {"loss": 1e-3, "update": 1e-2},
                      "bfloat16": {"loss": 3e-2, "update": 0.5},
                      "float16": {"loss": 1e-2, "update": 0.3}}


def wrap(body: Callable, mode: str) -> Callable:
    """``body`` as ``mode`` runs it: eager as is, ``tf.function`` for graph/autocluster, jit for xla modes."""
    import tensorflow as tf

    if mode == "eager":
        return body
    if mode in ("graph", "autocluster"):
        return tf.function(body)
    if mode in ("xla", "xla_mixed"):
        return tf.function(body, jit_compile=True)
    raise ValueError(f"mode {mode!r} has no TensorFlow wrapper; expected one of {MODES[:5]}")


@contextlib.contextmanager
def keras_policy(name: str | None) -> Iterator[None]:
    """Build Keras layers under the mixed-precision policy ``name`` (``None``: float32), then restore it."""
    import keras

    old = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(name or "float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(old)


def rel_error(value: Any, reference: Any) -> float:
    """Norm-wise relative error ``||value - reference|| / ||reference||`` in float64 (0 when both are zero)."""
    v = np.asarray(value, dtype=np.float64).ravel()
    r = np.asarray(reference, dtype=np.float64).ravel()
    if v.shape != r.shape:
        return float("inf")
    denom = np.linalg.norm(r)
    diff = np.linalg.norm(v - r)
    if denom == 0:
        return float(diff)
    return float(diff / denom)


@dataclass
class Runner:
    """One case, set up for one mode.

    Attributes:
        fn: the callable to time (a Python function, a ``tf.function`` or NumPy code).
        args: what ``fn`` is called with.
        outputs: turns the result of the first call into named arrays to compare across modes
            (for a training step: the loss and the change of every trainable weight).
        dtype: the compute dtype (``"float32"``, ``"bfloat16"``).
        min_bytes: bytes per step if they differ from the case's (narrower inputs in ``xla_mixed``).
    """

    fn: Callable
    args: tuple = ()
    outputs: Callable[[Any], dict[str, np.ndarray]] = lambda out: {"out": np.asarray(out)}
    dtype: str = "float32"
    min_bytes: float | None = None

    def __call__(self) -> Any:
        return self.fn(*self.args)


@dataclass
class Case:
    """One row group of the suite: a computation with its sizes, costs and a per-mode builder.

    Attributes:
        workload: one of :data:`WORKLOADS`; name: the case within it (e.g. ``"matmul_col"``).
        description: one line with shapes and dtypes.
        flops: FLOPs per step; min_bytes: the fewest bytes a step must move (see each module's ``min_bytes``).
        items: items per step (scores, elements, images, tokens); unit: the throughput unit (``"images/s"``).
        build: ``build(mode) -> Runner`` (raises nothing for a mode in ``modes``).
        modes: the modes this case runs; others appear in the results as skipped with ``skip_reason``.
        tolerance: allowed relative error per compute dtype: one number, or one per output name.
        min_time: seconds of interleaved timing.
        params: the sizes, for the record.
        training: a training step (outputs are the loss and the weight updates after one step).
        reference: ``reference() -> array``, the float64 answer the graph mode is checked against, if any.
    """

    workload: str
    name: str
    description: str
    flops: float
    min_bytes: float
    items: float
    unit: str
    build: Callable[[str], Runner]
    modes: tuple[str, ...] = ("eager", "graph", "xla", "xla_mixed", "autocluster")
    tolerance: dict[str, Any] = field(default_factory=lambda: dict(TOLERANCE))
    min_time: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)
    skip_reason: str = "not part of this case"
    training: bool = False
    reference: Callable[[], np.ndarray] | None = None


def training_outputs(model: Any, initial: list[np.ndarray]) -> Callable[[Any], dict[str, np.ndarray]]:
    """An ``outputs`` function for a training step: the loss, and every trainable weight's change from ``initial``."""

    def outputs(loss: Any) -> dict[str, np.ndarray]:
        deltas = [np.asarray(w, dtype=np.float64).ravel() - w0.ravel()
                  for w, w0 in zip(model.trainable_weights, initial)]
        return {"loss": np.asarray(loss, dtype=np.float64), "update": np.concatenate(deltas)}

    return outputs


def cross_entropy_step(model: Any, optimizer: Any) -> Callable[[Any, Any], Any]:
    """One training step: ``step(inputs, labels int32) -> loss`` (float32 scalar).

    Forward in training mode, mean sparse softmax cross-entropy on logits cast to float32 (so a mixed
    policy keeps its loss in float32), gradients of every trainable weight, one optimizer update.
    """
    import tensorflow as tf

    def step(inputs: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(inputs, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


@dataclass
class TrainingSetup:
    """What every training-step case shares: the seeded initial weights and a per-mode runner factory.

    ``build_mode(mode)`` builds a fresh model (under the device's mixed policy for ``"xla_mixed"``),
    loads the same initial weights, and returns a :class:`Runner` of one training step on ``inputs``.
    """

    params: int
    base_model: Any
    build_mode: Callable[[str], Runner]


def training_setup(build: Callable[[], Any], make_optimizer: Callable[[Any], Any],
                   make_train_step: Callable[[Any, Any], Callable], inputs: tuple[np.ndarray, ...]) -> TrainingSetup:
    """Seed, build the model once for its initial weights, and make runners that all start from them."""
    import keras
    import tensorflow as tf

    from .. import hw

    keras.utils.set_random_seed(0)
    base = build()
    initial = [w.numpy() for w in base.weights]
    trainable0 = [w.numpy() for w in base.trainable_weights]

    def build_mode(mode: str) -> Runner:
        policy = hw.mixed_policy() if mode == "xla_mixed" else None
        with keras_policy(policy):
            model = build()
        model.set_weights(initial)
        fn = wrap(make_train_step(model, make_optimizer(model)), mode)
        dtype = "bfloat16" if policy == "mixed_bfloat16" else ("float16" if policy else "float32")
        return Runner(fn, tuple(tf.constant(a) for a in inputs), training_outputs(model, trainable0), dtype=dtype)

    return TrainingSetup(count_params(base), base, build_mode)


def layer_flops(model: Any, batch: int) -> float:
    """Forward FLOPs of a Keras model's ``Conv2D`` and ``Dense`` layers for a batch of ``batch`` inputs.

    A convolution costs ``2 * out_elements * kh * kw * cin`` (a multiply and an add per weight per
    output element); a dense layer ``2 * out_elements * fan_in``. Batch norm, activations, pooling and
    additions are left out (a few FLOPs per element, well under 1% for these networks).
    """
    total = 0.0
    for layer in model.layers:
        kind = type(layer).__name__
        if kind not in ("Conv2D", "Dense"):
            continue
        out = [int(s) for s in layer.output.shape[1:]]
        kernel = layer.kernel.shape
        fan_in = int(np.prod(kernel[:-1]))
        total += 2.0 * int(np.prod(out)) * fan_in * batch
    return total


def count_params(model: Any) -> int:
    """Trainable parameters of a Keras model."""
    return int(sum(np.prod(w.shape) for w in model.trainable_weights))


def cases(workload: str, profile: str) -> list[Case]:
    """The cases of ``workload`` (one of :data:`WORKLOADS`) at ``profile`` sizes."""
    import importlib

    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; expected one of {WORKLOADS}")
    return importlib.import_module(f"{__name__}.{workload}").cases(profile)
