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

import pytest

from xlalab import assign, grade
from xlalab.grading import answers as answers_mod

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((REPO / "solutions").glob("lab*.ipynb"))
TINY = {"XLALAB_PROFILE": "tiny"}
FAKE_GPU = {**TINY, "XLALAB_FAKE_GPU": "NVIDIA A100-SXM4-40GB"}
LIMITS = {"cell_timeout": 900, "timeout": 2400, "memory_gb": 8}


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


def _feedback(row: grade.Row) -> str:
    return grade.feedback_text(row)


def _grade(path: Path, lab: Path, out: Path, env: dict) -> grade.Row:
    (row,) = grade.grade_submissions(lab, [path], out, env=env, **LIMITS)
    return row


def test_labs_are_current():
    """labs/ matches solutions/ (what `make check-labs` runs); holds with no lab at all."""
    assert assign.main(["--root", str(REPO), "--check"]) == 0, "run `python -m xlalab.assign`"


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
    released = json.loads(assign.dumps(grade.load_lab(path).released))
    assert all(a.state == "unchanged" and a.earned == 0 for a in answers_mod.answers_of(grade.load_lab(path),
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
    assert not row.restored, "the guard restored something in the solution:\n" + _feedback(row)


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_student_lab_scores_zero(path, tmp_path):
    lab = REPO / "labs" / path.name
    assert lab.exists(), f"labs/{path.name} is missing: run `python -m xlalab.assign`"
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
