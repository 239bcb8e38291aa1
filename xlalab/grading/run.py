"""Running one graded notebook under nbval: in the sandbox, with a cell timeout, a wall-clock limit, an
address-space limit and a process limit; a kernel that dies is noticed within a second
(:mod:`xlalab.grading.nbval_plugin`).

Layout of one run (a fresh temporary folder per run): ``priv/`` holds the notebook to run and pytest's ini file
(and for the judge the probe records and the hand-in's sources), read-only in the jail; ``work/`` is the kernel's
current folder, in the jail an empty, size-capped tmpfs. Nothing the grader reads back is a file it trusts:
pytest (the plugin: nbval's own per-cell outcome) and the launcher (:mod:`xlalab.grading.launcher`: the probe
records file, the processes left behind, the CPU time) send their results through a pipe, and the grader reads
them as data (JSON; the records are parsed by :func:`xlalab.grading.probe.parse_records`).

pytest and the launcher make themselves non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``) before the kernel
starts, so the kernel, the same user in the same jail, can neither open their descriptors in ``/proc`` nor
read or trace their memory.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading import sandbox as sandbox_mod

PLUGIN = "xlalab.grading.nbval_plugin"
LAUNCHER = Path(__file__).with_name("launcher.py")
RESULTS_LIMIT = 96 * 2**20      # bytes of results the grader reads from the pipe (the records are base64)


def _child_env(extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PYTEST_") or k.startswith("COV_") or k.startswith("COVERAGE_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("MPLBACKEND", "Agg")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Make sure the kernel imports this xlalab even when it is not installed.
    package_root = str(sandbox_mod.package_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), package_root) if p)
    return _apply(env, extra)


def _apply(env: dict[str, str], extra: Mapping[str, str | None] | None) -> dict[str, str]:
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _is_kernel(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"ipykernel" in cmdline


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean(value: Any) -> Any:
    """``value`` (from JSON the run sent) with lone surrogates in its strings replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    return value


def _parse_lines(lines: list[str]) -> list[dict]:
    records = []
    for line in lines:
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            records.append(clean(rec))
    return records


@dataclass
class CellResult:
    """One nbval phase of one cell, as the plugin reported it (:mod:`xlalab.grading.nbval_plugin`)."""

    cell: int | None
    id: str | None
    check: str | None
    phase: str              # setup | call | teardown
    outcome: str            # passed | failed | skipped
    message: str = ""
    duration: float = 0.0
    xfail: bool = False
    died: dict[str, Any] | None = None   # the kernel died while this cell ran: {"code": int|None, "signal": str|None}
    dead_at_start: bool = False           # the kernel was dead before this cell started
    timed_out: bool = False               # this cell reached its timeout (nbval interrupted it)

    @classmethod
    def from_record(cls, rec: dict) -> CellResult | None:
        """A result from one JSON line of the plugin, or None if it is not one."""
        if rec.get("event") != "result":
            return None

        def text(key: str) -> str | None:
            value = rec.get(key)
            return value if isinstance(value, str) else None

        cell = rec.get("cell")
        duration = rec.get("duration")
        died = rec.get("died")
        if isinstance(died, dict):
            code, sig = died.get("code"), died.get("signal")
            died = {"code": code if isinstance(code, int) and not isinstance(code, bool) else None,
                    "signal": sig[:40] if isinstance(sig, str) else None}
        else:
            died = None
        return cls(cell if isinstance(cell, int) else None, text("id"), text("check"), text("phase") or "call",
                   text("outcome") or "failed", text("message") or "",
                   float(duration) if isinstance(duration, (int, float)) else 0.0, rec.get("xfail") is True,
                   died, rec.get("dead_at_start") is True, rec.get("timed_out") is True)

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


@dataclass
class RunOutcome:
    """One run of a notebook under nbval: per-cell results, the probe records it left, how it ended."""

    results: list[CellResult]
    timed_out: bool
    returncode: int | None
    log_tail: str
    leftover: list[str] = field(default_factory=list)   # processes the notebook left (jail only)
    cpu_seconds: float | None = None                      # CPU time of pytest and the kernel (jail only)
    records: bytes = b""                                  # the probe records file (record mode), unparsed
    records_truncated: bool = False
    kernel_pids: list[int] = field(default_factory=list)
    ran: bool = False                                     # whether nbval reported any cell
    memory_jail: bool = False         # --memory-gb held for the whole jail (a memory cgroup), not per process only
    memory_note: str = ""             # why not, where it did not
    memory_peak: int | None = None    # the jail's peak memory in bytes (cgroup), where the kernel says
    memory_kills: int = 0             # processes the kernel killed at the jail's memory limit
    stuck: str = ""                   # what pytest was doing when the launcher ended it at its armed deadline
                                      # (the kernel's shutdown past the watchdog's SHUTDOWN_MARGIN_S), else ""


def read_private(path: Path, limit: int = 64 * 2**20) -> bytes:
    """At most ``limit`` bytes of a file the run wrote; b"" if it is missing, a link or not a regular file.

    A jailed notebook can write these files: it must not make the grader follow a link out of the folder,
    block on a FIFO, or read gigabytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        import stat
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        size = os.fstat(fd).st_size
        if size > limit:
            os.lseek(fd, size - limit, os.SEEK_SET)
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def run_notebook(nb: Any, work: Path, priv: Path, nb_path: Path, *, cell_timeout: float, timeout: float,
                 memory_gb: float, env: Mapping[str, str | None] | None = None,
                 sandbox: sandbox_mod.Sandbox | None = None, records: Path | None = None,
                 max_tasks: int = sandbox_mod.MAX_TASKS, writable: Sequence[Path] = ()) -> RunOutcome:
    """Run a notebook under nbval in its own session (in the jail when ``sandbox`` is on); kill it, its kernel
    and everything it started at ``timeout``. ``nb_path`` lies in ``priv`` (read-only in the jail); ``records``
    is the probe records file the notebook writes (in ``work``), sent back by the launcher; ``writable``: folders
    bound writable into the jail (the judge's cache of GPU answers; never given to a student's notebook)."""
    box = sandbox or sandbox_mod.Sandbox("none")
    nb_path.write_text(nbformat.writes(nb), encoding="utf-8")
    ini = priv / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    log = priv.parent / f"{nb_path.stem}.pytest.log"
    limit = int(memory_gb * 2**30) if memory_gb and memory_gb > 0 else 0
    out_r, out_w = os.pipe()
    cmd = [sys.executable, "-I", str(LAUNCHER), str(limit), str(max_tasks if box.on else 0), str(out_w),
           str(records or ""), "jail" if box.on else "", str(nb_path), str(work / nb_path.name), f"{timeout:g}",
           "-c", str(ini), "--rootdir", str(work), "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:xdist",
           "-p", "no:randomly", "--nbval-lax", "--nbval-current-env", f"--nbval-cell-timeout={cell_timeout:g}",
           "-q", "--tb=line", "-o", "addopts=", "-W", "ignore"]
    if box.on:
        child_env = _apply(sandbox_mod.jail_env(_child_env(None), "/tmp/home"), env)
        cmd = sandbox_mod.command(box, cmd, readonly=[priv], scratch=[work], writable=writable, cwd=work,
                                  env=child_env)
    else:
        child_env = _child_env(env)
    cgroup, memory_note = sandbox_mod.memory_cgroup(limit)   # the whole jail under --memory-gb, where possible
    if cgroup is not None:
        cmd = cgroup.wrap(cmd)
    chunks: list[bytes] = []

    def drain() -> None:
        size = 0
        while True:
            data = os.read(out_r, 2**16)
            if not data:
                return
            if size < RESULTS_LIMIT:
                chunks.append(data)
                size += len(data)

    reader = threading.Thread(target=drain, daemon=True)
    timed_out = False
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=child_env, start_new_session=True, pass_fds=(out_w,))
            os.close(out_w)
            out_w = -1
            reader.start()
            try:
                proc.wait(timeout=timeout + 30)   # the launcher ends the run at ``timeout``; this is a backstop
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                proc.wait()
    finally:
        if out_w >= 0:
            os.close(out_w)
        peak, kills = cgroup.report() if cgroup is not None else (None, 0)
        if cgroup is not None:
            cgroup.remove()
    reader.join(timeout=5)   # without the jail a process the notebook left may hold the pipe: do not wait on it
    os.close(out_r) if not reader.is_alive() else None
    lines = b"".join(chunks).decode("utf-8", errors="replace").splitlines()
    records_ = _parse_lines(lines)
    after = next((r for r in records_ if r.get("event") == "launcher"), {})
    results = [c for c in (CellResult.from_record(r) for r in records_) if c is not None]
    pids = [r["pid"] for r in records_ if r.get("event") == "kernel" and isinstance(r.get("pid"), int)]
    timed_out = timed_out or after.get("timed_out") is True
    if not box.on:
        # The kernel runs in a session of its own: end it (and what it started) too. (In the jail its PID
        # namespace ended with the run, and the pids it reports mean nothing outside.)
        for pid in pids:
            if _is_kernel(pid):
                _kill_group(pid)
    tail = read_private(log, 4000).decode("utf-8", errors="replace")
    left = [x for x in after.get("left", []) if isinstance(x, str)] if isinstance(after.get("left"), list) else []
    cpu = after.get("cpu") if isinstance(after.get("cpu"), (int, float)) else None
    data = b""
    if isinstance(after.get("records"), str):
        try:
            data = base64.b64decode(after["records"], validate=True)
        except ValueError:
            data = b""
    return RunOutcome(results, timed_out, proc.returncode, tail, left, cpu, data,
                      after.get("records_truncated") is True, pids,
                      any(r.get("event") == "result" for r in records_),
                      memory_jail=cgroup is not None, memory_note=memory_note, memory_peak=peak, memory_kills=kills,
                      stuck=after["stuck"][:200] if isinstance(after.get("stuck"), str) else "")
