"""Red-team tests of the grader (issue 3), on a small NumPy-only lab made by the test.

Most submissions are graded in one batch with ``jobs=2`` (a module fixture); every test reads its row and
feedback. All tests share one xdist group, so the batch runs once.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from xlalab import cli
from xlalab.grading import CheckState  # noqa: F401  (the notebook side must keep importing)
from xlalab.grading.build import build_graded
from xlalab.grading.cli import grade_submissions
from xlalab.grading.lab import load_lab
from xlalab.grading.options import GradeOptions
from xlalab.grading.score import Row

from helpers import SAMPLE, answered, cell, code, insert_after, released
from helpers.grading import verdicts

pytestmark = [pytest.mark.xdist_group("grading"), pytest.mark.slow]

CELL_TIMEOUT = 20
TIMEOUT = 90
MEMORY_GB = 3
MAX = 6.0
P1 = {"p1-scale": 2.0, "p1-scale-random": 2.0}   # the checks of part 1
# What a hand-in earns whose kernel dies or hangs in a cell right after "p1-check": the visible check before it;
# hidden checks run after all the student's cells, so they never run.
BEFORE_P1_CHECK_END = {"p1-scale": 2.0, "p1-scale-random": 0, "p2-total": 0, "p2-total-random": 0}


WRONG_SCALE = "def scale(x, k):\n    return np.asarray(x, dtype=float) * 0 + 1.0"


def build_submissions(root: Path, out: Path) -> dict[str, Path]:
    """Write every red-team submission under ``out``; return {student: path}."""
    subs: dict[str, nbformat.NotebookNode | bytes | str] = {}
    subs["good"] = answered(root)
    subs["blank"] = released(root)
    nb = answered(root)
    cell(nb, "p2-answer").source = ("def total(x):\n    while len(x) > 3:  # loops on the hidden check's input\n"
                                    "        pass\n    return float(np.sum(x))")
    subs["endless_loop"] = nb
    subs["sigint_ignored_loop"] = insert_after(
        answered(root), "p1-check", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n"
                                    "    pass")
    subs["os_exit"] = insert_after(answered(root), "p1-check", "import os\nos._exit(1)")
    subs["segfault"] = insert_after(answered(root), "p1-check", "import ctypes\nctypes.string_at(0)")
    subs["memory_bomb"] = insert_after(answered(root), "p1-check",
                                       "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS))\n"
                                       "hog = [np.empty(2**30, np.uint8) for _ in range(16)]  # 16 GiB, untouched")
    nb = answered(root)
    cell(nb, "p1-answer").source = WRONG_SCALE
    cell(nb, "p1-check").source = cell(nb, "p1-check").source.replace("[2.0, 4.0, 6.0]", "[1.0, 1.0, 1.0]")
    subs["tampered_check"] = nb
    nb = answered(root)
    cell(nb, "p1-answer").source = WRONG_SCALE
    nb.cells = [c for c in nb.cells if c.get("id") != "p1-check"]
    subs["deleted_check"] = nb
    nb = answered(root)
    cell(nb, "p1-answer").source = WRONG_SCALE
    cell(nb, "p1-check").source = "# CHECK p1-scale (2 points)\nassert True"
    subs["assert_true"] = nb
    nb = answered(root)
    cell(nb, "p1-answer").source = ("class Anything:\n    def __eq__(self, other):\n        return True\n"
                                    "    __array_priority__ = 1000\n\n"
                                    "def scale(x, k):\n    return Anything()")
    subs["eq_always_true"] = nb
    nb = answered(root)
    cell(nb, "p1-answer").source = WRONG_SCALE + "\nget_ipython().showtraceback = lambda *a, **k: None"
    subs["silenced_tracebacks"] = nb
    nb = answered(root)
    cell(nb, "p1-answer").source = (WRONG_SCALE + "\nget_ipython().set_custom_exc((Exception,), "
                                    "lambda *a, **k: None)")
    subs["custom_exc"] = nb
    nb = answered(root)
    cell(nb, "p2-answer").source = ("def total(x):\n    return 0.0\n\nimport builtins\n"
                                    "builtins.abs = lambda x: 0.0\nnp.isclose = lambda *a, **k: True")
    subs["patched_builtins"] = nb
    nb = answered(root)
    cell(nb, "p1-answer").source = WRONG_SCALE + "\nnp.testing.assert_allclose = lambda *a, **k: None"
    subs["monkeypatched_numpy"] = nb
    nb = answered(root)
    cell(nb, "p1-answer").source = (WRONG_SCALE + "\nnp.testing.assert_allclose.__defaults__ = "
                                    "(1e300, 1e300, True, '', True)\nnp = None")
    subs["patched_defaults"] = nb
    nb = answered(root)
    cell(nb, "p1-answer").source = (WRONG_SCALE + "\nimport ast\n\nclass Erase(ast.NodeTransformer):\n"
                                    "    def visit_Module(self, node):\n"
                                    "        node.body = [ast.Pass()]\n        return node\n\n"
                                    "get_ipython().ast_transformers.append(Erase())")
    subs["ast_transformer"] = nb
    subs["invalid_json"] = '{"cells": [ this is not json'
    subs["empty_file"] = b""
    other = copy.deepcopy(answered(root))
    other.metadata["xlalab"] = {"lab": "lab99_other"}
    subs["wrong_lab"] = other
    subs["unrelated_notebook"] = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1", id="a")])
    subs["print_100mb"] = insert_after(answered(root), "p1-check", "print('x' * 100_000_000)")
    subs["reads_solutions"] = insert_after(
        answered(root), "p1-check",
        "import glob\nprint(open('solutions/lab90_sample.ipynb').read()[:80])")
    nb = answered(root)
    c = cell(nb, "p1-check")
    c.metadata["xlalab"]["points"] = 1000
    c.source = c.source.replace("(2 points)", "(1000 points)")
    nb.cells.append(code("fake", "# CHECK bonus (500 points)\npass", check="bonus", points=500))
    subs["fake_points"] = nb

    paths = {}
    for name, content in subs.items():
        path = out / f"{name}.ipynb"
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_text(json.dumps(content), encoding="utf-8")
        paths[name] = path
    return paths


@pytest.fixture(scope="module")
def batch(lab_root, tmp_path_factory):
    subs_dir = tmp_path_factory.mktemp("submissions")
    paths = build_submissions(lab_root, subs_dir)
    out = tmp_path_factory.mktemp("grades")
    start = time.monotonic()
    rows = grade_submissions(lab_root / "solutions" / f"{SAMPLE}.ipynb", [subs_dir],
                                   GradeOptions(out=str(out), jobs=2, cell_timeout=CELL_TIMEOUT, timeout=TIMEOUT,
                                                memory_gb=MEMORY_GB))
    elapsed = time.monotonic() - start
    print(f"graded {len(rows)} submissions in {elapsed:.0f} s")
    return {r.student: r for r in rows}, out, paths


def row(batch, name) -> Row:
    return batch[0][name]


def feedback(batch, name) -> str:
    return (batch[1] / "feedback" / f"{name}.md").read_text(encoding="utf-8")


def earned(r: Row) -> dict[str, float]:
    return r.points()


def test_gradebook_has_every_submission(batch):
    rows, out, paths = batch
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        book = list(csv.DictReader(f))
    assert sorted(r["student"] for r in book) == sorted(paths)
    assert list(book[0]) == ["student", "total", "max", "p1-scale", "p1-scale-random", "p2-total",
                             "p2-total-random", "status"]
    assert all(r["max"] == "6" for r in book)


def test_solution_scores_full_and_blank_scores_zero(batch):
    assert row(batch, "good").total == MAX
    assert row(batch, "good").status == "graded", row(batch, "good").status
    assert row(batch, "blank").total == 0
    assert "NotImplementedError" in feedback(batch, "blank")


def test_endless_loop_times_out_that_cell_only(batch):
    r = row(batch, "endless_loop")
    assert earned(r) == {**P1, "p2-total": 1, "p2-total-random": 0}
    assert "Timeout" in feedback(batch, "endless_loop")


def test_loop_ignoring_sigint_ends_with_earlier_points(batch):
    r = row(batch, "sigint_ignored_loop")
    assert earned(r) == BEFORE_P1_CHECK_END, r
    assert r.seconds < TIMEOUT


@pytest.mark.parametrize("name, why", [("os_exit", "exit code 1"), ("segfault", "SIGSEGV")])
def test_dead_kernel_keeps_earlier_points_and_is_noticed_fast(batch, name, why):
    r = row(batch, name)
    assert earned(r) == BEFORE_P1_CHECK_END, r
    assert why in r.status
    # Noticed within seconds, not at the cell timeout for each remaining cell.
    assert r.seconds < TIMEOUT / 2
    assert "the kernel died" in feedback(batch, name)


def test_memory_bomb_fails_its_cell_only(batch):
    r = row(batch, "memory_bomb")
    assert r.total == MAX, r
    assert "MemoryError" in feedback(batch, "memory_bomb")


@pytest.mark.parametrize("name, word", [("tampered_check", "changed"), ("deleted_check", "deleted"),
                                        ("assert_true", "changed")])
def test_tampered_checks_are_restored_and_reported(batch, name, word):
    r = row(batch, name)
    assert earned(r)["p1-scale"] == 0 and earned(r)["p1-scale-random"] == 0
    assert earned(r)["p2-total"] == 1
    text = feedback(batch, name)
    assert f"check `p1-scale` was {word}" in text
    assert "tampered" in r.status


def test_cells_transformed_away_earn_nothing(batch):
    """An AST transformer that empties every later cell: nbval passes the check cells, no probe ran."""
    r = row(batch, "ast_transformer")
    assert earned(r)["p1-scale"] == 0 and earned(r)["p1-scale-random"] == 0, r
    assert "did not run" in feedback(batch, "ast_transformer")


def test_plain_nbval_is_fooled_by_silenced_tracebacks(tmp_path):
    """Why the guard exists: nbval 0.11 fails a cell only on an iopub 'error' message, which
    IPython's showtraceback sends; with it silenced a failing assert passes."""
    nb = nbformat.v4.new_notebook(cells=[
        code("a", "get_ipython().showtraceback = lambda *a, **k: None"),
        code("b", "assert False, 'this should fail'")])
    path = tmp_path / "fooled.ipynb"
    nbformat.write(nb, str(path))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-q",
                           "--nbval-cell-timeout=30", "-p", "no:cacheprovider", str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout[-2000:]


def test_eq_always_true_earns_nothing(batch):
    r = row(batch, "eq_always_true")
    assert earned(r)["p1-scale"] == 0 and earned(r)["p1-scale-random"] == 0


@pytest.mark.parametrize("name", ["silenced_tracebacks", "custom_exc", "patched_builtins", "monkeypatched_numpy",
                                  "patched_defaults"])
def test_monkeypatching_the_students_kernel_earns_nothing(batch, name):
    """The checks are judged in a kernel the student's code never ran in: what it patched there is not there."""
    r = row(batch, name)
    part = "p2-total" if name == "patched_builtins" else "p1-scale"
    assert earned(r)[part] == 0 and earned(r)[part + "-random"] == 0, r


@pytest.mark.parametrize("name, reason", [
    ("invalid_json", "not valid JSON"), ("empty_file", "empty file"),
    ("wrong_lab", "wrong lab: this notebook is lab99_other"), ("unrelated_notebook", "wrong lab"),
])
def test_unreadable_submissions_get_a_zero_row_with_the_reason(batch, name, reason):
    r = row(batch, name)
    assert r.total == 0 and reason in r.status
    assert reason in feedback(batch, name)


def test_printing_100_mb_does_not_break_grading(batch):
    assert row(batch, "print_100mb").total == MAX


def test_solutions_are_not_reachable_from_the_working_folder(batch):
    r = row(batch, "reads_solutions")
    assert r.total == MAX
    assert any("FileNotFoundError" in e for e in r.cell_errors), r.cell_errors


def test_points_come_from_the_source_not_the_submission(batch):
    r = row(batch, "fake_points")
    assert r.maximum == MAX and r.total == MAX
    assert [c.check for c in r.checks] == ["p1-scale", "p1-scale-random", "p2-total", "p2-total-random"]
    assert "changed" in feedback(batch, "fake_points")


def test_wall_clock_limit_ends_the_notebook_and_its_kernel(lab_root, tmp_path):
    """Unsandboxed (the kernel writes its pid outside its folder); in the jail its PID namespace ends it."""
    pid_file = tmp_path / "kernel.pid"
    nb = insert_after(answered(lab_root), "p1-check",
                      f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(1000)")
    sub = tmp_path / "sleeper.ipynb"
    sub.write_text(json.dumps(nb), encoding="utf-8")
    start = time.monotonic()
    (r,) = grade_submissions(lab_root / "solutions" / f"{SAMPLE}.ipynb", [sub],
                                   GradeOptions(out=str(tmp_path / "out"), cell_timeout=120, timeout=15,
                                                memory_gb=MEMORY_GB, sandbox="none"))
    assert time.monotonic() - start < 60
    assert "time limit 15 s reached" in r.status
    assert earned(r)["p1-scale"] == 2 and r.total == 2, r   # hidden checks come last: never reached
    pid = int(pid_file.read_text())
    time.sleep(0.5)
    assert not _running(pid), "the kernel of a notebook that ran out of time was left running"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_parallel_grading_equals_serial(batch, lab_root, tmp_path):
    _, out, paths = batch
    names = ["good", "blank", "invalid_json", "tampered_check"]
    serial = tmp_path / "serial"
    grade_submissions(lab_root / "solutions" / f"{SAMPLE}.ipynb", [paths[n] for n in names],
                            GradeOptions(out=str(serial), jobs=1, cell_timeout=CELL_TIMEOUT, timeout=TIMEOUT,
                                         memory_gb=MEMORY_GB))
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        parallel_rows = [r for r in csv.DictReader(f) if r["student"] in names]
    with open(serial / "gradebook.csv", newline="", encoding="utf-8") as f:
        serial_rows = list(csv.DictReader(f))
    assert serial_rows == parallel_rows
    for n in names:
        assert (serial / "feedback" / f"{n}.md").read_text() == (out / "feedback" / f"{n}.md").read_text()


def test_regrading_one_student_keeps_the_other_rows(batch, lab_root, tmp_path):
    _, out, paths = batch
    copy_out = tmp_path / "grades"
    shutil.copytree(out, copy_out)
    before = (copy_out / "gradebook.csv").read_text().splitlines()
    grade_submissions(lab_root / "solutions" / f"{SAMPLE}.ipynb", [paths["empty_file"]],
                            GradeOptions(out=str(copy_out)))
    after = (copy_out / "gradebook.csv").read_text().splitlines()
    assert after == before


def test_hidden_check_feedback_shows_message_not_source(batch):
    text = feedback(batch, "blank")
    assert "p1-scale-random" in text and "default_rng" not in text


def test_command_line_prints_a_summary(lab_root, tmp_path, capsys):
    sub = tmp_path / "nobody.ipynb"
    sub.write_text("", encoding="utf-8")
    assert cli.main(["grade", SAMPLE, str(sub), "--source", str(lab_root / "solutions"),
                     "--out", str(tmp_path / "g")]) == 0
    printed = capsys.readouterr().out
    assert "nobody" in printed and "0 / 6" in printed and "empty file" in printed


def test_checks_stay_after_the_students_own_cells(lab_root):
    """A student's extra cell after an answer runs before that answer's checks, even a deleted visible check's;
    hidden checks run after every cell of the hand-in."""
    lab = load_lab(lab_root / "solutions" / f"{SAMPLE}.ipynb")

    def order(nb):
        graded, _ = build_graded(lab, nb, Path("/nonexistent/records"), 1)
        return [c.id for c in graded.cells]

    ids = order(insert_after(answered(lab_root), "p1-answer", "x = 1"))
    assert ids.index("student-extra") < ids.index("xlalab-check-0") < ids.index("p2-answer") \
        < ids.index("report") < ids.index("xlalab-check-1")
    nb = insert_after(answered(lab_root), "p1-answer", "x = 1")
    nb.cells = [c for c in nb.cells if c.get("id") != "p1-check"]
    ids = order(nb)
    assert ids.index("student-extra") < ids.index("xlalab-check-0") < ids.index("p2-answer")
    ids = order(insert_after(answered(lab_root), "p1-check", "x = 1"))
    assert ids.index("xlalab-check-0") < ids.index("student-extra") < ids.index("p2-answer")
    assert ids[:2] == ["xlalab-grader-init", "setup"]
    assert ids[-2:] == ["xlalab-check-1", "xlalab-check-3"]


def test_a_kernel_that_cannot_start_its_setup_scores_nothing(lab_root, tmp_path):
    """An address-space limit too small for NumPy: the grader's first cell fails, every check fails."""
    sub = tmp_path / "good.ipynb"
    sub.write_text(json.dumps(answered(lab_root)), encoding="utf-8")
    (r,) = grade_submissions(lab_root / "solutions" / f"{SAMPLE}.ipynb", [sub],
                                   GradeOptions(out=str(tmp_path / "out"), cell_timeout=CELL_TIMEOUT, timeout=TIMEOUT,
                                                memory_gb=0.3))
    assert r.total == 0
    assert "could not set up the kernel" in r.status
    assert all(c.message.startswith("did not run") for c in r.checks)


def test_a_left_process_is_named_by_its_start_and_its_arguments():
    """The feedback names a process left running in 100 characters; a long interpreter path (a checkout deep in
    the file system) pushed the arguments out, and the instructor could not tell which process it was."""
    from xlalab.grading.task import _elide

    cmd = "/a/deliberately/long/path/" * 3 + "python -c import time; time.sleep(300) xlalab-orphan-0123456789ab"
    short = _elide(cmd)
    assert len(short) == 100 and short.startswith("/a/deliberately/") and short.endswith("xlalab-orphan-0123456789ab")
    assert _elide("python -c pass") == "python -c pass"


def test_checks_after_a_timed_out_cell_never_score(lab_root):
    """nbval runs the cells after a timed-out one in the interrupted kernel, expecting them to fail; one that passed
    there (xpass) with records the judge accepts still scores nothing, so the row does not depend on the machine's
    speed (CI's flood test earned 4 of 6 or 6 of 6 by the machine's load)."""
    from xlalab.grading.lab import load_lab
    from xlalab.grading.run import CellResult, RunOutcome
    from xlalab.grading.score import score

    lab = load_lab(lab_root / "solutions" / f"{SAMPLE}.ipynb")
    ids = [c.check for c in lab.checks]
    late = {"p2-total", "p2-total-random"}
    student = RunOutcome([CellResult(i, f"cell-{c}", c, "call", "passed", xfail=c in late) for i, c in enumerate(ids)]
                         + [CellResult(9, "flood", None, "call", "failed", "Timeout of 5 seconds exceeded")],
                         timed_out=False, returncode=1, log_tail="", ran=True)
    judge = RunOutcome([CellResult(i, f"cell-{c}", c, "call", "passed") for i, c in enumerate(ids)],
                       timed_out=False, returncode=0, log_tail="", records=verdicts(*ids), ran=True)
    checks = score(lab, student, judge, timeout=120).checks
    by_id = {c.check: c for c in checks}
    assert [c for c in ids if by_id[c].passed] == [c for c in ids if c not in late]
    assert by_id["p2-total"].message == "not graded: an earlier cell timed out"
    # the same runs without the timeout: every check scores (the rule, not the records, took the points)
    student.results = [CellResult(i, f"cell-{c}", c, "call", "passed") for i, c in enumerate(ids)]
    assert all(c.passed for c in score(lab, student, judge, timeout=120).checks)
