"""The glue audit and built-page checks of the chapter ``claims`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, PageCheck, _num, ci_word, flip_ci

CHAPTER = 'claims'


def _side(gain: float, lo: float, hi: float) -> str:
    """Where a printed gain (percent) lies against the claim's printed range (percent), compared exactly."""
    return "below" if gain < lo else "above" if gain > hi else "inside"


def _same_error(a: str, b: str) -> str:
    """Two printed error lines name the same error when they agree up to numbered function names."""
    return "the same" if re.sub(r"\d+", "#", a) == re.sub(r"\d+", "#", b) else "different"


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("claims", ("cl_rn_xla_words", "cl3_latency_words", "cl4_xla_words", "cl16_words"),
          NUM + r" ?x \((faster|slower); 95% interval " + CI3 + r", (\d+) rounds\)",
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4)), "n": int(m.group(5))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], "faster", "slower", "no verdict"),
          lambda m: m.group(2), flip_ci,
          optional="every measured claim may have come out 'no measurable difference' or too few rounds",
          wrong_before="item 2: ResNet-50 'faster' from 3 samples", sample={"lo": 1.04, "hi": 1.61, "n": 10}),
    # Claim 1: NVIDIA's two gains against the range the seed quotes, both as printed (no threshold of the chapter's).
    Entry("claims", ("cl1_amp_words", "cl1_tf32_words"),
          r"\+?" + NUM + r"% \(AMP\), (below|inside|above) the quoted (\d+)–(\d+)%.*?\+?" + NUM
          + r"% \(TF32\), (below|inside|above) it",
          lambda m: {"amp": _num(m.group(1)), "lo": _num(m.group(3)), "hi": _num(m.group(4)), "tf32": _num(m.group(5))},
          lambda v: f"{_side(v['amp'], v['lo'], v['hi'])} / {_side(v['tf32'], v['lo'], v['hi'])}",
          lambda m: f"{m.group(2)} / {m.group(6)}",
          lambda v: {**v, "amp": (v["lo"] + v["hi"]) / 2 if _side(v["amp"], v["lo"], v["hi"]) != "inside"
                     else v["lo"] - 5},
          sample={"amp": 8.0, "lo": 10.0, "hi": 30.0, "tf32": 18.0}),
    # Claim 5: eager against graph, from the interleaved ResNet-50 rounds, by bench.ratio_verdict.
    Entry("claims", ("cl5_eager_word", "cl5_eager_verdict"),
          r"eager mode ran at " + NUM + r" ?x graph mode's speed \(95% interval " + CI3 + r", (\d+) rounds\): "
          r"(eager was faster|the graph was faster|this run cannot tell them apart)",
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3)), "n": int(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], "eager was faster", "the graph was faster",
                            "this run cannot tell them apart"),
          lambda m: m.group(5), flip_ci, sample={"lo": 0.2, "hi": 0.3, "n": 10}),
    # Claim 7: whether XLA compiled the old spelling, as the cell above printed it.
    Entry("claims", ("cl7_hlo_ok",),
          r"compiles to HLO: (True|False),.*?\(XLA compiles it: (yes|no) ?\)",
          lambda m: {"ok": m.group(1) == "True"}, lambda v: "yes" if v["ok"] else "no", lambda m: m.group(2),
          lambda v: {"ok": not v["ok"]}, whole_page=True, sample={"ok": True}),
    # Claim 8: the explicitly compiled function's error without flags and with the three, as printed above.
    Entry("claims", ("cl8_same",),
          r"no flags: exit \d+, modules \d+, error: (.*?) the three flags: exit \d+, modules \d+, error: (.*?) "
          r"a misspelled flag.*?and (the same|different) error with the three",
          lambda m: {"plain": m.group(1), "flagged": m.group(2)}, lambda v: _same_error(v["plain"], v["flagged"]),
          lambda m: m.group(3),
          lambda v: {**v, "flagged": v["plain"] if _same_error(v["plain"], v["flagged"]) == "different"
                     else v["flagged"] + " (changed)"},
          whole_page=True, sample={"plain": "InvalidArgumentError: f_1", "flagged": "InvalidArgumentError: f_2"}),
    # Claim 13: one kernel or more for relu(x @ w + b), a count compared exactly.
    Entry("claims", ("cl13_word",),
          r"Here XLA compiled (\d+) kernel\(s\): the product ran as .*?, (in a kernel apart from|in one kernel with|"
          r"in no kernel, nor) the bias and ReLU",
          lambda m: {"kernels": int(m.group(1))},
          lambda v: ("in a kernel apart from" if v["kernels"] > 1 else "in one kernel with" if v["kernels"] == 1
                     else "in no kernel, nor"),
          lambda m: m.group(2), lambda v: {"kernels": 1 if v["kernels"] != 1 else 2}, sample={"kernels": 2}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    '40 ms is about': "exercise answer on fixed published numbers (40 ms against a 0.57 ms roof)",
    "At 224×224 and batch 256 NVIDIA's A100 step takes": "× is an image size; the step time is NVIDIA's published "
                                                          "throughput (256 images at 2,375 img/s), not a measurement",
    "Even if its": "arithmetic on NVIDIA's published throughput and the A100 datasheet bandwidth; × marks tensor "
                   "shapes, and no sentence compares two measurements",
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'cl_rn_xla_words': "audited (claims speed_words)",
    'cl1_amp_words': "audited",
    'cl1_tf32_words': "audited (with cl1_amp_words; test_book claims arithmetic)",
    'cl3_latency_words': "audited (claims speed_words)",
    'cl3_mem_words': "whether the allocator keeps statistics on this device (in the audited latency sentence)",
    'cl4_xla_words': "audited (claims speed_words)",
    'cl5_eager_ci_word': "bench.ratio_verdict words of glue_interval; not printed in the prose",
    'cl5_eager_verdict': "audited (cl5_eager_word)",
    'cl7_hlo_ok': "audited (whole page: the printed 'compiles to HLO')",
    'cl8_same': "audited (whole page: the two printed error lines)",
    'cl16_words': "audited (claims speed_words)",
}

# Built-page checks of review findings (core.PageCheck): the s5 review has no F finding in this chapter (S5-27 is
# xla_hlo's, and names this chapter's regex as the fix).
PAGE_CHECKS: list[PageCheck] = []
