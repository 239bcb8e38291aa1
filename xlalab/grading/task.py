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
from dataclasses import dataclass
from pathlib import Path

from xlalab.grading import faults as faults_mod, gpu_answer, labformat, sandbox as sandbox_mod
from xlalab.grading.build import REPLAY_INIT, build_graded
from xlalab.grading.faults import Fault, FaultKind
from xlalab.grading.judge import build_judge
from xlalab.grading.lab import Lab
from xlalab.grading.model import Row
from xlalab.grading.options import GRADE, GradeOptions
from xlalab.grading.probe import RecordsError, dump_records, parse_records
from xlalab.grading.run import run_notebook
from xlalab.grading.score import GRADER_CELLS, blocked_notes, score, zero_row
from xlalab.grading.submissions import HandIn, Unreadable, submission_of

RECORDS_NAME = ".xlalab-probes.jsonl"


def _children_cpu() -> float:
    """CPU seconds (user + system) of the ended child processes of this process (pytest, kernel, jail)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Limits:
    """How one hand-in is run: the limits and the environment of its two runs (the student's, the judge's)."""

    cell_timeout: float = GRADE.cell_timeout
    """Seconds per cell (nbval)."""
    timeout: float = GRADE.timeout
    """Seconds for a whole notebook."""
    memory_gb: float = GRADE.memory_gb
    """Memory of the jail (a cgroup where there is one, else per process); 0: none."""
    sandbox: sandbox_mod.Sandbox | str = GRADE.sandbox
    """A :class:`~xlalab.grading.sandbox.Sandbox` or a mode ("auto", "bwrap", "none")."""
    env: Mapping[str, str | None] | None = None
    """Environment variables of the grading process to add (or, with a value of None, remove), e.g.
    ``{"XLALAB_PROFILE": "tiny"}``."""
    keep: bool = False
    """Leave the temporary folder (for debugging)."""

    @classmethod
    def of(cls, opts: GradeOptions, *, sandbox: sandbox_mod.Sandbox | str | None = None,
           env: Mapping[str, str | None] | None = None) -> Limits:
        """The limits ``xlalab grade``'s options set (``sandbox``: the one resolved, where it is)."""
        return cls(opts.cell_timeout, opts.timeout, opts.memory_gb, opts.sandbox if sandbox is None else sandbox,
                   env)


def grade_one(lab: Lab, handin: HandIn, limits: Limits = Limits()) -> Row:
    """Grade one hand-in (read once by the client, :class:`~xlalab.grading.submissions.HandIn`) under ``limits``;
    never raises (a grader error becomes the row's reason, not graded)."""
    start = time.monotonic()
    student, path = handin.student, handin.path
    cell_timeout, timeout, memory_gb, env = limits.cell_timeout, limits.timeout, limits.memory_gb, limits.env
    row = Row(student, lab.name, lab.maximum, submission=str(path))
    tmp = None
    try:
        sandbox = limits.sandbox
        box = sandbox if isinstance(sandbox, sandbox_mod.Sandbox) else sandbox_mod.resolve(sandbox)
        row.sandbox = box.kind
        try:
            copied: list[str] = []
            if handin.raw is None:
                raise Unreadable(handin.error)
            sub = submission_of(handin.raw, lab, copied)
        except Unreadable as err:
            zero = zero_row(lab, student, str(err), str(path))
            row.checks, row.state, row.faults = zero.checks, zero.state, zero.faults
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
                       and not labformat.xmeta(c) and c.get("id") not in GRADER_CELLS]
            (jpriv / "sources.json").write_text(json.dumps(sources), encoding="utf-8")
            verdicts = jwork / ".xlalab-verdicts"
            init = REPLAY_INIT % {"path": str(jpriv / "records.jsonl"), "seed": seed,
                                  "sources": str(jpriv / "sources.json"), "verdicts": str(verdicts)}
            # The judge alone gets the folder of this process's compiled GPU answers, writable (gpu_answer).
            answers = gpu_answer.judge_cache(env)
            t1, cpu1 = time.monotonic(), _children_cpu()
            judge = run_notebook(build_judge(lab, init), jwork, jpriv, jpriv / f"{lab.name}.judge.ipynb",
                                 cell_timeout=cell_timeout, timeout=timeout, memory_gb=memory_gb,
                                 env={**(env or {}), gpu_answer.ENV: str(answers)}, sandbox=box, records=verdicts,
                                 writable=[answers] if answers.is_dir() else [])
            row.notebook_seconds += time.monotonic() - t1
            cpu += judge.cpu_seconds if judge.cpu_seconds is not None else _children_cpu() - cpu1
        row.cpu_seconds = cpu
        scored = score(lab, mine, judge, timeout, fault)
        row.checks, row.cell_errors = scored.checks, scored.cell_errors
        row.blocked = blocked_notes(row.cell_errors + [c.message for c in row.checks if not c.passed],
                                    sandbox_on=box.on, memory_gb=memory_gb, work=str(work))
        for cmd in mine.leftover[:3]:
            row.blocked.append(f"to leave a process running after the notebook ended (it ended with the "
                               f"sandbox): `{_elide(cmd)}`")
        kills = mine.memory_kills + (judge.memory_kills if judge is not None else 0)
        if kills:
            row.blocked.append(f"to use more than {memory_gb:g} GB for the whole jail (its processes and "
                               f"folders together; {kills} killed)")
        memory = [] if mine.memory_jail or not memory_gb else \
            [Fault(FaultKind.MEMORY_PER_PROCESS, f"--memory-gb held per process only: {mine.memory_note}",
                   f"memory limited per process only ({mine.memory_note})")]
        copy = [Fault(FaultKind.COPY_OF_SOURCE, c, c if i == 0 else "") for i, c in enumerate(copied)]
        row.faults = scored.faults + faults_mod.row_faults(row) + memory + copy
    except Exception as err:  # noqa: BLE001  (the grader itself failed on this submission: record it, go on)
        zero = zero_row(lab, student, f"grader error ({type(err).__name__}: {str(err)[:200]})")
        row.checks, row.state, row.faults = zero.checks, zero.state, zero.faults
    finally:
        row.seconds = time.monotonic() - start
        if tmp is not None and not limits.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return row


def _elide(cmd: str, width: int = 100) -> str:
    """``cmd`` in at most ``width`` characters: its start and its end, where the arguments are (a long path to
    the interpreter would otherwise push them out)."""
    if len(cmd) <= width:
        return cmd
    tail = width * 2 // 5
    return f"{cmd[:width - tail - 3]}...{cmd[-tail:]}"
