"""The glue audit and built-page checks of the chapter ``profiler`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401

CHAPTER = 'profiler'

STEP_WORDS = ("the XLA step was the faster", "the XLA step was the slower",
              "this run cannot tell which step was faster")
SPLIT_WORDS = ("products more than the rest", "rest more than the products", "products and the rest alike")
PREFETCH_WORDS = ("prefetching overlapped the host's work with the steps",
                  "prefetching made the calls slower here (its background thread competed with the steps)",
                  "this run cannot tell the two pipelines apart")
FLOOR_WORDS = ("Both lie above that time, as a floor requires", "The lower one equals that time, as a floor allows",
               "At least one lies below that time, so here it is no floor")


def _alt(*words: str) -> str:
    return "(" + "|".join(re.escape(w) for w in words) + ")"


def _order(a: float, b: float, larger: str, smaller: str, same: str) -> str:
    return larger if a > b else smaller if a < b else same


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("profiler", ("steps_xla", "steps_xla_lo", "steps_xla_hi", "steps_xla_n", "steps_xla_word",
                       "steps_xla_verdict", "steps_xla_ci_word", "graph_bench_ms", "xla_bench_ms"),
          r"a ratio of\s+" + NUM + r" \(95% CI " + NUM + " to " + NUM + r",\s+(\d+) rounds\): " + _alt(*STEP_WORDS),
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3)), "n": int(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], *STEP_WORDS), lambda m: m.group(5), flip_ci,
          wrong_before="S5-11 (M): 'ran 1.55× as fast as' from 3 traced steps per mode",
          sample={"lo": 1.2, "hi": 1.5, "n": 40}),
    Entry("profiler", ("time_split_verdict", "saved_mm_ms", "saved_other_ms"),
          r"By these numbers XLA changed the " + _alt(*SPLIT_WORDS) + ": " + NUM
          + " ms less in the products against " + NUM + " ms less in the rest",
          lambda m: {"mm": _num(m.group(2)), "other": _num(m.group(3))},
          lambda v: _order(v["mm"], v["other"], *SPLIT_WORDS),
          lambda m: m.group(1), lambda v: {"mm": v["other"], "other": v["mm"] + 1},
          sample={"mm": 800.0, "other": 400.0}),
    Entry("profiler", ("floor_word", "matmul_over_roof", "matmul_over_roof_graph"),
          r"\(" + NUM + r" ?× the " + NUM + r" ms the count gives at\s+the peak\) and " + NUM + r" ms under XLA \("
          + NUM + r" ?× that time\)\. " + _alt(*FLOOR_WORDS),
          lambda m: {"graph": _num(m.group(1)), "xla": _num(m.group(4))},
          lambda v: _order(min(v["graph"], v["xla"]), 1.0, FLOOR_WORDS[0], FLOOR_WORDS[2], FLOOR_WORDS[1]),
          lambda m: m.group(5),
          lambda v: {"graph": 2.0, "xla": 3.0} if min(v["graph"], v["xla"]) < 1 else {**v, "xla": 0.9},
          wrong_before="S5-9 (F): 'the floor under the step' beside op time at 0.9x the floor",
          sample={"graph": 2.44, "xla": 0.9}),
    Entry("profiler", ("prefetch", "prefetch_lo", "prefetch_hi", "prefetch_n", "prefetch_word", "prefetch_verdict",
                       "prefetch_ci_word"),
          r"The pipeline without prefetch against the one\s+with it: a ratio of " + NUM + r" \(95% CI " + NUM
          + r" to\s+" + NUM + r", (\d+) rounds\): " + _alt(*PREFETCH_WORDS),
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3)), "n": int(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], *PREFETCH_WORDS), lambda m: m.group(5), flip_ci,
          sample={"lo": 1.2, "hi": 1.5, "n": 40}),
    Entry("profiler", ("prediction_check",),
          r"took " + NUM + r" ms per step for " + NUM + r" GFLOP, " + NUM + r" GFLOP/s, (above|below) the " + NUM
          + " GFLOP/s peak",
          lambda m: {"rate": _num(m.group(3)), "peak": _num(m.group(5))},
          lambda v: "above" if v["rate"] > v["peak"] else "below", lambda m: m.group(4),
          lambda v: {**v, "rate": v["peak"] * (0.5 if v["rate"] > v["peak"] else 2)},
          optional="only when a head product misses the top three",
          wrong_before="R15 (I): three guesses where the numbers decide", sample={"rate": 108.0, "peak": 32.0}),
    Entry("profiler", ("mm_bound", "mm_intensity", "ridge"),
          r"Its arithmetic intensity from the HLO's shapes is\s+" + NUM + r" FLOP/byte against a ridge point of "
          + NUM + r", so the roofline says it is\s+bound by (compute|memory bandwidth|either \(it sits on the ridge\))",
          _f("intensity", "ridge"),
          lambda v: _order(v["intensity"], v["ridge"], "compute", "memory bandwidth", "either (it sits on the ridge)"),
          lambda m: m.group(3),
          lambda v: {**v, "intensity": v["ridge"] / 2 if v["intensity"] > v["ridge"] else v["ridge"] * 2},
          optional="only when the module has a matrix product", sample={"intensity": 98.0, "ridge": 3.2}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'prediction_check': "audited",
    'top_is_matmul': "structure",
    'tl_longest': "trace",
}


def _s5_9(page: Page) -> list[str]:
    """No unconditional 'floor' beside matrix-product op time below the count at the peak."""
    out = []
    if "the floor under the step" in page.prose:
        out.append("S5-9: 'the floor under the step' stated before the op times are known")
    ratios = [_num(m.group(1)) for m in re.finditer(NUM + r" ?× (?:the " + NUM + r" ms the count (?:predicts|gives) "
                                                    r"at\s+(?:the )?peak|that time)", page.prose)]
    if not ratios:
        out.append("S5-9: the products' op time is not set against the count at the peak")
    elif min(ratios) < 1 and "so here it is no floor" not in page.prose:
        out.append(f"S5-9: op time at {min(ratios)}× the count at the peak, still called a floor")
    return out


def _s5_11(page: Page) -> list[str]:
    """No verdict from the few traced steps: the traced steps are printed as such, the comparison is a timing."""
    out = []
    if re.search(r"the XLA step (ran|took) " + NUM + r"× as (fast|long) as the graph step in this capture", page.prose):
        out.append("S5-11: a speed verdict from the traced steps")
    if not re.search(r"traced steps per mode", page.prose) or "not a\ntiming" in page.prose:
        out.append("S5-11: the traced steps are not marked as a record rather than a timing")
    if not re.search(r"a ratio of\s+" + NUM + r" \(95% CI " + NUM + " to " + NUM + r",\s+\d+ rounds\)", page.prose):
        out.append("S5-11: the step comparison has no interval")
    return out


def _s5_28(page: Page) -> list[str]:
    """The timeline's lower panel zooms on part of the step, not on the whole span again."""
    if "zooms on the span of the ops" in page.prose:
        return ["S5-28: the 'zoom' is the span of all ops, i.e. the whole step"]
    m = re.search(r"The step took " + NUM + r" ms from marker to marker.*?zooms on the longest op and its neighbours, "
                  r"a window of\s+" + NUM + " ms", page.prose, re.S)
    if not m:
        return ["S5-28: the zoom window is not stated"]
    return [] if _num(m.group(2)) < _num(m.group(1)) else [f"S5-28: the zoom ({m.group(2)} ms) covers the step"]


_REVIEWED = Page(prose=(
    "At the device's float32 peak of 38 GFLOP/s the matrix products alone need 451.0 ms: the floor under the step. "
    "The step markers give the wall time of each traced step: a median of 948.9 ms in graph mode and 610.5 ms under "
    "XLA over 3 steps: the XLA step ran 1.55× as fast as the graph step in this capture. The step took 717.0 ms from "
    "marker to marker; the first op started 14.20 ms in, the longest was MatMul_1.50, and at least one op was running "
    "during 90% of the step (the lower panel zooms on the span of the ops). Both modes run the same matrix products, "
    "the same FLOPs: they took 1100.7 ms of op time per step in graph mode and 406.9 ms under XLA, 0.9× the 451.0 ms "
    "the count predicts at peak."))

PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-9", CHAPTER, _s5_9, _REVIEWED),
    PageCheck("S5-11", CHAPTER, _s5_11, _REVIEWED),
    PageCheck("S5-28", CHAPTER, _s5_28, _REVIEWED),
]
