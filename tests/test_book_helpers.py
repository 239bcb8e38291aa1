"""Tests of the small helpers the book's chapters use (xlalab.hlo.flops, xlalab.sphinx_dedupe), and of one chapter
branch."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def test_dot_flops_counts_each_product():
    import tensorflow as tf

    from xlalab import hlo
    from xlalab.hlo import flops

    text = hlo.hlo_text(lambda a, b: a @ b, tf.ones([4, 8]), tf.ones([8, 2]))
    assert flops.dot_flops(text)["total"] == 2 * 4 * 2 * 8
    batched = hlo.hlo_text(lambda a, b: tf.matmul(a, b, transpose_a=True), tf.ones([3, 8, 4]), tf.ones([3, 8, 2]))
    assert flops.dot_flops(batched)["total"] == 2 * 3 * 4 * 2 * 8


def test_gradient_of_a_layer_adds_two_products():
    import tensorflow as tf

    from xlalab import hlo
    from xlalab.hlo import flops

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


def _glued(nb) -> dict[str, str]:
    """The glued values of an executed notebook: name -> text/markdown, else text/plain."""
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            sb = o.get("metadata", {}).get("scrapbook")
            if sb:
                data = o["data"]
                out[sb["name"]] = (data.get(sb["mime_prefix"] + "text/markdown")
                                   or data.get(sb["mime_prefix"] + "text/plain", ""))
    return out



@pytest.mark.slow
@pytest.mark.timeout(900)
def test_autodiff_allocator_branch_the_build_does_not_take(monkeypatch):
    """Review s3 N1: the autodiff chapter prints and compares allocator figures only where the allocator keeps
    statistics. The book build takes this machine's branch; this test forces the other one (oneDNN, whose allocator
    is the only CPU allocator with statistics, switched by TF_ENABLE_ONEDNN_OPTS) and checks the glued sentences."""
    import re
    from pathlib import Path

    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from xlalab import hw

    if hw.gpus():
        pytest.skip("a GPU allocator always keeps statistics; the CPU branches are what this test switches")
    repo = Path(__file__).resolve().parents[1]
    stats_now = hw.memory_stats_available()
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0" if stats_now else "1")
    monkeypatch.setenv("XLALAB_PROFILE", "tiny")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(repo / "book" / "autodiff.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(repo / "book")}}).execute()
    g = _glued(nb)
    if stats_now:   # forced off: no statistics, so no figure and no conclusion
        assert "keeps no statistics" in g["ad_keep_story"] and "MiB behind" not in g["ad_keep_story"]
        assert "|" not in g["ad_mem_table"] and "cannot be measured" in g["ad_mem_table"]
        assert g["ad_rc_peak_word"].strip("'\"").startswith("could not be checked")
        assert "keeps no statistics" in g["ad_graph_count_story"] and "keeps no statistics" in g["ad_xla_alloc_story"]
        assert g["ad_xla_probe_story"].strip("'\" ") == "", g["ad_xla_probe_story"]
    else:           # forced on: the figures are printed and the verdicts follow from them
        m = re.search(r"leaves ([\d.]+) MiB, ([\d.]+) times the count of the L activations \(([\d.]+) MiB\)",
                      g["ad_keep_story"])
        assert m and abs(float(m.group(2)) - float(m.group(1)) / float(m.group(3))) <= 0.01, g["ad_keep_story"]
        assert "| value and gradients |" in g["ad_mem_table"]
        assert g["ad_xla_alloc_story"].strip("'\"").startswith("The allocator measured")
