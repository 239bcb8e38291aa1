"""A pytest plugin used by the grader (:mod:`xlalab.grading.run`): per-check results from nbval, and a kernel that
dies is noticed.

Loaded with ``-p xlalab.grading.nbval_plugin --xlalab-out-fd N`` next to ``--nbval-lax``
(:mod:`xlalab.grading.run`), in the student's run and in the judge's. At configure time, before nbval starts the
kernel, it makes this process non-dumpable (the kernel, the same user, cannot open its descriptors or read its
memory). It writes JSON lines to descriptor N (a pipe the grader reads) as it goes
(so a run killed half-way keeps what it had); ``--xlalab-results PATH`` appends them to a file instead (for
tests):

- ``{"event": "collected", "cell": n, "id": cell_id, "check": id|null}`` for every nbval item, at collection
  time, with the check id read from the item's cell metadata (``item.cell.metadata.xlalab.check``);
- ``{"event": "kernel", "pid": pid}`` once the kernel has started (the grader kills it if the run overruns);
- ``{"event": "result", "cell": n, "check": id|null, "phase": ..., "outcome": ..., "message": ...,
  "duration": s, "died": {"code": c, "signal": name}|null, "dead_at_start": bool, "timed_out": bool}`` per phase
  that did not pass, and for the call phase always (``duration``: seconds the cell ran; ``died``: the kernel died
  while this cell ran, :func:`exit_status`; ``dead_at_start``: the kernel was already dead when the cell was to
  start; ``timed_out``: the cell reached its timeout, as nbval noted). The grader decides from these fields, never
  from the message's words.

nbval 0.11 waits for a reply from a dead kernel until the cell timeout. This plugin wraps nbval's
``RunningKernel.get_message`` so that it waits in one-second slices and raises :class:`KernelDied` as soon
as the kernel process has exited; the following cells then fail at once with "Kernel dead on test start". The
wrapper is :mod:`xlalab.grading.watchdog`'s, which also keeps a kernel that floods its sockets from stretching a
cell's wait.

Bounded time. With ``--xlalab-deadline-fd M`` (the launcher's pipe, :func:`xlalab.grading.launcher.wait_bounded`)
it arms the run's deadline as it goes: ``arm SECONDS WHAT`` when a cell starts (its timeout, the watchdog's drain
and :data:`~xlalab.grading.watchdog.SHUTDOWN_MARGIN_S`), when a cell ends and when the kernel is stopped (the
margin); past it the launcher kills the run. nbval's ``RunningKernel.stop`` is replaced by :func:`bounded_stop`:
``stop_channels`` joins the client's heartbeat thread with no timeout, and a kernel that writes junk on its
sockets leaves that thread blocked for ever in a send; the stop gives up on the channels after
:data:`~xlalab.grading.watchdog.STOP_CHANNELS_S` and kills the kernel anyway, and pytest then leaves with
``os._exit`` once its results are out (an abandoned thread could hold the interpreter's exit).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
import threading
from typing import Any

import pytest

from xlalab.grading.watchdog import (
    DRAIN_S,
    SHUTDOWN_MARGIN_S,
    STOP_CHANNELS_S,
    WATCH,
    KernelDied,
    wrap as _watched,
    wrap_execute as _watched_execute,
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Interrupt|Exit|Failure)\w*|KernelDied)\b.*")


def exit_status(km) -> dict[str, Any]:
    """How the kernel ended, as data: ``{"code": its exit code or None, "signal": the signal's name or None}``."""
    code = None
    try:
        code = km.provisioner.process.returncode  # jupyter_client >= 7 LocalProvisioner
    except AttributeError:
        pass
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return {"code": None, "signal": name}
    return {"code": code, "signal": None}


def _patch_nbval() -> None:
    from xlalab import compat

    RunningKernel = compat.require("nbval.kernel", "the grader (it runs labs with nbval)").RunningKernel

    if getattr(RunningKernel.get_message, "_xlalab_patched", False):
        return
    RunningKernel.get_message = _watched(RunningKernel.get_message, exit_status)   # see xlalab.grading.watchdog
    RunningKernel.execute_cell_input = _watched_execute(RunningKernel.execute_cell_input)
    RunningKernel.stop = _stop


class _State:
    """This pytest's deadline pipe, and whether a kernel's channels were left stopping (see :func:`bounded_stop`)."""

    deadline_fd: int | None = None
    abandoned = False
    exitstatus = 0


STATE = _State()


def arm(seconds: float | None, what: str) -> None:
    """Tell the launcher that this run must end within ``seconds`` from now (None: only the notebook's limit)."""
    fd = STATE.deadline_fd
    if fd is None:
        return
    what = " ".join(what.split())[:200]
    line = "disarm\n" if seconds is None or not math.isfinite(seconds) else f"arm {max(seconds, 0.0):.3f} {what}\n"
    data = line.encode("utf-8", errors="replace")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


def bounded_stop(kernel: Any, budget: float = STOP_CHANNELS_S) -> bool:
    """nbval's ``RunningKernel.stop`` within a limit: ``stop_channels`` in a thread for at most ``budget``
    seconds, then the kernel killed (``shutdown_kernel(now=True)``) whether the channels stopped or not. Returns
    whether they did; if not, pytest leaves with ``os._exit`` at its end (:func:`pytest_unconfigure`)."""
    done = threading.Event()

    def channels() -> None:
        try:
            kernel.kc.stop_channels()
        finally:
            done.set()

    threading.Thread(target=channels, name="xlalab-stop-channels", daemon=True).start()
    finished = done.wait(budget)
    if not finished:
        STATE.abandoned = True
    kernel.km.shutdown_kernel(now=True)
    try:
        del kernel.km      # as nbval's stop: is_alive() is False from now on
    except AttributeError:
        pass
    return finished


def _stop(self) -> None:
    arm(SHUTDOWN_MARGIN_S, "stopping the kernel")
    bounded_stop(self)


def pytest_addoption(parser):
    group = parser.getgroup("xlalab")
    group.addoption("--xlalab-results", default=None, help="append per-cell results (JSON lines) to this file")
    group.addoption("--xlalab-out-fd", type=int, default=None, help="write per-cell results to this descriptor")
    group.addoption("--xlalab-deadline-fd", type=int, default=None,
                    help="arm the run's deadline on this descriptor (the launcher's pipe)")


def _no_dump() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0
    except Exception:  # noqa: BLE001  (not Linux: nothing to protect against here)
        pass


def pytest_configure(config):
    _patch_nbval()
    if config.getoption("xlalab_out_fd") is not None:
        _no_dump()
    STATE.deadline_fd = config.getoption("xlalab_deadline_fd")


def pytest_sessionfinish(session, exitstatus):
    STATE.exitstatus = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """If a kernel's channels were abandoned, leave now: the results and the summary are out, and the blocked
    thread (and the ZeroMQ context it holds) must not hold the interpreter's exit."""
    if STATE.abandoned:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(STATE.exitstatus)


def _write(config, record: dict) -> None:
    data = (json.dumps(record) + "\n").encode("utf-8", errors="backslashreplace")
    fd = config.getoption("xlalab_out_fd")
    if fd is not None:
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            pass
        return
    path = config.getoption("xlalab_results")
    if not path:
        return
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _check_of(item) -> str | None:
    cell = getattr(item, "cell", None)
    if cell is None:
        return None
    meta = cell.get("metadata", {}).get("xlalab", {})
    check = meta.get("check") if isinstance(meta, dict) else None
    return check if isinstance(check, str) else None


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        check = _check_of(item)
        item.user_properties.append(("xlalab_check", check))
        _write(config, {"event": "collected", "cell": getattr(item, "cell_num", None),
                        "id": getattr(getattr(item, "cell", None), "get", lambda k: None)("id"),
                        "check": check})


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    parent = getattr(item, "parent", None)
    kernel = getattr(parent, "kernel", None)
    if parent is not None and kernel is not None and not getattr(parent, "_xlalab_pid_written", False):
        try:
            pid = kernel.km.provisioner.process.pid
        except AttributeError:
            pid = None
        if pid:
            _write(item.config, {"event": "kernel", "pid": pid})
        parent._xlalab_pid_written = True
    try:   # the watchdog's deadline for this cell (xlalab.grading.watchdog)
        timeout = float(item.config.getoption("nbval_cell_timeout"))
    except (ValueError, TypeError):
        timeout = None
    item._xlalab_dead_at_start = kernel is not None and not kernel.is_alive()   # nbval's own test, as data
    name = f"cell {getattr(item, 'cell_num', '?')}"
    arm(None if timeout is None or timeout <= 0 else timeout + DRAIN_S + SHUTDOWN_MARGIN_S,
        f"{name} (its timeout, the watchdog's drain and the shutdown margin)")
    WATCH.cell_started(timeout)
    before = bool(getattr(parent, "timed_out", False))
    try:
        yield
    finally:
        # nbval sets its notebook's ``timed_out`` when this cell reaches its timeout: the fact, as data
        item._xlalab_timed_out = not before and bool(getattr(parent, "timed_out", False))
        WATCH.cell_ended()
        arm(SHUTDOWN_MARGIN_S, f"after {name}: the kernel's shutdown and the end of pytest")


def failure_message(excinfo) -> str:
    """One line saying why a cell failed: the exception's last traceback line, or the error itself."""
    exc = excinfo.value
    if isinstance(exc, KernelDied):
        return str(exc)
    inner = getattr(exc, "inner_traceback", None)
    if "Timeout" in str(exc):
        return _ANSI.sub("", str(exc)).strip()[:500]
    if inner:
        lines = [_ANSI.sub("", line).strip() for line in str(inner).splitlines()]
        lines = [line for line in lines if line]
        for line in reversed(lines):
            if _ERROR_LINE.match(line):
                return line.rstrip(":").strip()[:500]
        if lines:
            return lines[-1][:500]
    text = _ANSI.sub("", str(exc)).strip().splitlines()
    return (f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__)[:500]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" and report.passed:
        return
    message, died = "", None
    if call.excinfo is not None and isinstance(call.excinfo.value, KernelDied):
        died = call.excinfo.value.died
    if call.excinfo is not None and not report.passed:
        try:
            message = failure_message(call.excinfo)
        except Exception as err:  # noqa: BLE001  (never let reporting break the run)
            message = f"(could not read the error: {err})"
    cell = getattr(item, "cell", None)
    _write(item.config, {"event": "result", "cell": getattr(item, "cell_num", None), "check": _check_of(item),
                         "id": cell.get("id") if cell is not None else None,
                         "phase": report.when, "outcome": report.outcome,
                         "xfail": bool(getattr(report, "wasxfail", False)), "message": message, "died": died,
                         "dead_at_start": report.when == "call" and not report.passed
                         and bool(getattr(item, "_xlalab_dead_at_start", False)),
                         "timed_out": report.when == "call" and not report.passed
                         and bool(getattr(item, "_xlalab_timed_out", False)),
                         "duration": round(float(getattr(report, "duration", 0.0) or 0.0), 4)})
