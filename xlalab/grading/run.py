"""Running one graded notebook under nbval: in the sandbox, with a cell timeout, a wall-clock limit, an
address-space limit and a process limit; a kernel that dies is noticed within a second
(:mod:`xlalab.grading.nbval_plugin`).

Layout of one run (a fresh temporary folder per submission): ``priv/`` holds the notebook to run and pytest's
ini file, read-only in the jail; ``work/`` is the kernel's current folder, in the jail an empty, size-capped
tmpfs (nothing of it comes back). Nothing the grader reads back is a file the jail can write:

- the grader sends the check cells' code and per-check keys (:func:`check_payload`) to pytest through a file
  descriptor (an unlinked file), which the plugin reads and closes before the kernel starts;
- pytest (the plugin: nbval's own per-cell outcome) and the launcher (the guard's log, the processes left
  behind, the CPU time) send their results back through a pipe the grader reads.

pytest and the launcher make themselves non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``) before the kernel
starts, so the kernel, the same user in the same jail, can neither open their descriptors in ``/proc`` nor
read or trace their memory; the kernel is started with its descriptors closed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading import sandbox as sandbox_mod

PLUGIN = "xlalab.grading.nbval_plugin"
RESULTS_LIMIT = 64 * 2**20      # bytes of results the grader reads from the pipe

# The launcher (pytest under the limits; what it sends back): a real file the jail runs, see its docstring.
LAUNCHER = Path(__file__).with_name("launcher.py")


def guard_mac(key: str, check: str, event: str, passed: object) -> str:
    """The MAC a guard line of ``check`` carries (the key reaches the kernel only inside that check's cell)."""
    msg = f"{check}\0{event}\0{passed!r}".encode("utf-8", errors="backslashreplace")
    return hmac.new(key.encode(), msg, hashlib.sha256).hexdigest()


def _child_env(extra: dict[str, str | None] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PYTEST_") or k.startswith("COV_") or k.startswith("COVERAGE_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("MPLBACKEND", "Agg")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Make sure the kernel imports this xlalab even when it is not installed.
    package_root = str(sandbox_mod.package_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), package_root) if p)
    return _apply(env, extra)


def _apply(env: dict[str, str], extra: dict[str, str | None] | None) -> dict[str, str]:
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
class RunOutcome:
    plugin: list[dict]
    guard: list[dict]
    timed_out: bool
    returncode: int | None
    log_tail: str
    leftover: list[str] = field(default_factory=list)   # processes the notebook left (jail only)
    cpu_seconds: float | None = None                      # CPU time of pytest and the kernel (jail only)
    memory_jail: bool = False         # --memory-gb held for the whole jail (a memory cgroup), not per process only
    memory_note: str = ""             # why not, where it did not
    memory_peak: int | None = None    # the jail's peak memory in bytes (cgroup), where the kernel says
    memory_kills: int = 0             # processes the kernel killed at the jail's memory limit


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


def check_payload(checks: dict[str, str], guard_name: str, keys: dict[str, str]) -> dict:
    """What the plugin puts into each graded check cell as nbval runs it: ``{"cells": {check: source}}``.

    ``checks`` maps a check id to its header line and body; the source calls the guard with the id, the body
    and the check's key, so that no check's code or key is in the kernel before its cell runs.
    """
    cells = {}
    for check, (header, body) in checks.items():
        cells[check] = f"{header}\n{guard_name}({check!r}, {body!r}, {keys[check]!r})"
    return {"cells": cells}


def _payload_fd(payload: dict) -> int:
    """A read-only descriptor of an unlinked file holding ``payload`` (JSON), positioned at its start."""
    with tempfile.TemporaryFile() as f:
        f.write(json.dumps(payload).encode())
        f.flush()
        fd = os.open(f"/proc/self/fd/{f.fileno()}", os.O_RDONLY)
    return fd


def run_notebook(nb: Any, work: Path, priv: Path, nb_path: Path, *, cell_timeout: float, timeout: float,
                 memory_gb: float, env: dict[str, str | None] | None = None,
                 sandbox: sandbox_mod.Sandbox | None = None, payload: dict | None = None,
                 guard_log: Path | None = None, max_tasks: int = sandbox_mod.MAX_TASKS) -> RunOutcome:
    """Run a graded notebook under nbval in its own session (in the jail when ``sandbox`` is on); kill it,
    its kernel and everything it started at ``timeout``. ``nb_path`` lies in ``priv`` (read-only in the jail);
    ``payload`` is :func:`check_payload`'s; ``guard_log`` the file the guard writes (in ``work``)."""
    box = sandbox or sandbox_mod.Sandbox("none")
    nb_path.write_text(nbformat.writes(nb), encoding="utf-8")
    ini = priv / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    log = priv.parent / "pytest.log"
    guard_log = guard_log or (work / ".xlalab-guard.jsonl")
    limit = int(memory_gb * 2**30) if memory_gb and memory_gb > 0 else 0
    out_r, out_w = os.pipe()
    in_fd = _payload_fd(payload or {"cells": {}})
    cmd = [sys.executable, "-I", str(LAUNCHER), str(limit), str(max_tasks if box.on else 0), str(out_w), str(in_fd),
           str(guard_log), "jail" if box.on else "", str(nb_path), str(work / nb_path.name), f"{timeout:g}",
           "-c", str(ini), "--rootdir", str(work), "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:xdist",
           "-p", "no:randomly", "--nbval-lax", "--nbval-current-env", f"--nbval-cell-timeout={cell_timeout:g}",
           "-q", "--tb=line", "-o", "addopts=", "-W", "ignore"]
    if box.on:
        child_env = _apply(sandbox_mod.jail_env(_child_env(None), "/tmp/home"), env)
        cmd = sandbox_mod.command(box, cmd, readonly=[priv], scratch=[work], cwd=work, env=child_env)
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
                                    env=child_env, start_new_session=True, pass_fds=(out_w, in_fd))
            os.close(out_w)
            out_w = -1
            os.close(in_fd)
            in_fd = -1
            reader.start()
            try:
                proc.wait(timeout=timeout + 30)   # the launcher ends the run at ``timeout``; this is a backstop
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                proc.wait()
    finally:
        for fd in (out_w, in_fd):
            if fd >= 0:
                os.close(fd)
        peak, kills = cgroup.report() if cgroup is not None else (None, 0)
        if cgroup is not None:
            cgroup.remove()
    reader.join(timeout=5)   # without the jail a process the notebook left may hold the pipe: do not wait on it
    os.close(out_r) if not reader.is_alive() else None
    records = _parse_lines(b"".join(chunks).decode("utf-8", errors="replace").splitlines())
    plugin = [r for r in records if r.get("event") != "launcher"]
    after = next((r for r in records if r.get("event") == "launcher"), {})
    timed_out = timed_out or after.get("timed_out") is True
    if not box.on:
        # The kernel runs in a session of its own: end it (and what it started) too. (In the jail its PID
        # namespace ended with the run, and the pids it reports mean nothing outside.)
        for rec in plugin:
            if rec.get("event") == "kernel" and isinstance(rec.get("pid"), int) and _is_kernel(rec["pid"]):
                _kill_group(rec["pid"])
    tail = read_private(log, 4000).decode("utf-8", errors="replace")
    left = [x for x in after.get("left", []) if isinstance(x, str)] if isinstance(after.get("left"), list) else []
    cpu = after.get("cpu") if isinstance(after.get("cpu"), (int, float)) else None
    guard_lines = [x for x in after.get("guard", []) if isinstance(x, str)] \
        if isinstance(after.get("guard"), list) else []
    return RunOutcome(plugin, _parse_lines(guard_lines), timed_out, proc.returncode, tail, left, cpu,
                      memory_jail=cgroup is not None, memory_note=memory_note, memory_peak=peak, memory_kills=kills)
