"""ResNet-18 (basic blocks) and ResNet-50 (bottleneck blocks) from explicit blocks, and one training step.

:func:`build_resnet50` reproduces ``keras.applications.ResNet50(weights=None)`` block for block (convolutions
with biases, batch norm with epsilon 1.001e-5, the same parameter count) but returns logits.
:func:`build_resnet18` follows He et al. (2016): 3x3 basic blocks, convolutions without bias, batch norm;
for inputs under 64 pixels it uses the CIFAR stem (one 3x3 convolution, no pooling).

The step (:func:`make_train_step`): forward, softmax cross-entropy, gradients, SGD with momentum 0.9.
Sizes: GPU ResNet-50 at 224x224, batch 128; CPU ResNet-18 at 32x32, batch 8; tiny a two-stage ResNet-6
of width 8 at 16x16, batch 4 (so that a test compiles it in seconds). Images float32 ``[b, h, w, 3]``,
labels int32 ``[b]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import TRAINING_TOLERANCE, Case, cross_entropy_step, layer_flops, training_setup

BN_EPS = 1.001e-5  # keras.applications' value
LEARNING_RATE = 0.01
MOMENTUM = 0.9


def sizes(profile: str | None = None) -> dict[str, Any]:
    """``{"depth", "image", "batch", "classes", "width", "blocks"}`` for ``profile``
    (``None``: :func:`xlalab.hw.profile`)."""
    from .. import hw

    return dict({
        "gpu": {"depth": 50, "image": 224, "batch": 128, "classes": 1000, "width": 64, "blocks": (3, 4, 6, 3)},
        "cpu": {"depth": 18, "image": 32, "batch": 8, "classes": 10, "width": 64, "blocks": (2, 2, 2, 2)},
        "tiny": {"depth": 6, "image": 16, "batch": 4, "classes": 10, "width": 8, "blocks": (1, 1)},
    }[profile or hw.profile()])


def make_inputs(batch: int, image: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded images ``[batch, image, image, 3]`` float32 (standard normal) and labels ``[batch]`` int32."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, image, image, 3), dtype=np.float32)
    y = rng.integers(0, classes, size=batch).astype(np.int32)
    return x, y


# ---------------------------------------------------------------------------------------------
# Blocks.

def _bn(x: Any, name: str) -> Any:
    import keras

    return keras.layers.BatchNormalization(axis=-1, epsilon=BN_EPS, name=name)(x)


def bottleneck_block(x: Any, filters: int, stride: int = 1, conv_shortcut: bool = True, name: str = "") -> Any:
    """ResNet-50's block: 1x1 (``filters``), 3x3 (``filters``), 1x1 (``4 * filters``), plus the shortcut.

    As in ``keras.applications.resnet.block1``: the stride sits on the first 1x1 convolution, convolutions
    have biases, and the shortcut is a 1x1 convolution with batch norm when ``conv_shortcut``.
    """
    import keras
    from keras import layers

    if conv_shortcut:
        shortcut = layers.Conv2D(4 * filters, 1, strides=stride, name=f"{name}_0_conv")(x)
        shortcut = _bn(shortcut, f"{name}_0_bn")
    else:
        shortcut = x
    x = layers.Conv2D(filters, 1, strides=stride, name=f"{name}_1_conv")(x)
    x = layers.Activation("relu", name=f"{name}_1_relu")(_bn(x, f"{name}_1_bn"))
    x = layers.Conv2D(filters, 3, padding="same", name=f"{name}_2_conv")(x)
    x = layers.Activation("relu", name=f"{name}_2_relu")(_bn(x, f"{name}_2_bn"))
    x = layers.Conv2D(4 * filters, 1, name=f"{name}_3_conv")(x)
    x = _bn(x, f"{name}_3_bn")
    x = layers.Add(name=f"{name}_add")([shortcut, x])
    return keras.layers.Activation("relu", name=f"{name}_out")(x)


def basic_block(x: Any, filters: int, stride: int = 1, name: str = "") -> Any:
    """ResNet-18's block: two 3x3 convolutions (no bias) with batch norm, plus the shortcut.

    The shortcut is a 1x1 convolution with batch norm where the stride or the width changes.
    """
    from keras import layers

    cin = x.shape[-1]
    shortcut = x
    if stride != 1 or cin != filters:
        shortcut = layers.Conv2D(filters, 1, strides=stride, use_bias=False, name=f"{name}_0_conv")(x)
        shortcut = _bn(shortcut, f"{name}_0_bn")
    x = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_1_conv")(x)
    x = layers.Activation("relu", name=f"{name}_1_relu")(_bn(x, f"{name}_1_bn"))
    x = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_2_conv")(x)
    x = _bn(x, f"{name}_2_bn")
    x = layers.Add(name=f"{name}_add")([shortcut, x])
    return layers.Activation("relu", name=f"{name}_out")(x)


def build_resnet50(input_shape: tuple[int, int, int] = (224, 224, 3), classes: int = 1000) -> Any:
    """ResNet-50 as a Keras functional model: images ``[b, *input_shape]`` float32 -> logits ``[b, classes]``.

    Same layers and parameter count as ``keras.applications.ResNet50(weights=None, input_shape=...,
    classes=...)``, whose top ends in a softmax; this one returns logits for a numerically stable loss.
    """
    import keras
    from keras import layers

    inputs = keras.Input(input_shape, name="images")
    x = layers.ZeroPadding2D(3, name="conv1_pad")(inputs)
    x = layers.Conv2D(64, 7, strides=2, name="conv1_conv")(x)
    x = layers.Activation("relu", name="conv1_relu")(_bn(x, "conv1_bn"))
    x = layers.ZeroPadding2D(1, name="pool1_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    for stage, (filters, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=2):
        x = bottleneck_block(x, filters, stride, name=f"conv{stage}_block1")
        for i in range(2, blocks + 1):
            x = bottleneck_block(x, filters, conv_shortcut=False, name=f"conv{stage}_block{i}")
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    outputs = layers.Dense(classes, name="predictions")(x)
    return keras.Model(inputs, outputs, name="resnet50")


def build_resnet18(input_shape: tuple[int, int, int] = (224, 224, 3), classes: int = 1000, width: int = 64,
                   blocks: tuple[int, ...] = (2, 2, 2, 2), small_input: bool | None = None) -> Any:
    """ResNet-18 (or any basic-block ResNet): images ``[b, *input_shape]`` float32 -> logits ``[b, classes]``.

    Stages have ``width * (1, 2, 4, 8)`` filters and ``blocks`` basic blocks each (``(2, 2, 2, 2)`` is
    ResNet-18, ``(1, 1, 1, 1)`` ResNet-10; depth counts the stem, two per block and the head). ``small_input``
    (default: side under 64) swaps the ImageNet
    stem (7x7 stride 2 and a max pool) for one 3x3 convolution, as for CIFAR images.
    """
    import keras
    from keras import layers

    if small_input is None:
        small_input = input_shape[0] < 64
    inputs = keras.Input(input_shape, name="images")
    if small_input:
        x = layers.Conv2D(width, 3, padding="same", use_bias=False, name="conv1_conv")(inputs)
        x = layers.Activation("relu", name="conv1_relu")(_bn(x, "conv1_bn"))
    else:
        x = layers.Conv2D(width, 7, strides=2, padding="same", use_bias=False, name="conv1_conv")(inputs)
        x = layers.Activation("relu", name="conv1_relu")(_bn(x, "conv1_bn"))
        x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool1_pool")(x)
    for stage, n_blocks in enumerate(blocks):
        filters = width * 2**stage
        for i in range(n_blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            x = basic_block(x, filters, stride, name=f"conv{stage + 2}_block{i + 1}")
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    outputs = layers.Dense(classes, name="predictions")(x)
    depth = 2 + 2 * sum(blocks)
    return keras.Model(inputs, outputs, name=f"resnet{depth}")


def build(s: dict[str, Any]) -> Any:
    """The model ``sizes()`` describes: ResNet-50 for depth 50, else a basic-block ResNet."""
    shape = (s["image"], s["image"], 3)
    if s["depth"] == 50:
        return build_resnet50(shape, s["classes"])
    return build_resnet18(shape, s["classes"], width=s["width"], blocks=tuple(s["blocks"]))


# ---------------------------------------------------------------------------------------------
# The training step.

def make_optimizer(model: Any) -> Any:
    """SGD with momentum 0.9 (learning rate 0.01), its slots built for ``model``'s weights."""
    import keras

    opt = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    opt.build(model.trainable_variables)
    return opt


def make_train_step(model: Any, optimizer: Any) -> Callable[[Any, Any], Any]:
    """The body of one training step: ``step(images [b,h,w,3] float32, labels [b] int32) -> loss`` (float32 scalar).

    Forward in training mode (batch statistics), mean softmax cross-entropy on float32 logits,
    gradients of every trainable weight, and one optimizer update. Wrap it with ``tf.function``
    (optionally ``jit_compile=True``) or call it eagerly.
    """
    return cross_entropy_step(model, optimizer)


def flops(model: Any, batch: int) -> float:
    """FLOPs of one training step: 3x the forward convolution and dense FLOPs (:func:`xlalab.workloads.layer_flops`).

    The backward pass computes two products per forward one (the gradient with respect to the input
    and to the weights), hence the factor 3; elementwise work (batch norm, ReLU, the update) is left out.
    """
    return 3.0 * layer_flops(model, batch)


def min_bytes(params: int, batch: int, image: int, slots: int = 1, itemsize: int = 4) -> float:
    """Fewest bytes one training step moves: weights, gradients and optimizer state, plus the batch.

    Weights are read and written once (2), gradients written and read once (2), each optimizer slot
    (momentum: 1) read and written once (2 per slot); the images and labels are read once.
    Activations are not counted: this is a lower bound, so the intensity is an upper bound.
    """
    return float(itemsize * params * (4 + 2 * slots) + batch * (image * image * 3 * itemsize + 4))


# ---------------------------------------------------------------------------------------------
# Suite case.

def cases(profile: str) -> list[Case]:
    """One case: the training step of the profile's ResNet."""
    s = sizes(profile)
    setup = training_setup(lambda: build(s), make_optimizer, make_train_step,
                           make_inputs(s["batch"], s["image"], s["classes"]))
    params, build_mode = setup.params, setup.build_mode
    step_flops = flops(setup.base_model, s["batch"])
    del setup

    name = f"resnet{s['depth']}"
    return [Case(
        "resnet", name,
        f"{name} training step (SGD momentum), images [{s['batch']}, {s['image']}, {s['image']}, 3] float32, "
        f"{s['classes']} classes, {params:,} parameters",
        step_flops, min_bytes(params, s["batch"], s["image"]), s["batch"], "images/s",
        build=build_mode, training=True, min_time=3.0 if profile != "tiny" else 0.3,
        tolerance=TRAINING_TOLERANCE,
        params={**s, "blocks": list(s["blocks"]), "parameters": params},
        skip_reason="NumPy has no training step")]
