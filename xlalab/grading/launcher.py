"""The launcher: the first program of a graded run, in the jail (run by path with ``python -I``, importing the
standard library only; :func:`xlalab.grading.run.run_notebook` builds its command line).

It makes itself non-dumpable (the kernel, the same user, cannot reach its descriptors or memory), sets the limits
(address space, processes, no core files), copies the notebook into the work folder, runs pytest with nbval and the
grader's plugin, ends it (and, in the jail, every other process) at the wall-clock limit, then sends one JSON line
down the results pipe: whether it timed out, the processes the notebook left behind (jail only), the CPU time of
pytest and the kernel, and the guard's log (a file in the work folder, at most :data:`GUARD_LOG_LIMIT` bytes).

argv: address-space limit (bytes, 0: none), process limit (0: none), out fd, in fd, guard log, "jail" or "",
the notebook, its copy in the work folder, the wall-clock limit in seconds, then pytest's arguments.
"""

import ctypes
import json
import os
import resource
import shutil
import stat
import subprocess
import sys

GUARD_LOG_LIMIT = 8 * 2**20     # bytes of the guard's log sent back
PR_SET_DUMPABLE = 4


def _others(jail: bool) -> list[int]:
    """The pids of the jail's other processes (its own PID namespace: all of them are the notebook's)."""
    if not jail:
        return []
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) not in (1, os.getpid())]


def _left_behind(jail: bool) -> list[str]:
    left = []
    for pid in _others(jail):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.strip() and "ipykernel_launcher" not in cmd:
            left.append(cmd.strip()[:200])
    return left


def _guard_log(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        return os.read(fd, GUARD_LOG_LIMIT) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001  (not Linux)
        pass
    limit, tasks, out_fd, in_fd = int(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    log, jail, notebook, copy, wall = argv[4], argv[5] == "jail", argv[6], argv[7], float(argv[8])
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if tasks > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    shutil.copyfile(notebook, copy)   # the kernel starts in the notebook's folder: the work folder
    proc = subprocess.Popen([sys.executable, "-m", "pytest", copy, *argv[9:], f"--xlalab-out-fd={out_fd}",
                             f"--xlalab-in-fd={in_fd}"], pass_fds=(out_fd, in_fd))
    os.close(in_fd)
    timed_out = False
    try:
        rc = proc.wait(timeout=wall)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        for pid in _others(jail):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        rc = proc.wait()
    left = _left_behind(jail)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rec = {"event": "launcher", "timed_out": timed_out, "left": left[:20], "cpu": usage.ru_utime + usage.ru_stime,
           "guard": _guard_log(log).decode("utf-8", errors="replace").splitlines()[:10000]}
    data = (json.dumps(rec) + "\n").encode()
    while data:
        data = data[os.write(out_fd, data):]
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
