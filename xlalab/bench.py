"""Honest timing for TensorFlow: synchronize, warm up, separate compile time, report medians and spread.

TensorFlow may return from a call before the device has finished the work: on a GPU the kernels are
queued on a CUDA stream and the call returns at once. A clock read right after the call measures the
queueing, not the work. Every timing here waits at a device barrier first (:func:`sync`), times the
first call apart (it traces and compiles), and reports the median and inter-quartile range of the
steady-state samples.

The barrier is not a copy. Copying the result to the host (``.numpy()``) also waits, but it adds the
copy to the timed interval: on a GPU a PCIe transfer of the whole output, on a CPU a ``memcpy`` of it,
which for a memory-bound kernel costs about as much as the kernel itself.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from xlalab import fmt

#: The clock every timing here reads (seconds, monotonic). Tests replace it with a scripted clock so that a
#: stopping rule or a verdict can be forced without timing real code.
_clock: Callable[[], float] = time.perf_counter

#: The fewest timed samples (of the smaller side) on which :func:`ratio_verdict` says "faster" or "slower".
#: A percentile-bootstrap interval of a median from fewer samples is not a 95% interval: with n samples the
#: resampled median takes only a handful of distinct values, so the interval's ends are two of the samples
#: themselves and its coverage falls well short of its nominal level (Efron and Tibshirani, *An Introduction to
#: the Bootstrap*, 1993, section 7.3, on the bootstrap of a median from small samples). Below this count a
#: comparison says "indistinguishable" (the course's "cannot tell").
MIN_VERDICT_SAMPLES = 10

#: What :func:`verdict_words` prints for each verdict.
VERDICT_WORDS = {"faster": "faster", "slower": "slower", "indistinguishable": "this run cannot tell"}


def _leaves(obj: Any):
    if isinstance(obj, Mapping):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def _tensorflow():
    import sys

    return sys.modules.get("tensorflow")


def _sync_devices() -> Callable[[], None] | None:
    """``tf.test.experimental.sync_devices`` where this TensorFlow has it, else ``None``.

    The TensorFlow 2.12 API documentation lists it, and every later version's
    (https://www.tensorflow.org/versions/r2.12/api_docs/python/tf/test/experimental); the course requires
    TensorFlow 2.16 or later, so the fallback is for older installations only. It runs a
    ``SyncDevice`` op on every logical device (on a GPU: wait for its stream) and then waits for
    TensorFlow's own queue of pending eager ops (``context.async_wait()``).
    """
    tf = _tensorflow()
    if tf is None:
        return None
    return getattr(getattr(getattr(tf, "test", None), "experimental", None), "sync_devices", None)


def _fetch_one_element(leaf: Any) -> None:
    """Wait for one tensor by fetching one element that depends on it: 4 bytes cross to the host, not the tensor."""
    tf = _tensorflow()
    flat = tf.reshape(leaf, [-1])
    flat[:1].numpy()


def sync(result: Any) -> Any:
    """Wait at a device barrier until the work that produced ``result`` is done; return ``result`` unchanged.

    ``result`` may be nested lists, tuples and dicts. Its leaves that have ``block_until_ready()`` are
    waited on (JAX arrays, :class:`DelayedResult`). Then, when TensorFlow is imported,
    ``tf.test.experimental.sync_devices()`` (documented from TensorFlow 2.12 on) waits for every device, which also
    covers work that returned no tensor (a variable update). Without it, each TensorFlow tensor leaf is
    waited on by fetching one element that depends on it (``tf.reshape(x, [-1])[:1]``), never the whole
    tensor. Nothing is copied to the host, so the wait does not grow with the size of the output.

    On a GPU this barrier is what makes a timing honest. On a CPU, TensorFlow executes eagerly and
    synchronously by default: a call of an op, of a ``tf.function`` or of a ``tf.function(jit_compile=True)``
    returns only after its CPU kernels (XLA:CPU's included) have finished, so the barrier finds nothing
    pending and costs about 10 us (measured on the course's 2-core CI machine); it still matters there
    after ``tf.config.experimental.set_synchronous_execution(False)``.
    """
    tf_leaves = []
    for leaf in _leaves(result):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
        elif hasattr(leaf, "numpy") and not isinstance(leaf, np.ndarray):
            tf_leaves.append(leaf)
    barrier = _sync_devices()
    if barrier is not None:
        barrier()
    else:
        for leaf in tf_leaves:
            _fetch_one_element(leaf)
    return result


@dataclass
class Timing:
    """One benchmark: the first call apart, then steady-state samples (seconds).

    Attributes:
        name: what was timed.
        first_call_s: the first call, which traces and compiles a ``tf.function``.
        samples_s: steady-state call times after warm-up.
    """

    name: str
    first_call_s: float
    samples_s: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return float(np.median(self.samples_s))

    @property
    def median_ms(self) -> float:
        return self.median_s * 1e3

    @property
    def iqr_s(self) -> float:
        """Inter-quartile range of the samples (75th minus 25th percentile), in seconds."""
        q1, q3 = np.percentile(self.samples_s, [25, 75])
        return float(q3 - q1)

    @property
    def iqr_ms(self) -> float:
        return self.iqr_s * 1e3

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(median_ms=self.median_ms, iqr_ms=self.iqr_ms, n=len(self.samples_s))
        return d

    def __str__(self) -> str:
        return (f"{self.name}: median {fmt.duration(self.median_s)} "
                f"(IQR {fmt.duration(self.iqr_s)}, n={len(self.samples_s)}), "
                f"first call {fmt.duration(self.first_call_s)}")


def _time_call(fn: Callable, args: Sequence, do_sync: bool) -> float:
    t0 = _clock()
    out = fn(*args)
    if do_sync:
        sync(out)
    return _clock() - t0


def benchmark(fn: Callable, *args: Any, name: str | None = None, warmup: int = 2, min_time: float = 0.5,
              min_repeats: int = 5, max_repeats: int = 1000, do_sync: bool = True) -> Timing:
    """Time ``fn(*args)``: first call, ``warmup`` calls, then samples until ``min_time`` seconds have passed.

    Works the same for a Python function, a ``tf.function`` and a ``tf.function(jit_compile=True)``:
    each call's result is synchronized (:func:`sync`) before the clock is read. ``do_sync=False``
    exists only to show what goes wrong without it.

    Example:
        >>> t = benchmark(tf.function(lambda x: x * 2, jit_compile=True), tf.ones([1000]))
        >>> t.first_call_s > t.median_s   # the first call compiled
    """
    first = _time_call(fn, args, do_sync)
    for _ in range(warmup):
        _time_call(fn, args, do_sync)
    samples: list[float] = []
    start = _clock()
    while len(samples) < max_repeats and (len(samples) < min_repeats or _clock() - start < min_time):
        samples.append(_time_call(fn, args, do_sync))
    return Timing(name or str(getattr(fn, "__name__", "fn")), first, samples)


def bootstrap_ratio_ci(baseline_s: Sequence[float] | np.ndarray, variant_s: Sequence[float] | np.ndarray,
                       n_boot: int = 2000,
                       level: float = 0.95, seed: int = 0, paired: bool = False) -> tuple[float, float]:
    """Confidence interval of ``median(baseline) / median(variant)`` by resampling the samples.

    ``paired``: the two lists are timed in the same interleaved rounds (``baseline_s[i]`` and ``variant_s[i]`` in
    round ``i``, as :func:`compare` records them), so rounds are resampled whole: drift of the machine that hit both
    variants in one round stays paired instead of widening the interval (and a variant against itself gives
    exactly 1). Unpaired, each list is resampled on its own.
    """
    rng = np.random.default_rng(seed)
    b = np.asarray(baseline_s)
    v = np.asarray(variant_s)
    if paired and len(b) != len(v):
        raise ValueError(f"paired samples need equal lengths, got {len(b)} and {len(v)}")
    bi = rng.integers(0, len(b), size=(n_boot, len(b)))
    vi = bi if paired else rng.integers(0, len(v), size=(n_boot, len(v)))
    ratios = np.median(b[bi], axis=1) / np.median(v[vi], axis=1)
    lo, hi = np.percentile(ratios, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def ratio_verdict(ci: tuple[float, float], n: int | None = None, digits: int = 2) -> str:
    """What a speedup interval says: ``"faster"`` (the whole interval above 1), ``"slower"`` (below 1) or
    ``"indistinguishable"`` (it holds 1, or too few samples: the course's "cannot tell"), so that prose follows
    the measurement instead of assuming a direction.

    ``ci`` is ``(lo, hi)`` of ``median(baseline) / median(variant)``, e.g. ``Comparison.cis[name]`` or
    :func:`bootstrap_ratio_ci`. ``n``, when given, is the number of timed samples of the smaller side; below
    :data:`MIN_VERDICT_SAMPLES` the interval is not trusted and the verdict is ``"indistinguishable"`` whatever
    it holds. The interval is judged as printed, rounded to ``digits`` decimals (the course prints intervals as
    ``[1.00, 1.05]``): a lower end of 1.003 prints as 1.00, which holds 1, so the word is "cannot tell" rather than
    "faster" beside numbers that do not show it. Example: ``ratio_verdict((1.2, 1.9)) == "faster"``,
    ``ratio_verdict((1.2, 1.9), n=3) == "indistinguishable"``, ``ratio_verdict((1.003, 1.05)) ==
    "indistinguishable"``.
    """
    lo, hi = (float(v) for v in ci)
    if not lo <= hi:
        raise ValueError(f"ci={ci!r}: expected (lo, hi) with lo <= hi")
    if n is not None and int(n) < MIN_VERDICT_SAMPLES:
        return "indistinguishable"
    lo, hi = round(lo, digits), round(hi, digits)
    return "faster" if lo > 1 else "slower" if hi < 1 else "indistinguishable"


def than_words(ci: tuple[float, float], neither: str, n: int | None = None, digits: int = 2) -> str:
    """The comparison a sentence states before its baseline: ``"faster than"``, ``"slower than"`` or ``neither``
    (e.g. ``"not measurably different from"``), from :func:`ratio_verdict` of the same ``ci``, ``n`` and ``digits``
    (pass the decimals the interval is printed with). Example: ``than_words((1.2, 1.9), "not measurably different
    from") == "faster than"``."""
    return {"faster": "faster than", "slower": "slower than",
            "indistinguishable": neither}[ratio_verdict(ci, n=n, digits=digits)]


def verdict_words(verdict: str) -> str:
    """The words a lab or chapter prints for a verdict of :func:`ratio_verdict`: ``"faster"``, ``"slower"`` or
    ``"this run cannot tell"``."""
    try:
        return VERDICT_WORDS[verdict]
    except KeyError:
        raise ValueError(f"verdict={verdict!r}; expected one of {sorted(VERDICT_WORDS)}") from None


def relative_width(ci: tuple[float, float], ratio: float) -> float:
    """Width of a ratio's interval relative to the ratio: ``(hi - lo) / ratio`` (0.1 means +-5% about it)."""
    lo, hi = (float(v) for v in ci)
    return (hi - lo) / float(ratio) if ratio > 0 else float("inf")


#: Why :func:`compare` stopped its rounds (``Comparison.stopped``).
STOP_REASONS = {
    "min_time": "ran its minimum time (no stopping rule)",
    "decided": "every interval is decisive or narrower than the target",
    "max_time": "its time budget ran out",
    "max_rounds": "it reached its maximum number of rounds",
}


@dataclass
class Comparison:
    """Interleaved timings of several variants, each against a baseline.

    ``speedups[name]`` is ``median(baseline) / median(name)`` (above 1 means faster than the baseline);
    ``cis[name]`` its bootstrap 95% confidence interval. ``rounds`` interleaved rounds ran in ``elapsed_s``
    seconds and stopped for ``stopped`` (a key of :data:`STOP_REASONS`); ``target_rel_width`` is the stopping
    rule's target, ``None`` when the rounds ran for a fixed time.
    """

    baseline: str
    timings: dict[str, Timing]
    speedups: dict[str, float]
    cis: dict[str, tuple[float, float]]
    rounds: int = 0
    elapsed_s: float = 0.0
    stopped: str = "min_time"
    target_rel_width: float | None = None

    def n(self, name: str) -> int:
        """Timed samples behind ``name``'s speedup: the smaller of its and the baseline's sample counts."""
        return min(len(self.timings[name].samples_s), len(self.timings[self.baseline].samples_s))

    def verdict(self, name: str) -> str:
        """:func:`ratio_verdict` of ``name``'s speedup interval with this comparison's own sample count:
        ``"faster"``, ``"slower"`` or ``"indistinguishable"`` (which prints as "this run cannot tell")."""
        return ratio_verdict(self.cis[name], n=self.n(name))

    def paired(self, name: str, against: str) -> tuple[float, tuple[float, float], int]:
        """``name`` against another variant ``against`` timed in the same rounds: ``(ratio, ci, n)`` with ratio
        ``median(against) / median(name)`` (above 1: ``name`` is faster), its paired bootstrap interval
        (:func:`bootstrap_ratio_ci` with ``paired=True``) and the sample count, ready for
        ``ratio_verdict(ci, n=n)`` or ``xlalab.book.glue_interval(key, *cmp.paired(a, b))``."""
        a, b = self.timings[against].samples_s, self.timings[name].samples_s
        n = min(len(a), len(b))
        ratio = float(np.median(a) / np.median(b))
        return ratio, bootstrap_ratio_ci(a[:n], b[:n], paired=True), n

    def describe(self, name: str) -> str:
        """One line on ``name`` against the baseline, its outcome word from :meth:`verdict`, e.g.
        ``"xla vs graph: 2.31x [2.10, 2.52], n=40: faster"`` or ``"...: this run cannot tell"``."""
        lo, hi = self.cis[name]
        return (f"{name} vs {self.baseline}: {self.speedups[name]:.2f}x [{lo:.2f}, {hi:.2f}], n={self.n(name)}: "
                f"{verdict_words(self.verdict(name))}")

    def table(self) -> str:
        """A fixed-width text table, one row per variant; with a stopping rule, a last line says why it stopped."""
        head = (f"{'variant':<16} {'first call':>11} {'median':>10} {'IQR':>9} {'n':>5}  "
                f"speedup vs {self.baseline} [95% CI]")
        rows = [head, "-" * len(head)]
        for name, t in self.timings.items():
            lo, hi = self.cis[name]
            rows.append(f"{name:<16} {fmt.duration(t.first_call_s):>11} {fmt.duration(t.median_s):>10} "
                        f"{fmt.duration(t.iqr_s):>9} {len(t.samples_s):>5}  "
                        f"{self.speedups[name]:.2f}x [{lo:.2f}, {hi:.2f}]")
        if self.target_rel_width is not None:
            rows.append(f"{self.rounds} rounds in {fmt.duration(self.elapsed_s)}; "
                        f"stopped: {STOP_REASONS[self.stopped]}")
        return "\n".join(rows)

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "rounds": self.rounds, "elapsed_s": self.elapsed_s,
                "stopped": self.stopped, "target_rel_width": self.target_rel_width,
                "variants": {n: {**t.to_dict(), "speedup": self.speedups[n], "speedup_ci": list(self.cis[n]),
                                 "verdict": self.verdict(n)}
                             for n, t in self.timings.items()}}

    def __str__(self) -> str:
        return self.table()


def _settled(samples: Mapping[str, Sequence[float]], baseline: str, target_rel_width: float) -> bool:
    """Whether every variant's speedup over ``baseline`` is decided: at least :data:`MIN_VERDICT_SAMPLES`
    samples, and an interval that is decisive (excludes 1) or narrower than ``target_rel_width``."""
    base = samples[baseline]
    for name, s in samples.items():
        if name == baseline:
            continue
        n = min(len(s), len(base))
        if n < MIN_VERDICT_SAMPLES:
            return False
        ci = bootstrap_ratio_ci(base, s, paired=True)   # compare() times both in the same rounds
        ratio = float(np.median(base) / np.median(s))
        if ratio_verdict(ci, n=n) == "indistinguishable" and relative_width(ci, ratio) >= target_rel_width:
            return False
    return True


def compare(variants: Mapping[str, Callable], *args: Any, baseline: str | None = None, warmup: int = 2,
            min_time: float = 1.0, min_rounds: int = 5, max_rounds: int = 500, seed: int = 0,
            target_rel_width: float | None = None, max_time: float | None = None) -> Comparison:
    """Time several variants of one computation interleaved, so that drift hits all of them alike.

    Each variant is called as ``fn(*args)``. Every variant's first call is timed apart, then each is
    warmed up, then rounds run every variant once in a shuffled order until ``min_time`` seconds
    have passed (at least ``min_rounds``). The baseline defaults to the first variant.

    The stopping rule: with ``target_rel_width`` set, rounds go on after ``min_time`` until every variant's
    speedup is decided (:data:`MIN_VERDICT_SAMPLES` samples at least, and a bootstrap interval that excludes 1
    or whose width relative to the speedup is below ``target_rel_width``), or ``max_time`` seconds of rounds
    have passed (default ``max(10 * min_time, 5.0)``), or ``max_rounds``. The intervals are checked after
    rounds 10, 12, 15, 18, ... (a quarter more each time), so that the bootstrap costs little beside the timing.
    Each look at an interval is a chance to stop on a fluke, so stopping at the first decisive one makes a false
    "faster" or "slower" somewhat more likely than the 5% of one fixed-length run; the geometric schedule keeps the
    looks few (about 20 between 10 and 1,000 rounds).
    ``max_time`` without a target caps ``min_time``. ``Comparison.stopped`` records why the rounds ended.

    Example:
        >>> c = compare({"graph": graph_fn, "xla": xla_fn}, x, target_rel_width=0.1, max_time=20)
        >>> print(c.table(), c.describe("xla"))
    """
    names = list(variants)
    if not names:
        raise ValueError("compare() needs at least one variant")
    baseline = baseline or names[0]
    if baseline not in variants:
        raise KeyError(f"baseline {baseline!r} is not one of {names}")
    if target_rel_width is not None and not target_rel_width > 0:
        raise ValueError(f"target_rel_width={target_rel_width!r}: expected a positive number")
    if max_time is None:
        max_time = max(10 * min_time, 5.0) if target_rel_width is not None else float("inf")
    first = {n: _time_call(variants[n], args, True) for n in names}
    for _ in range(warmup):
        for n in names:
            _time_call(variants[n], args, True)
    samples: dict[str, list[float]] = {n: [] for n in names}
    order = names[:]
    rng = random.Random(seed)
    start = _clock()
    rounds = 0
    next_check = MIN_VERDICT_SAMPLES
    stopped = "min_time"
    while True:
        if rounds >= max_rounds:
            stopped = "max_rounds"
            break
        if rounds >= min_rounds:
            elapsed = _clock() - start
            if elapsed >= max_time:
                stopped = "max_time"
                break
            if elapsed >= min_time:
                if target_rel_width is None:
                    stopped = "min_time"
                    break
                if rounds >= next_check:
                    next_check = max(rounds + 1, int(rounds * 1.25))
                    if _settled(samples, baseline, target_rel_width):
                        stopped = "decided"
                        break
        rng.shuffle(order)
        for n in order:
            samples[n].append(_time_call(variants[n], args, True))
        rounds += 1
    elapsed = _clock() - start
    timings = {n: Timing(n, first[n], samples[n]) for n in names}
    base_median = timings[baseline].median_s
    speedups = {n: base_median / timings[n].median_s for n in names}
    cis = {n: bootstrap_ratio_ci(samples[baseline], samples[n], paired=True) for n in names}
    return Comparison(baseline, timings, speedups, cis, rounds=rounds, elapsed_s=elapsed, stopped=stopped,
                      target_rel_width=target_rel_width)


class DelayedResult:
    """A stand-in for a tensor whose device work outlives the call that returned it.

    ``delayed_work(seconds)`` returns at once; waiting on the result (``block_until_ready()`` or
    ``numpy()``) takes until ``seconds`` after the call. A timer that reads the clock without
    waiting reports almost nothing; :func:`benchmark` reports ``seconds``.
    """

    def __init__(self, seconds: float, value: Any = 0.0) -> None:
        self._ready_at = time.perf_counter() + seconds
        self._value = value

    def block_until_ready(self) -> DelayedResult:
        remaining = self._ready_at - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        return self

    def numpy(self) -> Any:
        self.block_until_ready()
        return np.asarray(self._value)


def delayed_work(seconds: float) -> DelayedResult:
    """Return at once a result that becomes ready ``seconds`` later (see :class:`DelayedResult`)."""
    return DelayedResult(seconds)
