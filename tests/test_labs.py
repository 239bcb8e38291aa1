"""Every lab in solutions/: its solution scores full points, its student version scores 0, every deliberately
broken answer (``metadata.xlalab.mutations``) fails its check, labs/ is current, and the lab has the shape the
course promises (6-12 checks, about 20 points of automatic checks, at least a third of them hidden, at least one
written answer graded by hand).

Grading a solution is also its nbval validation, so each solution runs once (CPU profile, or whatever
XLALAB_PROFILE the caller set); the student version and the mutations run at ``XLALAB_PROFILE=tiny``.

Backend-neutral: every solution is graded once more at the tiny profile with ``XLALAB_FAKE_GPU`` set, so that
recorded XLA:GPU HLO stands in for every optimized module the lab and its checks compile (``xlalab.hlo``) and
``xlalab.hw`` reports that GPU; a check whose expected value holds on the CPU only fails there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from xlalab import cli
from xlalab.grading import answers as answers_mod, assign, gpu_answer
from xlalab.grading.cli import grade_submissions
from xlalab.grading.feedback import feedback_text
from xlalab.grading.lab import load_lab
from xlalab.grading.options import GradeOptions
from xlalab.grading.score import Row

from helpers import handin_copy

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((REPO / "solutions").glob("lab*.ipynb"))
TINY = {"XLALAB_PROFILE": "tiny"}
FAKE_GPU = {**TINY, "XLALAB_FAKE_GPU": "NVIDIA A100-SXM4-40GB"}
LIMITS: dict[str, Any] = {"cell_timeout": 900, "timeout": 2400, "memory_gb": 8}


def _mutations() -> list:
    params = []
    for path in SOLUTIONS:
        try:
            meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("xlalab", {})
        except (OSError, ValueError):
            continue
        for i, m in enumerate(meta.get("mutations", []) if isinstance(meta, dict) else []):
            params.append(pytest.param(path, i, m, id=f"{path.stem}-{i}-{m.get('check', '?')}"))
    return params


def _feedback(row: Row) -> str:
    return feedback_text(row)


def _grade(path: Path, lab: Path, out: Path, env: dict) -> Row:
    (row,) = grade_submissions(lab, [handin_copy(path, out / "handin")],
                                     GradeOptions(out=str(out / "graded"), **LIMITS), env=env)
    return row


def test_labs_are_current():
    """labs/ matches solutions/ (what `make check-labs` runs); holds with no lab at all."""
    assert cli.main(["assign", "--root", str(REPO), "--check"]) == 0, "run `python -m xlalab assign`"


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_lab_shape(path):
    nb = assign.read(path)
    checks = assign.checks(nb)
    total = sum(c.points for c in checks)
    hidden = sum(c.points for c in checks if c.hidden)
    assert 6 <= len(checks) <= 12, f"{path.name}: {len(checks)} checks (want 6-12)"
    assert 18 <= total <= 22, f"{path.name}: {total:g} points of automatic checks (want about 20)"
    written = assign.answers(nb)   # graded by hand; their points come on top of the checks'
    assert written, f"{path.name}: no written answer marked with xlalab.answer (want at least one, with points)"
    assert all(a.rubric.strip() for a in written), f"{path.name}: every written answer needs a rubric"
    intro = next(c for c in nb.cells if c.cell_type == "markdown").source
    max_manual = sum(a.points for a in written)
    assert f"up to {max_manual:g} points" in intro, \
        f"{path.name}: the first cell must say the written answers are worth up to {max_manual:g} points"
    released = json.loads(assign.dumps(load_lab(path).released))
    assert all(a.state == "unchanged" and a.earned == 0 for a in answers_mod.answers_of(load_lab(path),
                                                                                       released)), \
        f"{path.name}: the released answer boxes must score 0 without the instructor"
    lab_path = REPO / "labs" / path.name
    text = "\n".join(c.source + json.dumps(dict(c.metadata)) for c in assign.read(lab_path).cells) \
        if lab_path.exists() else ""
    leaked = [a.answer for a in written if a.rubric.strip() in text or (a.model.strip() and a.model.strip() in text)]
    assert not leaked, f"labs/{path.name} holds the rubric or model answer of {leaked}"
    assert hidden >= total / 3, f"{path.name}: {hidden:g} of {total:g} points hidden (want at least a third)"
    ids = [c.get("id") for c in nb.cells]
    assert all(ids) and len(set(ids)) == len(ids), f"{path.name}: every cell needs a unique id"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any(assign.xmeta(c).get("setup") and "track_checks" in c.source for c in code), \
        f"{path.name}: the setup cell (xlalab: setup) must call xlalab.grading.track_checks()"
    assert "report(" in code[-1].source, f"{path.name}: the last code cell must call xlalab.grading.report()"
    names = {c.check for c in checks}
    by_id = {c.get("id"): c for c in nb.cells}
    for m in nb.metadata.get("xlalab", {}).get("mutations", []):
        assert m.get("check") in names, f"{path.name}: mutation names unknown check {m.get('check')!r}"
        assert m.get("cell") in by_id, f"{path.name}: mutation names unknown cell {m.get('cell')!r}"
        old = m["replace"][0]
        assert old in by_id[m["cell"]].source, f"{path.name}: {old!r} is not in cell {m['cell']!r}"


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_scores_full_points(path, tmp_path):
    """The nbval validation of the solution (CPU profile unless XLALAB_PROFILE is set by the caller)."""
    row = _grade(path, path, tmp_path, env={})
    # Full automatic points; the written answers' points are the instructor's (merged from manual.csv).
    assert row.auto == row.max_auto, _feedback(row)


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_student_lab_scores_zero(path, tmp_path):
    lab = REPO / "labs" / path.name
    assert lab.exists(), f"labs/{path.name} is missing: run `python -m xlalab assign`"
    row = _grade(lab, path, tmp_path, env=TINY)
    passed = [c.check for c in row.checks if c.passed]
    assert not passed, f"checks that pass on the unmodified student lab: {passed}\n" + _feedback(row)
    assert row.manual == 0 and not row.pending, "the unmodified lab's written answers must score 0:\n" + _feedback(row)


@pytest.mark.slow
@pytest.mark.parametrize("path, index, mutation", _mutations())
def test_mutation_fails_its_check(path, index, mutation, tmp_path):
    nb = assign.read(path)
    cell = next(c for c in nb.cells if c.get("id") == mutation["cell"])
    old, new = mutation["replace"]
    assert old in cell.source
    cell.source = cell.source.replace(old, new)
    sub = tmp_path / f"{path.stem}-mutation-{index}.ipynb"
    sub.write_text(assign.dumps(nb), encoding="utf-8")
    row = _grade(sub, path, tmp_path / "out", env=TINY)
    result = next(c for c in row.checks if c.check == mutation["check"])
    assert not result.passed, f"mutation {mutation} did not fail check {mutation['check']}:\n" + _feedback(row)


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_scores_full_points_on_fake_gpu(path, tmp_path):
    """The solution keeps every point when the backend is a GPU (recorded XLA:GPU HLO, hw reporting an A100)."""
    row = _grade(path, path, tmp_path, env=FAKE_GPU)
    assert row.auto == row.max_auto, _feedback(row)


# Lab 7's text names the decoder block's sub-layers (ln1, attn, ln2, mlp) but not the model's: a model that keeps
# its embeddings, blocks, final norm and head under other names follows the text and must keep every point.
LAB7_RENAMES = [("self.tok", "self.token_embedding"), ("self.pos", "self.position_embedding"),
                ("self.blocks", "self.stack"), ("self.ln_f", "self.final_norm"), ("self.head", "self.to_logits")]


@pytest.mark.slow
def test_lab07_checks_accept_other_model_attribute_names(tmp_path):
    path = REPO / "solutions" / "lab07_transformer.ipynb"
    nb = assign.read(path)
    cell = next(c for c in nb.cells if c.get("id") == "p3-answer")
    for old, new in LAB7_RENAMES:
        assert old in cell.source, f"{old} is no longer in Lab 7's p3-answer: update LAB7_RENAMES"
        cell.source = cell.source.replace(old, new)
    sub = tmp_path / "lab07-renamed.ipynb"
    sub.write_text(assign.dumps(nb), encoding="utf-8")
    row = _grade(sub, path, tmp_path / "out", env=TINY)
    failed = [c.check for c in row.checks if not c.passed]
    assert not failed, f"checks that rely on attribute names the lab text does not give: {failed}\n" + _feedback(row)


# ---------------------------------------------------------------------------------------------
# Lab checks run in this process on answers other than the solution's (fast: a few compiles each).

def _lab_namespace(path: Path, *cell_ids: str, **names) -> dict:
    """Run the given cells of a solution, in order, in a fresh namespace holding the setup's modules and `names`."""
    import re

    import numpy as np
    import tensorflow as tf

    import xlalab.bench
    import xlalab.hlo
    import xlalab.hw
    from xlalab.grading.probe import check_rng, probe

    # The checks run whole here, as while a student works (probe calls the function); `written` reads the
    # kernel's history there, which this process has not: the answers are passed in `names`.
    ns = {"np": np, "tf": tf, "re": re, "xlalab": xlalab, "probe": probe, "check_rng": check_rng,
          "written": lambda *names: {}, **names}
    by_id = {c.get("id"): c for c in assign.read(path).cells}
    for cid in cell_ids:
        exec(compile(by_id[cid].source, f"{path.name}:{cid}", "exec"), ns)
    return ns


def _cell_source(path: Path, cell_id: str) -> str:
    return next(c.source for c in assign.read(path).cells if c.get("id") == cell_id)


LAB02 = REPO / "solutions" / "lab02_hlo_fusion.ipynb"


def _moments_ln(x, gamma, beta):
    import tensorflow as tf

    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    y = tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-5)
    return 0.5 * y * (1.0 + tf.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))


def _second_moment_ln(x, gamma, beta):
    import tensorflow as tf

    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(x * x, axis=-1, keepdims=True) - mean * mean
    y = (x - mean) / tf.sqrt(var + 1e-5) * gamma + beta
    return 0.5 * y * (1.0 + tf.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))


@pytest.mark.heavy   # compiles many layer norms: 12 s
def test_lab02_ln_checks_hold_a_fused_layer_norm_to_the_reference_at_its_own_shapes(monkeypatch):
    """The kernels of a correct layer norm depend on the shapes on XLA:CPU (8 at [8, 2048], 5 at [512, 512]):
    other correct formulations pass both ln-rewrite checks, the per-row loop and a split in two halves fail."""
    monkeypatch.setenv("XLALAB_PROFILE", "tiny")
    monkeypatch.delenv("XLALAB_FAKE_GPU", raising=False)
    ns = _lab_namespace(LAB02, "p1-given", "p2-given", "p4-given")
    assert ns["vectorized_kernels"](8, 2048) != ns["vectorized_kernels"](512, 512)  # why a fixed bound failed
    checks = [_cell_source(LAB02, "p4-check-lab"), _cell_source(LAB02, "p4-check-fresh")]
    given = ns["ln_gelu_given"]

    def part2_ln(x, gamma, beta):
        return ns["gelu"](ns["layer_norm"](x) * gamma + beta)

    def halves(x, gamma, beta):
        h = x.shape[0] // 2
        return ns["tf"].concat([part2_ln(x[:h], gamma, beta), part2_ln(x[h:], gamma, beta)], 0)

    for answer, run in ((part2_ln, checks), (_moments_ln, checks[:1]), (_second_moment_ln, checks[:1])):
        for check in run:
            exec(check, {**ns, "ln_gelu_fast": answer})
    for wrong, why in ((given, "while loop"), (halves, "kernels for ln_gelu_fast")):
        with pytest.raises(AssertionError, match=why):
            exec(checks[0], {**ns, "ln_gelu_fast": wrong})


@pytest.mark.heavy   # compiles a chain per shape: 8 s
def test_lab02_chain_bytes_rule_matches_the_unoptimized_hlo_on_every_shape(monkeypatch):
    """The counting rule Part 3 states, as the solution implements it, gives summary()'s bytes on rank-0 inputs,
    one-element and empty arrays too, where TensorFlow's lowering skips the broadcast of the scalar constant."""
    monkeypatch.setenv("XLALAB_PROFILE", "tiny")
    ns = _lab_namespace(LAB02, "p1-given", "p3-given", "p3-answer")
    tf, hlo = ns["tf"], ns["xlalab"].hlo

    def hlo_bytes(names, shape, dtype=tf.float32):
        return hlo.summary(hlo.hlo_text(ns["make_chain"](names), tf.zeros(shape, dtype), stage="hlo"))["bytes_moved"]

    # The two exceptions, as the lab text states them: no broadcast kernel on a rank-0 input, nor for a relu of
    # at most one element (its zero is a literal of the input's shape); a broadcast everywhere else.
    assert hlo_bytes(["scale"], ()) == 3 * 4 and hlo_bytes(["relu"], ()) == 3 * 4
    assert hlo_bytes(["relu"], (1,)) == hlo_bytes(["relu"], (1, 1)) == 3 * 4
    assert hlo_bytes(["scale"], (1,)) == 4 + 4 + 3 * 4 and hlo_bytes(["relu"], (2,)) == 4 + 2 * 4 + 3 * 2 * 4
    chains = [[n] for n in sorted({**ns["SCALAR_STEPS"], **ns["UNARY_STEPS"]})] + [ns["LAB_CHAIN"],
                                                                                   ["relu", "exp", "relu", "shift"]]
    for shape in [(), (1,), (1, 1), (0,), (0, 3), (2,), (3, 5)]:
        for names in chains:
            for dtype in (tf.float32, tf.bfloat16):
                unfused, fused = ns["chain_bytes"](shape, names, dtype.size)
                assert unfused == hlo_bytes(names, shape, dtype), (shape, names, dtype.name)


@pytest.mark.slow
def test_lab02_gpu_predictions_wrong_or_refused_cost_that_check_only(tmp_path):
    """Issue 36: Lab 2's GPU prediction (gpu-kernels) is compared in the judge with the instructor's dense_relu and
    softmax compiled for H100 and T4 (in the judge's jail, cached per grading run). A wrong prediction loses
    exactly that point; a reference XLA refuses fails that check with XLA's message and no other; answers in the
    cache are read, not compiled again."""
    cache = tmp_path / "gpu-answers"
    cache.mkdir()
    env = {**TINY, gpu_answer.ENV: str(cache)}
    nb = assign.read(LAB02)
    cell = next(c for c in nb.cells if c.get("id") == "p2gpu-answer")
    right = '"softmax": {"Triton fusion": 1}'
    assert right in cell.source
    cell.source = cell.source.replace(right, '"softmax": {"input fusion": 2, "loop fusion": 1}')
    wrong = tmp_path / "wrong.ipynb"
    wrong.write_text(assign.dumps(nb), encoding="utf-8")
    row = _grade(wrong, LAB02, tmp_path / "wrong", env)
    failed = {c.check: c for c in row.checks if not c.passed}
    assert set(failed) == {"gpu-kernels"} and row.auto == row.max_auto - 1, _feedback(row)
    assert "H100-SXM softmax" in failed["gpu-kernels"].message, failed["gpu-kernels"].message
    entries = {p: json.loads(p.read_text()) for p in cache.glob("*.json")}
    assert len(entries) == 4 and all("answer" in e for e in entries.values())   # 2 functions x 2 targets
    # XLA "refuses" T4's dense_relu (its cached answer replaced by a refusal): the solution loses that check only.
    (t4_gemm,) = [p for p, e in entries.items() if "cuBLASLt call" in e["answer"]["backends"]]
    t4_gemm.write_text(json.dumps({"error": "INTERNAL: simulated refusal of the T4 GEMM"}))
    stamps = {p: p.stat().st_mtime_ns for p in entries}
    row = _grade(LAB02, LAB02, tmp_path / "refused", env)
    failed = {c.check: c for c in row.checks if not c.passed}
    assert set(failed) == {"gpu-kernels"} and row.auto == row.max_auto - 1, _feedback(row)
    assert "simulated refusal of the T4 GEMM" in failed["gpu-kernels"].message, failed["gpu-kernels"].message
    assert "dense_relu for T4" in failed["gpu-kernels"].message
    assert {p: p.stat().st_mtime_ns for p in entries} == stamps and set(cache.glob("*.json")) == set(entries)
