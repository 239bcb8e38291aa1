"""The glue audit and built-page checks of the chapter ``graphs`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, PageCheck, _f, _num, ci_word, flip_ci  # noqa: F401

CHAPTER = 'graphs'

#: The words of the graph's growth from 2 to 32 ops (above 1: it grew; below; cannot tell).
GROWTH_WORDS = ("grew with the number of ops, so part of its cost is per op on this machine",
                "fell as the ops grew from 2 to 32, which no cost model predicts (noise between the rounds)",
                "could not be told apart for 2 and for 32 ops by this run, as a cost paid per call would give")

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    Entry("graphs", ("small_ratio", "small_ratio_lo", "small_ratio_hi", "small_ratio_n", "small_ratio_word",
                     "small_ratio_verdict", "small_ratio_ci_word"),
          r"the eager time over the graph time is " + NUM + r" \(95% CI " + NUM + " to " + NUM
          + r", (\d+) rounds\), so here the graph was "
          r"(faster|slower|neither faster nor slower by this measurement \(cannot tell\))",
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3)), "n": int(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], "faster", "slower",
                            "neither faster nor slower by this measurement (cannot tell)"),
          lambda m: m.group(5), flip_ci,
          wrong_before="R5 (F): 'graph faster (1.34)' beside a table where the graph was 2.3x slower",
          sample={"lo": 0.4, "hi": 0.5, "n": 40}),
    Entry("graphs", ("graph_growth", "graph_growth_lo", "graph_growth_hi", "graph_growth_n", "graph_growth_word",
                     "graph_growth_verdict", "graph_growth_ci_word"),
          r"(" + "|".join(re.escape(w) for w in GROWTH_WORDS) + r") \(the 32-op graph took " + NUM
          + r" times as long as the\s+2-op one, 95% CI " + NUM + " to " + NUM + r", (\d+)\s+rounds",
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4)), "n": int(m.group(5))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], *GROWTH_WORDS), lambda m: m.group(1), flip_ci,
          wrong_before="S5 item 2: a chapter threshold (1.5) on a ratio of medians",
          sample={"lo": 1.2, "hi": 1.5, "n": 40}),
    Entry("graphs", ("graph8_q1", "graph8_q3", "sweep_agreement"),
          r"IQR " + NUM + r" ?– ?" + NUM + r" µs\) the eager time over.*?The sweep above timed the same 8-op graph "
          r"at the same n at " + NUM + r" µs \(IQR " + NUM + r" ?– ?" + NUM
          + r"(?: µs)?\), (consistent with this table|outside this table's range)",
          lambda m: {"q1": _num(m.group(1)), "q3": _num(m.group(2)), "s1": _num(m.group(4)), "s3": _num(m.group(5))},
          lambda v: ("consistent with this table" if v["s1"] <= v["q3"] + 1 and v["q1"] <= v["s3"] + 1
                     else "outside this table's range"),
          lambda m: m.group(6),
          lambda v: ({**v, "s1": v["q3"] + 100, "s3": v["q3"] + 200}
                     if v["s1"] <= v["q3"] + 1 and v["q1"] <= v["s3"] + 1 else {**v, "s1": v["q1"], "s3": v["q3"]}),
          wrong_before="R5 (F): two estimates of one program 3.9x apart, the page picked one",
          sample={"q1": 600.0, "q3": 900.0, "s1": 620.0, "s3": 700.0}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    'For the 8-op chain': "'wins once ... exceeds' states the general rule; the outcome is small_ratio_word",
    'Per op, the kernel time is': "exercise answer: arithmetic on the exercise's given constants",
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'sweep_agreement': "audited",
}

# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.
PAGE_CHECKS: list[PageCheck] = []
