"""The glue audit and built-page checks of the chapter ``measuring`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci, forbid, require, text_rules  # noqa: F401

CHAPTER = 'measuring'


def _ci_entry(glues: tuple[str, ...], pattern: str, groups: tuple[int, int, int, int],
              words: tuple[str, ...], **kw: object) -> Entry:
    """An audited sentence whose word comes from the interval printed in it: ``groups`` are the match groups of
    (lo, hi, n, the word); ``words`` the (above 1, below 1, neither) phrases of the chapter."""
    lo, hi, n, word = groups
    return Entry("measuring", glues, pattern,
                 lambda m: {"lo": _num(m.group(lo)), "hi": _num(m.group(hi)), "n": int(m.group(n))},
                 lambda v: ci_word(v["lo"], v["hi"], v["n"], *words), lambda m: m.group(word), flip_ci,
                 sample={"lo": 1.2, "hi": 1.5, "n": 40}, **kw)  # type: ignore[arg-type]


def _alt(*words: str) -> str:
    return "(" + "|".join(re.escape(w) for w in words) + ")"


XLA_WORDS = ("faster than graph mode", "slower than graph mode",
             "not measurably different from graph mode (cannot tell)")
BARRIER_WORDS = ("the call alone was the shorter: the call returned before its work was done, or the barrier cost "
                 "measurable time",
                 "the call alone was the longer, which only the order of the calls can explain (noise)",
                 "this run cannot tell the two apart: the call returned after its work was done")
COPY_WORDS = tuple(w.format("XLA") for w in ("inflated the {} time", "shortened the {} time",
                                             "changed the {} time by less than this run can tell"))
GRAPH_COPY_WORDS = tuple(w.replace("XLA", "graph-mode") for w in COPY_WORDS)
BOUND_WORDS = ("above 1: graph mode ran faster than its unfused bytes allow from memory, so part of its traffic "
               "stayed in the last-level cache (or the roof was measured at a busier moment than the chain)",
               "below 1", "not distinguishable from 1")
FRAC_WORDS = ("Graph mode is the further from its bound, so the measured speedup is larger than the bytes alone "
              "predict: the unfused kernels lost time to something besides bytes (launches, dispatch, running below "
              "the memory roof)",
              "XLA is the further from its bound, so the measured speedup is smaller than the bytes alone predict: "
              "what is missing is XLA's per-call shortfall, not bytes",
              "This run cannot tell which of the two is further from its bound: within the scatter of the rounds, "
              "the byte ratio accounts for the speedup")

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    _ci_entry(("speedup_xla", "speedup_xla_lo", "speedup_xla_hi", "speedup_xla_n", "speedup_xla_word",
               "speedup_xla_verdict", "speedup_xla_ci_word", "speedup_eager"),
              r"XLA ran the chain " + NUM + r" ?× as fast \(95% CI " + NUM + " to " + NUM + r"\) and eager " + NUM
              + r" ?× \(CI " + NUM + " to " + NUM + r"\), over (\d+) rounds: by the rule above, XLA was "
              + _alt(*XLA_WORDS), (2, 3, 7, 8), XLA_WORDS),
    _ci_entry(("barrier", "barrier_lo", "barrier_hi", "barrier_n", "barrier_word", "barrier_verdict",
               "barrier_ci_word"),
              r"The call alone took a median of " + NUM + r" ms and the call plus the barrier " + NUM + r" ms, a "
              r"ratio of " + NUM + r" \(95% CI " + NUM + " to " + NUM + r", (\d+) rounds\): " + _alt(*BARRIER_WORDS),
              (4, 5, 6, 7), BARRIER_WORDS, wrong_before="S5-23 (I): 'we checked' with no measurement on the page"),
    _ci_entry(("bug_copy", "bug_copy_lo", "bug_copy_hi", "bug_copy_n", "bug_copy_word", "bug_copy_verdict",
               "bug_copy_ci_word"),
              r"Copying the " + NUM + r" MB result " + _alt(*COPY_WORDS) + r": XLA's median was " + NUM
              + r" ms with the copy and " + NUM + r" ms at the barrier, a ratio of " + NUM + r" \(95% CI " + NUM
              + " to " + NUM + r", (\d+) rounds\)", (6, 7, 8, 2), COPY_WORDS,
              wrong_before="S5-3 (F): 'inflated ... by a factor of 1.43' beside [0.66, 1.36]"),
    _ci_entry(("bug_copy_graph", "bug_copy_graph_lo", "bug_copy_graph_hi", "bug_copy_graph_n", "bug_copy_graph_word",
               "bug_copy_graph_verdict", "bug_copy_graph_ci_word"),
              r"In graph mode the copy " + _alt(*GRAPH_COPY_WORDS) + r": " + NUM + r" ms with the copy and " + NUM
              + r" ms at the barrier, a ratio of " + NUM + r" \(95% CI " + NUM + " to " + NUM + r", (\d+) rounds\)",
              (5, 6, 7, 1), GRAPH_COPY_WORDS,
              wrong_before="S5-4 (F): 'about the same absolute time to both modes' beside +5.1 and -0.9 ms"),
    _ci_entry(("chain_graph_of_bound", "chain_graph_of_bound_lo", "chain_graph_of_bound_hi", "chain_graph_of_bound_n",
               "chain_graph_of_bound_word", "chain_graph_of_bound_verdict", "chain_graph_of_bound_ci_word"),
              r"it ran at " + NUM + r" of that bound \(95% CI " + NUM + " to " + NUM + r", (\d+) rounds\), "
              + _alt(*BOUND_WORDS), (2, 3, 4, 5), BOUND_WORDS),
    _ci_entry(("frac_ratio", "frac_ratio_lo", "frac_ratio_hi", "frac_ratio_n", "frac_ratio_word", "frac_ratio_verdict",
               "frac_ratio_ci_word", "bytes_ratio"),
              r"the ratio of the two fractions " + NUM + r" \(95% CI " + NUM + " to " + NUM + r", (\d+) rounds\)\. "
              + _alt(*FRAC_WORDS), (2, 3, 4, 5), FRAC_WORDS,
              wrong_before="R4 (F) / S5-14 (M): a side verdict from medians, the identity shown as a check"),
    Entry("measuring", ("roof_words",),
          r"measured: " + NUM + r" GB/s, the faster of a copy with \d+ threads \(" + NUM + r" GB/s\) and with one \("
          + NUM + r" GB/s\)",
          _f("roof", "threads", "one"),
          lambda v: f"{max(v['threads'], v['one']):.1f}", lambda m: f"{_num(m.group(1)):.1f}",
          lambda v: {**v, "one": max(v["threads"], v["one"]) + 5.0},
          optional="on a GPU the roof is a datasheet row or measured on the GPU", sample={"roof": 8.8, "threads": 3.8,
                                                                                        "one": 8.8}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    'This book therefore draws no verdict': "states the rule (no verdict below N rounds)",
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'roof_words': "audited (CPU); on a GPU chosen by peaks.roof: a datasheet row or a roof measured on the GPU",
    'min_verdict_samples': "a constant of xlalab.bench",
    'speedup_eager_verdict': "glued by glue_interval, not used in the prose",
    'speedup_eager_ci_word': "glued by glue_interval, not used in the prose",
    'speedup_eager_word': "glued by glue_interval, not used in the prose",
}


# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.
def _s5_3(page: Page) -> list[str]:
    """The copy's word on XLA comes from its printed interval (the audit entry checks which word); the sentence must
    print the interval and its rounds."""
    if re.search(r"inflated the XLA time by a factor of", page.prose):
        return ["S5-3: the copy's verdict is a factor without its interval"]
    m = re.search(r"Copying the " + NUM + r" MB result (.*?): XLA's median was .*? a ratio of " + NUM
                  + r" \(95% CI " + NUM + " to " + NUM + r", (\d+) rounds\)", page.prose)
    if not m:
        return ["S5-3: the copy's ratio is printed without its 95% interval and rounds"]
    said = m.group(2)
    rule = ci_word(_num(m.group(4)), _num(m.group(5)), int(m.group(6)), *COPY_WORDS)
    return [] if said == rule else [f"S5-3: says {said!r}, the interval gives {rule!r}"]


_s5_4 = text_rules(
    forbid(r"The copy adds about the same absolute time to both modes",
           "S5-4: typed 'about the same absolute time to both modes'"),
    require(r"In graph mode the copy .*?a ratio of " + NUM + r" \(95% CI",
            "S5-4: graph mode's change with the copy has no measured interval"),
    doc="No typed claim that the copy adds the same time to both modes; graph mode's change has its own interval.")


def _s5_6(page: Page) -> list[str]:
    """The spread example names its sample count as measured, the same number in both sentences."""
    said = re.search(r"the XLA samples above \(the first (\d+) of them\)", page.prose)
    used = re.search(r"One slow call added to (\d+)", page.prose)
    if re.search(r"\b(ten|twenty|thirty|forty|fifty) XLA samples", page.prose) or not said or not used:
        return ["S5-6: the spread example's sample count is typed or missing"]
    return [] if said.group(1) == used.group(1) else [f"S5-6: {said.group(1)} samples said, {used.group(1)} used"]


def _s5_7(page: Page) -> list[str]:
    """Measured GPU roofs are named as such; no unconditional 'a GPU's datasheet roof ... no kernel exceeds it'."""
    out = []
    if re.search(r"A GPU's datasheet roof does not move, and no kernel exceeds it", page.prose):
        out.append("S5-7: every GPU roof called a datasheet that no kernel exceeds")
    if re.search(r"For a GPU they come from the datasheet of its exact model", page.prose):
        out.append("S5-7: every GPU roof said to come from a datasheet")
    if not re.search(r"for a GPU missing from that table they are measured on it", page.prose):
        out.append("S5-7: the measured roof of a GPU without a datasheet row is not described")
    if re.search(r"The roof here is the datasheet of the", page.prose) and re.search(r"roof=.?measured", page.text):
        out.append("S5-7: a measured GPU roof called a datasheet")
    return out


_s5_14 = text_rules(
    forbid(r"= " + NUM + r", the speedup measured above",
           "S5-14: the algebraic identity presented as a check of the speedup"),
    require(r"the ratio of the two fractions " + NUM + r" \(95% CI " + NUM + " to " + NUM,
            "S5-14: which mode is further from its bound is judged without an interval"),
    doc="The speedup identity is a decomposition, not 'the speedup measured above'; the side verdict has an "
        "interval.")

_s5_23 = text_rules(
    forbid("we checked: the call alone takes as long as the call plus the barrier",
           "S5-23: the barrier check is asserted, not shown", regex=False),
    forbid(r"recorded at 3\.7\s+and at 9\.3", "S5-23: typed ridge values of other builds"),
    doc="No unshown 'we checked', no typed ridge values from other builds.")


_REVIEWED = Page(prose=(
    "The cell below shows it with a slow call that every benchmark meets, the first: the twenty XLA samples above "
    "with and without their first call. One slow call among 17 moved the mean from 14.8 ms to 22.1 ms. "
    "a `tf.function(jit_compile=True)` returns after its kernels have run (we checked: the call alone takes as long "
    "as the call plus the barrier), so the barrier finds nothing pending. "
    "Copying the 16.8 MB result inflated the XLA time by a factor of 1.43: XLA's median was 16.94 ms with the copy "
    "and 11.83 ms at the barrier. The copy adds about the same absolute time to both modes, so it pulls the ratio "
    "between them towards 1. For a GPU they come from the datasheet of its exact model (a PCIe board and an SXM "
    "board of one chip differ). The roof here is the datasheet of the NVIDIA A10G: 600 GB/s. "
    "between two builds on the same type of machine it has been recorded at 3.7 and at 9.3. A GPU's datasheet roof "
    "does not move, and no kernel exceeds it. Both modes are memory-bound, so the speedup of XLA over graph mode is "
    "the byte ratio times XLA's fraction of its roof over graph mode's fraction of its bound: 8.5 × 0.10 / 0.57 = "
    "1.44, the speedup measured above. XLA is the further from its bound (0.10 against graph mode's 0.57)."),
    text="DevicePeaks(name='NVIDIA A10G', roof='measured')")

PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-3", CHAPTER, _s5_3, _REVIEWED),
    PageCheck("S5-4", CHAPTER, _s5_4, _REVIEWED),
    PageCheck("S5-6", CHAPTER, _s5_6, _REVIEWED),
    PageCheck("S5-7", CHAPTER, _s5_7, _REVIEWED),
    PageCheck("S5-14", CHAPTER, _s5_14, _REVIEWED),
    PageCheck("S5-23", CHAPTER, _s5_23, _REVIEWED),
]
