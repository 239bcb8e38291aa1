"""Issue 22: ways through the jail and the gradebook, each graded on a small NumPy-only lab.

One batch is graded in the jail (``--sandbox bwrap``): a blank lab plus an attack must still score 0, an
honest lab plus an attack must keep its points, and no attack may reach a secret. The other tests grade in
the grader's own process (names, links, broken hand-ins), where no notebook runs, so they take a second each.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest

from xlalab.grading import sandbox
from xlalab.grading.cli import grade_submissions
from xlalab.grading.faults import GRADED, NOT_GRADED
from xlalab.grading.gradebook import Gradebook
from xlalab.grading.options import GradeOptions
from xlalab.grading.score import CheckResult, Row
from xlalab.grading.submissions import safe_name

from helpers import (
    SAMPLE,
    answered,
    cell,
    code,
    insert_after,
    make_answers_root,
    make_lab_root,
    released,
    sample_solution,
)
from helpers.grading import feedback_file

pytestmark = [pytest.mark.xdist_group("sandbox")]

BWRAP = sandbox.probe()[0]
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"bwrap cannot run here: {sandbox.probe()[1]}")
slow = pytest.mark.slow
MAX = 7.0                   # the sample lab (6) plus the check of the given names (1)
GIVEN_SIZES = "SIZES = [3, 5, 8]\nTOL = 1e-12"
SECRET_ENV = {"TF_TOKEN_hub": "tok-SECRET-1", "TF_VAR_db_password": "pw-SECRET-2", "CUDA_API_KEY": "key-SECRET-3"}
ROOT_ONLY = "root-only-SECRET-4"


def holes_solution() -> nbformat.NotebookNode:
    """The sample lab with a given cell (SIZES, TOL) that a visible check loops over, and a check whose
    last line is not an assertion (a trace function can jump over its asserts)."""
    nb = sample_solution()
    i = next(i for i, c in enumerate(nb.cells) if c.get("id") == "p2-hidden")
    nb.cells.insert(i + 1, code("given", GIVEN_SIZES))
    nb.cells.insert(i + 2, code("p3-check", "# CHECK p3-sizes (1 points)\n"
                                "got = [probe(f'total-ones-{n}', lambda n=n: total(np.ones(n))) for n in SIZES]\n"
                                "# JUDGE\nwritten('total')\nfor n, g in zip(SIZES, got):\n"
                                "    assert abs(g - n) < TOL, f'total(np.ones({n})) should be {n}'\n"
                                "print('p3 checked')", check="p3-sizes", points=1))
    c = next(c for c in nb.cells if c.get("id") == "p2-check")
    c.source += "\nprint('p2 checked')"
    return nb


# -- the attacks: each is a cell added to a hand-in ------------------------------------------------------------

# 1: the guard's closure held every check's code; set it all to `pass`.
GUARD_PASS = """import builtins
for name in dir(builtins):
    if name.startswith('_xlalab'):
        for c in getattr(builtins, name).__closure__ or ():
            try:
                v = c.cell_contents
            except ValueError:
                continue
            if isinstance(v, dict) and v and all(isinstance(x, str) for x in v.values()):
                for k in v:
                    v[k] = 'pass'
"""

# 1: read the hidden checks' code (from the guard, or from the calling frame) and fail with it.
GUARD_READ = """import builtins, sys
_leak = []
for name in dir(builtins):
    if name.startswith('_xlalab'):
        for c in getattr(builtins, name).__closure__ or ():
            try:
                v = c.cell_contents
            except ValueError:
                continue
            if isinstance(v, dict) and any(isinstance(x, str) and 'default_rng' in x for x in v.values()):
                _leak.append(' '.join(x for x in v.values() if isinstance(x, str)).replace(chr(10), ' '))

def total(x):
    f = sys._getframe(1)
    raise ValueError('LEAK ' + (_leak[0] if _leak else repr(f.f_code.co_consts) + repr(f.f_code.co_names)))
"""

# 2: rewrite the run's results files (wherever they are) with passes for every check, from a process that
# outlives the kernel.
FORGE = """import glob, json, os, time
def _forge():
    checks = ['p1-scale', 'p1-scale-random', 'p2-total', 'p2-total-random', 'p3-sizes']
    for d in set(glob.glob('/tmp/xlalab-grade-*/priv') + glob.glob('../priv')):
      for path in (d + '/results.jsonl', d + '/guard.jsonl'):
        with open(path, 'w') as f:
            for c in checks:
                f.write(json.dumps({'event': 'result', 'cell': 1, 'check': c, 'id': 'x', 'phase': 'call',
                                    'outcome': 'passed', 'xfail': False, 'message': '', 'duration': 0}) + '\\n')
                f.write(json.dumps({'check': c, 'event': 'end', 'passed': True, 'message': '', 'notes': []}) + '\\n')
if os.fork() == 0:
    os.setsid()
    end = time.time() + 20
    while time.time() < end:
        try:
            _forge()
        except OSError:
            pass
        time.sleep(0.02)
    os._exit(0)
"""

# 3: code called by a check rebinds names of the check's namespace; a given name is redefined; a trace
# function jumps over a check's assertions.
REBIND = """import sys, types
class _T:
    @staticmethod
    def assert_allclose(*a, **k):
        return None
_fake = types.SimpleNamespace(testing=_T, asarray=lambda x, dtype=None: x, isclose=lambda *a, **k: True,
                              ones=lambda n: [0.0] * n, random=__import__('numpy').random)
def total(x):
    sys._getframe(1).f_globals['np'] = _fake
    return 0.0
def scale(x, k):
    sys._getframe(1).f_globals['np'] = _fake
    return x
"""
GIVEN = "SIZES = []\nTOL = 1e300"
SETTRACE = """import sys
def _jump(frame, event, arg):
    if event == 'line' and frame.f_code.co_filename.startswith('<check'):
        last = max(l for _, _, l in frame.f_code.co_lines() if l)
        if frame.f_lineno < last:
            try:
                frame.f_lineno = last
            except ValueError:
                pass
    return _jump
def _global(frame, event, arg):
    return _jump if frame.f_code.co_filename.startswith('<check') else None
sys.settrace(_global)
"""

# 4: the limits
FILL_TMP = "with open('/tmp/fill', 'wb') as f:\n    for _ in range(1200):\n        f.write(b'x' * 2**20)"
FILL_SHM = "open('/dev/shm/fill', 'wb').write(b'x' * 700 * 2**20)"
FILL_WORK = "with open('fill', 'wb') as f:\n    for _ in range(1200):\n        f.write(b'x' * 2**20)"
FORK_MANY = """import subprocess
procs = []
for _ in range(1500):
    procs.append(subprocess.Popen(['sleep', '20']))
"""

# 5 and 9: secrets of the grader's environment and files
ENV_LEAK = "import os\nraise AssertionError('ENV ' + ' '.join(f'{k}={v}' for k, v in os.environ.items()))"


def package_copy(root: Path) -> Path:
    """A copy of the ``xlalab`` package under ``root`` (a temporary folder) for the grader's workers to import, so
    that the jail binds the copy in place of the checkout's package: the root-only file the test plants in the bound
    package folder then lies in the test's own folder, never in the checkout (where a concurrent test's stay-home
    guard would see it come and go)."""
    shutil.copytree(sandbox.package_root() / "xlalab", root / "xlalab",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def read_root_only(path: Path) -> str:
    return f"raise AssertionError('ROOT ' + open({str(path)!r}).read())"


@pytest.fixture(scope="module")
def holes_root(tmp_path_factory) -> Path:
    return make_lab_root(tmp_path_factory.mktemp("repo-holes"), holes_solution())


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _write(subs: Path, name: str, nb) -> None:
    (subs / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")


@pytest.fixture(scope="module")
def jailed(holes_root, tmp_path_factory):
    if not BWRAP:
        pytest.skip(f"bwrap cannot run here: {sandbox.probe()[1]}")
    subs = tmp_path_factory.mktemp("holes-handins")
    out = tmp_path_factory.mktemp("holes-grades")
    package = package_copy(tmp_path_factory.mktemp("holes-package"))
    secret = package / "xlalab" / ".i22-root-only.txt"     # in the package folder the jail binds
    blank, good = released(holes_root), answered(holes_root)
    hand_ins = {
        "good": good,
        "blank": blank,
        "guard_pass": insert_after(released(holes_root), "p1-answer", GUARD_PASS),
        "guard_read": insert_after(answered(holes_root), "p2-answer", GUARD_READ),
        "forge": insert_after(released(holes_root), "p1-answer", FORGE),
        "rebind": insert_after(released(holes_root), "p1-answer", REBIND),
        "settrace": insert_after(released(holes_root), "p2-answer", SETTRACE),
        "fill_tmp": insert_after(answered(holes_root), "p1-check", FILL_TMP),
        "fill_shm": insert_after(answered(holes_root), "p1-check", FILL_SHM),
        "fill_work": insert_after(answered(holes_root), "p1-check", FILL_WORK),
        "fork_many": insert_after(answered(holes_root), "p1-check", FORK_MANY),
        "env_leak": insert_after(answered(holes_root), "p1-check", ENV_LEAK),
        "root_only": insert_after(answered(holes_root), "p1-check", read_root_only(secret)),
        "surrogate_error": insert_after(answered(holes_root), "p2-answer",
                                        "def total(x):\n    raise ValueError('bad \\ud800 text')"),
    }
    nb = answered(holes_root)
    insert_after(nb, "given", GIVEN, "student-given")
    cell(nb, "p2-answer").source = "def total(x):\n    return 0.0"
    hand_ins["given_redefined"] = nb
    for name, nb in hand_ins.items():
        _write(subs, name, nb)
    secret.write_text(ROOT_ONLY)
    os.chmod(secret, 0o600)
    saved = {k: os.environ.get(k) for k in SECRET_ENV}
    os.environ.update(SECRET_ENV)    # the grader's own environment
    try:
        with pytest.MonkeyPatch.context() as mp:
            # The grader's workers (processes) import xlalab from the copy, so the jail binds the copy.
            mp.syspath_prepend(str(package))
            mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")])))
            rows = grade_submissions(holes_root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                     GradeOptions(out=str(out), jobs=2, sandbox="bwrap", cell_timeout=60,
                                                  timeout=120, memory_gb=3), quiet=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {r.student: r for r in rows}, out


@slow
@needs_bwrap
def test_honest_and_blank_still_score_full_and_zero(jailed):
    rows, _ = jailed
    assert rows["good"].total == MAX, (rows["good"].status, rows["good"].checks)
    assert rows["blank"].total == 0


@slow
@needs_bwrap
@pytest.mark.parametrize("name", ["guard_pass", "forge", "rebind", "settrace"])
def test_a_blank_lab_with_an_attack_scores_nothing(jailed, name):
    """Items 1-3: the guard's closure, the results files, rebinding the check's names, a trace function."""
    r = jailed[0][name]
    assert r.total == 0, (name, [(c.check, c.passed, c.message) for c in r.checks])


@slow
@needs_bwrap
def test_redefined_given_names_are_put_back(jailed):
    """Item 3: SIZES = [] would make the loop of p3-sizes check nothing; the judge runs the released given cell,
    so it asks for the probes of SIZES = [3, 5, 8], which the student's kernel never ran."""
    r = jailed[0]["given_redefined"]
    p3 = next(c for c in r.checks if c.check == "p3-sizes")
    assert not p3.passed, p3
    assert "did not run" in p3.message, p3


@slow
@needs_bwrap
def test_hidden_check_source_never_reaches_the_feedback(jailed):
    """Item 1: neither the guard nor the calling frame carries a hidden check's code into the feedback."""
    rows, out = jailed
    r = rows["guard_read"]
    hidden = next(c for c in r.checks if c.check == "p2-total-random")
    assert not hidden.passed
    text = feedback_file(out, "guard_read")
    for secret in ("default_rng", "size=37", "normal", "isclose"):
        assert secret not in text, (secret, hidden.message)


@slow
@needs_bwrap
@pytest.mark.parametrize("name, word", [("fill_tmp", "/tmp"), ("fill_shm", "/dev/shm"), ("fill_work", "work folder"),
                                        ("fork_many", "processes")])
def test_limits_hold_and_are_named_in_the_feedback(jailed, name, word):
    """Item 4: /tmp and /dev/shm are size-capped, so is the work folder, and the process count."""
    rows, out = jailed
    r = rows[name]
    assert r.total == MAX, (name, r.status, r.cell_errors)
    assert any(word in b for b in r.blocked), (name, r.blocked, r.cell_errors)
    assert "## Blocked by the grader" in feedback_file(out, name)


@slow
@needs_bwrap
def test_only_named_environment_variables_enter_the_jail(jailed):
    """Item 5: TF_TOKEN_*, TF_VAR_* and CUDA_API_KEY stay out (no prefix matching)."""
    rows, out = jailed
    text = feedback_file(out, "env_leak") + "\n".join(rows["env_leak"].cell_errors)
    assert "ENV " in text
    for value in SECRET_ENV.values():
        assert value not in text


@slow
@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the grader does not run as root here")
def test_as_root_the_jail_cannot_read_root_only_files(jailed):
    """Item 9: when the grader is root, the jail runs as an unprivileged user outside."""
    r = jailed[0]["root_only"]
    assert ROOT_ONLY not in "\n".join(r.cell_errors)
    assert "Permission denied" in "\n".join(r.cell_errors), r.cell_errors


@slow
@needs_bwrap
def test_a_lone_surrogate_in_an_error_is_written_not_fatal(jailed):
    """Item 8: an error message with \\ud800 becomes feedback; the rest of the class is graded."""
    rows, out = jailed
    assert rows["surrogate_error"].total == MAX - 3, rows["surrogate_error"].checks   # p2-total, its hidden one, p3
    assert "ValueError: bad \ufffd text" in feedback_file(out, "surrogate_error")
    book = list(csv.DictReader(io.StringIO((out / "gradebook.csv").read_text(encoding="utf-8"))))
    assert sorted(r["student"] for r in book) == sorted(rows)


# -- in the grader's own process -------------------------------------------------------------------------------

def test_file_names_of_feedback_are_distinct_for_distinct_students():
    """Item 6: `ann b` and `ann_b` (and other near-equal names) get their own feedback files."""
    names = ["ann b", "ann_b", "ann/b", "ann%20b", "Ann b", ".ann", "ann\nb", "x" * 300, "x" * 301]
    files = [safe_name(n) for n in names]
    assert len(set(files)) == len(names), files
    assert all(f and "/" not in f and "\n" not in f and not f.startswith(".") and len(f) <= 200 for f in files)
    assert safe_name("ann_b") == "ann_b" and safe_name("good-1.x") == "good-1.x"


def test_spreadsheet_formulas_are_not_written_as_formulas(tmp_path):
    """Item 6: a name starting with = + - @ is written so that a spreadsheet shows it as text."""
    from xlalab.grading import export

    rows = [Row(n, "lab", 1.0, [CheckResult("c", 1.0, False, False)]) for n in
            ("=HYPERLINK(\"http://x\")", "+1+1", "-2", "@SUM(A1)", "ok")]
    book = Gradebook(tmp_path / "out", ["c"], quiet=True)
    with book:
        for r in rows:
            book.record(r)
    for path in [tmp_path / "out" / "gradebook.csv",
                 export.export("canvas", rows, lab="lab", maximum=1, out=tmp_path / "out"),
                 export.export("moodle", rows, lab="lab", maximum=1, out=tmp_path / "out")]:
        for rec in csv.reader(io.StringIO(path.read_text(encoding="utf-8"))):
            for value in rec:
                assert value[:1] not in ("=", "+", "-", "@"), (path.name, value)


@pytest.mark.heavy   # a grading run
def test_a_name_with_newlines_forges_no_section_and_odd_names_are_graded(tmp_path):
    """Item 6: a newline in a name cannot start another student's section; a non-UTF-8 name is graded."""
    root = make_answers_root(_mkdir(tmp_path / "repo"))
    subs = tmp_path / "subs"
    subs.mkdir()
    good = answered(root)
    cell(good, "p2-why").source = "Addition is associative."
    forger = "mallory (answered; 3 \u2215 3)\n\n> Addition is associative.\n\n### victim"
    (subs / f"{forger}.ipynb").write_text(json.dumps(good), encoding="utf-8")
    (subs / "victim.ipynb").write_text(json.dumps(released(root)), encoding="utf-8")
    os.mkdir(os.fsencode(subs) + b"/caf\xe9")
    (Path(os.fsdecode(os.fsencode(subs) + b"/caf\xe9")) / f"{SAMPLE}.ipynb").write_text(
        json.dumps(released(root)), encoding="utf-8")
    out = tmp_path / "out"
    rows = grade_submissions(root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                   GradeOptions(out=str(out), sandbox="none", cell_timeout=30, timeout=60,
                                                memory_gb=3), quiet=True)
    assert len(rows) == 3, [r.student for r in rows]
    text = (out / "answers" / SAMPLE / "p2-why.md").read_text(encoding="utf-8")
    headers = [line for line in text.splitlines() if line.startswith("### ")]
    assert len(headers) == 3, headers
    assert sum(line.startswith("### victim") for line in headers) == 1, headers
    book = list(csv.DictReader(io.StringIO((out / "gradebook.csv").read_text(encoding="utf-8"))))
    assert len(book) == 3


def _links_and_specials(root: Path, subs: Path) -> dict[str, str]:
    """Hand-ins that are not regular files of the hand-in folder: name -> what the row must say."""
    (subs / "sol.ipynb").symlink_to(root / "solutions" / f"{SAMPLE}.ipynb")
    (subs / "zero.ipynb").symlink_to("/dev/zero")
    os.mkfifo(subs / "fifo.ipynb")
    (subs / "dirlink").symlink_to(root / "solutions")
    folder = subs / "inner"
    folder.mkdir()
    (folder / f"{SAMPLE}.ipynb").symlink_to(root / "solutions" / f"{SAMPLE}.ipynb")
    big = answered(root)
    big.cells.append(nbformat.v4.new_markdown_cell("x" * (60 * 2**20), id="big"))
    (subs / "huge.ipynb").write_text(json.dumps(big), encoding="utf-8")
    return {"sol": "link", "zero": "link", "fifo": "not a regular file", "dirlink": "link", "inner": "link",
            "huge": "larger than"}


def test_links_fifos_and_huge_hand_ins_are_refused_with_the_reason(tmp_path):
    """Item 7: a link to the solution (or /dev/zero), a FIFO, a folder link or a 60 MB file is not read."""
    import signal

    root = make_answers_root(_mkdir(tmp_path / "repo"))
    subs = tmp_path / "subs"
    subs.mkdir()
    want = _links_and_specials(root, subs)
    out = tmp_path / "out"
    signal.alarm(60)   # a FIFO must not hang the grader
    try:
        rows = grade_submissions(root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                       GradeOptions(out=str(out), sandbox="none", cell_timeout=30, timeout=60,
                                                    memory_gb=3), quiet=True)
    finally:
        signal.alarm(0)
    by = {r.student: r for r in rows}
    assert sorted(by) == sorted(want), sorted(by)
    for name, word in want.items():
        assert by[name].total == 0 and word in by[name].status, (name, by[name].status)
    answers = (out / "answers" / SAMPLE / "p2-why.md").read_text(encoding="utf-8")
    assert "MODEL-SECRET" not in answers.split("## Answers", 1)[1], "the model answer was copied as an answer"


@pytest.mark.heavy   # a grading run
def test_one_broken_hand_in_never_stops_the_class(tmp_path):
    """Item 8: deeply nested JSON, an answer whose source is not text and a lone surrogate in a written answer
    each become that student's row with the reason; the others are graded and every file is written."""
    root = make_answers_root(_mkdir(tmp_path / "repo"))
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "nested.ipynb").write_text('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    nb = json.loads(json.dumps(released(root)))
    next(c for c in nb["cells"] if c.get("id") == "p2-why")["source"] = [1, 2, 3]
    (subs / "nontext.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    nb = json.loads(json.dumps(released(root)))
    next(c for c in nb["cells"] if c.get("id") == "p2-why")["source"] = "my answer \ud800 here"
    (subs / "surrogate.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (subs / "zz_blank.ipynb").write_text(json.dumps(released(root)), encoding="utf-8")
    out = tmp_path / "out"
    rows = grade_submissions(root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                   GradeOptions(out=str(out), sandbox="none", cell_timeout=30, timeout=60,
                                                memory_gb=3), quiet=True)
    by = {r.student: r for r in rows}
    assert sorted(by) == ["nested", "nontext", "surrogate", "zz_blank"]
    nested = by["nested"]     # refused as a file, with the reason, as a typed fault (not read from the status)
    assert nested.state == NOT_GRADED and nested.total == 0
    assert [f.kind for f in nested.faults] == ["not graded"] and "nested too deeply" in nested.faults[0].detail
    states = {name: (r.state, [f.kind for f in r.faults if f.kind == "not graded"]) for name, r in by.items()}
    assert states["nontext"] == (NOT_GRADED, ["not graded"]), states          # a cell source that is no text
    assert states["surrogate"] == states["zz_blank"] == (GRADED, []), states  # graded, each with its own points
    for name in by:
        assert (out / "feedback" / f"{safe_name(name)}.md").exists(), name
    manual = (out / "manual.csv").read_text(encoding="utf-8")
    assert "surrogate" in manual and "zz_blank" in manual
    assert "my answer" in (out / "answers" / SAMPLE / "p2-why.md").read_text(encoding="utf-8")


def test_a_results_line_with_a_lone_surrogate_is_written(tmp_path):
    """Item 8: a check message with \\ud800 (from the run) does not stop the feedback or the gradebook."""
    row = Row("s", "lab", 1.0, [CheckResult("c", 1.0, False, False, "AssertionError: bad \ud800 x")],
              cell_errors=["cell `a`: ValueError: \udcff"])
    with Gradebook(tmp_path / "out", ["c"], quiet=True) as book:
        book.record(row)
        book.record(Row("t", "lab", 1.0, [CheckResult("c", 1.0, False, True)]))
    assert "bad" in (tmp_path / "out" / "feedback" / "s.md").read_text(encoding="utf-8")
    assert "t," in (tmp_path / "out" / "gradebook.csv").read_text(encoding="utf-8")
