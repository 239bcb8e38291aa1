"""xlalab.workloads: models have the right parameter counts, bodies match their references, counts are right."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from xlalab import hlo  # noqa: E402
from xlalab.workloads import count_params, fusion, gemv, layer_flops, rel_error, resnet, transformer  # noqa: E402


@pytest.mark.heavy   # builds two Keras ResNet-50s (ours and keras.applications): 13 s
def test_resnet50_matches_keras_applications_parameter_count():
    ours = resnet.build_resnet50((32, 32, 3), classes=10)
    theirs = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    assert ours.count_params() == theirs.count_params()
    assert count_params(ours) == count_params(theirs)


@pytest.mark.heavy   # builds and runs a Keras ResNet-18: 7 s
def test_resnet18_is_the_standard_cifar_resnet18():
    model = resnet.build_resnet18((32, 32, 3), classes=10)
    assert count_params(model) == 11_173_962  # He et al.'s ResNet-18 with a 3x3 stem, 10 classes
    # 0.56 GMAC per 32x32 image: convolutions and the classifier, 2 FLOPs per multiply-add.
    assert layer_flops(model, 1) == pytest.approx(1.1108e9, rel=1e-3)
    assert model(np.zeros((2, 32, 32, 3), np.float32)).shape == (2, 10)


def test_resnet18_imagenet_stem_for_large_inputs():
    model = resnet.build_resnet18((64, 64, 3), classes=7, width=8)
    assert model.get_layer("conv1_conv").kernel_size == (7, 7)
    assert model.output.shape[-1] == 7


def test_gemv_formulations_agree_with_reference():
    items, user = gemv.make_inputs(500, 16)
    ref = gemv.reference(items, user)
    for name, fn in gemv.FORMULATIONS.items():
        out = fn(tf.constant(items), tf.constant(user)).numpy()
        assert out.shape == (500,), name
        assert rel_error(out, ref) < 1e-5, name


def test_gemv_topk_and_batched():
    items, user = gemv.make_inputs(300, 8)
    values, idx = gemv.scores_topk(tf.constant(items), tf.constant(user), 5)
    ref = gemv.reference(items, user)
    np.testing.assert_array_equal(idx.numpy(), np.argsort(-ref)[:5])
    _, users = gemv.make_inputs(300, 8, batch=4, seed=1)
    out = gemv.batched_scores(tf.constant(items), tf.constant(users)).numpy()
    assert rel_error(out, gemv.reference(items, users)) < 1e-5


def test_gemv_counts():
    # float32 GEMV: 2 FLOPs per 4-byte element read, intensity just under 0.5 FLOP/byte.
    assert gemv.flops(100_000, 128) == 2 * 100_000 * 128
    assert gemv.min_bytes(100_000, 128) == 4 * (100_000 * 128 + 128 + 100_000)
    assert gemv.flops(10, 4, 8) / gemv.min_bytes(10, 4, 8) > gemv.flops(10, 4) / gemv.min_bytes(10, 4)


@pytest.mark.parametrize("kind", ["memory", "transcendental", "layer_norm"])
def test_fusion_bodies_match_reference(kind):
    arrays: tuple[np.ndarray, ...]
    if kind == "layer_norm":
        arrays = fusion.make_rows(8)
    else:
        arrays = (fusion.make_inputs(4096),)
    out = fusion.BODIES[kind](*[tf.constant(a) for a in arrays]).numpy()
    assert rel_error(out, fusion.reference(kind, *arrays)) < 1e-5


def test_memory_chain_is_one_fusion_under_xla():
    x = tf.constant(fusion.make_inputs(4096))
    s = hlo.summary(hlo.hlo_text(fusion.memory_chain, x))
    assert s["fusions"] == 1 and s["kernels"] == 1, s["kernel_list"]
    assert fusion.min_bytes("memory", 4096) == 2 * 4 * 4096
    assert fusion.unfused_bytes("memory", 4096) == 8 * fusion.min_bytes("memory", 4096)


def test_decoder_parameter_count_and_flops():
    v, seq, d, h, n = 50, 8, 16, 2, 2
    model = transformer.build_decoder(v, seq, d, h, n)
    # Embeddings, per layer 12 d^2 + 13 d (attention 4 d^2 + 4 d, MLP 8 d^2 + 5 d, two layer norms 4 d),
    # the final layer norm and the head.
    expected = v * d + seq * d + n * (12 * d * d + 13 * d) + 2 * d + d * v + v
    assert count_params(model) == expected
    assert model(np.zeros((3, seq), np.int32)).shape == (3, seq, v)
    fwd = transformer.forward_flops(3, seq, d, n, v)
    assert fwd == n * (24 * 3 * seq * d * d + 4 * 3 * seq * seq * d) + 2 * 3 * seq * d * v
    assert transformer.flops(3, seq, d, n, v) == 3 * fwd


@pytest.mark.heavy   # trains two models: 19 s
def test_training_steps_reduce_the_loss():
    keras.utils.set_random_seed(0)
    s = resnet.sizes("tiny")
    model = resnet.build(s)
    step = tf.function(resnet.make_train_step(model, resnet.make_optimizer(model)))
    x, y = (tf.constant(a) for a in resnet.make_inputs(s["batch"], s["image"], s["classes"]))
    losses = [float(step(x, y)) for _ in range(4)]
    assert losses[-1] < losses[0], losses

    t = transformer.sizes("tiny")
    dec = transformer.build(t)
    step = tf.function(transformer.make_train_step(dec, transformer.make_optimizer(dec)))
    tok, lab = (tf.constant(a) for a in transformer.make_inputs(t["batch"], t["seq"], t["vocab"]))
    losses = [float(step(tok, lab)) for _ in range(4)]
    assert losses[-1] < losses[0], losses


def test_min_bytes_count_weights_gradients_and_slots():
    # SGD with momentum: weights, gradients and one slot, each read and written once; plus the images and labels.
    assert resnet.min_bytes(1000, 2, 4) == 4 * 1000 * 6 + 2 * (4 * 4 * 3 * 4 + 4)
    # Adam has two slots.
    assert transformer.min_bytes(1000, 2, 4) == 4 * 1000 * 8 + 2 * 4 * 2 * 4
