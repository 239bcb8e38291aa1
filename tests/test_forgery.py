"""Forged probe records (issue 34): what a hand-in earns by writing its own records file, per lab.

Slow (each grades notebooks at ``XLALAB_PROFILE=tiny``, one lab per test):

- the generic forgery (the unanswered lab + one cell: stubs for ``written``, then the records of the solution's
  run with another seed) and the empty forgeries (every value ``[]``, ``{}``, or hollowed) pass only checks the
  lab declares self-reported (``"self_reported": true`` in the check cell's metadata), which hold at most a fifth
  of the lab's automatic points;
- the judge alone, on the solution's own records (same seed) with empty containers, a key missing from every dict,
  the last element missing from every list and array, or a key added to every dict: every check whose records
  changed fails (a check whose records hold no list, dict or array for a mutation is exempt from it: nothing
  changes), while the unmutated records pass every check.

Fast: the static rule on probing parts (:func:`helpers.forgery.probing_problems`) over every check, with cells
that prove it can fail; the declared share; README's table against ``results/grading/self-reported.json``.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from xlalab.grading import assign
from xlalab.grading.lab import Lab, load_lab
from xlalab.grading.probe import ProbeRecord, parse_records

from helpers import forgery

LABS = [p.stem for p in forgery.SOLUTIONS]
CHECKS = [pytest.param(p, c.check, c.source, id=f"{p.stem}/{c.check}")
          for p in forgery.SOLUTIONS for c in assign.checks(assign.read(p))]


# ------------------------------------------------------------------------------------------- static rule (fast)
@pytest.mark.parametrize(("path", "check", "source"), CHECKS)
def test_probing_part_holds_no_reference(path: Path, check: str, source: str) -> None:
    """The code a check runs in the student's kernel defines no reference and no expected value."""
    problems = forgery.probing_problems(source)
    assert not problems, f"{path.stem}, check {check!r}: " + "; ".join(problems)


GOOD = '''\
# CHECK p1-scale-random (2 points)
rng = check_rng("p1-scale-random")
x = rng.normal(size=int(rng.integers(5, 50)))


def _pair(v):
    return [scale(v, 2.0), scale(v, -1.0)]


def fresh(a):
    return tf.exp(a) @ a


text = hlo_text(fresh, tf.ones([3, 3]))
got = probe("scale-random", lambda: _pair(x))
out = probe("lowered", lambda: lowering(text))
# JUDGE
expected = x @ np.ones(len(x))
np.testing.assert_allclose(got[0], x * 2.0)
'''

BAD = {
    "reference function": ("def _np_scale(v):\n    return v * 2.0\n\n\n", "defines function '_np_scale'"),
    "unused helper": ("def conv_p(c):\n    return 9 * c\n\n\n", "defines function 'conv_p'"),
    "expected value": ("expected = 1e-9\n", "binds 'expected'"),
    "reference name": ("_ref_out = x * 2.0\n", "binds '_ref_out'"),
    "matmul": ("w = np.outer(x, x)\ny = x @ w\n", "computes @"),
    "softmax": ("s = np.exp(x) / np.sum(np.exp(x))\n", "computes np.exp"),
    "keras layer": ("lay = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)\n",
                    "computes keras.layers.MultiHeadAttention"),
    "lambda kept": ("ref_fn = lambda v: v * 2.0\nfirst = ref_fn(x)\n", "defines lambda 'ref_fn'"),
    "helper also called outside": ("twice = _pair(x)\n", "defines function '_pair'"),
}


def test_probing_rule_passes_a_clean_check() -> None:
    """Inputs from check_rng, a helper only a probe runs, an input program passed to a call, math after # JUDGE."""
    assert forgery.probing_problems(GOOD) == []


@pytest.mark.parametrize("case", sorted(BAD))
def test_probing_rule_fails_a_bad_check(case: str) -> None:
    added, want = BAD[case]
    head, rest = GOOD.split("got = probe", 1)
    problems = forgery.probing_problems(head + added + "got = probe" + rest)
    assert any(want in p for p in problems), problems


# --------------------------------------------------------------------------------------- declared share (fast)
@pytest.mark.parametrize("name", LABS)
def test_declared_share_at_most_a_fifth(name: str) -> None:
    lab = load_lab(forgery.REPO / "solutions" / f"{name}.ipynb")
    share = sum(forgery.declared(lab).values())
    assert share <= forgery.SHARE_CAP * lab.max_auto, \
        f"{name} declares {share:g} of {lab.max_auto:g} automatic points self-reported (at most a fifth)"


def test_declared_reads_check_metadata() -> None:
    lab = load_lab(forgery.REPO / "solutions" / f"{LABS[0]}.ipynb")
    checks = [c for c in lab.source.cells if "check" in assign.xmeta(c)]
    for cell in checks:
        assign.xmeta(cell).pop("self_reported", None)
    assert forgery.declared(lab) == {}
    first = checks[0]
    first.metadata["xlalab"]["self_reported"] = True
    got = forgery.declared(lab)
    assert got == {assign.xmeta(first)["check"]: assign.xmeta(first)["points"]}


# ---------------------------------------------------------------------------------- forgery builders (fast)
def test_mutations_change_every_container() -> None:
    value = {"a": [1.0, 2.0, 3.0], "b": {"c": np.arange(6.0).reshape(3, 2)}, "d": 4}
    m = forgery.MUTATIONS
    assert m["empty"](value) == {} and m["empty"]([1]) == [] and m["empty"](np.ones(3)).shape == (0,)
    assert m["empty"](3.0) == 3.0
    assert list(m["missing-key"](value)) == ["a", "b"] and m["missing-key"](value)["b"] == {}
    short = m["short"](value)
    assert short["a"] == [1.0, 2.0] and short["b"]["c"].shape == (2, 2)
    extra = m["extra-key"](value)
    assert extra[forgery.EXTRA_KEY] == 0 and extra["b"][forgery.EXTRA_KEY] == 0
    hollow = forgery.hollow(value)
    assert hollow["a"] == [] and hollow["b"]["c"].shape == (0, 2) and hollow["d"] == 4


def test_affected_checks_exempt_scalars_only() -> None:
    """A check whose records hold only scalars is not touched by list or dict mutations."""
    lab = load_lab(forgery.REPO / "solutions" / "lab01_timing.ipynb")
    records = {"traces-python": [ProbeRecord("traces-python", 10)],
               "traces-tensor": [ProbeRecord("traces-tensor", 1)],
               "fixed-five-floats": [ProbeRecord("fixed-five-floats", {"outs": [1.0, 2.0]})]}
    for kind, fn in forgery.MUTATIONS.items():
        got = forgery.affected_checks(lab, records, fn)
        assert "retrace-count" not in got, kind
        assert "retrace-fix" in got, kind


def test_forged_handin_writes_the_records_and_stubs(tmp_path: Path) -> None:
    lab = load_lab(forgery.REPO / "solutions" / "lab01_timing.ipynb")
    data = forgery.replace_values({"traces-python": [ProbeRecord("traces-python", 10)]}, lambda v: [])
    nb = forgery.forged_handin(lab, data)
    assert len(nb.cells) == len(lab.released.cells) + 2
    stubs, cell = nb.cells[-2].source, nb.cells[-1].source
    for name in forgery.written_names(lab):
        assert re.search(rf"^def {re.escape(name)}\(", stubs, re.M), name
    encoded = re.search(r"b64decode\('([^']*)'\)", cell)
    assert encoded
    assert parse_records(zlib.decompress(base64.b64decode(encoded.group(1))))["traces-python"][0].value == []
    compile(stubs, "stubs", "exec")
    compile(cell, "forgery", "exec")


# ---------------------------------------------------------------------------------------- README table (fast)
def test_readme_table_renders() -> None:
    data = {"labs": {"lab09_x_y": {"max_auto": 20, "forgeries": {"generic": {"passed": {"a": 1, "b": 2}},
                                                                  "hollow": {"passed": {"c": 1.5}}}}}}
    table = forgery.readme_table(data)
    assert "| 9 x y | a 1, b 2, c 1.5 | 4.5/20 |" in table.splitlines()


def test_readme_table_is_the_measurement() -> None:
    """README's table of self-reported points is the one the last measurement gives (tests/scripts/self_reported.py)."""
    section = forgery.readme_section((forgery.REPO / "README.md").read_text(encoding="utf-8"))
    assert section is not None, "README.md lacks the generated table's markers"
    data = json.loads(forgery.MEASUREMENT.read_text(encoding="utf-8"))
    assert section == forgery.readme_table(data), "run `.venv/bin/python tests/scripts/self_reported.py --readme-only`"
    assert sorted(data["labs"]) == LABS, "the measurement lacks a lab: run tests/scripts/self_reported.py LAB"


# ------------------------------------------------------------------------------------------- forgeries (slow)
_CAPTURES: dict[str, forgery.Capture] = {}


def _capture(name: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Lab, forgery.Capture]:
    """The lab and one grading run of its solution (once per test session)."""
    lab = load_lab(forgery.REPO / "solutions" / f"{name}.ipynb")
    if name not in _CAPTURES:
        cap = forgery.capture_solution(lab, tmp_path_factory.mktemp(f"{name}-solution"))
        assert cap.row.auto == lab.max_auto, f"{name}: the solution earned {cap.row.auto:g}: {cap.row.status}"
        _CAPTURES[name] = cap
    return lab, _CAPTURES[name]


def _over(m: forgery.Measure, kind: str) -> str | None:
    f = m.forgeries[kind]
    extra = {c: p for c, p in f["passed"].items() if c not in m.declared}
    if not extra and f["earned"] <= sum(m.declared.values()):
        return None
    return (f"{m.lab}: the {kind} forgery earned {f['earned']:g} of {m.max_auto:g} ({f['status']}); "
            f"checks it passed that the lab does not declare self-reported: {extra}")


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("name", LABS)
def test_generic_forgery_earns_only_the_declared_share(name: str, tmp_path: Path,
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    lab, cap = _capture(name, tmp_path_factory)
    control = forgery.control_forgery(lab, cap, tmp_path)
    assert control.auto >= 0.5 * lab.max_auto, \
        f"{name}: the forged records with their own seed earned {control.auto:g}: do they reach the judge? " \
        f"({control.status})"
    m = forgery.measure_lab(lab, tmp_path, ("generic",), capture=cap)
    assert sum(m.declared.values()) <= forgery.SHARE_CAP * lab.max_auto
    problem = _over(m, "generic")
    assert problem is None, problem


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("name", LABS)
def test_empty_forgeries_earn_only_the_declared_share(name: str, tmp_path: Path,
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    lab, cap = _capture(name, tmp_path_factory)
    m = forgery.measure_lab(lab, tmp_path, tuple(forgery.EMPTY_FORGERIES), capture=cap)
    problems = [p for p in (_over(m, k) for k in m.forgeries) if p]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("name", LABS)
def test_mutated_records_fail_their_checks(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """One judge run per mutation, every record mutated at once; the unmutated records pass everything. A check the lab
    declares self-reported is held only to the declared share (the generic forgery's tests): records that stay
    consistent with themselves under a mutation (Lab 7's p8-recompute: every list one shorter) can pass it."""
    lab, cap = _capture(name, tmp_path_factory)
    declared = forgery.declared(lab)
    records = cap.records
    control = forgery.judge_records(lab, cap, cap.mine.records)
    assert control.auto == lab.max_auto, \
        f"{name}: the judge alone on the solution's records earned {control.auto:g} ({control.status})"
    failures = []
    for kind, fn in forgery.MUTATIONS.items():
        affected = [c for c in forgery.affected_checks(lab, records, fn) if c not in declared]
        row = forgery.judge_records(lab, cap, forgery.replace_values(records, fn))
        still = sorted(set(affected) & set(forgery.passed(row)))
        if still:
            failures.append(f"{kind}: {', '.join(still)} passed")
    assert not failures, f"{name}, checks that passed on mutated records: " + "; ".join(failures)


# -------------------------------------------------------------------------------- regressions of issue 34 (slow)
# (lab, cell id, text in the solution's cell, its replacement, the checks that hand-in must fail)
REGRESSIONS = {
    "unfixed-retrace": ("lab01_timing", "p2-fix-answer",
                        "make_scaled_sum(\n    input_signature=[tf.TensorSpec([None], tf.float32), "
                        "tf.TensorSpec([], tf.float32)])", "make_scaled_sum()",
                        ["retrace-fix", "retrace-fresh", "retrace-traces"]),
    "chain-identity": ("lab01_timing", "p3-answer", "    y = x * 1.5\n", "    return tf.identity(x)\n",
                       ["chain-variants", "chain-fresh", "chain-kernels"]),
}


def regression_handin(name: str) -> tuple[Lab, object, list[str]]:
    """The lab, its solution with one answer replaced by the regression's, and the checks it must fail."""
    lab_name, cell_id, old, new, checks = REGRESSIONS[name]
    lab = load_lab(forgery.REPO / "solutions" / f"{lab_name}.ipynb")
    nb = assign.read(lab.source_path)
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    assert old in cell.source, f"{name}: {old!r} is not in cell {cell_id} any more"
    cell.source = cell.source.replace(old, new)
    return lab, nb, checks


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression_handins_apply(name: str) -> None:
    """Each regression's text still occurs in its cell (fast: the slow test would grade the plain solution)."""
    lab, nb, checks = regression_handin(name)
    assert set(checks) <= {c.check for c in lab.checks}


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regressions_earn_nothing_on_their_checks(name: str, tmp_path: Path) -> None:
    """The unfixed given function and ``chain`` as the identity earn 0 on the checks of what they leave undone
    (before the probe/judge split they did; issue 34 measured 6 points)."""
    lab, nb, checks = regression_handin(name)
    row = forgery.grade_handin(lab, nb, tmp_path, name)
    got = forgery.passed(row)
    assert not set(checks) & set(got), f"{name} passed {sorted(set(checks) & set(got))} ({row.status})"
