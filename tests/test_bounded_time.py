"""Bounded time (issue 34, item 8): no step of grading one hand-in waits without a limit.

A hand-in that writes junk on its kernel's sockets broke the ZeroMQ connections between the kernel and pytest:
when nbval then stopped the kernel, ``KernelClient.stop_channels`` joined the heartbeat thread with no timeout,
and that thread was blocked for ever sending its ping on a socket with no peer left. Nothing ended the run but the
notebook's limit (1,800 s by default). Now the kernel's shutdown has :data:`watchdog.SHUTDOWN_MARGIN_S` seconds
(in pytest, and the launcher kills the run from outside past its deadline), so the row is decided within the cell
timeout plus that margin.

The junk races with the heartbeat: on the grader before this change, the junk hand-in below held the run to the
notebook's limit in 5 of 6 measured runs (the sixth ended at the cell timeout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from xlalab.grading import launcher, watchdog
from xlalab.grading.submissions import HandIn
from xlalab.grading.task import Limits

JUNK = """import os, stat, threading, time
def sockets():
    found = []
    for name in os.listdir('/proc/self/fd'):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                found.append(int(name))
        except (OSError, ValueError):
            pass
    return found
def junk():   # raw bytes into every socket of the kernel: its ZeroMQ connections to pytest break
    while True:
        for fd in sockets():
            try:
                os.write(fd, b"junk" * 64)
            except OSError:
                pass
        time.sleep(0.37)   # paced: measured, this leaves nbval's heartbeat thread blocked in most runs
threading.Thread(target=junk, daemon=True).start()
time.sleep(2)
"""

CELL_TIMEOUT = 20
NOTEBOOK_LIMIT = 600


@pytest.mark.heavy   # two grading runs of the sample lab, one of them up to its cell timeout
def test_a_hand_in_writing_junk_on_its_kernels_sockets_is_decided_within_the_cell_timeout_and_margin(tmp_path):
    """Break (issue 34): the junk hand-in held the grader until the notebook's limit. Measured here against the
    same hand-in without the junk cell, graded just before: the difference is at most the cell timeout plus the
    margin, and far below the notebook's limit."""
    from xlalab.grading.lab import load_lab
    from xlalab.grading.task import grade_one

    from helpers import SAMPLE, answered, insert_after, make_lab_root

    (tmp_path / "repo").mkdir()
    root = make_lab_root(tmp_path / "repo")
    lab = load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    honest, junk = tmp_path / "honest.ipynb", tmp_path / "junk.ipynb"
    honest.write_text(json.dumps(answered(root)), encoding="utf-8")
    junk.write_text(json.dumps(insert_after(answered(root), "p1-check", JUNK)), encoding="utf-8")
    start = time.monotonic()
    base = grade_one(lab, HandIn.read("honest", honest),
                     Limits(cell_timeout=CELL_TIMEOUT, timeout=NOTEBOOK_LIMIT, memory_gb=3, sandbox="auto"))
    baseline = time.monotonic() - start
    start = time.monotonic()
    row = grade_one(lab, HandIn.read("junk", junk),
                    Limits(cell_timeout=CELL_TIMEOUT, timeout=NOTEBOOK_LIMIT, memory_gb=3, sandbox="auto"))
    took = time.monotonic() - start
    assert base.auto == lab.maximum, base.status
    assert not any(f.kind == "time limit" and f"{NOTEBOOK_LIMIT}" in f.detail for f in row.faults), row.status
    assert any(f"Timeout of {CELL_TIMEOUT} seconds" in e for e in row.cell_errors), row.cell_errors
    assert 2 <= row.auto < lab.maximum, "the check before the junk counts; the ones after it did not run"
    bound = CELL_TIMEOUT + watchdog.SHUTDOWN_MARGIN_S
    assert took - baseline < bound, f"{took:.1f} s against {baseline:.1f} s for the honest hand-in (bound {bound} s)"


def _launcher_wait(tmp_path, lines: list[str], wall: float) -> tuple[dict, float]:
    """The launcher's wait for a stand-in pytest (a sleeping child) that sends ``lines`` on the deadline pipe."""
    script = tmp_path / "child.py"
    script.write_text("import os, sys, time\nfd = int(sys.argv[1])\n"
                      "for line in sys.argv[2:]:\n    os.write(fd, (line + '\\n').encode())\ntime.sleep(600)\n",
                      encoding="utf-8")
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, str(script), str(w), *lines], pass_fds=(w,))
    os.close(w)
    start = time.monotonic()
    try:
        ended = launcher.wait_bounded(proc, wall, r)
    finally:
        os.close(r)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return ended, time.monotonic() - start


class _ScriptedWait:
    """The launcher's wait on a scripted clock: ``lines`` (``(second, text)``) reach the deadline pipe at their
    second; the clock moves only when the wait sleeps or polls (no real waiting), and pytest never exits by itself
    (a stand-in process that is only ever killed)."""

    def __init__(self, lines: list[tuple[float, str]]) -> None:
        self.t = 0.0
        self.lines = sorted(lines)
        self.r, self.w = os.pipe()
        self.killed_at: float | None = None

    # time.monotonic / time.sleep
    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    # select.select on the deadline pipe: the next line arrives within the step, or the step passes
    def select(self, readable, writable, errors, step):
        if self.lines and self.lines[0][0] <= self.t + step:
            at, text = self.lines.pop(0)
            self.t = max(self.t, at)
            os.write(self.w, (text + "\n").encode())
            if not self.lines:
                os.close(self.w)   # the last line: then end of file, as when pytest closes its end
            return readable, [], []
        self.t += step
        return [], [], []

    # the subprocess.Popen stand-in
    def poll(self):
        return None if self.killed_at is None else -9

    def kill(self) -> None:
        self.killed_at = self.t

    def wait(self):
        return -9


def _scripted(monkeypatch, lines: list[tuple[float, str]], wall: float) -> tuple[dict, float | None]:
    wait = _ScriptedWait(lines)
    monkeypatch.setattr(launcher, "time", wait)
    monkeypatch.setattr(launcher, "select", wait)
    try:
        ended = launcher.wait_bounded(wait, wall, wait.r)   # type: ignore[arg-type]  # a Popen stand-in
    finally:
        os.close(wait.r)
    return ended, wait.killed_at


def test_an_armed_deadline_ends_the_wait_at_that_second(monkeypatch):
    """Scripted clock: armed at 0.5 s for 1 s, the run is killed at 1.5 s, named after what was armed."""
    ended, killed = _scripted(monkeypatch, [(0.5, "arm 1 stopping the kernel")], wall=60)
    assert ended == {"timed_out": False, "stuck": "stopping the kernel"} and killed == pytest.approx(1.5)


def test_a_disarmed_deadline_leaves_the_wall(monkeypatch):
    ended, killed = _scripted(monkeypatch, [(0.0, "arm 1 a cell"), (0.5, "disarm")], wall=2)
    assert ended == {"timed_out": True, "stuck": ""} and killed == pytest.approx(2.0)


def test_a_deadline_past_the_wall_leaves_the_wall(monkeypatch):
    ended, killed = _scripted(monkeypatch, [(0.0, "arm 30 a cell")], wall=2)
    assert ended == {"timed_out": True, "stuck": ""} and killed == pytest.approx(2.0)


def test_malformed_lines_arm_nothing(monkeypatch):
    lines = [(0.1 * i, text) for i, text in enumerate(["arm x y", "arm -5 z", "arm nan q", "junk", "arm inf w",
                                                         "arm 0.5" + "x" * launcher.LINE_LIMIT])]
    ended, killed = _scripted(monkeypatch, lines, wall=2)
    assert ended == {"timed_out": True, "stuck": ""} and killed == pytest.approx(2.0)


@pytest.mark.heavy   # a real child process and the real clock: the bound holds only on a machine not overloaded
def test_the_launcher_ends_the_run_at_the_deadline_pytest_armed(tmp_path):
    """pytest arms a deadline (here: a kernel shutdown with 1 s); the launcher kills it there, not at the wall."""
    ended, took = _launcher_wait(tmp_path, ["arm 1 stopping the kernel"], wall=60)
    assert ended == {"timed_out": False, "stuck": "stopping the kernel"}, ended
    assert took < 10, f"{took:.1f} s"


@pytest.mark.heavy   # a real child process and the real clock (the scripted tests above: the fast tier)
def test_the_launcher_keeps_the_wall_limit_when_pytest_disarms(tmp_path):
    """A disarmed deadline leaves the notebook's limit (here 2 s) in force: the run is then timed out."""
    ended, took = _launcher_wait(tmp_path, ["arm 1 a cell", "disarm"], wall=2)
    assert ended == {"timed_out": True, "stuck": ""}, ended
    assert 1.5 < took < 10, f"{took:.1f} s"


@pytest.mark.heavy   # a real child process and the real clock (the scripted tests above: the fast tier)
def test_the_launcher_reads_no_deadline_from_malformed_lines(tmp_path):
    """Lines that are not ``arm SECONDS WHAT`` or ``disarm`` change nothing (the wall limit still ends it)."""
    ended, took = _launcher_wait(tmp_path, ["arm x y", "arm -5 z", "arm nan q", "junk", "arm inf w"], wall=2)
    assert ended == {"timed_out": True, "stuck": ""}, ended
    assert took < 10, f"{took:.1f} s"


def test_a_stop_that_never_returns_is_abandoned_after_its_budget():
    """The bounded stop gives up on a blocked ``stop_channels`` (the heartbeat's join) and kills the kernel."""
    import threading

    from xlalab.grading import nbval_plugin

    killed = []
    release = threading.Event()

    class Client:
        def stop_channels(self):
            release.wait(30)   # blocked, as the heartbeat's join was (released at the end of this test)

    class Manager:
        def shutdown_kernel(self, now=False):
            killed.append(now)

    class Kernel:
        def __init__(self):
            self.kc, self.km = Client(), Manager()

    kernel = Kernel()
    try:
        finished = nbval_plugin.bounded_stop(kernel, budget=0.05)
    finally:
        release.set()
    assert finished is False and killed == [True], "it waited for the blocked stop instead of its budget"
    assert not hasattr(kernel, "km"), "nbval's is_alive() reads a stopped kernel from the missing km"
    nbval_plugin.STATE.abandoned = False   # this test's pytest exits as usual


def test_a_run_ended_at_its_shutdown_margin_is_a_typed_time_limit_fault(tmp_path):
    """The launcher's backstop (``RunOutcome.stuck``) reaches the row as a fault of kind "time limit", typed, for the
    student's run and for the judge's."""
    from xlalab.grading.lab import load_lab
    from xlalab.grading.run import RunOutcome
    from xlalab.grading.score import run_faults

    from helpers import SAMPLE, make_lab_root

    (tmp_path / "repo").mkdir()
    root = make_lab_root(tmp_path / "repo")
    lab = load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    calm = RunOutcome([], False, 0, "", ran=True)
    stuck = RunOutcome([], False, 0, "", ran=True, stuck="stopping the kernel")
    assert run_faults(lab, calm, calm, 60) == []
    kinds = [(f.kind, "stopping the kernel" in f.detail) for f in run_faults(lab, stuck, calm, 60)]
    assert kinds == [("time limit", True)]
    assert [f.kind for f in run_faults(lab, calm, stuck, 60)] == ["judge failed"]
