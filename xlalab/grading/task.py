"""One submission, end to end (read, build, run the student's notebook, judge, score): the task every engine runs.

Two runs per submission, each under nbval in the sandbox: the student's notebook with the checks' probing parts
(probes record what the student's code returns), then the judge notebook (:mod:`xlalab.grading.judge`), which
runs no student code and replays the records. The records pass through the grader as data
(:func:`xlalab.grading.probe.parse_records`); only the judge's verdicts score.

:func:`grade_one` never raises and never writes outside its temporary folder: it returns the :class:`Row`, and
only the client (:mod:`xlalab.grading.gradebook`) writes the gradebook and feedback.
"""

from __future__ import annotations

import json
import resource
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from xlalab.grading import assign, faults as faults_mod, sandbox as sandbox_mod
from xlalab.grading.build import REPLAY_INIT, build_graded
from xlalab.grading.faults import Fault
from xlalab.grading.judge import build_judge
from xlalab.grading.lab import Lab
from xlalab.grading.probe import RecordsError, dump_records, parse_records
from xlalab.grading.run import run_notebook
from xlalab.grading.score import GRADER_CELLS, Row, blocked_notes, run_faults, score, zero_row
from xlalab.grading.submissions import Unreadable, read_submission
from xlalab.options import GRADE

RECORDS_NAME = ".xlalab-probes.jsonl"


def _children_cpu() -> float:
    """CPU seconds (user + system) of the ended child processes of this process (pytest, kernel, jail)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grade_one(lab: Lab, student: str, path: Path, *, cell_timeout: float = GRADE.cell_timeout,
              timeout: float = GRADE.timeout, memory_gb: float = GRADE.memory_gb,
              env: Mapping[str, str | None] | None = None, keep: bool = False,
              sandbox: sandbox_mod.Sandbox | str = GRADE.sandbox) -> Row:
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
        for d in (work, priv):
            d.mkdir()
        nb_path = priv / f"{lab.name}.ipynb"
        seed = secrets.randbits(62)   # the master seed: only each check's derived seed reaches the student's kernel
        records_path = work / RECORDS_NAME
        graded, row.tampering = build_graded(lab, sub, records_path, seed, notes=row.notes)
        t0, cpu0 = time.monotonic(), _children_cpu()
        mine = run_notebook(graded, work, priv, nb_path, cell_timeout=cell_timeout, timeout=timeout,
                            memory_gb=memory_gb, env=env, sandbox=box, records=records_path)
        row.notebook_seconds = time.monotonic() - t0
        cpu = mine.cpu_seconds if mine.cpu_seconds is not None else _children_cpu() - cpu0
        row.cells_seconds = sum(r.duration for r in mine.results
                                if r.phase == "call" and r.id not in GRADER_CELLS)
        judge, fault = None, None
        try:
            if mine.records_truncated:
                raise RecordsError("the probe records are larger than the limit")
            records = parse_records(mine.records)
        except RecordsError as err:
            fault = str(err)
        else:
            jwork, jpriv = tmp / "judge-work", tmp / "judge-priv"
            for d in (jwork, jpriv):
                d.mkdir()
            (jpriv / "records.jsonl").write_bytes(dump_records(records))
            sources = [c.source for c in graded.cells if c.cell_type == "code"
                       and not assign.xmeta(c) and c.get("id") not in GRADER_CELLS]
            (jpriv / "sources.json").write_text(json.dumps(sources), encoding="utf-8")
            verdicts = jwork / ".xlalab-verdicts"
            init = REPLAY_INIT % {"path": str(jpriv / "records.jsonl"), "seed": seed,
                                  "sources": str(jpriv / "sources.json"), "verdicts": str(verdicts)}
            t1, cpu1 = time.monotonic(), _children_cpu()
            judge = run_notebook(build_judge(lab, init), jwork, jpriv, jpriv / f"{lab.name}.judge.ipynb",
                                 cell_timeout=cell_timeout, timeout=timeout, memory_gb=memory_gb, env=env,
                                 sandbox=box, records=verdicts)
            row.notebook_seconds += time.monotonic() - t1
            cpu += judge.cpu_seconds if judge.cpu_seconds is not None else _children_cpu() - cpu1
        row.cpu_seconds = cpu
        row.checks, row.cell_errors, row.status = score(lab, mine, judge, timeout, fault)
        row.blocked = blocked_notes(row.cell_errors + [c.message for c in row.checks if not c.passed],
                                    sandbox_on=box.on, memory_gb=memory_gb, work=str(work))
        for cmd in mine.leftover[:3]:
            row.blocked.append(f"to leave a process running after the notebook ended (it ended with the "
                               f"sandbox): `{_elide(cmd)}`")
        kills = mine.memory_kills + (judge.memory_kills if judge is not None else 0)
        if kills:
            row.blocked.append(f"to use more than {memory_gb:g} GB for the whole jail (its processes and "
                               f"folders together; {kills} killed)")
        if row.tampering:
            row.status += "; tampered"
        if row.restored:
            row.status += "; guard restored " + str(len(row.restored))
        memory = [] if mine.memory_jail or not memory_gb else \
            [Fault("memory per process", f"--memory-gb held per process only: {mine.memory_note}")]
        if memory:
            row.status += f"; memory limited per process only ({mine.memory_note})"
        copy = [Fault("copy of the source", c) for c in copied]
        if copied:
            row.status += "; " + copied[0]
        row.faults = faults_mod.merge(run_faults(lab, mine, judge, timeout, fault) + faults_mod.row_faults(row)
                                      + memory + copy)
    except Exception as err:  # noqa: BLE001  (the grader itself failed on this submission: record it, go on)
        zero = zero_row(lab, student, f"not graded: grader error ({type(err).__name__}: {str(err)[:200]})")
        row.checks, row.status, row.state, row.faults = zero.checks, zero.status, zero.state, zero.faults
    finally:
        row.seconds = time.monotonic() - start
        if tmp is not None and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return row


def _elide(cmd: str, width: int = 100) -> str:
    """``cmd`` in at most ``width`` characters: its start and its end, where the arguments are (a long path to
    the interpreter would otherwise push them out)."""
    if len(cmd) <= width:
        return cmd
    tail = width * 2 // 5
    return f"{cmd[:width - tail - 3]}...{cmd[-tail:]}"
