"""The first process of one graded run (in the jail when there is one): limits, pytest under nbval, the report.

Run as a script by :func:`xlalab.grading.run.run_notebook` (it imports nothing of xlalab, so that the student's
notebook can change nothing it runs)::

    python launcher.py LIMIT TASKS OUT_FD RECORDS JAIL NOTEBOOK COPY WALL [pytest arguments...]

It makes itself non-dumpable (the kernel, the same user, cannot open its descriptors in ``/proc`` nor read its
memory), sets the address-space, process and core limits, copies the notebook into the work folder, runs pytest
and at the wall-clock limit ends it (in the jail, every other process too). Then it writes one JSON line to
``OUT_FD`` (a pipe the grader reads): ``{"event": "launcher", "timed_out", "left" (processes the notebook left
behind), "cpu" (seconds of pytest and the kernel), "records" (the probe records file, base64, at most
RECORDS_LIMIT bytes; "records_truncated" if it was larger)}``.
"""

import base64
import ctypes
import json
import os
import resource
import shutil
import stat
import subprocess
import sys

RECORDS_LIMIT = 32 * 2**20 + 1


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
    proc = subprocess.Popen([sys.executable, "-m", "pytest", copy, *pytest_args, f"--xlalab-out-fd={out_fd}"],
                            pass_fds=(out_fd,))
    timed_out = False
    try:
        rc = proc.wait(timeout=wall)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
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
    rec = {"event": "launcher", "timed_out": timed_out, "left": left[:20], "cpu": usage.ru_utime + usage.ru_stime,
           "records": base64.b64encode(data[:RECORDS_LIMIT - 1]).decode("ascii"), "records_truncated": truncated}
    out = (json.dumps(rec) + "\n").encode()
    while out:
        out = out[os.write(out_fd, out):]
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
