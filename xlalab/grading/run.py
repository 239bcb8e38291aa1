"""Running one graded notebook under nbval: in the sandbox, with a cell timeout, a wall-clock limit and an
address-space limit; a kernel that dies is noticed within a second (:mod:`xlalab.grading.nbval_plugin`).

Layout of one run (a fresh temporary folder per submission): ``work/`` holds only the notebook and is the
kernel's current folder; ``priv/`` holds what the grader reads back (the plugin's results, the guard's log,
pytest's log). In the jail both are writable and nothing else of the grader's is visible, so what a student
writes there can only change that student's own row.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading import sandbox as sandbox_mod

PLUGIN = "xlalab.grading.nbval_plugin"

# Runs pytest under the limits; in the jail (a PID namespace of its own) it then writes to the file named by
# argv[2] the processes the notebook left behind (they end with the jail; the feedback says so) and the CPU time
# of the run (which does not reach the grader through bwrap).
_LAUNCHER = (
    "import json, os, resource, subprocess, sys\n"
    "limit = int(sys.argv[1])\n"
    "if limit > 0:\n"
    "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "if not sys.argv[2]:\n"
    "    os.execv(sys.executable, [sys.executable, '-m', 'pytest'] + sys.argv[3:])\n"
    "rc = subprocess.call([sys.executable, '-m', 'pytest'] + sys.argv[3:])\n"
    "left = []\n"
    "for d in os.listdir('/proc'):\n"
    "    if d.isdigit() and int(d) not in (1, os.getpid()):\n"
    "        try:\n"
    "            cmd = open(f'/proc/{d}/cmdline', 'rb').read().replace(b'\\0', b' ').decode(errors='replace')\n"
    "        except OSError:\n"
    "            continue\n"
    "        if cmd.strip() and 'ipykernel_launcher' not in cmd:\n"
    "            left.append(cmd.strip()[:200])\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "with open(sys.argv[2], 'w') as f:\n"
    "    json.dump({'left': left[:20], 'cpu': usage.ru_utime + usage.ru_stime}, f)\n"
    "sys.exit(rc)\n"
)


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


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    for line in read_private(path).decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
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
                 memory_gb: float, env: dict[str, str | None] | None = None,
                 sandbox: sandbox_mod.Sandbox | None = None) -> RunOutcome:
    """Run a graded notebook under nbval in its own session (in the jail when ``sandbox`` is on); kill it,
    its kernel and everything it started at ``timeout``."""
    box = sandbox or sandbox_mod.Sandbox("none")
    nb_path.write_text(nbformat.writes(nb), encoding="utf-8")
    results = priv / "results.jsonl"
    ini = priv / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    log = priv / "pytest.log"
    limit = int(memory_gb * 2**30) if memory_gb and memory_gb > 0 else 0
    leftover = priv / "leftover.json"
    cmd = [sys.executable, "-c", _LAUNCHER, str(limit), str(leftover) if box.on else "", str(nb_path),
           "-c", str(ini), "--rootdir", str(work),
           "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
           "--nbval-lax", "--nbval-current-env", f"--nbval-cell-timeout={cell_timeout:g}",
           f"--xlalab-results={results}", "-q", "--tb=line", "-o", "addopts=", "-W", "ignore"]
    if box.on:
        child_env = _apply(sandbox_mod.jail_env(_child_env(None), "/tmp/home"), env)
    else:
        child_env = _child_env(env)
    if box.on:
        cmd = sandbox_mod.command(box, cmd, writable=[work, priv], cwd=work, env=child_env)
    timed_out = False
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=child_env, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
    plugin = _read_jsonl(results)
    if not box.on:
        # The kernel runs in a session of its own: end it (and what it started) too. (In the jail its PID
        # namespace ended with the run, and the pids it reports mean nothing outside.)
        for rec in plugin:
            if rec.get("event") == "kernel" and isinstance(rec.get("pid"), int) and _is_kernel(rec["pid"]):
                _kill_group(rec["pid"])
    tail = read_private(log, 4000).decode("utf-8", errors="replace")
    try:
        after = json.loads(read_private(leftover) or b"{}") if box.on else {}
    except ValueError:
        after = {}
    after = after if isinstance(after, dict) else {}
    left = [x for x in after.get("left", []) if isinstance(x, str)] if isinstance(after.get("left"), list) else []
    cpu = after.get("cpu") if isinstance(after.get("cpu"), (int, float)) else None
    return RunOutcome(plugin, _read_jsonl(priv / "guard.jsonl"), timed_out, proc.returncode, tail, left, cpu)
