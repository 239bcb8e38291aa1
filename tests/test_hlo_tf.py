"""xlalab.hlo on HLO that TensorFlow itself prints: small functions, control flow, a ResNet-50 step."""

import pytest
import tensorflow as tf

from xlalab import hlo


def _relu_dense(x, w, b):
    return tf.nn.relu(tf.matmul(x, w) + b)


def test_lowering_and_fusion_on_cpu():
    x, w, b = tf.ones([8, 16]), tf.ones([16, 32]), tf.ones([32])
    before = hlo.summary(hlo.hlo_text(_relu_dense, x, w, b, stage="hlo"))
    after = hlo.summary(hlo.hlo_text(_relu_dense, x, w, b, stage="optimized_hlo"))
    assert before["ops_by_opcode"]["dot"] == 1 and before["ops_by_opcode"]["maximum"] == 1
    assert before["fusions"] == 0
    assert after["fusions"] >= 1
    assert after["kernels"] < before["kernels"]
    assert after["bytes_moved"] < before["bytes_moved"]


def test_elementwise_chain_is_one_fusion():
    f = tf.function(lambda x: tf.nn.relu(tf.abs(x * 2.0 + 1.0) - 0.5) * 3.0, jit_compile=True)
    s = hlo.summary(hlo.hlo_text(f, tf.ones([1000])))
    assert s["fusions"] == 1 and s["kernels"] == 1


def test_while_and_conditional_from_tensorflow():
    @tf.function(jit_compile=True)
    def loop(x, flag):
        x = tf.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, tf.sin(v) * 2.0), (0, x))[1]
        return tf.cond(flag, lambda: tf.exp(x), lambda: -x)

    args = (tf.ones([4, 4]), tf.constant(True))
    for stage in ("hlo", "optimized_hlo"):
        text = hlo.hlo_text(loop, *args, stage=stage)
        module = hlo.parse(text)
        assert sum(len(c.instructions) for c in module.computations.values()) == hlo.instruction_lines(text)
        opcodes = {i.opcode for i in module.instructions()}
        assert "while" in opcodes


def test_hlo_text_rejects_unknown_stage():
    with pytest.raises(ValueError):
        hlo.hlo_text(lambda x: x, tf.ones([2]), stage="nonsense")


@pytest.mark.slow
def test_resnet50_training_step_parses_completely():
    """Acceptance: every instruction of a Keras ResNet-50 training step's optimized HLO parses."""
    import keras

    model = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    opt = keras.optimizers.SGD(0.01, momentum=0.9)
    opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=False)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    x = tf.random.normal([2, 64, 64, 3])
    y = tf.constant([1, 2])
    text = hlo.hlo_text(tf.function(step, jit_compile=True), x, y, stage="optimized_hlo")
    module = hlo.parse(text)
    n = sum(len(c.instructions) for c in module.computations.values())
    assert n == hlo.instruction_lines(text)
    s = hlo.summary(module)
    assert s["ops_by_opcode"].get("convolution", 0) + s["fused_ops_by_opcode"].get("convolution", 0) >= 53
    assert s["fusions"] > 50


def _crossing_tensors(fn, x) -> tuple[set[str], int]:
    """The forward results read by backward kernels in fn's optimized module (the red edges of the autodiff chapter's
    recompute pictures), and the number of backward kernels."""
    from xlalab.hlo import graph

    text = hlo.hlo_text(fn, x, stage="optimized_hlo")
    d = hlo.draw(text, format="dot", highlight=graph.forward_to_backward)
    module = hlo.parse(text)
    backward = sum(graph.is_backward(module, module.find(k["name"])) for k in d.kernels)
    return {e["from"] for e in d.edges if e["highlighted"]}, backward


def test_recompute_grad_lowers_the_tensors_that_cross_from_forward_to_backward():
    """book-review-s5, S5-1: with tf.recompute_grad the forward ops that run again in the backward pass are backward
    work, so fewer forward results cross into the backward pass (3 -> 1 on XLA:CPU: only the block's output, which
    the loss's gradient reads), not more (3 -> 5 when op names alone decided). The autodiff chapter's small stack."""
    weights = [tf.Variable(tf.random.normal([64, 64], seed=40 + i) / 8.0) for i in range(3)]
    x = tf.random.normal([32, 64], seed=43)

    def grads(x):
        with tf.GradientTape() as tape:
            h = x
            for w in weights:
                h = tf.tanh(h @ w)
            loss = tf.reduce_sum(h * h)
        return loss, tape.gradient(loss, weights)

    block = tf.recompute_grad(lambda h: tf.tanh(tf.tanh(tf.tanh(h @ weights[0]) @ weights[1]) @ weights[2]))

    def grads_recompute(x):
        with tf.GradientTape() as tape:
            h = block(x)
            loss = tf.reduce_sum(h * h)
        return loss, tape.gradient(loss, weights)

    plain, plain_backward = _crossing_tensors(grads, x)
    recompute, recompute_backward = _crossing_tensors(grads_recompute, x)
    assert len(plain) == 3                        # each layer's tanh output, read by its gradient
    assert 1 <= len(recompute) < len(plain)       # the block's output only: the rest is recomputed
    assert recompute_backward > plain_backward    # the recomputed forward kernels run in the backward pass


def test_matrix_ops_on_cpu_programs():
    x, w = tf.ones([8, 16]), tf.ones([16, 32])
    ops = hlo.matrix_ops(hlo.hlo_text(_relu_dense, x, w, tf.ones([32])))
    assert [(o.kind, o.lhs.dims, o.rhs.dims, o.out.dims, o.flops) for o in ops] == \
        [("dot", (8, 16), (16, 32), (8, 32), 2 * 8 * 32 * 16)]
    assert ops[0].impl in ("xla", "fusion", "onednn")
    conv = hlo.matrix_ops(hlo.hlo_text(lambda a, k: tf.nn.conv2d(a, k, 1, "SAME"),
                                       tf.ones([2, 8, 8, 3]), tf.ones([3, 3, 3, 4])))
    assert [(o.kind, o.flops) for o in conv] == [("convolution", 2 * (2 * 8 * 8 * 4) * (3 * 3 * 3))]


def test_fake_gpu_hook_with_a_recorded_stand_in(monkeypatch):
    # A V100 has a datasheet row but no deviceless target: a recorded XLA:GPU module stands in.
    monkeypatch.setenv(hlo.FAKE_GPU_ENV, "Tesla V100-SXM2-16GB")
    assert hlo.fake_gpu_target() is None and "recorded" in hlo.fake_gpu_stand_in()
    dense = hlo.hlo_text(_relu_dense, tf.ones([8, 16]), tf.ones([16, 32]), tf.ones([32]))
    assert dense == hlo.fake_gpu_module("gemm") and "__cublas$gemm" in dense
    conv = hlo.hlo_text(lambda a, k: tf.nn.relu(tf.nn.conv2d(a, k, 1, "SAME")),
                        tf.ones([2, 8, 8, 3]), tf.ones([3, 3, 3, 4]))
    assert conv == hlo.fake_gpu_module("conv") and {o.impl for o in hlo.matrix_ops(conv)} == {"cudnn"}
    chain = hlo.hlo_text(lambda a: tf.nn.relu(a * 2.0 + 1.0), tf.ones([64]))
    assert chain == hlo.fake_gpu_module("elementwise")
    # Other stages stay real (XLA:CPU's lowering of this very program).
    before = hlo.hlo_text(_relu_dense, tf.ones([8, 16]), tf.ones([16, 32]), tf.ones([32]), stage="hlo")
    assert "__cublas" not in before and "dot(" in before
    # The program is still compiled for real, so its errors surface.
    with pytest.raises(Exception):  # noqa: B017  (TensorFlow versions raise different types for a shape mismatch)
        hlo.hlo_text(lambda a, b: tf.matmul(a, b), tf.ones([2, 3]), tf.ones([4, 5]))


@pytest.mark.heavy   # the deviceless XLA:GPU compile runs in a subprocess
def test_fake_gpu_hook_compiles_for_that_gpu_without_one(monkeypatch):
    from xlalab.hlo import gpu_compile

    if gpu_compile.missing_packages():
        pytest.skip("the gpu-compile extra is not installed")
    monkeypatch.setenv(hlo.FAKE_GPU_ENV, "NVIDIA A100-SXM4-40GB")
    assert hlo.fake_gpu_target() == "A100-SXM-40GB" and "compiled without a GPU" in hlo.fake_gpu_stand_in()
    dense = hlo.hlo_text(_relu_dense, tf.ones([8, 16]), tf.ones([16, 32]), tf.ones([32]))
    ops = hlo.matrix_ops(dense)
    # This program's own product (not a recorded module's), as XLA:GPU builds it for an A100: a Triton GEMM.
    assert [(o.impl, o.lhs.dims, o.rhs.dims, o.flops) for o in ops] == [("triton", (8, 16), (16, 32), 2 * 8 * 32 * 16)]
    chain = hlo.summary(hlo.hlo_text(lambda a: tf.nn.relu(a * 2.0 + 1.0), tf.ones([64])))
    assert chain["kernels"] == 1 and chain["fusions_by_kind"] == {"kLoop": 1}
    with pytest.raises(Exception):  # noqa: B017  (TensorFlow versions raise different types for a shape mismatch)
        hlo.hlo_text(lambda a, b: tf.matmul(a, b), tf.ones([2, 3]), tf.ones([4, 5]))


@pytest.mark.heavy   # a TensorFlow subprocess dumps every pass
def test_every_file_of_a_full_dump_parses(tmp_path):
    """Acceptance: hlo.parse on every *.txt of a full --xla_dump_to directory (all passes) never raises."""
    source = ("import tensorflow as tf\n"
              "@tf.function(jit_compile=True)\n"
              "def f(x, w, flag):\n"
              "    h = tf.nn.relu(x @ w)\n"
              "    h = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tf.tanh(v)), (0, h))[1]\n"
              "    return tf.cond(flag, lambda: tf.reduce_sum(h), lambda: tf.reduce_max(h))\n"
              "f(tf.ones([4, 8]), tf.ones([8, 16]), tf.constant(True))\n")
    hlo.dump_passes(source, tmp_path)
    texts = sorted(tmp_path.glob("*.txt"))
    assert len(texts) > 20
    modules = 0
    for path in texts:
        text = path.read_text()
        module = hlo.parse(text)
        if text.lstrip().startswith("HloModule"):
            modules += 1
            assert sum(len(c.instructions) for c in module.computations.values()) == hlo.instruction_lines(text)
            hlo.summary(module)
    assert modules > 20
