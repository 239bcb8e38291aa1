"""xlalab.bench: synchronization matters, compile time stays out of the steady state, compare works."""

import time

import numpy as np
import pytest
import tensorflow as tf

from xlalab import bench


def test_sync_matters_for_asynchronous_results():
    with_sync = bench.benchmark(bench.delayed_work, 0.02, min_time=0.1, min_repeats=5)
    without = bench.benchmark(bench.delayed_work, 0.02, min_time=0.1, min_repeats=5, do_sync=False)
    assert with_sync.median_s >= 0.019
    assert without.median_s < 0.002  # the naive timer sees only the dispatch


def test_sync_walks_nested_results():
    out = bench.sync({"a": [bench.delayed_work(0.01), (tf.ones([3]), np.ones(2))]})
    assert isinstance(out, dict)


def test_first_call_is_kept_out_of_steady_state():
    def body(x):
        time.sleep(0.3)  # runs only while tracing
        return x * 2.0

    fn = tf.function(body)
    t = bench.benchmark(fn, tf.ones([16]), min_time=0.05)
    assert t.first_call_s >= 0.3
    assert t.median_s < 0.05


def test_xla_compile_time_is_first_call_only():
    fn = tf.function(lambda x: tf.reduce_sum(tf.tanh(x) * 3.0 + 1.0), jit_compile=True)
    t = bench.benchmark(fn, tf.ones([256, 256]), min_time=0.1)
    assert t.first_call_s > 5 * t.median_s


def test_same_answer_for_python_graph_and_xla():
    a = tf.random.normal([768, 768])

    def work(x):
        return tf.matmul(x, x)

    # Interleaved, so that load from other processes hits all three alike (a sequential run flaked under load).
    c = bench.compare({"python": work, "graph": tf.function(work), "xla": tf.function(work, jit_compile=True)},
                      a, min_time=0.3)
    timings = [t.median_s for t in c.timings.values()]
    assert max(timings) / min(timings) < 4, c.table()


def test_compare_interleaves_and_reports_ratios():
    c = bench.compare({"slow": lambda: bench.delayed_work(0.004), "fast": lambda: bench.delayed_work(0.001)},
                      min_time=0.1, min_rounds=5)
    assert len(c.timings["slow"].samples_s) == len(c.timings["fast"].samples_s)
    assert c.speedups["slow"] == pytest.approx(1.0)
    assert 2.0 < c.speedups["fast"] < 6.0
    lo, hi = c.cis["fast"]
    assert lo <= c.speedups["fast"] <= hi
    assert "speedup vs slow" in c.table()
    assert set(c.to_dict()["variants"]) == {"slow", "fast"}


def test_compare_rejects_unknown_baseline():
    with pytest.raises(KeyError):
        bench.compare({"a": lambda: 1}, baseline="b")


def _count_host_copies(monkeypatch):
    """Patch EagerTensor.numpy to record the number of elements each host copy moves."""
    from tensorflow.python.framework import ops

    copies: list[int] = []
    original = ops._EagerTensorBase.numpy

    def counting(self):
        copies.append(int(np.prod(self.shape)))
        return original(self)

    monkeypatch.setattr(ops._EagerTensorBase, "numpy", counting)
    return copies


def test_sync_copies_nothing_to_the_host(monkeypatch):
    copies = _count_host_copies(monkeypatch)
    big = tf.function(lambda x: {"a": x * 2.0, "b": [x + 1.0, tf.reduce_sum(x)]}, jit_compile=True)
    x = tf.ones([1 << 20])
    bench.sync(big(x))
    bench.benchmark(big, x, min_time=0.02, min_repeats=3)
    assert copies == [], "the barrier must not copy results to the host"


def test_fallback_fetches_one_element_per_output(monkeypatch):
    copies = _count_host_copies(monkeypatch)
    monkeypatch.setattr(bench, "_sync_devices", lambda: None)  # a TensorFlow without sync_devices
    bench.sync({"a": tf.ones([1000, 1000]), "b": [tf.zeros([512]), np.ones(3)]})
    assert copies == [1, 1]


def test_sync_time_does_not_grow_with_the_output():
    """Waiting on a 64 MB output costs less than copying it: the copy is out of the timed region."""
    fn = tf.function(lambda x: x + 1.0, jit_compile=True)
    small, large = tf.ones([1024]), tf.ones([16 * 2**20])
    outs = {"small": fn(small), "large": fn(large)}

    def best(f, repeats=15):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return min(times)

    sync_small = best(lambda: bench.sync(outs["small"]))
    sync_large = best(lambda: bench.sync(outs["large"]))
    copy_large = best(lambda: outs["large"].numpy())
    assert sync_large < 0.25 * copy_large, (sync_large, copy_large)
    assert sync_large < sync_small + 0.5e-3, (sync_small, sync_large)


@pytest.mark.parametrize("ci, verdict", [((1.05, 1.9), "faster"), ((0.4, 0.97), "slower"), ((0.9, 1.2), "indistinguishable"),
                                         ((1.0, 1.3), "indistinguishable"), ((0.7, 1.0), "indistinguishable")])
def test_ratio_verdict_reads_the_interval_not_the_median(ci, verdict):
    assert bench.ratio_verdict(ci) == verdict
    assert bench.ratio_verdict(list(ci)) == verdict


def test_ratio_verdict_rejects_a_reversed_or_empty_interval():
    with pytest.raises(ValueError):
        bench.ratio_verdict((1.3, 1.1))
    with pytest.raises(ValueError):
        bench.ratio_verdict((float("nan"), 1.0))
