"""Grade lab submissions with nbval, each in a bubblewrap jail, on this machine or a Dask cluster.

``xlalab grade LAB SUBMISSIONS... --out grades/ [-j N] [--source DIR] [--sandbox auto|bwrap|none]
[--cell-timeout S] [--timeout S] [--memory-gb G] [--scheduler tcp://host:8786 | --cluster slurm|pbs|sge|lsf
[--queue Q] [--cores N] [--memory 16GB] [--walltime 02:00:00] [--gpus N] [--cluster-jobs N] [--dry-run]]``

LAB is a lab name (``lab01_timing``, looked up as ``<source>/<name>.ipynb``, default ``solutions/``) or the
path of a solution notebook. A submission is a notebook (the student is its file name) or a folder: each
notebook in it is one student, and each sub-folder holding a notebook is one student named after the folder.

For each submission the grader reads it (an unreadable file, a non-notebook or the wrong lab becomes a row
with 0 points and the reason), compares every visible check cell with the released lab (tampered or deleted
cells are reported and the released cell is used), puts the hidden checks back from the instructor source,
and runs the notebook with ``pytest --nbval-lax --nbval-current-env`` in a fresh temporary folder holding only
the notebook, in a bubblewrap jail (no network, no view of anything but the Python environment and that
folder), with a cell timeout, a wall-clock limit and an address-space limit. Points, ids and hidden checks
always come from the instructor source, never from the submission.

Outputs: ``<out>/gradebook.csv`` (student, total, max, one column per check, status), rebuilt from the rows the
grader keeps in its private spool (re-grading one student replaces only that row; a gradebook changed behind
the grader's back is reported and rebuilt), and ``<out>/feedback/<student>.md``. A lab with written answers
(graded by hand) also gets ``auto``/``manual`` columns, ``<out>/answers/<lab>/<question>.md`` and the template
``<out>/manual.csv`` (:mod:`xlalab.grading.answers`).

Every grading run also writes ``<out>/report.html``, the class report (:mod:`xlalab.grading.classreport`: the most
frequent failures first, scores, checks, written questions, time, faults, and pairs of similar hand-ins at
``--similarity-threshold``, :mod:`xlalab.grading.similarity`); ``xlalab report LAB --out grades/``
remakes it from the grader's rows.

``xlalab merge-manual LAB grades/manual.csv --out grades/`` folds the instructor's scores of the written answers in
(bad lines are rejected, one line each, exit status 1); ``xlalab export LAB canvas|moodle|csv...`` (``--roster``,
``--moodle-id``) writes ``<out>/export-<kind>.csv`` (:mod:`xlalab.grading.export`). Each command's options are
one dataclass of :mod:`xlalab.grading.options`; the ``xlalab`` command (:mod:`xlalab.cli`) is the one way in, and
:mod:`xlalab.grading.api` the instructors' Python API.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from xlalab.grading import (
    answers as answers_mod,
    classreport,
    engine,
    export as export_mod,
    labformat,
    sandbox as sandbox_mod,
    similarity,
)
from xlalab.grading.feedback import summary_table
from xlalab.grading.gradebook import Gradebook
from xlalab.grading.lab import load_lab
from xlalab.grading.model import Row
from xlalab.grading.options import GRADE, ExportOptions, GradeOptions, MergeManualOptions, ReportOptions
from xlalab.grading.score import zero_row
from xlalab.grading.submissions import HandIn, expand_submissions, guard_sources
from xlalab.grading.task import Limits

log = logging.getLogger(__name__)


class Graded(list):
    """The rows of one grading run (a list of :class:`Row`), with ``warnings`` (tampering found),
    ``elapsed`` seconds, the ``sandbox`` used and the ``engine``."""

    warnings: list[str]
    elapsed: float
    sandbox: str
    engine: str


def grade_submissions(lab: str | Path, submissions: Iterable[str | Path], opts: GradeOptions = GRADE, *,
                      env: Mapping[str, str | None] | None = None, progress: bool = False,
                      spec: engine.EngineSpec | None = None, quiet: bool = False) -> Graded:
    """Grade every submission of one lab with ``xlalab grade``'s options ``opts`` (its ``lab`` and
    ``submissions`` are the arguments here); write the gradebook and feedback under ``opts.out``; return the rows.

    Example: ``grade_submissions("lab01_timing", ["hand-ins/"], GradeOptions(out="grades", jobs=2))``.
    ``env`` adds (None: removes) environment variables of the grading runs; ``spec`` an
    :class:`~xlalab.grading.engine.EngineSpec` other than the one ``opts`` says (:func:`engine_spec`). Writes
    ``<out>/report.html`` at the end (:mod:`xlalab.grading.classreport`; pairs of similar hand-ins at
    ``opts.similarity_threshold``).
    """
    start = time.monotonic()
    out = opts.out
    the_lab = load_lab(lab, opts.source)
    box = sandbox_mod.resolve(opts.sandbox, quiet=quiet)   # says once, here, if grading runs unsandboxed
    spec = spec or engine_spec(opts)
    guard_sources(the_lab)   # from here, no reader of this process takes a source file for a hand-in
    # Each hand-in is read here, once, before any student code of this run starts: its written answers, its own
    # text for the similarity report, and the bytes its task grades all come from this one read.
    handins = [HandIn.read(student, path) for student, path in expand_submissions(submissions, the_lab.name)]
    ids = [c.check for c in the_lab.checks]
    limits = Limits.of(opts, sandbox=box if spec.kind in ("serial", "local") else opts.sandbox, env=env)
    written = {h.student: _collect(the_lab, h) for h in handins} if the_lab.answers else {}
    owns = [similarity.collect(the_lab, h) for h in handins]
    with Gradebook(out, ids, quiet=quiet, answer_ids=[a.answer for a in the_lab.answers]) as book:
        before = dict(book.stored)
        similarity.save(out, owns)

        def record(row: Row) -> None:
            try:
                row.answers = answers_mod.carry_over(written.get(row.student, []), before.get(row.student))
                book.record(row)
            except Exception as err:  # noqa: BLE001  (one hand-in never stops the class: its row says why)
                bad = zero_row(the_lab, row.student, f"grader error while recording "
                               f"({type(err).__name__}: {str(err)[:200]})", row.submission)
                book.record(bad)

        rows = engine.run(the_lab, handins, limits, spec, record, progress=progress)
        if the_lab.answers:
            everyone = list(book.stored.values())
            answers_mod.write_answer_files(the_lab, everyone, out)
            answers_mod.write_manual_template(the_lab, everyone, Path(out) / "manual.csv")
    _write_report(the_lab, list(book.stored.values()), out, opts.similarity_threshold, book.warnings, quiet)
    result = Graded(rows)
    result.warnings = book.warnings
    result.elapsed = time.monotonic() - start
    result.sandbox = box.describe()
    result.engine = engine.describe(spec)
    unsandboxed = sorted({r.student for r in rows if r.sandbox == "none"})
    if box.on and unsandboxed and not quiet:
        log.warning("xlalab.grade: WARNING: %d submissions ran unsandboxed on workers without bwrap (%s...); "
                    "install bubblewrap there or use --sandbox bwrap", len(unsandboxed), ", ".join(unsandboxed[:5]))
    return result


def _collect(lab, handin: HandIn) -> list:
    try:
        return answers_mod.collect(lab, handin)
    except Exception:  # noqa: BLE001  (a hand-in the reader cannot take: its answers are missing, the class goes on)
        return answers_mod.answers_of(lab, {})

def _write_report(lab, rows: list[Row], out, threshold: float, warnings: list[str], quiet: bool) -> Path | None:
    """The class report; a failure to make it is a warning, never a lost gradebook."""
    try:
        return classreport.write_report(lab, rows, out, threshold=threshold)
    except Exception as err:  # noqa: BLE001  (the gradebook is written; the report is a view of it)
        warnings.append(f"the class report could not be written ({type(err).__name__}: {str(err)[:200]})")
        if not quiet:
            log.warning("xlalab.grade: WARNING: %s", warnings[-1])
        return None


def class_report(lab: str | Path, out: str | Path = GRADE.out, *, source: str | Path | None = None,
                 similarity_threshold: float = GRADE.similarity_threshold, quiet: bool = False) -> Path:
    """Write ``<out>/report.html`` from the grader's own rows of the gradebook in ``out`` (``--report``)."""
    the_lab = load_lab(lab, source)
    with Gradebook(out, [c.check for c in the_lab.checks], quiet=quiet,
                   answer_ids=[a.answer for a in the_lab.answers]) as book:
        rows = list(book.stored.values())
        return classreport.write_report(the_lab, rows, out, threshold=similarity_threshold)


def merge_manual(lab: str | Path, manual: str | Path, out: str | Path = GRADE.out, *,
                 source: str | Path | None = None, quiet: bool = False) -> tuple[list[Row], list[str]]:
    """Fold the instructor's ``manual.csv`` into the gradebook in ``out``: returns (changed rows, errors).

    Only the written-answer points and comments of the listed students change (their gradebook line and
    feedback file); each bad line is one error and changes nothing. The answer files are rewritten.
    """
    the_lab = load_lab(lab, source)
    lines = answers_mod.read_manual(manual)
    with Gradebook(out, [c.check for c in the_lab.checks], quiet=quiet,
                   answer_ids=[a.answer for a in the_lab.answers]) as book:
        changed, errors = answers_mod.merge_manual(the_lab, dict(book.stored), lines)
        for row in changed:
            book.record(row, write=False)
        if changed:
            book.write_csv()
        if the_lab.answers:
            answers_mod.write_answer_files(the_lab, list(book.stored.values()), out)
    return changed, errors


def export_gradebook(lab: str | Path, kind: str, out: str | Path = GRADE.out, *, source: str | Path | None = None,
                     roster: str | Path | None = None, moodle_id: str = ExportOptions.moodle_id,
                     quiet: bool = False) -> Path:
    """Write ``<out>/export-<kind>.csv`` (see :mod:`xlalab.grading.export`) from the grader's own rows."""
    the_lab = load_lab(lab, source)
    with Gradebook(out, [c.check for c in the_lab.checks], quiet=quiet,
                   answer_ids=[a.answer for a in the_lab.answers]) as book:
        rows = list(book.stored.values())
        text = book.csv_text()
    return export_mod.export(kind, rows, lab=the_lab.name, maximum=the_lab.maximum, out=out, csv_text=text,
                             roster=roster, moodle_id=moodle_id)


# ---------------------------------------------------------------------------------------------
# The commands: ``xlalab grade``, ``report``, ``merge-manual`` and ``export`` (xlalab.cli), each one of these.

def engine_spec(opts: GradeOptions) -> engine.EngineSpec:
    """Where ``opts`` runs the tasks."""
    return engine.EngineSpec(jobs=opts.jobs, scheduler=opts.scheduler, cluster=opts.cluster, queue=opts.queue,
                             cores=opts.cores, memory=opts.memory, walltime=opts.walltime, gpus=opts.gpus,
                             cluster_jobs=opts.cluster_jobs, account=opts.account, prologue=list(opts.prologue))


def run_grade(opts: GradeOptions) -> int:
    """``xlalab grade``: grade, print the summary table; 0, or 2 on an error (``--dry-run``: the job script)."""
    spec = engine_spec(opts)
    if opts.dry_run:
        if not opts.cluster:
            log.error("error: --dry-run prints the job script of --cluster; give --cluster")
            return 2
        print(engine.job_script(spec))
        return 0
    if not opts.submissions:
        log.error("error: no submissions given")
        return 2
    try:
        rows = grade_submissions(opts.lab, opts.submissions, opts, spec=spec,
                                 progress=log.isEnabledFor(logging.INFO))   # no progress bar under -q
    except (FileNotFoundError, labformat.FormatError, sandbox_mod.SandboxUnavailable, engine.ClusterUnavailable) as err:
        log.error("error: %s", err)
        return 2
    out = Path(opts.out)
    print()
    print(summary_table(rows, rows.elapsed))
    print(f"engine: {rows.engine}; sandbox: {rows.sandbox}")
    for w in rows.warnings:
        print(f"WARNING: {w}")
    print(f"\ngradebook: {out / 'gradebook.csv'}; feedback: {out / 'feedback'}/")
    if (out / "report.html").exists():
        print(f"class report: {out / 'report.html'}")
    if (out / "manual.csv").exists():
        print(f"written answers: {out / 'answers'}/; score them in {out / 'manual.csv'}, then `xlalab merge-manual`")
    return 0


def run_report(opts: ReportOptions, *, quiet: bool = True) -> int:
    """``xlalab report``: remake ``<out>/report.html`` from the grader's rows; 0, or 2 on an error."""
    try:
        path = class_report(opts.lab, opts.out, source=opts.source, similarity_threshold=opts.similarity_threshold,
                            quiet=quiet)
    except (FileNotFoundError, ValueError, labformat.FormatError) as err:
        log.error("error: %s", err)
        return 2
    print(f"class report: {path}")
    return 0


def run_merge_manual(opts: MergeManualOptions) -> int:
    """``xlalab merge-manual``: fold ``manual.csv`` in, then remake the report; 1 when a line was rejected."""
    try:
        changed, errors = merge_manual(opts.lab, opts.manual, opts.out, source=opts.source)
    except (FileNotFoundError, ValueError, labformat.FormatError) as err:
        log.error("error: %s", err)
        return 2
    for e in errors:
        log.warning("rejected: %s", e)
    print(f"merged {opts.manual}: {len(changed)} students changed, {len(errors)} lines rejected")
    return run_report(opts) or (1 if errors else 0)


def run_export(opts: ExportOptions) -> int:
    """``xlalab export``: write ``<out>/export-<kind>.csv`` for each kind; 0, or 2 on an error."""
    try:
        for kind in opts.kinds:
            path = export_gradebook(opts.lab, kind, opts.out, source=opts.source, roster=opts.roster,
                                    moodle_id=opts.moodle_id)
            print(f"export ({kind}): {path}")
    except (FileNotFoundError, ValueError, labformat.FormatError) as err:
        log.error("error: %s", err)
        return 2
    return 0


__all__ = ["Graded", "Row", "class_report", "engine_spec", "export_gradebook", "grade_submissions",
           "merge_manual", "run_export", "run_grade", "run_merge_manual", "run_report"]
