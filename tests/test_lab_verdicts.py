"""Every timing verdict in the labs, forced three ways (issue 26, item 4).

A lab's written answer or printed verdict that rests on a timing comparison must say what the student's own run
shows: *faster*, *slower* or *this run cannot tell*. For each such verdict this file

- runs the lab's verdict cell (the code cell that prints it) on comparisons forced to each outcome, built without
  timing anything, and checks that the cell prints that outcome's words and no other's;
- checks that every ``compare(...)`` in the labs' code runs until its interval decides or a time budget runs out
  (``target_rel_width=`` and ``max_time=``), and that each cell that measures is followed by a verdict in this list;
- checks that the lab text accepts each outcome: the question names "cannot tell", and the written answer's rubric
  accepts a verdict in any direction.

Fast: no TensorFlow work, no kernel; each verdict cell is executed in this process.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xlalab.bench
import xlalab.hw
from xlalab.grading import assign

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"


@dataclass
class Verdict:
    """One verdict cell of a lab and what it reads.

    ``comparisons``: variable name -> (baseline, [variants in the order the forged speedups grow or shrink]);
    a value that is a dict of such pairs stands for a dict of comparisons (``timings[name]`` in Lab 2).
    ``measured_in``: the code cells whose ``compare(...)`` this verdict reads.
    ``questions``: (question cell id, answer id or None): the question must accept every outcome.
    """

    lab: str
    cell: str
    comparisons: dict
    measured_in: list[str]
    questions: list[tuple[str, str | None]] = field(default_factory=list)
    names: dict = field(default_factory=dict)


GRAPH_XLA = ("graph", ["xla"])
VERDICTS = [
    Verdict("lab01_timing", "p3-verdicts",
            {"comparison": ("graph", ["eager", "xla"]), "comparison_trans": ("graph", ["eager", "xla"]),
             "per_op_cmp": {op: GRAPH_XLA for op in ("sin", "exp", "tanh")}},
            ["p3-answer", "p3-results"], [("p3-why-q", "p3-why"), ("p3-intro", None)], {"n_chain": 2**20}),
    Verdict("lab02_hlo_fusion", "p3-verdicts",
            {"timings": {n: GRAPH_XLA for n in ("elementwise_chain", "row_sum", "dense_relu", "softmax",
                                                  "layer_norm")}},
            ["p3-results"], [("q2-q", "q2"), ("p3-results-intro", None)]),
    Verdict("lab02_hlo_fusion", "p4-verdict", {"ln_compare": ("given", ["fast"])}, ["p4-answer"],
            [("p4-task", None)]),
    Verdict("lab03_gemv", "p5-verdict", {"bf16_cmp": ("float32 table", ["bf16 table"])}, ["p5-measure"],
            [("q1-question", "q1"), ("q3-question", "q3")]),
    Verdict("lab04_autodiff", "p3-verdict", {"remat_cmp": ("no recompute", ["recompute each block"])},
            ["p3-measure"], [("p3-why-question", "p3-why")]),
    Verdict("lab04_autodiff", "p4-verdict",
            {"jac_cmp": ("loop (eager)", ["jacobian, pfor (tf.function)", "batch_jacobian (tf.function)"])},
            ["p4-measure"], [("p4-why-question", "p4-why")]),
    Verdict("lab04_autodiff", "p5-verdict",
            {"steady_cmp": ("given (tensor lr), graph", ["fixed, graph", "given, eager", "fixed, eager"])},
            ["p5-measure"], [("p5-why-question", "p5-why")]),
    # The order matters for the policy lines: mixed XLA against float32 XLA, mixed graph against float32 graph.
    Verdict("lab05_mixed_precision", "p4-verdict",
            {"timing": ("float32 graph", ["mixed graph", "float32 XLA", "mixed XLA", "mixed graph w=1020"])},
            ["p4-measure"], [("p4-why-q", "p4-why")], {"POLICY": "mixed_bfloat16"}),
    Verdict("lab06_resnet", "p4-verdict", {"timing": ("graph", ["XLA", "XLA + mixed"])}, ["p4-measure"],
            [("p4-why-q", "p4-why"), ("q2-q", "q2")]),
    Verdict("lab06_resnet", "p5-conv-verdict", {"conv_timing": ("graph", ["XLA"])}, ["p5-conv"], [("q2-q", "q2")]),
    Verdict("lab07_transformer", "p5-verdict", {"modes": ("graph", ["xla", "xla+mixed"])}, ["p5-time"],
            [("p5-why", "p5-why-answer")]),
    Verdict("lab07_transformer", "p8-verdict", {"rc_cmp": ("plain", ["recompute"])}, ["p8-measure"],
            [("p8-intro", "p8-why-answer")]),
]

# The words each outcome prints (xlalab.bench.verdict_words), and the factor by which each forged variant's times
# are those of the variant before it.
OUTCOMES = {"faster": 0.5, "slower": 2.0, "indistinguishable": 1.0}
WORDS = {v: xlalab.bench.verdict_words(v) for v in OUTCOMES}


def _cells(lab: str) -> dict:
    return {c.get("id"): c for c in assign.read(SOLUTIONS / f"{lab}.ipynb").cells}


def forged(baseline: str, variants: list[str], outcome: str, n: int = 20) -> xlalab.bench.Comparison:
    """A Comparison whose every variant is ``outcome`` against the baseline and against each variant before it:
    variant i's times are the baseline's times ``OUTCOMES[outcome] ** (i + 1)``. Nothing is timed."""
    jitter = 1.0 + 0.02 * np.linspace(-1.0, 1.0, n)
    samples = {baseline: list(2e-3 * jitter)}
    for i, name in enumerate(variants):
        samples[name] = list(2e-3 * OUTCOMES[outcome] ** (i + 1) * jitter)
    timings = {k: xlalab.bench.Timing(k, 0.5, v) for k, v in samples.items()}
    base = timings[baseline].median_s
    speedups = {k: base / t.median_s for k, t in timings.items()}
    cis = {k: xlalab.bench.bootstrap_ratio_ci(samples[baseline], v) for k, v in samples.items()}
    return xlalab.bench.Comparison(baseline, timings, speedups, cis, rounds=n, elapsed_s=1.0, stopped="decided",
                                   target_rel_width=0.1)


def _forge_all(spec: dict, outcome: str) -> dict:
    out: dict[str, Any] = {}
    for var, value in spec.items():
        if isinstance(value, dict):
            out[var] = {k: forged(b, v, outcome) for k, (b, v) in value.items()}
        else:
            out[var] = forged(value[0], value[1], outcome)
    return out


def test_forged_comparisons_take_the_outcome_they_are_forged_for():
    for outcome in OUTCOMES:
        c = forged("base", ["a", "b"], outcome)
        assert c.verdict("a") == c.verdict("b") == outcome
        lo, hi = xlalab.bench.bootstrap_ratio_ci(c.timings["a"].samples_s, c.timings["b"].samples_s)
        assert xlalab.bench.ratio_verdict((lo, hi), n=20) == outcome     # b against a, too


def _run(v: Verdict, outcome: str) -> str:
    source = _cells(v.lab)[v.cell].source
    ns = {"np": np, "xlalab": xlalab, "bench": xlalab.bench, "hw": xlalab.hw, **v.names,
          **_forge_all(v.comparisons, outcome)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, f"{v.lab}:{v.cell}", "exec"), ns)
    return out.getvalue()


@pytest.mark.parametrize("outcome", list(OUTCOMES))
@pytest.mark.parametrize("v", VERDICTS, ids=[f"{v.lab}-{v.cell}" for v in VERDICTS])
def test_each_verdict_prints_each_outcome(v, outcome):
    printed = _run(v, outcome)
    lines = [line for line in printed.splitlines() if line.strip()]
    n_verdicts = sum(len(x[1]) if isinstance(x, tuple) else sum(len(y[1]) for y in x.values())
                     for x in v.comparisons.values())
    assert len(lines) >= n_verdicts, \
        f"{v.lab}:{v.cell} printed {len(lines)} lines for {n_verdicts} verdicts:\n{printed}"
    assert all(line.rstrip().endswith(WORDS[outcome]) or WORDS[outcome] + "   (" in line for line in lines
               if ":" in line and "x [" in line), printed
    for other, words in WORDS.items():
        if other != outcome:
            assert not re.search(rf"\b{re.escape(words)}\b", printed), \
                f"{outcome} forced, '{words}' printed:\n{printed}"
    assert WORDS[outcome] in printed


def test_a_verdict_on_too_few_rounds_is_cannot_tell():
    """The verdict cells read Comparison.verdict, so a decisive interval from 9 rounds still prints cannot tell."""
    v = VERDICTS[0]
    ns = {"np": np, "xlalab": xlalab, **v.names}
    for var, value in v.comparisons.items():
        if isinstance(value, dict):
            ns[var] = {k: _few(forged(b, vs, "faster")) for k, (b, vs) in value.items()}
        else:
            ns[var] = _few(forged(value[0], value[1], "faster"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(_cells(v.lab)[v.cell].source, ns)
    assert "faster" not in out.getvalue() and WORDS["indistinguishable"] in out.getvalue()


def _few(c: xlalab.bench.Comparison, n: int = xlalab.bench.MIN_VERDICT_SAMPLES - 1) -> xlalab.bench.Comparison:
    for t in c.timings.values():
        t.samples_s = t.samples_s[:n]
    return c


def _compare_calls(source: str) -> list[str]:
    """The argument text of each ``compare(`` call in ``source`` (balanced parentheses)."""
    calls = []
    for m in re.finditer(r"\bcompare\(", source):
        depth, i = 1, m.end()
        while depth and i < len(source):
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        calls.append(source[m.end():i - 1])
    return calls


LABS = sorted(p.stem for p in SOLUTIONS.glob("lab*.ipynb"))


@pytest.mark.parametrize("lab", LABS)
def test_every_lab_comparison_runs_until_decided_and_has_a_verdict(lab):
    measured = {c for v in VERDICTS if v.lab == lab for c in v.measured_in}
    for cid, cell in _cells(lab).items():
        if cell.cell_type != "code" or assign.xmeta(cell).get("check"):
            continue
        calls = _compare_calls(cell.source)
        for args in calls:
            assert "target_rel_width=" in args and "max_time=" in args, (
                f"{lab}:{cid}: compare({args[:80]}...) runs a fixed time; give it target_rel_width= and max_time=")
        if calls:
            assert cid in measured, f"{lab}:{cid} times a comparison that no verdict cell in VERDICTS reads"


@pytest.mark.parametrize("v", VERDICTS, ids=[f"{v.lab}-{v.cell}" for v in VERDICTS])
def test_the_lab_text_accepts_each_outcome(v):
    cells = _cells(v.lab)
    ids = list(cells)
    assert ids.index(v.cell) > max(ids.index(c) for c in v.measured_in), f"{v.cell} must follow what it reads"
    assert "Comparison.verdict" in cells[v.cell].source or ".describe(" in cells[v.cell].source
    for question, answer in v.questions:
        text = " ".join(cells[question].source.split())
        assert "cannot tell" in text, f"{v.lab}:{question} must accept 'this run cannot tell'"
        if answer is not None:
            (box,) = [c for c in cells.values() if assign.xmeta(c).get("answer") == answer]
            rubric = assign.xmeta(box).get("rubric", "")
            assert "cannot tell" in rubric and ("any direction" in rubric or "either" in rubric), (
                f"{v.lab}: the rubric of {answer} must accept the run's verdict in any direction: {rubric!r}")
