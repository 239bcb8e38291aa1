"""One submission, end to end (read, build, run in the sandbox, score): the task every engine runs.

:func:`grade_one` never raises and never writes outside its temporary folder: it returns the :class:`Row`, and
only the client (:mod:`xlalab.grading.gradebook`) writes the gradebook and feedback.
"""

from __future__ import annotations

import resource
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from xlalab.grading import sandbox as sandbox_mod
from xlalab.grading.build import build_graded, check_cells
from xlalab.grading.lab import Lab
from xlalab.grading.run import check_payload, run_notebook
from xlalab.grading import faults as faults_mod
from xlalab.grading.faults import Fault
from xlalab.grading.score import GRADER_CELLS, Row, blocked_notes, run_faults, score, zero_row
from xlalab.grading.submissions import Unreadable, read_submission


def verified_guard(records: list[dict], keys: dict[str, str]) -> list[dict]:
    """The guard's log lines whose MAC matches the check's key (the others were not written by the guard)."""
    import hmac

    from xlalab.grading.run import guard_mac

    out = []
    for rec in records:
        check, mac = rec.get("check"), rec.get("mac")
        if not isinstance(check, str) or check not in keys or not isinstance(mac, str):
            continue
        if hmac.compare_digest(mac, guard_mac(keys[check], check, str(rec.get("event")), rec.get("passed"))):
            out.append(rec)
    return out


def _children_cpu() -> float:
    """CPU seconds (user + system) of the ended child processes of this process (pytest, kernel, jail)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grade_one(lab: Lab, student: str, path: Path, *, cell_timeout: float = 600, timeout: float = 1800,
              memory_gb: float = 8, env: dict[str, str | None] | None = None, keep: bool = False,
              sandbox: sandbox_mod.Sandbox | str = "auto") -> Row:
    """Grade one submission; never raises (a grader error becomes the row's status).

    ``env`` adds (or, with a value of None, removes) environment variables of the grading process,
    e.g. ``{"XLALAB_PROFILE": "tiny"}``; ``keep`` leaves the temporary folder for debugging; ``sandbox`` is a
    :class:`~xlalab.grading.sandbox.Sandbox` or a mode ("auto", "bwrap", "none").
    """
    start = time.monotonic()
    row = Row(student, lab.name, lab.maximum, submission=str(path))
    tmp = None
    try:
        box = sandbox if isinstance(sandbox, sandbox_mod.Sandbox) else sandbox_mod.resolve(sandbox)
        row.sandbox = box.kind
        try:
            copied: list[str] = []
            sub = read_submission(Path(path), lab, copied)
        except Unreadable as err:
            zero = zero_row(lab, student, f"not graded: {err}", str(path))
            row.checks, row.status, row.state, row.faults = zero.checks, zero.status, zero.state, zero.faults
            return row
        tmp = Path(tempfile.mkdtemp(prefix="xlalab-grade-"))
        work, priv = tmp / "work", tmp / "priv"
        work.mkdir()
        priv.mkdir()
        nb_path = priv / f"{lab.name}.ipynb"
        guard_log = work / f".xlalab-guard-{secrets.token_hex(4)}.jsonl"
        nonce = secrets.token_hex(8)
        keys = {c.check: secrets.token_hex(16) for c in lab.checks}
        graded, row.tampering = build_graded(lab, sub, nonce, guard_log, nb_path)
        payload = check_payload(check_cells(lab), f"_xlalab_guard_{nonce}", keys)
        t0, cpu0 = time.monotonic(), _children_cpu()
        outcome = run_notebook(graded, work, priv, nb_path, cell_timeout=cell_timeout, timeout=timeout,
                               memory_gb=memory_gb, env=env, sandbox=box, payload=payload, guard_log=guard_log)
        outcome.guard = verified_guard(outcome.guard, keys)
        row.notebook_seconds = time.monotonic() - t0
        row.cpu_seconds = outcome.cpu_seconds if outcome.cpu_seconds is not None else _children_cpu() - cpu0
        row.cells_seconds = sum(float(r.get("duration") or 0) for r in outcome.plugin
                                if r.get("event") == "result" and r.get("phase") == "call"
                                and r.get("id") not in GRADER_CELLS)
        row.checks, row.restored, row.cell_errors, row.status = score(lab, outcome, timeout)
        row.blocked = blocked_notes(row.cell_errors + [c.message for c in row.checks if not c.passed],
                                    sandbox_on=box.on, memory_gb=memory_gb, work=str(work))
        for cmd in outcome.leftover[:3]:
            row.blocked.append(f"to leave a process running after the notebook ended (it ended with the "
                               f"sandbox): `{cmd[:100]}`")
        if outcome.memory_kills:
            row.blocked.append(f"to use more than {memory_gb:g} GB for the whole jail (its processes and "
                               f"folders together; {outcome.memory_kills} killed)")
        if row.tampering:
            row.status += "; tampered"
        if row.restored:
            row.status += "; guard restored " + str(len(row.restored))
        memory = [] if outcome.memory_jail or not memory_gb else \
            [Fault("memory per process", f"--memory-gb held per process only: {outcome.memory_note}")]
        if memory:
            row.status += f"; memory limited per process only ({outcome.memory_note})"
        copy = [Fault("copy of the source", c) for c in copied]
        if copied:
            row.status += "; " + copied[0]
        row.faults = faults_mod.merge(run_faults(lab, outcome, timeout) + faults_mod.row_faults(row) + memory + copy)
    except Exception as err:  # the grader itself failed on this submission: record it, go on
        zero = zero_row(lab, student, f"not graded: grader error ({type(err).__name__}: {str(err)[:200]})")
        row.checks, row.status, row.state, row.faults = zero.checks, zero.status, zero.state, zero.faults
    finally:
        row.seconds = time.monotonic() - start
        if tmp is not None and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return row
