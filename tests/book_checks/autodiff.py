"""The glue audit and built-page checks of the chapter ``autodiff`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci, require, text_rules

CHAPTER = 'autodiff'

_INTERVAL = ("", "_lo", "_hi", "_n", "_verdict", "_ci_word", "_word")


def _interval(name: str) -> tuple[str, ...]:
    return tuple(name + s for s in _INTERVAL)


# --- rules that need more than an interval -------------------------------------------------------------------------

def _graph_count_rule(v: dict) -> str:
    lo, hi, peak = v["lo"], v["hi"], v["peak"]
    if peak is None:
        return "no statistics"
    if lo <= peak <= hi:
        return "inside"
    return f"above {peak - hi:.2f}" if peak > hi else f"below {lo - peak:.2f}"


def _graph_count_mutate(v: dict) -> dict:
    inside = v["peak"] is not None and v["lo"] <= v["peak"] <= v["hi"]
    return {**v, "peak": (v["lo"] + v["hi"]) / 2 if not inside and v["peak"] is not None else v["hi"] + 1.0}


_PEAK_ROW = r"(value and gradients, tf\.recompute_grad per two layers|value and gradients) " + NUM + " " + NUM


def _rc_peak_values(m: re.Match) -> dict:
    text = m.string
    if "keeps no statistics here: its plain CPU allocator collects" in text:   # the prose (the code splits it)
        return {"stats": False}
    rows = {label: (_num(g), _num(x)) for label, g, x in re.findall(_PEAK_ROW, text)}
    vg, rc = rows.get("value and gradients", (0.0, 0.0)), rows.get(
        "value and gradients, tf.recompute_grad per two layers", (0.0, 0.0))
    return {"stats": True, "g_vg": vg[0], "x_vg": vg[1], "g_rc": rc[0], "x_rc": rc[1]}


def _rc_peak_rule(v: dict) -> str:
    if not v["stats"]:
        return "could not be checked against the allocator here"
    lower = [mode for mode, rc, vg in (("graph", v["g_rc"], v["g_vg"]), ("XLA", v["x_rc"], v["x_vg"])) if rc < vg]
    return ("lowered the peak in both modes" if len(lower) == 2 else
            f"lowered the peak in {lower[0]} mode only" if lower else "lowered the peak in neither mode")


def _rc_peak_mutate(v: dict) -> dict:
    if not v["stats"]:
        return {"stats": True, "g_vg": 10.0, "x_vg": 12.0, "g_rc": 8.0, "x_rc": 9.0}
    if _rc_peak_rule(v) == "lowered the peak in neither mode":
        return {**v, "g_rc": v["g_vg"] - 1, "x_rc": v["x_vg"] - 1}
    return {**v, "g_rc": v["g_vg"] + 1, "x_rc": v["x_vg"] + 1}


def _order(a: float, b: float, larger: str, smaller: str, same: str) -> str:
    return larger if a > b else smaller if a < b else same


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("autodiff", ("ad_hvp_speed", "ad_hvp_ci", "ad_hvp_word"),
          r"Forward over reverse was (faster than|slower than|not measurably different from) reverse over reverse \("
          + NUM + r" ?x its speed, 95% CI " + CI3 + r"\)",
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], None, "faster than", "slower than", "not measurably different from"),
          lambda m: m.group(1), flip_ci, sample={"lo": 0.8, "hi": 1.3}),
    Entry("autodiff", ("ad_hvp_fwd_cost_ci", "ad_hvp_fwd_cost_word", "ad_hvp_rev_cost_ci", "ad_hvp_rev_cost_word",
                       "ad_hvp_{key}_cost_ci", "ad_hvp_{key}_cost_word"),
          r"\((?:forward|reverse) over reverse, 95% CI " + CI3 + r": (more than a gradient|less than a gradient|cannot "
          r"tell from a gradient)\)",
          lambda m: {"lo": _num(m.group(1)), "hi": _num(m.group(2))},
          lambda v: ci_word(v["lo"], v["hi"], None, "more than a gradient", "less than a gradient",
                            "cannot tell from a gradient"),
          lambda m: m.group(3), flip_ci,
          wrong_before="R16 (I): 'an HVP cost 2.5 times' a gradient with an interval that held 1",
          sample={"lo": 0.6, "hi": 3.6}),
    Entry("autodiff", ("ad_fm_tall_ci", "ad_fm_tall_word", "ad_fm_wide_ci", "ad_fm_wide_word", "ad_fm_{case}_word",
                       "ad_fm_{case}_ci", "ad_fm_{case}_speed"),
          r"(faster than|slower than|not measurably different from) reverse mode \(" + NUM + r" ?x[^)]*?95% CI " + CI3,
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], None, "faster than", "slower than", "not measurably different from"),
          lambda m: m.group(1), flip_ci, sample={"lo": 1.2, "hi": 1.5}),
    Entry("autodiff", ("ad_draw_grad_tensors", "ad_draw_grad_kib", "ad_draw_grad_kernels", "ad_draw_rc_tensors",
                       "ad_draw_rc_kib", "ad_draw_rc_kernels", "ad_draw_verdict"),
          r"Without recomputation, (\d+) forward results \(" + NUM + r" KiB read by backward kernels\) cross over, in "
          r"(\d+) kernels; with the stack as one tf\.recompute_grad block, (\d+) \(" + NUM + r" KiB\), in (\d+) "
          r"kernels: (the same kernels|fewer forward results|more forward results|as many forward results)",
          lambda m: {"grad": int(m.group(1)), "grad_kib": _num(m.group(2)), "grad_k": int(m.group(3)),
                     "rc": int(m.group(4)), "rc_kib": _num(m.group(5)), "rc_k": int(m.group(6))},
          lambda v: ("fewer forward results" if v["rc"] < v["grad"] else "more forward results" if v["rc"] > v["grad"]
                     else "the same kernels" if (v["rc_kib"], v["rc_k"]) == (v["grad_kib"], v["grad_k"])
                     else "as many forward results"),
          lambda m: m.group(7),
          lambda v: {**v, "rc": v["grad"] + 1} if v["rc"] < v["grad"] else {**v, "rc": max(v["grad"] - 1, 0)},
          wrong_before="S5-1 (F): recomputed forward kernels counted as saved activations, 3 -> 5 'instead of being "
                       "read from memory'",
          sample={"grad": 3, "grad_kib": 40.0, "grad_k": 17, "rc": 1, "rc_kib": 16.0, "rc_k": 23}),
    # The backward's added products against the count 2L - 1 (exact comparison of the printed counts).
    Entry("autodiff", ("ad_dots_grad", "ad_dots_fwd", "ad_dots_added", "ad_dots_count", "ad_dots_verdict"),
          r"The value-and-gradient program has (\d+) matrix products against the forward's (\d+): the backward added "
          r"(\d+), against the count of [^:]*?(\d+): (exactly the count|not the count)",
          lambda m: {"grad": int(m.group(1)), "fwd": int(m.group(2)), "added": int(m.group(3)),
                     "count": int(m.group(4))},
          lambda v: ("exactly the count" if v["added"] == v["count"] and v["added"] == v["grad"] - v["fwd"]
                     else "not the count"),
          lambda m: m.group(5),
          lambda v: {**v, "count": v["added"] + 1} if v["count"] == v["added"] else {**v, "count": v["added"]},
          sample={"grad": 11, "fwd": 4, "added": 7, "count": 7}),
    # XLA against graph mode for the value-and-gradient step, and the fixed words about its interval.
    Entry("autodiff", _interval("ad_xla_vs_graph"),
          r"Under XLA the value-and-gradient step (was faster than graph mode|was slower than graph mode|showed no "
          r"measurable difference from graph mode): it ran at " + NUM + r" times the speed of graph mode, with a 95% "
          r"confidence interval of " + CI3 + r"\. By this book's rule, an interval that contains 1 means no measurable "
          r"difference; (it lies wholly above 1|it lies wholly below 1|it contains 1: this run cannot tell)",
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], None, "was faster than graph mode / it lies wholly above 1",
                            "was slower than graph mode / it lies wholly below 1",
                            "showed no measurable difference from graph mode / it contains 1: this run cannot tell"),
          lambda m: f"{m.group(1)} / {m.group(5)}", flip_ci,
          wrong_before="S5-13 (M): the same pair timed twice on one page, the two disagreeing",
          sample={"lo": 0.81, "hi": 1.61}),
    # Graph mode's measured peak against the counted range (or the statement that it cannot be measured here).
    Entry("autodiff", ("ad_count_lo_mib", "ad_count_hi_mib", "ad_graph_count_story"),
          r"a count of " + NUM + r" to " + NUM + r" MiB\. (?:The measured peak, " + NUM
          + r" MiB, is (inside that range|(" + NUM[1:-1] + r") MiB (above|below) it)|"
          r"(This machine's allocator keeps no statistics))",
          lambda m: {"lo": _num(m.group(1)), "hi": _num(m.group(2)),
                     "peak": None if m.group(7) else _num(m.group(3))},
          _graph_count_rule,
          lambda m: ("no statistics" if m.group(7) else "inside" if m.group(4) == "inside that range"
                     else f"{m.group(6)} {_num(m.group(5)):.2f}"),
          _graph_count_mutate, sample={"lo": 9.0, "hi": 10.0, "peak": 9.5}),
    # The tape story: measured where the allocator keeps statistics (the cell prints which), else says it cannot be.
    Entry("autodiff", ("ad_keep_story",),
          r"(Without a tape the forward pass leaves \d|keeps no statistics here: its plain CPU allocator collects)",
          lambda m: {"stats": "statistics available" in m.string},
          lambda v: "measured" if v["stats"] else "unmeasured",
          lambda m: "measured" if m.group(1).startswith("Without") else "unmeasured",
          lambda v: {"stats": not v["stats"]}, whole_page=True, sample={"stats": False}),
    # Recomputation's products: kept when the compiled program has more products than without it.
    Entry("autodiff", ("ad_dots_rc", "ad_rc_dots_word", "ad_rc_extra_frac"),
          r"The compiled program (kept|did not keep) the extra forward products: it has (\d+) matrix products instead "
          r"of (\d+)",
          lambda m: {"rc": int(m.group(2)), "grad": int(m.group(3))},
          lambda v: "kept" if v["rc"] > v["grad"] else "did not keep", lambda m: m.group(1),
          lambda v: {**v, "rc": v["grad"] + 1} if v["rc"] <= v["grad"] else {**v, "rc": v["grad"]},
          sample={"rc": 13, "grad": 11}),
    # Recomputation's time in each mode, against the step without it (median(recompute) / median(value+grad)).
    Entry("autodiff", _interval("ad_rc_{mode}") + _interval("ad_rc_XLA") + _interval("ad_rc_graph"),
          CI3 + r": (measurably longer|measurably shorter|no measurable difference)\)",
          lambda m: {"lo": _num(m.group(1)), "hi": _num(m.group(2))},
          lambda v: ci_word(v["lo"], v["hi"], None, "measurably longer", "measurably shorter",
                            "no measurable difference"),
          lambda m: m.group(3), flip_ci, sample={"lo": 1.05, "hi": 1.4}),
    # Recomputation and the allocator's peaks (the table's printed values), or why they cannot be compared here.
    Entry("autodiff", ("ad_rc_peak_word", "ad_mem_table"),
          r"Recomputation (could not be checked against the allocator here|lowered the peak in both modes|lowered the "
          r"peak in (?:graph|XLA) mode only|lowered the peak in neither mode)",
          _rc_peak_values, _rc_peak_rule, lambda m: m.group(1), _rc_peak_mutate, whole_page=True,
          sample={"stats": False}),
    # The liveness peak read from XLA's file against the count (MiB as printed, exact).
    Entry("autodiff", ("ad_live_inter_mib", "ad_live_count_mib", "ad_live_count_word", "ad_live_temp_word"),
          r"and " + NUM + r" MiB of intermediates, among them .*?, " + NUM
          + r" MiB\. The file (equals the count|differs from the count by ([+-]\d[\d.]*) MiB)",
          lambda m: {"inter": _num(m.group(1)), "count": _num(m.group(2))},
          lambda v: ("equals the count" if round(v["inter"] - v["count"], 2) == 0
                     else f"differs {round(v['inter'] - v['count'], 2):+.2f}"),
          lambda m: "equals the count" if m.group(3) == "equals the count" else f"differs {float(m.group(4)):+.2f}",
          lambda v: {**v, "count": v["inter"] + 1.0} if v["inter"] == v["count"] else {**v, "count": v["inter"]},
          sample={"inter": 9.25, "count": 9.25}),
    # The in-process estimates with and without recompute_grad (MiB as printed, exact).
    Entry("autodiff", ("ad_est_grad_mib", "ad_est_rc_mib", "ad_est_rc_word"),
          r"For this module it estimates " + NUM + r" MiB; with tf\.recompute_grad every two layers, " + NUM
          + r" MiB, (lower|higher|not lower)",
          _f("grad", "rc"), lambda v: _order(v["rc"], v["grad"], "higher", "lower", "not lower"),
          lambda m: m.group(3),
          lambda v: {**v, "rc": v["grad"] + 1} if v["rc"] < v["grad"] else {**v, "rc": v["grad"] - 1},
          sample={"grad": 9.25, "rc": 6.5}),
    # The live-bytes curves' peaks (as printed, in one unit).
    Entry("autodiff", ("ad_lc_peak_grad", "ad_lc_peak_rc", "ad_lc_word"),
          r"Without recomputation the peak is " + NUM + r" (?:MiB|KiB), .*?with tf\.recompute_grad the peak is " + NUM
          + r" (?:MiB|KiB), (higher|lower|the same)",
          _f("grad", "rc"), lambda v: _order(v["rc"], v["grad"], "higher", "lower", "the same"),
          lambda m: m.group(3),
          lambda v: {**v, "rc": v["grad"] + 1} if v["rc"] <= v["grad"] else {**v, "rc": v["grad"] - 1},
          wrong_before="S5-22 (I): the curves of a 50- and a 62-instruction schedule drawn on one [0, 1] axis",
          sample={"grad": 9.25, "rc": 6.5}),
    # pfor and batch_jacobian against the while loop, each with its interval.
    Entry("autodiff", _interval("ad_pfor") + _interval("ad_bj") + _interval("ad_{key}"),
          r"was (faster than|slower than|not measurably faster than) the loop \(" + NUM + r" ?x(?: its speed)?, 95% CI "
          + CI3,
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], None, "faster than", "slower than", "not measurably faster than"),
          lambda m: m.group(1), flip_ci, sample={"lo": 3.31, "hi": 6.51}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    'its count can exceed what was requested': "describes the BFC allocator; the allocator story glued into the same "
                                               "sentence is audited elsewhere only where statistics exist (test_book "
                                               "N1)",
    'The number to remember': "'equal' describes the layers (products of one size); the ratio is the count's formula, "
                              "and the HLO's figure is printed beside it, not judged",
    'Both modes run the same matrix products': "names which libraries run the products on this backend "
                                               "(ad_runtime_story is chosen by the backend); no measured outcome",
    '**What the backward pass keeps, drawn.**': "describes the pictures; ad_draw_fake is the XLALAB_FAKE_GPU note",
    '**Live memory, drawn.**': "describes the curves; ad_lc_fake is the XLALAB_FAKE_GPU note",
    'The built-in gradient and the correct VJP agree with': "states the measured errors themselves; no word is chosen "
                                                            "from them",
    'The two Jacobians agree to': "states the measured difference itself; no word is chosen from it",
    'the two Hessian-vector products agree to': "states the measured difference itself; no word is chosen from it",
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'ad_runtime_story': "backend",
    'ad_xla_alloc_story': "allocator figures (printed in it; checked by test_book N1 where statistics exist)",
    'ad_xla_probe_story': "allocator figures (empty without statistics)",
    'ad_draw_fake': "XLALAB_FAKE_GPU note",
    'ad_lc_fake': "XLALAB_FAKE_GPU note",
    'ad_zbar_fake': "XLALAB_FAKE_GPU note",
    'ad_live_step': "buffer assignment text",
}


# --- built-page checks of the review's findings ------------------------------------------------------------------

_DRAW = (r"Without recomputation, (\d+) forward results \(" + NUM + r" KiB read by backward kernels\) cross over, "
         r"in (\d+) kernels; with the stack as one tf\.recompute_grad block, (\d+) \(" + NUM + r" KiB\), in (\d+) "
         r"kernels: ([^.]*)")


def s5_1_problems(page: Page) -> list[str]:
    """S5-1: the recompute pictures' sentence takes its direction (fewer / more / as many) from the two printed
    tensor counts, and says 'instead of being read from memory' only when fewer tensors cross."""
    m = re.search(_DRAW, page.prose)
    if not m:
        return ["no sentence about the forward results that cross to the backward pass"]
    grad, rc, said = int(m.group(1)), int(m.group(4)), m.group(7)
    want = "fewer forward results" if rc < grad else "more forward results" if rc > grad else ""
    problems = []
    if want and not said.startswith(want):
        problems.append(f"{grad} -> {rc} tensors, but the sentence says {said[:60]!r}")
    if rc >= grad and "instead of being read from memory" in said:
        problems.append(f"{grad} -> {rc} tensors, yet 'instead of being read from memory'")
    return problems


_ROW = re.compile(r"^value\+grad \((graph|XLA)\)\s+\S", re.M)


def s5_13_problems(page: Page) -> list[str]:
    """S5-13: the value-and-gradient step in graph mode against XLA is timed once on the page: only one printed
    table of ``bench.compare`` (from its ``variant`` header to the next) holds both rows."""
    tables = [t for b in page.printed for t in re.split(r"(?m)^(?=variant\s)", b)]   # bench's tables, one by one
    both = [t for t in tables if {m.group(1) for m in _ROW.finditer(t)} == {"graph", "XLA"}]
    return [f"{len(both)} printed tables time value+grad (graph) against value+grad (XLA)"] if len(both) > 1 else []


def s5_20_problems(page: Page) -> list[str]:
    """S5-20: cuBLASLt is named as a GPU product path only with its flag (the fusion chapter's wording)."""
    problems = []
    if "cuBLASLt" in page.prose and "xla_gpu_enable_cublaslt" not in page.prose:
        problems.append("names cuBLASLt without --xla_gpu_enable_cublaslt")
    if re.search(r"On a GPU, cuBLASLt can absorb", page.prose):
        problems.append("calls cuBLASLt the GPU's default product path")
    if "cuBLASLt" in page.prose and "Triton GEMM" not in page.prose:
        problems.append("does not name the Triton GEMM fusion, the default on compute capability 8.0 and newer")
    return problems


s5_22_problems = text_rules(
    require(r"against the instruction's index",
            "the live-bytes text does not say the curves are drawn against the instruction index"),
    require(r"longer, \d+ instructions against \d+", "the live-bytes text does not give the two schedules' lengths"),
    require(r"The shaded part of each panel is the backward pass",
            "the live-bytes text does not mark where the backward pass starts"),
    doc="S5-22: the live-bytes curves are drawn against the instruction index with the backward part marked, and the "
        "text says so with both schedule lengths.")


# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-1", CHAPTER, s5_1_problems, Page(prose=(
        "Without recomputation, 3 forward results (40 KiB read by backward kernels) cross over, in 17 kernels; with "
        "the stack as one tf.recompute_grad block, 5 (56 KiB), in 23 kernels: a different set of tensors crosses from "
        "forward to backward: the recomputed block's forward ops run again inside the backward pass instead of being "
        "read from memory."))),
    PageCheck("S5-13", CHAPTER, s5_13_problems, Page(prose="", printed=[
        "variant first call median\n---\nforward (graph) 1 ms\nvalue+grad (graph) 2 ms 1.0x\n"
        "forward (XLA) 1 ms\nvalue+grad (XLA) 2 ms 1.06x [0.81, 1.61]",
        "variant first call median\n---\nvalue+grad (XLA) 2 ms\nrecompute (XLA) 3 ms\n"
        "value+grad (graph) 2 ms 1.56x [1.27, 1.92]\nrecompute (graph) 3 ms"])),
    PageCheck("S5-20", CHAPTER, s5_20_problems, Page(prose=(
        "On a GPU, cuBLASLt can absorb a bias add or a ReLU after a product as its epilogue; a tanh derivative is not "
        "among its epilogues, so z̄ stays a loop fusion there too."))),
    PageCheck("S5-22", CHAPTER, s5_22_problems, Page(prose=(
        "Live memory, drawn. The curves are that walk step by step: after each instruction of the entry "
        "computation's schedule, the bytes of intermediates alive (inputs aside). Without recomputation the peak is "
        "9.25 MiB, reached at subtract_multiply_fusion.5"))),
]
