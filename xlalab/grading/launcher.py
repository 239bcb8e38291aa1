"""The first process of one graded run (in the jail when there is one): limits, pytest under nbval, the report.

Run as a script by :func:`xlalab.grading.run.run_notebook` (it imports nothing of xlalab, so that the student's
notebook can change nothing it runs)::

    python launcher.py LIMIT TASKS OUT_FD RECORDS JAIL NOTEBOOK COPY WALL [pytest arguments...]

It makes itself non-dumpable (the kernel, the same user, cannot open its descriptors in ``/proc`` nor read its
memory), sets the address-space, process and core limits, copies the notebook into the work folder, runs pytest
and ends it (in the jail, every other process too) at the wall-clock limit or at the deadline pytest armed,
whichever comes first (:func:`wait_bounded`). Then it writes one JSON line to ``OUT_FD`` (a pipe the grader
reads): ``{"event": "launcher", "timed_out" (the wall-clock limit ended it), "stuck" (what pytest was doing when
its armed deadline ended it, else ""), "left" (processes the notebook left behind), "cpu" (seconds of pytest and
the kernel), "records" (the probe records file, base64, at most RECORDS_LIMIT bytes; "records_truncated" if it
was larger)}``.

pytest (:mod:`xlalab.grading.nbval_plugin`) arms the deadline on a pipe of its own: ``arm SECONDS WHAT`` when a
cell starts (its timeout plus the watchdog's drain and shutdown margin), when it ends and when nbval stops the
kernel (the margin, :data:`xlalab.grading.watchdog.SHUTDOWN_MARGIN_S`), ``disarm`` for none. So every step
after a cell's last wait, the kernel's shutdown included, ends within the margin.
"""

import base64
import ctypes
import json
import math
import os
import resource
import select
import shutil
import stat
import subprocess
import sys
import time

RECORDS_LIMIT = 32 * 2**20 + 1
LINE_LIMIT = 4096        # bytes of one deadline line; longer lines are dropped
POLL_S = 0.25            # how often the wait looks at pytest while no line comes


def _no_dump() -> None:
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    except Exception:  # noqa: BLE001  (not Linux)
        pass


def _others() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) not in (1, os.getpid())]


def _read_records(path: str) -> tuple[bytes, bool]:
    """At most RECORDS_LIMIT bytes of a regular file (no link, no FIFO), and whether there was more."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b"", False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b"", False
        chunks, left = [], RECORDS_LIMIT
        while left > 0:
            chunk = os.read(fd, min(left, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), left <= 0
    finally:
        os.close(fd)


def _parse(line: bytes) -> tuple[str, float, str]:
    """``arm SECONDS WHAT`` as ("arm", seconds, what); ``disarm`` as ("disarm", 0, ""); anything else as
    ("", 0, "") (ignored)."""
    words = line.decode("utf-8", errors="replace").strip().split(" ", 2)
    if words == ["disarm"]:
        return "disarm", 0.0, ""
    if len(words) >= 2 and words[0] == "arm":
        try:
            seconds = float(words[1])
        except ValueError:
            return "", 0.0, ""
        if math.isfinite(seconds) and seconds >= 0:
            return "arm", seconds, words[2] if len(words) > 2 else ""
    return "", 0.0, ""


def wait_bounded(proc: subprocess.Popen, wall: float, deadline_fd: int) -> dict:
    """Wait for ``proc`` (pytest) for at most ``wall`` seconds, and at most until the deadline it arms on
    ``deadline_fd`` (lines ``arm SECONDS WHAT`` / ``disarm``, see the module docstring); kill it at whichever comes
    first. Returns ``{"timed_out": the wall ended it, "stuck": WHAT of the armed deadline that ended it, or ""}``."""
    start = time.monotonic()
    armed: tuple[float, str] | None = None
    buffer, reading = b"", True
    while proc.poll() is None:
        now = time.monotonic()
        ends, what = start + wall, ""
        if armed is not None and armed[0] < ends:
            ends, what = armed
        if now >= ends:
            proc.kill()
            proc.wait()
            return {"timed_out": not what, "stuck": what}
        step = min(ends - now, POLL_S)
        if not reading:
            time.sleep(step)
            continue
        if not select.select([deadline_fd], [], [], step)[0]:
            continue
        data = os.read(deadline_fd, 2**16)
        if not data:
            reading = False
            continue
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        buffer = buffer if len(buffer) <= LINE_LIMIT else b""
        for line in lines:
            order, seconds, text = _parse(line[:LINE_LIMIT])
            if order == "disarm":
                armed = None
            elif order == "arm":
                armed = (time.monotonic() + seconds, text or "an armed step")
    return {"timed_out": False, "stuck": ""}


def main(argv: list[str]) -> int:
    _no_dump()
    limit, tasks, out_fd, records, jail = int(argv[1]), int(argv[2]), int(argv[3]), argv[4], argv[5]
    notebook, copy, wall, pytest_args = argv[6], argv[7], float(argv[8]), argv[9:]
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if tasks > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    shutil.copyfile(notebook, copy)   # the kernel starts in the notebook's folder: the work folder
    deadline_r, deadline_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", copy, *pytest_args, f"--xlalab-out-fd={out_fd}",
                             f"--xlalab-deadline-fd={deadline_w}"], pass_fds=(out_fd, deadline_w))
    os.close(deadline_w)
    ended = wait_bounded(proc, wall, deadline_r)
    os.close(deadline_r)
    timed_out = ended["timed_out"]
    if timed_out or ended["stuck"]:
        for pid in _others() if jail else ():
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    rc = proc.wait()
    left = []
    for pid in _others() if jail else ():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.strip() and "ipykernel_launcher" not in cmd:
            cmd = cmd.strip()
            left.append(cmd if len(cmd) <= 200 else f"{cmd[:120]}...{cmd[-77:]}")  # the arguments are at the end
    data, truncated = _read_records(records) if records else (b"", False)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rec = {"event": "launcher", "timed_out": timed_out, "stuck": ended["stuck"], "left": left[:20],
           "cpu": usage.ru_utime + usage.ru_stime, "records_truncated": truncated,
           "records": base64.b64encode(data[:RECORDS_LIMIT - 1]).decode("ascii")}
    out = (json.dumps(rec) + "\n").encode()
    while out:
        out = out[os.write(out_fd, out):]
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
