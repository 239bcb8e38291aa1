"""xlalab.bench: synchronization matters, compile time stays out of the steady state, compare works."""

import time

import numpy as np
import pytest
import tensorflow as tf

from xlalab import bench


class _QueuedWork:
    """A result that is ready ``seconds`` of the scripted clock after it was made, like a queued GPU kernel:
    ``block_until_ready()`` advances the clock to that moment (no real waiting)."""

    def __init__(self, clock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def block_until_ready(self):
        self.clock.t += self.seconds
        return self


def test_sync_matters_for_asynchronous_results(clock):
    with_sync = bench.benchmark(lambda: _QueuedWork(clock, 0.02), min_time=0.1, min_repeats=5)
    without = bench.benchmark(lambda: _QueuedWork(clock, 0.02), min_time=0.1, min_repeats=5, max_repeats=50,
                              do_sync=False)
    assert with_sync.median_s == pytest.approx(0.02)
    assert without.median_s == 0.0  # the naive timer sees only the call, none of the queued work


def test_delayed_work_waits_for_its_time():
    """The real stand-in the labs use: block_until_ready() returns no earlier than its delay (a lower bound only,
    which no load can break)."""
    import time as _time

    t0 = _time.perf_counter()
    r = bench.delayed_work(0.02)
    r.block_until_ready()
    assert _time.perf_counter() - t0 >= 0.02


class _Leaf:
    """A result that records whether it was waited on."""

    waited = False

    def block_until_ready(self):
        self.waited = True
        return self


def test_sync_walks_nested_results():
    """Every leaf that can be waited on, at any depth of dicts, lists and tuples, is waited on; the result comes
    back as it went in (TensorFlow and NumPy leaves beside them)."""
    leaves = [_Leaf() for _ in range(4)]
    nested = {"a": [leaves[0], (tf.ones([3]), np.ones(2), {"b": leaves[1]})], "c": (leaves[2], [[leaves[3]]])}
    assert bench.sync(nested) is nested
    assert [leaf.waited for leaf in leaves] == [True] * 4
    assert bench.sync(leaves[0]) is leaves[0]


def test_first_call_is_kept_out_of_steady_state(clock):
    def body(x):
        clock.t += 0.3  # a Python side effect: runs only while tracing, so only the first call advances the clock
        return x * 2.0

    fn = tf.function(body)
    t = bench.benchmark(fn, tf.ones([16]), min_time=0.05, max_repeats=20)
    assert t.first_call_s == pytest.approx(0.3)
    assert t.median_s == 0.0 and len(t.samples_s) == 20


@pytest.mark.heavy   # real timing (XLA's compile against one run): the scheduler's load decides it, not a unit
def test_xla_compile_time_is_first_call_only():
    fn = tf.function(lambda x: tf.reduce_sum(tf.tanh(x) * 3.0 + 1.0), jit_compile=True)
    t = bench.benchmark(fn, tf.ones([256, 256]), min_time=0.1)
    assert t.first_call_s > 5 * t.median_s


@pytest.mark.heavy   # real timing of three variants: the scheduler's load decides it, not a unit
def test_same_answer_for_python_graph_and_xla():
    a = tf.random.normal([768, 768])

    def work(x):
        return tf.matmul(x, x)

    # Interleaved, so that load from other processes hits all three alike (a sequential run flaked under load).
    c = bench.compare({"python": work, "graph": tf.function(work), "xla": tf.function(work, jit_compile=True)},
                      a, min_time=0.3)
    timings = [t.median_s for t in c.timings.values()]
    assert max(timings) / min(timings) < 4, c.table()


def test_compare_interleaves_and_reports_ratios(clock):
    """On the scripted clock (no real timing): a 4 ms and a 1 ms variant, with 10% jitter, in interleaved rounds."""
    order: list[str] = []

    def timed(name, ms):
        work = clock.work(ms, jitter=0.1)

        def run():
            order.append(name)
            work()
        return run

    c = bench.compare({"slow": timed("slow", 4.0), "fast": timed("fast", 1.0)}, min_time=0.1, min_rounds=5)
    assert len(c.timings["slow"].samples_s) == len(c.timings["fast"].samples_s) == c.rounds
    rounds = order[2 + 2 * 2:]   # after the first calls and two warm-up rounds
    assert all(sorted(rounds[i:i + 2]) == ["fast", "slow"] for i in range(0, len(rounds), 2)), \
        "each round runs every variant once"
    assert c.speedups["slow"] == pytest.approx(1.0)
    assert 3.3 < c.speedups["fast"] < 4.9   # 4 ms / 1 ms, each within 10%
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


@pytest.mark.heavy   # real timing of a barrier against a 64 MB copy
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


@pytest.mark.parametrize("ci, verdict", [((1.05, 1.9), "faster"), ((0.4, 0.97), "slower"),
                                         ((0.9, 1.2), "indistinguishable"), ((1.0, 1.3), "indistinguishable"),
                                         ((0.7, 1.0), "indistinguishable")])
def test_ratio_verdict_reads_the_interval_not_the_median(ci, verdict):
    assert bench.ratio_verdict(ci) == verdict
    assert bench.ratio_verdict(list(ci)) == verdict  # type: ignore[arg-type]  # a list, as JSON gives it back


def test_ratio_verdict_judges_the_interval_as_printed():
    """CI printed "95% CI 1.00 to 1.05 ... faster" in graphs: a lower end of 1.003 prints as 1.00, which holds 1."""
    assert bench.ratio_verdict((1.003, 1.05)) == "indistinguishable"
    assert bench.ratio_verdict((1.006, 1.05)) == "faster"  # prints as 1.01
    assert bench.ratio_verdict((0.93, 0.996)) == "indistinguishable"
    assert bench.ratio_verdict((1.003, 1.05), digits=3) == "faster"  # printed with three decimals, 1.003 is above 1


def test_than_words_follow_the_verdict():
    neither = "not measurably different from"
    assert bench.than_words((1.2, 1.9), neither) == "faster than"
    assert bench.than_words((0.4, 0.9), neither) == "slower than"
    assert bench.than_words((1.003, 1.9), neither) == neither
    assert bench.than_words((1.2, 1.9), neither, n=3) == neither


def test_ratio_verdict_rejects_a_reversed_or_empty_interval():
    with pytest.raises(ValueError):
        bench.ratio_verdict((1.3, 1.1))
    with pytest.raises(ValueError):
        bench.ratio_verdict((float("nan"), 1.0))


# ---------------------------------------------------------------------------------------------
# Verdicts and the stopping rule, forced: a scripted clock that only the variants advance, no real timing.

class ScriptedClock:
    """A clock that stands still until a variant advances it; ``work(ms, jitter)`` is such a variant."""

    def __init__(self, seed: int = 0) -> None:
        self.t = 0.0
        self.rng = np.random.default_rng(seed)

    def __call__(self) -> float:
        return self.t

    def work(self, ms: float, jitter: float = 0.0):
        """A variant taking ``ms`` milliseconds, times a uniform factor in [1 - jitter, 1 + jitter]."""
        def run():
            self.t += ms * 1e-3 * (1.0 + jitter * self.rng.uniform(-1.0, 1.0))
        return run

    def cycle(self, *ms: float):
        """A variant whose calls take ``ms[0]``, ``ms[1]``, ... milliseconds in turn, round and round."""
        calls = [0]

        def run():
            self.t += ms[calls[0] % len(ms)] * 1e-3
            calls[0] += 1
        return run


@pytest.fixture
def clock(monkeypatch):
    c = ScriptedClock()
    monkeypatch.setattr(bench, "_clock", c)
    return c


def test_ratio_verdict_refuses_a_verdict_below_the_minimum_sample_count():
    assert bench.MIN_VERDICT_SAMPLES == 10
    for ci in ((1.2, 1.9), (0.3, 0.8)):
        assert bench.ratio_verdict(ci, n=bench.MIN_VERDICT_SAMPLES - 1) == "indistinguishable"
        assert bench.ratio_verdict(ci, n=3) == "indistinguishable"
        assert bench.ratio_verdict(ci, n=bench.MIN_VERDICT_SAMPLES) != "indistinguishable"
        assert bench.ratio_verdict(ci) == bench.ratio_verdict(ci, n=1000)
    with pytest.raises(ValueError):
        bench.ratio_verdict((1.3, 1.1), n=3)   # a malformed interval is an error whatever the count


@pytest.mark.parametrize("verdict, words", [("faster", "faster"), ("slower", "slower"),
                                            ("indistinguishable", "this run cannot tell")])
def test_verdict_words(verdict, words):
    assert bench.verdict_words(verdict) == words


def test_verdict_words_rejects_an_unknown_verdict():
    with pytest.raises(ValueError):
        bench.verdict_words("maybe")


def _comparison(n_base: int, n_var: int, ci=(1.5, 2.5)) -> bench.Comparison:
    timings = {"base": bench.Timing("base", 0.1, [2e-3] * n_base), "var": bench.Timing("var", 0.1, [1e-3] * n_var)}
    return bench.Comparison("base", timings, {"base": 1.0, "var": 2.0}, {"base": (1.0, 1.0), "var": ci})


def test_comparison_verdict_applies_its_own_sample_counts():
    assert _comparison(3, 3).verdict("var") == "indistinguishable"          # the claims chapter's 3 samples
    assert _comparison(9, 40).verdict("var") == "indistinguishable"         # the smaller side counts
    assert _comparison(10, 10).verdict("var") == "faster"
    assert _comparison(10, 10, ci=(0.4, 0.9)).verdict("var") == "slower"
    assert _comparison(10, 10, ci=(0.9, 1.2)).verdict("var") == "indistinguishable"
    assert _comparison(10, 10).describe("var").endswith(": faster")
    assert _comparison(3, 3).describe("var").endswith(": this run cannot tell")
    assert _comparison(10, 10).to_dict()["variants"]["var"]["verdict"] == "faster"


@pytest.mark.parametrize("base_ms, var_ms, verdict", [(2.0, 1.0, "faster"), (1.0, 2.0, "slower")])
def test_stopping_rule_stops_once_the_interval_is_decisive(clock, base_ms, var_ms, verdict):
    c = bench.compare({"base": clock.work(base_ms, 0.3), "var": clock.work(var_ms, 0.3)}, warmup=1,
                      min_time=0.0, min_rounds=3, target_rel_width=1e-6, max_time=60.0)
    assert c.stopped == "decided", c.table()
    assert c.rounds == bench.MIN_VERDICT_SAMPLES   # decisive at the first check, long before the budget
    assert c.verdict("var") == verdict
    assert "stopped: every interval is decisive" in c.table()


def test_stopping_rule_stops_once_the_interval_is_narrow_even_when_it_cannot_tell(clock):
    c = bench.compare({"base": clock.work(1.0, 0.01), "var": clock.work(1.0, 0.01)}, warmup=0,
                      min_time=0.0, target_rel_width=0.05, max_time=60.0)
    assert c.stopped == "decided"
    assert c.verdict("var") == "indistinguishable"
    lo, hi = c.cis["var"]
    assert bench.relative_width((lo, hi), c.speedups["var"]) < 0.05


def test_stopping_rule_runs_out_of_budget_and_cannot_tell(clock):
    # Two variants alike, each call 0.5 or 1.5 ms in turn (out of phase, so that no round pairs equal times): the
    # interval holds 1 and stays wide for 2 s of rounds.
    c = bench.compare({"base": clock.cycle(0.5, 1.5), "var": clock.cycle(1.5, 0.5)}, warmup=0,
                      min_time=0.1, target_rel_width=0.001, max_time=2.0, max_rounds=100_000)
    assert c.stopped == "max_time", c.table()
    assert 2.0 <= c.elapsed_s < 2.0 + 0.01
    assert c.verdict("var") == "indistinguishable"
    assert c.describe("var").endswith("this run cannot tell")
    assert "stopped: its time budget ran out" in c.table()


def test_stopping_rule_keeps_running_past_min_time_until_enough_samples(clock):
    # After min_time only 4 rounds have run; the rule runs on to MIN_VERDICT_SAMPLES before it may stop.
    c = bench.compare({"base": clock.work(100.0), "var": clock.work(50.0)}, warmup=0, min_time=1.0, min_rounds=2,
                      target_rel_width=0.5, max_time=60.0)
    assert c.stopped == "decided" and c.rounds == bench.MIN_VERDICT_SAMPLES
    no_rule = bench.compare({"base": clock.work(100.0), "var": clock.work(50.0)}, warmup=0, min_time=1.0,
                            min_rounds=2)
    assert no_rule.stopped == "min_time" and no_rule.rounds == 7   # 150 ms a round: 7 rounds reach 1 s
    assert no_rule.verdict("var") == "indistinguishable"          # 7 samples: too few for a verdict
    assert "stopped" not in no_rule.table()


def test_stopping_rule_respects_max_rounds_and_min_rounds(clock):
    c = bench.compare({"base": clock.cycle(0.5, 1.5), "var": clock.cycle(1.5, 0.5)}, warmup=0, min_time=0.0,
                      target_rel_width=1e-6, max_time=1e9, max_rounds=40)
    assert c.stopped == "max_rounds" and c.rounds == 40
    short = bench.compare({"base": clock.work(1000.0), "var": clock.work(1000.0)}, warmup=0, min_time=0.0,
                          min_rounds=6, target_rel_width=0.1, max_time=1.0)
    assert short.stopped == "max_time" and short.rounds == 6        # min_rounds is a floor under the budget
    assert short.verdict("var") == "indistinguishable"


def test_compare_rejects_a_target_that_is_not_positive():
    with pytest.raises(ValueError):
        bench.compare({"a": lambda: 1}, target_rel_width=0)


def test_paired_bootstrap_keeps_rounds_whole():
    """Review s4 R12: compare() interleaves rounds so that drift hits both variants alike; the paired bootstrap
    resamples rounds whole, so a variant against itself is exactly 1 and a shared drift does not widen the
    interval, while the unpaired bootstrap (each list resampled alone) throws the pairing away."""
    rng = np.random.default_rng(1)
    drift = np.exp(rng.normal(0, 0.3, 40))            # the machine's speed per round, shared by both variants
    base, variant = 0.010 * drift, 0.008 * drift * np.exp(rng.normal(0, 0.01, 40))
    assert bench.bootstrap_ratio_ci(base, base, paired=True) == (1.0, 1.0)
    lo_p, hi_p = bench.bootstrap_ratio_ci(base, variant, paired=True)
    lo_u, hi_u = bench.bootstrap_ratio_ci(base, variant)
    assert hi_p - lo_p < (hi_u - lo_u) / 3, ((lo_p, hi_p), (lo_u, hi_u))
    assert lo_p > 1 and bench.ratio_verdict((lo_p, hi_p), n=40) == "faster"
    with pytest.raises(ValueError):
        bench.bootstrap_ratio_ci(base, variant[:-1], paired=True)
