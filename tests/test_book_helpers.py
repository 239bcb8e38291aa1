"""Fast tests of the small helpers the book's chapters use: xlalab.flops and xlalab.sphinx_dedupe."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def test_dot_flops_counts_each_product():
    import tensorflow as tf

    from xlalab import flops, hlo

    text = hlo.hlo_text(lambda a, b: a @ b, tf.ones([4, 8]), tf.ones([8, 2]))
    assert flops.dot_flops(text)["total"] == 2 * 4 * 2 * 8
    batched = hlo.hlo_text(lambda a, b: tf.matmul(a, b, transpose_a=True), tf.ones([3, 8, 4]), tf.ones([3, 8, 2]))
    assert flops.dot_flops(batched)["total"] == 2 * 3 * 4 * 2 * 8


def test_gradient_of_a_layer_adds_two_products():
    import tensorflow as tf

    from xlalab import flops, hlo

    w = tf.Variable(tf.ones([16, 16]))
    x = tf.ones([8, 16])

    def value_and_grads(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.tanh(x @ w))
        return y, tape.gradient(y, [x, w])

    fwd = flops.dot_flops(hlo.hlo_text(lambda x: tf.reduce_sum(tf.tanh(x @ w)), x))["total"]
    both = flops.dot_flops(hlo.hlo_text(value_and_grads, x))["total"]
    assert both == 3 * fwd, (fwd, both)


def test_sphinx_dedupe_drops_repeated_inline_scripts():
    from xlalab import sphinx_dedupe

    page = ("<head>\n    <script>const X = 1</script>\n    <script src=\"a.js\"></script>\n"
            "    <script>var y = 2</script>\n    <script>const X = 1</script>\n</head>\n")
    out = sphinx_dedupe.dedupe_inline_scripts(page)
    assert out.count("const X = 1") == 1 and out.count("var y = 2") == 1 and 'src="a.js"' in out
    assert sphinx_dedupe.dedupe_inline_scripts(out) == out
