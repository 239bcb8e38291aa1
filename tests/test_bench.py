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

    timings = [bench.benchmark(f, a, min_time=0.2).median_s
               for f in (work, tf.function(work), tf.function(work, jit_compile=True))]
    assert max(timings) / min(timings) < 4, timings


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
