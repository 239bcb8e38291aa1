"""The grader's sandbox and gradebook against an adversarial class (issue 14), on the NumPy-only sample lab.

One batch runs with ``--sandbox bwrap`` (every attack contained, the class graded, faults noticed in seconds),
one with ``--sandbox none`` (the gradebook survives a submission that overwrites it, and the attacks that the
jail stops do work there, so the sandboxed tests are not vacuous).
"""

from __future__ import annotations

import csv
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from xlalab.grading import sandbox
from xlalab.grading.cli import grade_submissions
from xlalab.grading.options import GradeOptions
from xlalab.grading.submissions import HandIn
from xlalab.grading.task import Limits

from helpers import SAMPLE, answered, insert_after
from helpers.grading import feedback_file

pytestmark = [pytest.mark.xdist_group("sandbox"), pytest.mark.slow]

CELL_TIMEOUT = 60          # long, so that a dead kernel noticed at the timeout would show
TIMEOUT = 120
MEMORY_GB = 3
MAX = 6.0
P1 = 2.0                   # the visible check before the attack cell ("p1-check"); hidden checks run after every
                           # student cell (issue 34), so a kernel that dies loses p1-scale-random too
MARKER = f"xlalab-orphan-{uuid.uuid4().hex[:12]}"
BWRAP = sandbox.probe()[0]
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"bwrap cannot run here: {sandbox.probe()[1]}")


# -- the attacks (each cell raises LEAKED/CONNECTED/OVERWROTE when it got what it wanted) ------------------

def read_file(path: Path) -> str:
    return f"data = open({str(path)!r}).read()\nraise AssertionError('LEAKED ' + data[:40])"


def home_file() -> Path:
    """A file of the grader's home folder (its keys and tokens would be there)."""
    files = sorted(p for p in Path.home().iterdir() if p.is_file()) if Path.home().is_dir() else []
    return files[0] if files else Path.home() / ".ssh" / "id_ed25519"


def overwrite_gradebooks(known: Path) -> str:
    """A cell that overwrites every ``gradebook.csv`` under the test's own folder of this batch (``known``'s
    parent: the hand-ins and the grades folder; never ``/``, which held other people's gradebooks), and
    ``known``'s own by its path."""
    tree = known.parent
    return f"""import os
hits = []
for d, subdirs, files in os.walk({str(tree)!r}):
    if "gradebook.csv" in files:
        p = os.path.join(d, "gradebook.csv")
        with open(p, "w") as f:
            f.write("student,total,max,status\\nhacker,1000,6,graded\\n")
        hits.append(p)
open({str(known / "gradebook.csv")!r}, "w").write("student,total,max,status\\nhacker,1000,6,graded\\n")
hits.append("known")
raise AssertionError(f"OVERWROTE {{len(hits)}}: {{hits[:3]}}")"""


def connect(port: int) -> str:
    return (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "s.sendall(b'stolen')\nraise AssertionError('CONNECTED')")


ORPHAN = f"""import os, subprocess, sys, time
if os.fork() == 0:  # a double-forked daemon in a session of its own
    os.setsid()
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{MARKER}"],
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    os._exit(0)
time.sleep(1)"""


def orphans() -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if MARKER.encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


class Server:
    """A TCP server on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


def write(subs: Path, name: str, nb) -> Path:
    path = subs / f"{name}.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def attacks(root: Path, subs: Path, out: Path, port: int) -> dict[str, str]:
    secret = root / "solutions" / f"{SAMPLE}.ipynb"        # the instructor's source, by absolute path
    return {
        "reads_source": read_file(secret),
        "reads_other_handin": read_file(subs / "good.ipynb"),
        "reads_home": read_file(home_file()),
        "overwrites_gradebooks": overwrite_gradebooks(out),
        "connects": connect(port),
        "orphan": ORPHAN,
        "os_exit": "import os\nos._exit(1)",
        "segfault": "import ctypes\nctypes.string_at(0)",
        "oom_killed": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does",
        "memory_bomb": "hog = [np.ones(2**30, np.uint8) for _ in range(16)]  # 16 GiB",
    }


@pytest.fixture(scope="module")
def jailed(lab_root, tmp_path_factory):
    """The adversarial class, graded with --sandbox bwrap and -j 2."""
    if not BWRAP:
        pytest.skip(f"bwrap cannot run here: {sandbox.probe()[1]}")
    tree = tmp_path_factory.mktemp("jailed")     # the overwriting hand-in walks this folder only
    subs, out = tree / "handins", tree / "grades"
    subs.mkdir()
    out.mkdir()
    server = Server()
    write(subs, "good", answered(lab_root))
    for name, source in attacks(lab_root, subs, out, server.port).items():
        write(subs, name, insert_after(answered(lab_root), "p1-check", source))
    rows = grade_submissions(lab_root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                   GradeOptions(out=str(out), jobs=2, sandbox="bwrap", cell_timeout=CELL_TIMEOUT,
                                                timeout=TIMEOUT, memory_gb=MEMORY_GB))
    time.sleep(0.5)
    return {r.student: r for r in rows}, out, server, orphans()


def errors(r) -> str:
    return "\n".join(r.cell_errors)


def test_gpu_binds_on_a_made_up_dev(tmp_path):
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "null", "sda", "nvme0"):
        (dev / name).touch()
    libs = tmp_path / "nvidia-libs"
    libs.mkdir()
    args = sandbox.gpu_binds(dev, lib_dirs=(str(libs), str(tmp_path / "absent")), sys_dir=tmp_path)
    binds = [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == "--dev-bind"]
    assert binds == [(str(dev / n), f"/dev/{n}") for n in
                     ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps")]
    assert ["--ro-bind", str(libs), str(libs)] == args[-3:]
    assert str(tmp_path / "absent") not in args
    (dev / "nvidia0").unlink()
    (dev / "nvidia1").unlink()
    assert sandbox.gpu_binds(dev) == [], "no nvidia<N> node: no GPU, nothing bound"


def test_auto_without_bwrap_says_why_and_the_fix(monkeypatch, capsys):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None)
    sandbox.probe.cache_clear()
    sandbox._warn_once.cache_clear()
    try:
        box = sandbox.resolve("auto")
        assert not box.on and "bubblewrap is not installed" in box.reason
        assert "apt-get install -y bubblewrap" in capsys.readouterr().err
        sandbox.resolve("auto")
        assert capsys.readouterr().err == "", "the warning is said once"
        with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install -y bubblewrap"):
            sandbox.resolve("bwrap")
    finally:
        sandbox.probe.cache_clear()
        sandbox._warn_once.cache_clear()


@needs_bwrap
def test_the_jail_holds_only_python_the_package_and_the_work_folder(tmp_path):
    import subprocess
    import sys

    work = tmp_path / "work"
    work.mkdir()
    if (uid := sandbox.host_uid()) is not None:   # a root grader's jail is an unprivileged user: give it its folder
        os.chown(work, uid, uid)
    (tmp_path / "secret.txt").write_text("s")
    probe = ("import json, os, sys; import numpy, xlalab.grading\n"
             "def can(f):\n    try:\n        f(); return True\n    except OSError:\n        return False\n"
             f"print(json.dumps({{'root': sorted(os.listdir('/')), 'cwd': os.getcwd(),"
             f" 'secret': os.path.exists({str(tmp_path / 'secret.txt')!r}),"
             f" 'repo': sorted(os.listdir({str(sandbox.package_root())!r})),"
             f" 'write_usr': can(lambda: open('/usr/x', 'w')), 'write_tmp': can(lambda: open('/tmp/x', 'w')),"
             f" 'write_work': can(lambda: open('x', 'w')), 'uid': os.getuid(), 'pid': os.getpid(),"
             f" 'home': os.environ['HOME'], 'token': os.environ.get('GRADER_TOKEN')}}))")
    box = sandbox.resolve("bwrap")
    cmd = sandbox.command(box, [sys.executable, "-c", probe], writable=[work], cwd=work)
    env = sandbox.jail_env({**os.environ, "GRADER_TOKEN": "t0ken"}, "/tmp/home")
    seen = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True,
                                     timeout=60).stdout)
    assert seen["cwd"] == str(work) and seen["write_work"] and seen["write_tmp"] and not seen["write_usr"]
    assert not seen["secret"], "a file next to the work folder is visible"
    # Python itself may live inside the repository (make's .venv); nothing else of it is there.
    inside = sorted({Path(r).relative_to(sandbox.package_root()).parts[0] for r in sandbox._python_roots()
                     if Path(r).is_relative_to(sandbox.package_root())})
    assert seen["repo"] == sorted(["xlalab", *inside]), "only the package, not the repository (solutions/) around it"
    assert seen["uid"] == sandbox.jail_uid() and seen["pid"] < 10, \
        "own user (unprivileged under a root grader) and PID namespace"
    assert seen["home"] == "/tmp/home" and seen["token"] is None
    allowed = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp", "sys"}
    allowed |= {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, str(sandbox.package_root()), str(work))}
    assert set(seen["root"]) <= allowed, seen["root"]


@pytest.mark.parametrize("name, word", [("reads_source", "FileNotFoundError"),
                                        ("reads_other_handin", "FileNotFoundError"),
                                        ("reads_home", "FileNotFoundError"),
                                        ("overwrites_gradebooks", "FileNotFoundError"),
                                        ("connects", "ConnectionRefusedError")])
def test_each_attack_gets_nothing_and_the_student_keeps_their_points(jailed, name, word):
    rows, out, _, _ = jailed
    r = rows[name]
    assert word in errors(r), r.cell_errors
    for leak in ("LEAKED", "CONNECTED", "OVERWROTE"):
        assert leak not in errors(r), r.cell_errors
    assert r.total == MAX, (r.status, r.checks)
    assert "## Blocked by the grader" in feedback_file(out, name), "the feedback names what was blocked"


def test_no_connection_reached_the_test_server(jailed):
    assert jailed[2].accepted == 0


def test_no_process_outlives_its_notebook(jailed):
    rows, _, _, left = jailed
    assert rows["orphan"].total == MAX, rows["orphan"].status
    assert left == [], f"processes left running after grading: {left}"
    assert any("xlalab-orphan-" in b for b in rows["orphan"].blocked), rows["orphan"].blocked
    assert not any("left running" in b for b in rows["good"].blocked)


def test_the_gradebook_is_out_of_reach_and_complete(jailed):
    rows, out, _, _ = jailed
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        book = {r["student"]: r for r in csv.DictReader(f)}
    assert sorted(book) == sorted(rows) and "hacker" not in book
    assert not list(out.glob("gradebook.csv.changed-*"))


@pytest.mark.parametrize("name, why", [("os_exit", "exit code 1"), ("segfault", "SIGSEGV"),
                                       ("oom_killed", "SIGKILL")])
def test_a_dead_kernel_is_reported_in_seconds(jailed, name, why):
    r = jailed[0][name]
    assert why in r.status and r.total == P1, (r.status, r.checks)
    assert r.seconds < 30, f"{name}: noticed after {r.seconds:.1f} s"
    print(f"{name}: graded in {r.seconds:.1f} s (cell timeout {CELL_TIMEOUT} s)")


def test_memory_bomb_fails_its_cell_only(jailed):
    r = jailed[0]["memory_bomb"]
    assert r.total == MAX and "MemoryError" in errors(r), r.cell_errors
    assert any("memory beyond the limit" in b for b in r.blocked)


def test_honest_work_scores_the_same_in_and_out_of_the_sandbox(jailed, unjailed):
    assert jailed[0]["good"].total == MAX and unjailed[0]["good"].total == MAX
    assert jailed[0]["good"].points() == unjailed[0]["good"].points()
    assert jailed[0]["good"].sandbox == "bwrap" and unjailed[0]["good"].sandbox == "none"


# -- without the sandbox ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def unjailed(lab_root, tmp_path_factory):
    """--sandbox none, one at a time: a hand-in that overwrites every gradebook.csv it finds runs between
    two others (file names sort a_blank, b_overwrites_gradebooks, good); one that reads the source."""
    tree = tmp_path_factory.mktemp("unjailed")   # the overwriting hand-in walks this folder only
    subs, out = tree / "handins-open", tree / "grades-open"
    subs.mkdir()
    out.mkdir()
    from helpers import released
    write(subs, "a_blank", released(lab_root))
    write(subs, "b_overwrites_gradebooks", insert_after(answered(lab_root), "p1-check", overwrite_gradebooks(out)))
    write(subs, "good", answered(lab_root))
    write(subs, "reads_source", insert_after(answered(lab_root), "p1-check",
                                             read_file(lab_root / "solutions" / f"{SAMPLE}.ipynb")))
    rows = grade_submissions(lab_root / "solutions" / f"{SAMPLE}.ipynb", [subs],
                                   GradeOptions(out=str(out), jobs=1, sandbox="none", cell_timeout=CELL_TIMEOUT,
                                                timeout=TIMEOUT, memory_gb=MEMORY_GB))
    return {r.student: r for r in rows}, out, rows.warnings


def test_unsandboxed_the_attacks_work(unjailed):
    """The control: without the jail the same cells do reach the source and the gradebook."""
    rows = unjailed[0]
    assert "LEAKED" in errors(rows["reads_source"])
    assert "OVERWROTE" in errors(rows["b_overwrites_gradebooks"])


def test_an_overwritten_gradebook_loses_no_row_unsandboxed(unjailed):
    rows, out, warnings = unjailed
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        book = {r["student"]: r for r in csv.DictReader(f)}
    assert sorted(book) == sorted(rows), "every student's row is there, and no forged one"
    assert book["good"]["total"] == "6" and book["a_blank"]["total"] == "0"
    assert any("changed behind the grader's back" in w and "b_overwrites_gradebooks" in w for w in warnings), \
        warnings
    kept = list(out.glob("gradebook.csv.changed-*"))
    assert kept and "hacker" in kept[0].read_text()


def test_probe_hides_no_folder_that_python_lives_in(monkeypatch):
    """The probe's tmpfs must not cover the grader's Python (a repository or venv under /tmp): that turned the jail
    off on a clone in /tmp ("execvp .../.venv/bin/python: No such file or directory")."""
    import sys
    from pathlib import PurePath
    from types import SimpleNamespace

    from xlalab.grading import sandbox

    seen: list[list[str]] = []
    monkeypatch.setattr(sandbox.subprocess, "run",
                        lambda cmd, **kw: seen.append(cmd)  # type: ignore[func-returns-value]  # None, so `or` goes on
                        or SimpleNamespace(returncode=0, stdout="", stderr=""))
    sandbox.probe.cache_clear()
    try:
        assert sandbox.probe("/usr/bin/bwrap-for-the-test")[0]
    finally:
        sandbox.probe.cache_clear()
    cmd = seen[0]
    tmpfs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--tmpfs"]
    assert tmpfs, cmd
    for t in tmpfs:
        for exe in {sys.executable, "/tmp/clone/.venv/bin/python"}:
            assert not PurePath(exe).is_relative_to(t), f"the probe's tmpfs {t} hides {exe}"


def test_as_root_each_grading_process_jails_as_its_own_uid(monkeypatch):
    """RLIMIT_NPROC counts per uid: jails graded at once (-j 2) must not share one, or one hand-in's fork bomb makes
    another's kernel fail to start (seen in CI: "BlockingIOError: Resource temporarily unavailable")."""
    import multiprocessing

    from xlalab.grading import sandbox

    monkeypatch.delenv("XLALAB_JAIL_HOST_UID", raising=False)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    mine = sandbox.host_uid()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        other = pool.apply(_host_uid_as_root)
    assert mine is not None and other is not None
    assert mine != other and min(mine, other) >= sandbox.JAIL_HOST_UID_BASE and max(mine, other) < 2**32 - 1
    monkeypatch.setenv("XLALAB_JAIL_HOST_UID", "65534")
    assert sandbox.host_uid() == 65534


def _host_uid_as_root() -> int | None:
    import os

    from xlalab.grading import sandbox

    os.environ.pop("XLALAB_JAIL_HOST_UID", None)
    sandbox.os.geteuid = lambda: 0
    return sandbox.host_uid()


# -- memory per jail, not per process (issue 25) -------------------------------------------------------------------

CHILDREN = """import subprocess, sys
code = "import time; a = bytearray(600 * 2**20); a[::4096] = b'x' * len(a[::4096]); time.sleep(4)"
procs = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(3)]
codes = [p.wait() for p in procs]
assert all(c == 0 for c in codes), f'JAIL LIMIT HELD: children ended with {codes}'
raise AssertionError(f'OVER THE LIMIT: three children held 1.8 GiB together, {codes}')
"""


def test_memory_is_limited_per_jail_not_per_process(lab_root, tmp_path):
    """Break: with --memory-gb 4 one jail held 6.2 GiB (children each under the per-process limit). Here three
    children of 600 MiB each stay under a 1.5 GB address-space limit one by one but not together: a memory cgroup
    of the jail stops them; where the machine has none, the row says that only per-process limits held."""
    from xlalab.grading.lab import load_lab
    from xlalab.grading.task import grade_one

    nb = insert_after(answered(lab_root), "p1-check", CHILDREN)
    path = tmp_path / "children.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    lab = load_lab(lab_root / "solutions" / f"{SAMPLE}.ipynb")
    row = grade_one(lab, HandIn.read("children", path),
                    Limits(cell_timeout=CELL_TIMEOUT, timeout=TIMEOUT, memory_gb=1.5, sandbox="auto"))
    errors = " ".join(row.cell_errors)
    cgroup, why = sandbox.memory_cgroup(2**30)
    if cgroup is None:
        assert "OVER THE LIMIT" in errors, errors
        assert [f.kind for f in row.faults if f.kind == "memory per process"] and "per process only" in row.status
        pytest.skip(f"no memory cgroup here ({why}); the row says only per-process limits held")
    cgroup.remove()
    assert "OVER THE LIMIT" not in errors, (errors, row.status)
    assert "JAIL LIMIT HELD" in errors or any(f.kind == "kernel died" for f in row.faults), (errors, row.status)
    assert any("for the whole jail" in b for b in row.blocked), row.blocked
    assert not any(f.kind == "memory per process" for f in row.faults), row.faults


def test_the_code_that_runs_in_the_jail_lives_in_real_py_files():
    """Issue 25, item 7: the launcher and the privilege drop were string literals passed to ``python -c``; they are
    modules of the package that tools read (they compile here), run by path with ``python -I``."""
    import ast
    import sys

    from xlalab.grading import run

    for path in (run.LAUNCHER, sandbox._DROP):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names}
        assert imported <= set(sys.stdlib_module_names), (path, imported)   # nothing of the grader's own
    cmd = sandbox.command(sandbox.Sandbox("bwrap", "", "/usr/bin/bwrap"), ["python3", "x"], cwd=Path("/tmp"))
    assert "-c" not in cmd
    if sandbox.host_uid() is not None:
        assert cmd[cmd.index("--") + 1:cmd.index("--") + 4] == [sys.executable, "-I", str(sandbox._DROP)]
