"""Issue 25: a grade is decided only where the student's code never ran.

Each attack is a cell added to the *unmodified* sample lab (no answer written: the functions it defines return
wrong values) that tries, by one class of attack on the student's own kernel, to turn the checks green. With the
checks judged in a judge kernel that runs no student code, every one earns 0 automatic points. Each also beats the
grader before issue 25 (commit e7dfeca, its guard in the student's kernel): graded there in the jail, with that
commit's sample lab and grader, the hand-ins earned builtins 6, ctypes 6, files 6, kill 6, messages 6, transform 6,
audit 5, patch_libs 5, liars 4 and trace 4 of the 6 points.

The other tests here run in this process: the probe records' format and limits, the static rule ``make labs``
enforces, and the judge notebook's contents.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import pytest

from xlalab.grading import sandbox
from xlalab.grading.cli import grade_submissions
from xlalab.grading.options import GradeOptions

from helpers import SAMPLE, answered, code, insert_after, make_lab_root, released, sample_solution
from helpers.grading import verdicts

pytestmark = [pytest.mark.xdist_group("sandbox")]

MAX = 6.0
# Wrong answers that do not raise, so that a check runs to its assertions in the student's kernel.
WRONG = "def scale(x, k):\n    return x\n\ndef total(x):\n    return 0.0\n"

# Replacing or wrapping a function in builtins or the guard: the old guard's entry point in builtins runs an
# empty body instead of the check (it then logged "passed" with a valid MAC). Today: the probe's conversion is
# replaced, so that anything goes into the records. (A hand-in that records the visible check's expected value,
# [2, 4, 6], passes that visible check, exactly as `return [2.0, 4.0, 6.0]` would: hidden checks decide that case.)
BUILTINS = WRONG + """
import builtins
for _n in [n for n in dir(builtins) if n.startswith('_xlalab_guard')]:
    setattr(builtins, _n, (lambda g: lambda c, b, k: g(c, 'pass', k))(getattr(builtins, _n)))
try:
    import xlalab.grading.probe as _p
    _p.to_plain = lambda value, name='?', depth=0: value     # anything goes into the records
    builtins.probe = _p.probe = lambda name, fn: fn()
except ImportError:
    pass
"""

# Trace and profile functions set from an IPython event callback: before each cell the callback arms a
# profile function (with the real sys.setprofile, captured before anything could replace it) that, when an
# assertion helper is called, makes its two arguments equal, then removes itself.
TRACE = WRONG + """
import ctypes, sys
_setprofile = sys.setprofile
def _prof(frame, event, arg):
    if event == 'call' and frame.f_code.co_name in ('assert_allclose', 'isclose', 'probe', 'to_plain'):
        loc = frame.f_locals
        for a, b in (('actual', 'desired'), ('a', 'b')):
            if a in loc and b in loc:
                loc[a] = loc[b]
                ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
    elif event == 'return' and frame.f_code.co_name in ('assert_allclose', 'isclose'):
        _setprofile(None)   # gone before anyone looks
def _arm(*args):
    _setprofile(_prof)
get_ipython().events.register('pre_run_cell', _arm)
_scale = scale
def scale(x, k):
    _setprofile(_prof)
    return _scale(x, k)
"""

# An input transformer: every later cell that calls the guard gets an empty check body (IPython transforms the
# cell before the guard can put its transformers back); every cell that probes gets its probes removed.
TRANSFORM = WRONG + """
import ast, re
def _empty(lines):
    text = ''.join(lines)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return lines
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith('_xlalab_guard'):
            node.args[1:2] = [ast.Constant('pass')]
    return [ast.unparse(tree) + '\\n'] if '_xlalab_guard' in text else [re.sub(r'probe\\(', '(lambda *a: 0)(', text)]
ip = get_ipython()
def _again(*args):
    if _empty not in ip.input_transformers_cleanup:
        ip.input_transformers_cleanup.append(_empty)
_again()
ip.events.register('post_run_cell', _again)
"""

# An audit hook: it sees each check's code as it is compiled and executed, and swaps the NumPy the check's
# namespace holds (found in the calling frames) for one whose assertions pass.
AUDIT = WRONG + """
import sys, types, numpy
class _T:
    @staticmethod
    def assert_allclose(*a, **k):
        return None
_fake = types.SimpleNamespace(testing=_T, asarray=lambda x, dtype=None: x, isclose=lambda *a, **k: True,
                              random=numpy.random, ones=numpy.ones)
def _hook(event, args):
    if event in ('exec', 'compile'):
        f = sys._getframe(1)
        while f is not None:
            g = f.f_locals.get('g')
            if isinstance(g, dict) and 'np' in g:
                g['np'] = _fake
            f = f.f_back
sys.addaudithook(_hook)
"""

# A check cell's code with the old guard's call emptied: the check's code becomes `pass`, its id and key stay.
EMPTIED = """
import ast
def _emptied(code):
    if '_xlalab_guard' not in code:
        return code
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, 'id', '').startswith('_xlalab_guard') \\
                and len(node.args) == 3:
            node.args[1] = ast.Constant('pass')
    return ast.unparse(tree)
"""

# The error messages a kernel sends, silenced: no error reaches nbval, every reply says "ok" (needs `_s`, the
# jupyter_client.session module).
QUIET_ERRORS = """
_send = _s.Session.send
def _quiet(self, stream, msg_or_type, content=None, *args, **kwargs):
    kind = msg_or_type if isinstance(msg_or_type, str) else msg_or_type.get('msg_type')
    if kind == 'error':
        return None
    if isinstance(content, dict) and content.get('status') == 'error':
        content = {'status': 'ok', 'execution_count': content.get('execution_count', 0), 'user_expressions': {},
                   'payload': []}
    return _send(self, stream, msg_or_type, content, *args, **kwargs)
_s.Session.send = _quiet
"""

# Patching the messages the kernel receives and sends: every check cell that arrives has its check's code
# emptied (the old guard then ran nothing and logged a pass with the check's own key), and no error ever reaches
# nbval (every reply says "ok").
MESSAGES = WRONG + EMPTIED + """
import jupyter_client.session as _s
_deserialize = _s.Session.deserialize
def _emptied_message(self, *args, **kwargs):
    msg = _deserialize(self, *args, **kwargs)
    content = msg.get('content')
    if isinstance(content, dict) and isinstance(content.get('code'), str):
        content['code'] = _emptied(content['code'])
    return msg
_s.Session.deserialize = _emptied_message
""" + QUIET_ERRORS

# Writing the files and descriptors the grader reads: forged pass records for every check into every file of the
# run's folders it can reach, and into the probe records a value that is code, not data. After each cell, a pass
# record signed with the key that cell carried (read from the cell's own text) is appended to the old guard's log,
# and no error reaches nbval.
FILES = WRONG + """
import glob, json, os, base64, io, pickle, ast, hmac, hashlib
import jupyter_client.session as _s
def _forge(result):
    raw = getattr(getattr(result, 'info', None), 'raw_cell', None) or ''
    if '_xlalab_guard' not in raw:
        return
    for node in ast.walk(ast.parse(raw)):
        if isinstance(node, ast.Call) and len(node.args) == 3 and all(isinstance(a, ast.Constant) for a in node.args):
            check, key = node.args[0].value, node.args[2].value
            mac = hmac.new(key.encode(), f'{check}\\0end\\0True'.encode(), hashlib.sha256).hexdigest()
            rec = {'check': check, 'event': 'end', 'passed': True, 'message': '', 'notes': [], 'mac': mac}
            for path in glob.glob('.xlalab-guard*'):
                with open(path, 'a') as f:
                    f.write(json.dumps(rec) + '\\n')
get_ipython().events.register('post_run_cell', _forge)
checks = ['p1-scale', 'p1-scale-random', 'p2-total', 'p2-total-random']
line = ''.join(json.dumps({'event': 'result', 'cell': 1, 'check': c, 'id': 'x', 'phase': 'call',
                           'outcome': 'passed', 'xfail': False, 'message': '', 'duration': 0}) + '\\n' for c in checks)
for path in glob.glob('*') + glob.glob('.*') + glob.glob('../*/*') + ['/proc/1/fd/1', '/proc/self/fd/1']:
    try:
        with open(path, 'a') as f:
            f.write(line)
    except OSError:
        pass
class _Evil:
    def __reduce__(self):
        return (os.system, ('touch /tmp/pwned',))
_pk = base64.b64encode(pickle.dumps(_Evil())).decode()
for path in glob.glob('.xlalab-probes*'):
    with open(path, 'w') as f:
        f.write(json.dumps({'probe': 'scale-123', 'value': {'a': _pk}}) + '\\n')
""" + QUIET_ERRORS

# Patching NumPy, TensorFlow's and the standard library's helpers the checks use, and hmac; the code object of
# the function behind np.isclose (a dispatcher the old guard compared by identity only) always says equal.
PATCH_LIBS = WRONG + """
import hmac, numpy, numpy.testing
try:   # below every name a guard could put back: the code of isclose's own implementation
    numpy.isclose._implementation.__code__ = (lambda a, b, rtol=1e-05, atol=1e-08, equal_nan=False: True).__code__
except AttributeError:
    pass
numpy.testing.assert_allclose = lambda *a, **k: None
numpy.isclose = lambda *a, **k: True
numpy.asarray = lambda x, *a, **k: numpy.array([2.0, 4.0, 6.0])
hmac.compare_digest = lambda a, b: True
import xlalab.grading.probe as _p
_p.written = lambda *names: {}
"""

# Lying objects: comparisons that always succeed, an __array__ that answers what is asked, a subclassed array,
# a float subclass whose arithmetic always lands on the expected value.
LIARS = """
import numpy
class Anything:
    def __eq__(self, other):
        return True
    def __array__(self, dtype=None, copy=None):
        return numpy.array([2.0, 4.0, 6.0])
    def __float__(self):
        return 6.5
    __array_priority__ = 1000
class Arr(numpy.ndarray):
    def __eq__(self, other):
        return numpy.ones(numpy.shape(other), bool)
class F(float):
    def __sub__(self, other):
        return F(0.0)
    def __rsub__(self, other):
        return F(0.0)
    def __abs__(self):
        return 0.0
def scale(x, k):
    return numpy.asarray(x, dtype=float).view(Arr) if len(x) > 3 else Anything()
def total(x):
    return F(0.0)
"""

# ctypes writes into the interpreter: the cell of the guard's closure that runs the check's code is set to a
# function that runs nothing; the probe module's recording function is replaced in place.
CTYPES = WRONG + """
import builtins, ctypes
for _n in [n for n in dir(builtins) if n.startswith('_xlalab_guard')]:
    g = getattr(builtins, _n)
    for c in g.__closure__ or ():
        try:
            v = c.cell_contents
        except ValueError:
            continue
        if v is exec:   # the check's code now defines a function that does nothing
            _noop = lambda code, ns: ns.__setitem__('__xlalab_outer__', lambda *a: (lambda: None))
            ctypes.pythonapi.PyCell_Set(ctypes.py_object(c), ctypes.py_object(_noop))
try:
    import xlalab.grading.probe as _p
    ctypes.pythonapi.PyDict_SetItem(ctypes.py_object(vars(_p)), ctypes.py_object('probe'),
                                    ctypes.py_object(lambda name, fn: fn()))
except ImportError:
    pass
"""

# Replacing the kernel's own request handler (the kernel, as a process, is the student's): every execute request
# runs with its check's code emptied, and the handler puts itself back after each cell (the old guard restored the
# kernel's methods while a check ran, and logged a pass with the check's own key). Killing the kernel or pytest
# inside the jail is tests/test_grader_holes.py's.
KILL = WRONG + EMPTIED + """
_kernel_type = type(get_ipython().kernel)
_do_execute = _kernel_type.do_execute
async def _replaced(self, code, *args, **kwargs):
    try:
        reply = _do_execute(self, _emptied(code), *args, **kwargs)
        return (await reply) if hasattr(reply, '__await__') else reply
    finally:
        _kernel_type.do_execute = _replaced
_kernel_type.do_execute = _replaced
"""

# Killing everything else in the jail (pytest, the launcher, the judge's side never runs there): a process that
# outlives the kernel's cell kills every other process it can see. Not a forgery (it scored 0 before issue 25 too):
# the row says what happened, and no other row is touched.
KILL_ALL = WRONG + """
import os, signal, time
if os.fork() == 0:
    os.setsid()
    time.sleep(3)
    for pid in os.listdir('/proc'):
        if pid.isdigit() and int(pid) not in (1, os.getpid()):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    os._exit(0)
"""

ATTACKS = {"builtins": BUILTINS, "trace": TRACE, "transform": TRANSFORM, "audit": AUDIT, "messages": MESSAGES,
           "files": FILES, "patch_libs": PATCH_LIBS, "liars": LIARS, "ctypes": CTYPES, "kill": KILL}


@pytest.fixture(scope="module")
def trust_root(tmp_path_factory) -> Path:
    return make_lab_root(tmp_path_factory.mktemp("repo-trust"))


@pytest.fixture(scope="module")
def attacked(trust_root, tmp_path_factory):
    mode = "bwrap" if sandbox.probe()[0] else "none"
    subs = tmp_path_factory.mktemp("trust-handins")
    out = tmp_path_factory.mktemp("trust-grades")
    hand_ins = {"good": answered(trust_root), "blank": released(trust_root)}
    for name, attack in ATTACKS.items():
        hand_ins[name] = insert_after(released(trust_root), "p1-answer", attack, "attack")
    hand_ins["kill_all"] = insert_after(released(trust_root), "p1-answer", KILL_ALL, "attack")
    for name, nb in hand_ins.items():
        (subs / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    rows = grade_submissions(trust_root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                   GradeOptions(out=str(out), jobs=1, sandbox=mode, cell_timeout=60, timeout=120,
                                                memory_gb=3), quiet=True)
    return {r.student: r for r in rows}, out


@pytest.mark.slow
def test_the_solution_scores_full_and_the_blank_lab_zero(attacked):
    rows, _ = attacked
    assert rows["good"].auto == MAX, (rows["good"].status, [(c.check, c.message) for c in rows["good"].checks])
    assert rows["blank"].auto == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attack_in_the_students_kernel_earns_nothing(attacked, name):
    r = attacked[0][name]
    assert r.auto == 0, (name, r.status, [(c.check, c.passed, c.message) for c in r.checks])


@pytest.mark.slow
def test_a_hand_in_that_kills_the_rest_of_its_jail_is_its_own_row_with_the_reason(attacked):
    rows = attacked[0]
    r = rows["kill_all"]
    assert r.auto == 0
    assert all(not c.passed and c.message for c in r.checks), [(c.check, c.message) for c in r.checks]
    assert rows["good"].auto == MAX and rows["blank"].auto == 0


@pytest.mark.slow
def test_a_record_that_is_not_data_is_the_students_fault_and_runs_nothing(attacked):
    r = attacked[0]["files"]
    assert not Path("/tmp/pwned").exists()
    assert all(not c.passed for c in r.checks)


# -- the records, in this process ------------------------------------------------------------------------------

def test_plain_data_round_trips_and_anything_else_is_refused_by_name():
    from xlalab.grading import probe as p

    value = {"a": [1, 2.5, None, True, "s"], "b": np.arange(6, dtype=np.int32).reshape(2, 3),
             "c": float("nan"), "d": (np.float32(1.5), np.bool_(True))}
    plain = p.to_plain(value, "x")
    rec = p.parse_records(p.dump_records({"x": [p.ProbeRecord("x", value=plain)]}))
    back = rec["x"][0].value
    assert back["a"] == [1, 2.5, None, True, "s"] and back["d"] == [1.5, True] and np.isnan(back["c"])
    assert back["b"].dtype == np.int32 and back["b"].tolist() == [[0, 1, 2], [3, 4, 5]]

    class F(float):
        pass

    class A(np.ndarray):
        pass

    for bad in (F(1.0), np.zeros(3).view(A), np.array([object()]), {1: 2}, object(), np.zeros(2, "U3")):
        with pytest.raises(p.ProbeError, match="probe 'name-of-it'"):
            p.to_plain(bad, "name-of-it")


def test_a_module_sized_string_is_recorded_and_a_longer_one_refused_by_name():
    """Lab 6 probes its optimized HLO: 1.04 M characters on a 2-core CPU, 1.06 M in CI (longer paths in the
    metadata), so a 1 MiB cap failed the solution in CI. Several MiB pass; beyond MAX_STRING is refused."""
    from xlalab.grading import probe as p

    text = "%fusion = f32[8,16,16,64] fusion(...), metadata={op_name=\"x\"}\n" * (3 * 2**20 // 60)
    assert len(text) > 3 * 2**20
    rec = p.parse_records(p.dump_records({"hlo": [p.ProbeRecord("hlo", value=p.to_plain({"text": text}, "hlo"))]}))
    assert rec["hlo"][0].value["text"] == text
    with pytest.raises(p.ProbeError, match="probe 'hlo': a string of .* characters is too long"):
        p.to_plain("x" * (p.MAX_STRING + 1), "hlo")


@pytest.mark.parametrize("data, why", [
    (b"not json\n", "not JSON"),
    (json.dumps({"probe": "x", "value": {"pickle": "gASV"}}).encode(), "unknown tag"),
    (json.dumps({"probe": "x", "value": [1, 2]}).encode(), "not tagged"),
    (json.dumps({"probe": "x", "value": {"a": "AAAA"}}).encode(), "not a valid .npy"),
    ((json.dumps({"probe": "x", "value": {"l": [{"l": []}]}}) * 1).encode().replace(b'{"l": []}', b'{"l": []}'),
     None),
    ((b'{"probe": "x", "value": ' + b'{"l": [' * 40 + b"1" + b"]}" * 40 + b"}"), "deeper"),
    (b"x" * (33 * 2**20), "larger"),
])
def test_malformed_records_are_refused_with_the_reason(data, why):
    from xlalab.grading.probe import RecordsError, parse_records

    if why is None:
        parse_records(data)
        return
    with pytest.raises(RecordsError, match=why):
        parse_records(data)


def test_an_object_array_in_a_record_is_refused_without_unpickling(tmp_path):
    import base64
    import io

    from xlalab.grading.probe import RecordsError, parse_records

    buf = io.BytesIO()
    np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    line = json.dumps({"probe": "x", "value": {"a": base64.b64encode(buf.getvalue()).decode()}}).encode()
    with pytest.raises(RecordsError, match="valid .npy"):
        parse_records(line)


def test_replay_returns_records_in_order_and_says_which_probe_did_not_run(tmp_path):
    from xlalab.grading import probe as p

    path = tmp_path / "r.jsonl"
    path.write_bytes(p.dump_records({"x": [p.ProbeRecord("x", value=1), p.ProbeRecord("x", value=2)],
                                     "y": [p.ProbeRecord("y", error="ValueError: no")]}))
    try:
        p.configure("replay", str(path), 7)
        assert p.probe("x", lambda: 1 / 0) == 1 and p.probe("x", lambda: 1 / 0) == 2
        with pytest.raises(p.ProbeError, match="probe 'x' did not run"):
            p.probe("x", lambda: 0)
        with pytest.raises(p.ProbeError, match="probe 'y': ValueError: no"):
            p.probe("y", lambda: 0)
        a = p.check_rng("c").integers(0, 2**30, 4)
        p.configure("replay", str(path), 7)
        assert (p.check_rng("c").integers(0, 2**30, 4) == a).all()
    finally:
        p.configure("live")


# -- the static rule and the judge notebook --------------------------------------------------------------------

def test_make_labs_refuses_a_check_that_reads_a_student_name_outside_probe():
    from xlalab.grading.judge import check_problems

    nb = sample_solution()
    assert check_problems(nb) == []
    c = next(c for c in nb.cells if c.get("id") == "p1-check")
    c.source = c.source.replace("np.testing.assert_allclose(np.asarray(got",
                                "np.testing.assert_allclose(np.asarray(scale([1, 2, 3], 2.0)")
    problems = check_problems(nb)
    assert any("p1-scale" in p and "scale" in p and "outside probe" in p for p in problems), problems
    c.source = c.source.replace("# JUDGE\n", "")
    assert any("no '# JUDGE' line" in p for p in check_problems(nb))
    nb = sample_solution()
    h = next(c for c in nb.cells if c.get("id") == "p1-hidden")
    h.source = h.source.replace("check_rng('p1-scale-random')", "np.random.default_rng()")
    assert any("p1-scale-random" in p and "check_rng" in p for p in check_problems(nb)), check_problems(nb)


def test_given_names_that_are_not_literals_come_from_the_released_cells():
    """The judge runs the released given cells: `SIZES = [0.1 * k ...]` redefined by a student is not what the
    check sees (the break of issue 25's list, closed by the judge kernel)."""
    from xlalab.grading.judge import check_problems, plan

    nb = sample_solution()
    i = next(i for i, c in enumerate(nb.cells) if c.get("id") == "p2-hidden")
    nb.cells.insert(i + 1, code("given", "SIZES = [k + 1 for k in range(3)]"))
    nb.cells.insert(i + 2, code("p3-check", "# CHECK p3-sizes (1 points)\n"
                                "got = [probe(f'ones-{n}', lambda n=n: total(np.ones(n))) for n in SIZES]\n# JUDGE\n"
                                "assert [float(g) for g in got] == [float(n) for n in SIZES]",
                                check="p3-sizes", points=1))
    assert check_problems(nb) == []
    p = plan(nb)
    assert i + 1 in p.given and "SIZES" in p.judge_names


def test_the_student_never_receives_a_judging_part_and_the_judge_no_answer(tmp_path):
    from xlalab.grading.build import build_graded
    from xlalab.grading.judge import build_judge
    from xlalab.grading.lab import load_lab

    (tmp_path / "repo").mkdir()
    root = make_lab_root(tmp_path / "repo")
    lab = load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    graded, _ = build_graded(lab, answered(root), tmp_path / "r.jsonl", 5)
    text = "\n".join(c.source for c in graded.cells)
    assert "# JUDGE" not in text and "assert_allclose" not in text and "isclose" not in text, text
    judge = nbformat.writes(build_judge(lab, "pass"))
    assert "# JUDGE" in judge and "np.asarray(x, dtype=float) * k" not in judge and "np.sum(x)" not in judge


def test_make_labs_stops_on_such_a_check_with_the_reason(tmp_path, capsys):
    from xlalab import cli

    nb = sample_solution()
    c = next(c for c in nb.cells if c.get("id") == "p2-check")
    c.source = c.source.replace("assert isinstance(a, float)", "assert isinstance(total([1.0]), float)")
    (tmp_path / "_config.yml").write_text("title: t\nrepository:\n  url: https://example.org/x\n", encoding="utf-8")
    (tmp_path / "solutions").mkdir()
    nbformat.write(nb, str(tmp_path / "solutions" / f"{SAMPLE}.ipynb"))
    assert cli.main(["assign", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "p2-total" in err and "total" in err and "outside probe()" in err
    assert not (tmp_path / "labs" / f"{SAMPLE}.ipynb").exists()


def test_a_lone_surrogate_in_a_record_cannot_silence_the_judges_error():
    """The judge's kernel cannot send an error message holding a lone surrogate, so nbval saw the check pass
    (found by test_grader_holes' surrogate hand-in): every string of a record is made sendable."""
    from xlalab.grading import probe as p

    data = p.dump_records({"t": [p.ProbeRecord("t", error="ValueError: bad \ud800 text")],
                           "v": [p.ProbeRecord("v", value={"k\udfff": ["x\ud800"]})]})
    rec = p.parse_records(data)
    assert rec["t"][0].error == "ValueError: bad \ufffd text"
    assert rec["v"][0].value == {"k\ufffd": ["x\ufffd"]}


def test_a_check_scores_only_if_its_last_line_ran_in_the_judge(tmp_path):
    """nbval passes a cell whose error the kernel failed to send; the check's own last line must also have run."""
    from xlalab.grading.lab import load_lab
    from xlalab.grading.run import CellResult, RunOutcome
    from xlalab.grading.score import score

    (tmp_path / "repo").mkdir()
    root = make_lab_root(tmp_path / "repo")
    lab = load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    student = RunOutcome([], False, 0, "", ran=True)
    results = [CellResult(None, f"xlalab-check-{i}", c.check, "call", "passed") for i, c in enumerate(lab.checks)]
    judge = RunOutcome(results, False, 0, "", records=verdicts("p1-scale", "p2-total"), ran=True)
    checks = score(lab, student, judge, 60).checks
    assert [c.check for c in checks if c.passed] == ["p1-scale", "p2-total"]
    assert "did not reach its end" in next(c for c in checks if c.check == "p1-scale-random").message or \
        next(c for c in checks if c.check == "p1-scale-random").hidden
