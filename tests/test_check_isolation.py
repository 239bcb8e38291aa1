"""Issue 34, the grading mechanism: per-check seeds given late, hidden checks last, checks in their own namespace,
older releases noted (not tampering), hidden checks leak nothing, records capped before they are parsed.

The unit tests run in this process; the tests marked ``slow`` grade hand-ins of the sample lab (and one real lab)
end to end.
"""

from __future__ import annotations

import json
import linecache
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from xlalab.grading import build, probe as p, releases
from xlalab.grading.judge import check_problems
from xlalab.grading.lab import load_lab
from xlalab.grading.options import GradeOptions

from helpers import SAMPLE, answered, cell, code, insert_after, make_lab_root, released, sample_solution
from helpers.grading import verdicts

# The names an honest student may well choose, which are also names the grader or its checks use.
STUDENT_NAMES = ("probe", "written", "got", "expected", "check", "report", "judge", "x", "model", "check_rng")
HONEST_CELL = "\n".join(f"{n} = 'the student s own {n}'" for n in STUDENT_NAMES) + \
    "\ndef check(a):\n    return a\n"


@pytest.fixture
def live():
    yield
    p.configure("live")


@pytest.fixture
def sample(tmp_path):
    (tmp_path / "repo").mkdir()
    root = make_lab_root(tmp_path / "repo")
    return root, load_lab(root / "solutions" / f"{SAMPLE}.ipynb")


# -- seeds -------------------------------------------------------------------------------------------------------

def test_each_check_gets_its_own_seed_and_the_judge_derives_the_same(tmp_path, live):
    master = 123456789
    assert p.derive(master, "a") == p.derive(master, "a")
    assert len({p.derive(master, "a"), p.derive(master, "b"), p.derive(master + 1, "a")}) == 3
    records = tmp_path / "r.jsonl"
    records.touch()
    p.configure("record", str(records))
    drawn: dict = {}
    kernel = {"drawn": drawn, "_run": p.run_check}
    for check in ("a", "b"):
        source = f"drawn[{check!r}] = check_rng({check!r}).integers(0, 2**62, 4).tolist()"
        exec(f"_run({check!r}, {p.derive(master, check)}, {source!r})", kernel)
    assert drawn["a"] != drawn["b"]
    p.configure("replay", str(records), master)
    for check in ("a", "b"):
        assert p.check_rng(check).integers(0, 2**62, 4).tolist() == drawn[check]


def test_record_mode_refuses_another_checks_seed_and_any_outside_a_check(tmp_path, live):
    p.configure("record", str(tmp_path / "r.jsonl"))
    with pytest.raises(p.ProbeError, match="outside a check"):
        p.check_rng("a")
    kernel = {"_run": p.run_check}
    with pytest.raises(p.ProbeError, match="called in the check 'a'"):
        exec("_run('a', 5, \"check_rng('b')\")", kernel)
    exec("_run('a', 5, \"check_rng('a')\")", kernel)
    p.configure("live")
    assert p.check_rng("a").integers(0, 2**62) != p.check_rng("a").integers(0, 2**62)   # fresh entropy


def test_the_master_seed_is_nowhere_in_the_students_notebook_and_each_cell_has_its_own_seed(sample, tmp_path):
    root, lab = sample
    master = 987654321987654321
    nb, tampering = build.build_graded(lab, answered(root), tmp_path / "r.jsonl", master)
    assert tampering == []
    text = [c.source for c in nb.cells]
    assert not any(str(master) in t for t in text)
    for check in lab.checks:
        mine = [t for t in text if str(p.derive(master, check.check)) in t]
        assert len(mine) == 1 and mine[0].startswith(f"# CHECK {check.check} "), check.check


# -- placement ---------------------------------------------------------------------------------------------------

def test_hidden_checks_run_after_every_student_cell_and_visible_ones_where_the_student_has_them(sample, tmp_path):
    root, lab = sample
    nb = insert_after(answered(root), "report", "late = 1", "student-last")
    nb = insert_after(nb, "p1-answer", "extra = 1", "student-extra")
    graded, _ = build.build_graded(lab, nb, tmp_path / "r.jsonl", 1)
    ids = [c.id for c in graded.cells]
    hidden = [f"xlalab-check-{i}" for i, c in enumerate(lab.checks) if c.hidden]
    assert ids[-len(hidden):] == hidden and ids.index("student-last") < ids.index(hidden[0])
    assert ids.index("student-extra") < ids.index("xlalab-check-0") < ids.index("p2-answer") \
        < ids.index("xlalab-check-2") < ids.index("report")


# -- namespace ---------------------------------------------------------------------------------------------------

def test_a_check_runs_in_its_own_namespace_with_the_graders_names(tmp_path, live):
    records = tmp_path / "r.jsonl"
    p.configure("record", str(records))
    student = {"__builtins__": __builtins__, "scale": lambda x: x * 2, **{n: f"student {n}" for n in STUDENT_NAMES}}
    student["_run"] = p.run_check
    source = "# CHECK c (1 points)\nx = [1, 2]\ngot = probe('c-1', lambda: scale(3))\nsecret = 42\n"
    exec(compile(f"_run('c', 7, {source!r})", "<cell>", "exec"), student)
    # the check ran in a copy of the student's globals, with the grader's probe: the student's names are as they were
    assert all(student[n] == f"student {n}" for n in STUDENT_NAMES)
    assert "secret" not in student
    assert [json.loads(line)["value"] for line in records.read_text().splitlines()] == [6]
    assert not any(p.CHECK_FILENAME in name for name in linecache.cache)


def test_a_failing_check_shows_no_line_of_its_source_in_the_traceback(tmp_path, live):
    import traceback

    p.configure("record", str(tmp_path / "r.jsonl"))
    try:
        exec("_run('c', 7, 'hidden_input = 604087\\nraise ValueError(\"boom\")\\n')", {"_run": p.run_check})
    except ValueError:
        text = traceback.format_exc()
    frame = text[text.index('File "<xlalab check>"'):]
    assert frame.splitlines()[1:] == ["ValueError: boom"], frame


def test_make_labs_refuses_a_cell_that_reads_a_name_only_a_check_binds():
    nb = sample_solution()
    assert check_problems(nb) == []
    i = next(i for i, c in enumerate(nb.cells) if c.get("id") == "p1-check")
    nb.cells.insert(i + 1, code("given-after", "print(got)"))
    problems = check_problems(nb)
    assert any("'given-after' reads got, bound only by a check cell" in q for q in problems), problems
    nb = sample_solution()
    h = next(c for c in nb.cells if c.get("id") == "p2-hidden")
    h.source = h.source.replace("probe('total-random', lambda: total(x))", "probe('total-random', lambda: total(a))")
    problems = check_problems(nb)
    assert any("'p2-total-random' reads a in its probing part" in q for q in problems), problems
    nb = sample_solution()
    h = next(c for c in nb.cells if c.get("id") == "p2-hidden")
    h.source = h.source.replace("check_rng('p2-total-random')", "check_rng('p1-scale-random')")
    problems = check_problems(nb)
    assert any("'p2-total-random' calls check_rng with 'p1-scale-random'" in q for q in problems), problems
    # hidden checks run last in the student's notebook, in the source's order in the judge: one probe name, one check
    nb = sample_solution()
    h = next(c for c in nb.cells if c.get("id") == "p1-hidden")
    h.source = h.source.replace("probe('scale-random'", "probe('scale-123'")
    problems = check_problems(nb)
    assert any("probe name 'scale-123' is used by the checks 'p1-scale', 'p1-scale-random'" in q for q in problems), \
        problems


# -- older releases ----------------------------------------------------------------------------------------------

def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


def test_a_check_of_an_earlier_release_is_a_note_and_an_edit_is_tampering(tmp_path, monkeypatch):
    from xlalab import cli

    (tmp_path / "repo").mkdir()
    root = make_lab_root(tmp_path / "repo")
    old = released(root)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "first release")
    sol = root / "solutions" / f"{SAMPLE}.ipynb"
    nb = nbformat.read(str(sol), as_version=4)
    c = next(c for c in nb.cells if c.get("id") == "p1-check")
    c.source = c.source.replace("should be [2, 4, 6]", "should be [2.0, 4.0, 6.0]")
    i = next(i for i, c in enumerate(nb.cells) if c.get("id") == "p2-check")
    nb.cells.insert(i + 1, code("p2-extra-check", "# CHECK p2-zero (1 points)\nz = probe('total-0', lambda: "
                                "total([0.0]))\n# JUDGE\nassert z == 0.0, 'total([0]) should be 0'",
                                check="p2-zero", points=1))
    nbformat.write(nb, str(sol))
    assert cli.main(["assign", "--root", str(root)]) == 0
    _git(root, "commit", "-q", "-am", "second release")
    target = tmp_path / "released_checks.json"
    monkeypatch.setattr(releases, "RELEASED_CHECKS", target)
    releases.record_released_checks(root, target)
    assert len(json.loads(target.read_text())[SAMPLE]["checks"]["p1-scale"]) == 2
    lab = load_lab(sol)
    for c in old.cells:
        if c.get("id") in ("p1-answer", "p2-answer"):
            c.source = cell(answered(root), c.get("id")).source
    notes: list[str] = []
    _, tampering = build.build_graded(lab, old, tmp_path / "r.jsonl", 1, notes=notes)
    assert tampering == [] and notes == [
        "your notebook has an older version of this check `p1-scale`; the released check ran",
        "your notebook is from an earlier release of the lab, without the check `p2-zero`; the released check ran"]
    cell(old, "p1-check").source += "\nassert True"
    notes = []
    _, tampering = build.build_graded(lab, old, tmp_path / "r.jsonl", 1, notes=notes)
    assert tampering == ["check `p1-scale` was changed; the released check was run instead"]
    # a check deleted from a notebook of the current release is tampering, as before
    new = answered(root)
    new.cells = [c for c in new.cells if c.get("id") != "p2-extra-check"]
    notes = []
    _, tampering = build.build_graded(lab, new, tmp_path / "r.jsonl", 1, notes=notes)
    assert notes == [] and tampering == ["check `p2-zero` was deleted; the released check was run"]
    releases.released_digests.cache_clear()


# -- leaks -------------------------------------------------------------------------------------------------------

def test_a_failed_hidden_checks_feedback_shows_no_input_and_no_expected_value(sample):
    from xlalab.grading.feedback import feedback_text
    from xlalab.grading.run import CellResult, RunOutcome
    from xlalab.grading.score import Row, score

    root, lab = sample
    ids = [c.check for c in lab.checks]
    leak = "AssertionError: gemv_bytes(604087, 582, batch=487, itemsize=8) should be 3991658020"
    student = RunOutcome([CellResult(i, f"cell-{c}", c, "call", "passed") for i, c in enumerate(ids)],
                         timed_out=False, returncode=0, log_tail="", ran=True)
    student.results[3] = CellResult(3, "cell-x", ids[3], "call", "failed", "ValueError: input of shape (487, 582)")
    judge = RunOutcome([CellResult(i, f"cell-{c}", c, "call", "passed" if i == 0 else "failed",
                                   "" if i == 0 else leak if lab.checks[i].hidden else "AssertionError: visible")
                        for i, c in enumerate(ids)],
                       timed_out=False, returncode=0, log_tail="",
                       records=verdicts(ids[0], missing={ids[3]: "total-random"}), ran=True)
    judge.results[3] = CellResult(3, "cell-x", ids[3], "call", "failed",
                                  "xlalab.grading.probe.ProbeError: probe 'total-random' did not run in your notebook")
    checks = score(lab, student, judge, timeout=120).checks
    row = Row("s", lab.name, lab.maximum, checks)
    text = feedback_text(row)
    for secret in ("604087", "582", "487", "3991658020", "'total-random'", "gemv_bytes", "shape"):
        assert secret not in text, secret
    by_id = {c.check: c for c in checks}
    assert by_id["p1-scale-random"].message == "a hidden check failed: AssertionError"
    assert by_id["p1-scale-random"].detail == leak
    # the judge says the probe did not run; the student's kernel says why: its error, of which only the type shows
    assert by_id["p2-total-random"].message == "a hidden check failed: ValueError"
    assert "(487, 582)" in by_id["p2-total-random"].detail
    assert by_id["p2-total"].message == "AssertionError: visible"   # a visible check's message is shown as is


# -- records caps ------------------------------------------------------------------------------------------------

def test_a_long_dict_key_is_refused_when_recorded_and_when_parsed():
    with pytest.raises(p.ProbeError, match="a dict key of 201 characters"):
        p.to_plain({"k" * 201: 1})
    line = json.dumps({"probe": "x", "value": {"d": [["k" * (30 * 2**20), 1]]}}).encode()
    with pytest.raises(p.RecordsError, match="dict key longer than 200"):
        p.parse_records(line)
    with pytest.raises(p.RecordsError, match="not a probe record"):
        p.parse_records(json.dumps({"probe": "x", "value": 1, "k" * 1000: 1}).encode())


def test_records_nested_too_deep_are_refused_before_parsing():
    deep = b'{"probe": "x", "value": ' + b"[" * 100 + b"]" * 100 + b"}"
    with pytest.raises(p.RecordsError, match="nested deeper"):
        p.parse_records(deep)
    # brackets inside strings count for nothing
    fine = json.dumps({"probe": "x", "value": "[" * 1000 + '\\"' + "{" * 1000}).encode()
    assert p.parse_records(fine)["x"][0].value == "[" * 1000 + '\\"' + "{" * 1000
    # the deepest tagged data the probe records is accepted
    value: object = 1
    for _ in range(p.MAX_DEPTH):
        value = {"k": value}
    assert p.parse_records(p.dump_records({"x": [p.ProbeRecord("x", value=p.to_plain(value))]}))["x"][0].value \
        == value


MEASURE = """
import json, resource, sys, time, tracemalloc
from xlalab.grading import probe as p
kind = sys.argv[1]
n = 32 * 2**20 - 64
head, tail = b'{"probe": "x", "value": [', b"[]]}\\n"
unit = b"[[],[[]],[1,2]]," if kind == "lists" else b"[[[[[[[[[[1]]]]]]]]]],"
data = head + unit * ((n - len(head) - len(tail)) // len(unit)) + tail
json.loads(head + unit * 3 + tail)   # valid JSON of that shape
data = data[:p.MAX_RECORDS_BYTES]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
t = time.perf_counter()
try:
    p.parse_records(data)
    why = "accepted"
except p.RecordsError as err:
    why = str(err)
seconds = time.perf_counter() - t
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"why": why, "seconds": seconds, "peak_mib": peak / 2**20, "bytes": len(data),
                  "rss_growth_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}))
"""


@pytest.mark.parametrize("kind", ["lists", "nested"])
def test_32_mib_of_untagged_nested_lists_is_refused_without_building_them(kind):
    """Issue 34 measured 882 MiB and 6-16 s of the grader's own process before the refusal; now the raw bytes are
    counted first: the peak of Python allocations stays within a few copies of the input (32 MiB)."""
    out = subprocess.run([sys.executable, "-c", MEASURE, kind], capture_output=True, text=True, timeout=300,
                         check=True)
    got = json.loads(out.stdout)
    print(got)
    assert "JSON values" in got["why"], got
    assert got["peak_mib"] < 4 * 32, got


# -- whole grading runs ------------------------------------------------------------------------------------------

# A last cell that reads everything the kernel keeps of the code it ran and the grader's module, and fails with it
# as its message: hidden checks run after it, so none of their source can be there.
READER = r"""
import linecache, sys
texts = [str(v) for v in In] if 'In' in globals() else []
texts += ["".join(v[2]) for v in linecache.cache.values() if isinstance(v, tuple) and len(v) > 2]
texts += [repr(v) for v in globals().values()]
state = sys.modules['xlalab.grading.probe']._STATE
texts.append(repr(vars(state)))
found = [m for m in ('scale-' + '123', 'scale-' + 'random', 'total-' + 'random') if any(m in t for t in texts)]
raise RuntimeError(f"FOUND {found} in {len(texts)} texts; master seed {state.seed}")
"""


def _leaky_solution() -> nbformat.NotebookNode:
    """The sample lab whose hidden total check formats its input and expected value in its assertion message."""
    nb = sample_solution()
    h = next(c for c in nb.cells if c.get("id") == "p2-hidden")
    h.source = h.source.replace("'total is wrong on random inputs'",
                                "f'total of {x[:2].tolist()} should be {x.sum()!r} (size {len(x)})'")
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from xlalab.grading.cli import grade_submissions

    root = make_lab_root(tmp_path_factory.mktemp("repo"), _leaky_solution())
    subs = tmp_path_factory.mktemp("handins")
    honest = insert_after(answered(root), "setup", HONEST_CELL, "student-names-top")
    honest.cells.append(code("student-names-end", HONEST_CELL))
    reader = answered(root)
    reader.cells.append(code("student-reader", READER))
    wrong = answered(root)
    cell(wrong, "p2-answer").source = "def total(x):\n    return float(np.sum(x[1:]))"
    for name, nb in {"honest": honest, "reader": reader, "wrong": wrong}.items():
        (subs / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    out = tmp_path_factory.mktemp("grades")
    rows = grade_submissions(root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                   GradeOptions(out=str(out), jobs=1, cell_timeout=60, timeout=240, memory_gb=3))
    return {r.student: r for r in rows}, out


def _feedback(graded, name):
    return (graded[1] / "feedback" / f"{name}.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_an_honest_student_may_name_globals_probe_written_got_model(graded):
    r = graded[0]["honest"]
    assert r.total == 6 and r.status == "graded", (r.status, [(c.check, c.message) for c in r.checks])


@pytest.mark.slow
def test_a_student_cell_after_everything_cannot_read_a_hidden_check(graded):
    r = graded[0]["reader"]
    assert r.total == 6, [(c.check, c.message) for c in r.checks]
    seen = next(e for e in r.cell_errors if "FOUND" in e)
    # it read the kernel's history, line cache and globals (a visible check's probe name is there), but nothing of
    # a hidden check, and the grader's state in the kernel holds no master seed
    assert "FOUND ['scale-123'] in" in seen and "master seed None" in seen, seen


@pytest.mark.slow
def test_a_hidden_checks_message_with_its_inputs_is_not_in_the_feedback(graded):
    r = graded[0]["wrong"]
    c = next(c for c in r.checks if c.check == "p2-total-random")
    assert not c.passed and "should be" in c.detail, c
    numbers = re.findall(r"-?\d+\.\d+", c.detail)
    assert numbers
    text = _feedback(graded, "wrong")
    assert "a hidden check failed: AssertionError" in text
    assert not any(n in text for n in numbers) and "total of [" not in text


@pytest.mark.slow
def test_lab05_graded_with_the_students_own_probe_model_earns_every_point(tmp_path, monkeypatch):
    """The reported case: a correct Lab 5 whose student names its activation-reading model `probe`."""
    from xlalab.grading import assign
    from xlalab.grading.cli import grade_submissions

    monkeypatch.setenv("XLALAB_PROFILE", "tiny")
    repo = Path(__file__).resolve().parents[1]
    sol = repo / "solutions" / "lab05_mixed_precision.ipynb"
    nb = assign.read(sol)
    setup = next(i for i, c in enumerate(nb.cells) if assign.xmeta(c).get("setup"))
    nb.cells.insert(setup + 1, code("student-names-top", HONEST_CELL
                                    + "import keras\n_i = keras.Input((3,))\n"
                                      "probe = keras.Model(_i, keras.layers.Dense(2)(_i))\nmodel = probe\n"))
    nb.cells.append(code("student-names-end", HONEST_CELL + "probe = keras.Model(_i, keras.layers.Dense(2)(_i))\n"))
    sub = tmp_path / "handin" / sol.name
    sub.parent.mkdir()
    sub.write_text(json.dumps(nb), encoding="utf-8")
    (r,) = grade_submissions(sol, [sub],
                                   GradeOptions(out=str(tmp_path / "out"), cell_timeout=900, timeout=2400,
                                                memory_gb=8), env={"XLALAB_PROFILE": "tiny"})
    assert r.auto == r.max_auto, [(c.check, c.message, c.detail) for c in r.checks if not c.passed]
    assert "tampered" not in r.status, r.status


def test_student_source_parses_each_cell_once_and_never_rescans_it(monkeypatch):
    """A hand-in cell with a line of megabytes held the judge for minutes: ``written()`` parsed the cell again for
    every name and ``ast.get_source_segment`` scanned it character by character per node. Now each cell is parsed
    once per kernel and segments are sliced from its lines (checked by counting, not by timing)."""
    import ast

    from xlalab.grading import probe

    big = ("def wait(r):\n    return r\n" + "blob = '" + "A" * 500_000 + "'\n"
           + "\n".join(f"def s{i}(*a, **k):\n    return None" for i in range(30)) + "\n")
    parses = []
    real_parse = ast.parse

    def counting_parse(src, *args, **kwargs):
        parses.append(len(src))
        return real_parse(src, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting_parse)
    monkeypatch.setattr(ast, "get_source_segment", lambda *a, **k: pytest.fail("rescans the cell"))
    monkeypatch.setattr(probe._STATE, "mode", "replay")
    monkeypatch.setattr(probe._STATE, "sources", [big, "x = 1\n"])
    monkeypatch.setattr(probe, "_DEFINITIONS", {})
    for i in range(30):
        assert probe.student_source(f"s{i}") == f"def s{i}(*a, **k):\n    return None"
    assert probe.student_source("wait") == "def wait(r):\n    return r"
    assert (probe.student_source("blob") or "").startswith("blob = 'AAA") and probe.student_source("x") == "x = 1"
    assert probe.student_source("nothing") is None
    assert parses.count(len(big)) == 1
