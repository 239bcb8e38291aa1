"""Grade lab submissions with nbval, each in a bubblewrap jail, on this machine or a Dask cluster.

``python -m xlalab.grade LAB SUBMISSIONS... --out grades/ [-j N] [--source DIR] [--sandbox auto|bwrap|none]
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
``--similarity-threshold``, :mod:`xlalab.grading.similarity`); ``python -m xlalab.grade LAB --report --out grades/``
remakes it from the grader's rows.

``python -m xlalab.grade LAB --merge-manual grades/manual.csv --out grades/`` folds the instructor's scores of the
written answers in (bad lines are rejected, one line each, exit status 1); ``--export canvas|moodle|csv``
(repeatable, ``--roster``, ``--moodle-id``) writes ``<out>/export-<kind>.csv`` (:mod:`xlalab.grading.export`).
Both work with or without submissions in the same command.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from xlalab.grading import (
    answers as answers_mod,
    assign,
    classreport,
    engine,
    export as export_mod,
    sandbox as sandbox_mod,
    similarity,
)
from xlalab.grading.feedback import summary_table
from xlalab.grading.gradebook import Gradebook
from xlalab.grading.lab import load_lab
from xlalab.grading.score import Row, zero_row
from xlalab.grading.submissions import expand_submissions, guard_sources


class Graded(list):
    """The rows of one grading run (a list of :class:`Row`), with ``warnings`` (tampering found),
    ``elapsed`` seconds, the ``sandbox`` used and the ``engine``."""

    warnings: list[str]
    elapsed: float
    sandbox: str
    engine: str


def grade_submissions(lab: str | Path, submissions: Iterable[str | Path], out: str | Path = "grades", *,
                      jobs: int = 1, source: str | Path | None = None, cell_timeout: float = 600,
                      timeout: float = 1800, memory_gb: float = 8, env: Mapping[str, str | None] | None = None,
                      progress: bool = False, sandbox: str = "auto", scheduler: str | None = None,
                      spec: engine.EngineSpec | None = None, quiet: bool = False,
                      similarity_threshold: float = similarity.DEFAULT_THRESHOLD) -> Graded:
    """Grade every submission of one lab; write the gradebook and feedback under ``out``; return the rows.

    Example: ``grade_submissions("lab01_timing", ["hand-ins/"], "grades", jobs=2)``. ``sandbox`` is "auto"
    (bwrap where it works), "bwrap" (required) or "none"; ``scheduler`` a Dask scheduler address; ``spec`` an
    :class:`~xlalab.grading.engine.EngineSpec` for anything else (``jobs`` and ``scheduler`` then are ignored).
    Writes ``<out>/report.html`` at the end (:mod:`xlalab.grading.classreport`; pairs of similar hand-ins at
    ``similarity_threshold``).
    """
    start = time.monotonic()
    the_lab = load_lab(lab, source)
    box = sandbox_mod.resolve(sandbox, quiet=quiet)   # says once, here, if grading runs unsandboxed
    spec = spec or engine.EngineSpec(jobs=jobs, scheduler=scheduler)
    guard_sources(the_lab)   # from here, no reader of this process takes a source file for a hand-in
    entries = expand_submissions(submissions, the_lab.name)
    ids = [c.check for c in the_lab.checks]
    kwargs = dict(cell_timeout=cell_timeout, timeout=timeout, memory_gb=memory_gb, env=env,
                  sandbox=box if spec.kind in ("serial", "local") else sandbox)
    # Written answers are read here, from the submission files, before any student code of this run starts.
    written = {student: _collect(the_lab, path) for student, path in entries} if the_lab.answers else {}
    owns = [similarity.collect(the_lab, student, path) for student, path in entries]   # for the report, likewise
    with Gradebook(out, ids, quiet=quiet, answer_ids=[a.answer for a in the_lab.answers]) as book:
        before = dict(book.stored)
        similarity.save(out, owns)

        def record(row: Row) -> None:
            try:
                row.answers = written.get(row.student, [])
                old = before.get(row.student)
                for res in row.answers:   # a re-graded student keeps the instructor's points for an unchanged answer
                    prev = next((a for a in (old.answers if old else []) if a.answer == res.answer), None)
                    if prev is not None and prev.earned is not None and res.earned is None and prev.text == res.text:
                        res.earned, res.comment = prev.earned, prev.comment
                book.record(row)
            except Exception as err:  # noqa: BLE001  (one hand-in never stops the class: its row says why)
                bad = zero_row(the_lab, row.student, f"not graded: grader error while recording "
                               f"({type(err).__name__}: {str(err)[:200]})", row.submission)
                book.record(bad)

        rows = engine.run(the_lab, entries, kwargs, spec, record, progress=progress)
        if the_lab.answers:
            everyone = list(book.stored.values())
            answers_mod.write_answer_files(the_lab, everyone, out)
            answers_mod.write_manual_template(the_lab, everyone, Path(out) / "manual.csv")
    _write_report(the_lab, list(book.stored.values()), out, similarity_threshold, book.warnings, quiet)
    result = Graded(rows)
    result.warnings = book.warnings
    result.elapsed = time.monotonic() - start
    result.sandbox = box.describe()
    result.engine = engine.describe(spec)
    unsandboxed = sorted({r.student for r in rows if r.sandbox == "none"})
    if box.on and unsandboxed and not quiet:
        print(f"xlalab.grade: WARNING: {len(unsandboxed)} submissions ran unsandboxed on workers without "
              f"bwrap ({', '.join(unsandboxed[:5])}...); install bubblewrap there or use --sandbox bwrap",
              file=sys.stderr)
    return result


def _collect(lab, path) -> list:
    try:
        return answers_mod.collect(lab, path)
    except Exception:  # noqa: BLE001  (a hand-in the reader cannot take: its answers are missing, the class goes on)
        return answers_mod.answers_of(lab, {})

def _write_report(lab, rows: list[Row], out, threshold: float, warnings: list[str], quiet: bool) -> Path | None:
    """The class report; a failure to make it is a warning, never a lost gradebook."""
    try:
        return classreport.write_report(lab, rows, out, threshold=threshold)
    except Exception as err:  # noqa: BLE001  (the gradebook is written; the report is a view of it)
        warnings.append(f"the class report could not be written ({type(err).__name__}: {str(err)[:200]})")
        if not quiet:
            print(f"xlalab.grade: WARNING: {warnings[-1]}", file=sys.stderr)
        return None


def class_report(lab: str | Path, out: str | Path = "grades", *, source: str | Path | None = None,
                 similarity_threshold: float = similarity.DEFAULT_THRESHOLD, quiet: bool = False) -> Path:
    """Write ``<out>/report.html`` from the grader's own rows of the gradebook in ``out`` (``--report``)."""
    the_lab = load_lab(lab, source)
    with Gradebook(out, [c.check for c in the_lab.checks], quiet=quiet,
                   answer_ids=[a.answer for a in the_lab.answers]) as book:
        rows = list(book.stored.values())
        return classreport.write_report(the_lab, rows, out, threshold=similarity_threshold)


def merge_manual(lab: str | Path, manual: str | Path, out: str | Path = "grades", *,
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


def export_gradebook(lab: str | Path, kind: str, out: str | Path = "grades", *, source: str | Path | None = None,
                     roster: str | Path | None = None, moodle_id: str = "username", quiet: bool = False) -> Path:
    """Write ``<out>/export-<kind>.csv`` (see :mod:`xlalab.grading.export`) from the grader's own rows."""
    the_lab = load_lab(lab, source)
    with Gradebook(out, [c.check for c in the_lab.checks], quiet=quiet,
                   answer_ids=[a.answer for a in the_lab.answers]) as book:
        rows = list(book.stored.values())
        text = book.csv_text()
    return export_mod.export(kind, rows, lab=the_lab.name, maximum=the_lab.maximum, out=out, csv_text=text,
                             roster=roster, moodle_id=moodle_id)


def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], not {text}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m xlalab.grade", description=__doc__.split("\n\n")[0])
    p.add_argument("lab", help="lab name (lab01_timing) or path to its solution notebook")
    p.add_argument("submissions", nargs="*", help="notebooks or folders of them")
    p.add_argument("--out", default="grades", help="output folder (gradebook.csv, feedback/)")
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="submissions graded at once on this machine (a local Dask cluster of that many workers)")
    p.add_argument("--source", default=None,
                   help="folder with the instructor's lab sources (with hidden checks); default solutions/")
    p.add_argument("--sandbox", choices=sandbox_mod.MODES, default="auto",
                   help="bwrap: run each notebook in a bubblewrap jail (required); auto: bwrap where it works, "
                        "else say why and run unsandboxed; none: no jail")
    p.add_argument("--cell-timeout", type=float, default=600, help="seconds per cell (nbval)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds for a whole notebook")
    p.add_argument("--memory-gb", type=float, default=8,
                   help="address-space limit of the grading process and its kernel (TF+XLA needs >= 4)")
    m = p.add_argument_group("written answers and exports")
    m.add_argument("--merge-manual", metavar="CSV", default=None,
                   help="fold the instructor's scores of the written answers (student,question,points,comment; "
                        "the grader writes <out>/manual.csv as a template) into the gradebook and feedback")
    m.add_argument("--export", action="append", choices=export_mod.KINDS, default=[],
                   help="write <out>/export-KIND.csv in the form Canvas or Moodle imports, or a plain CSV "
                        "(repeatable)")
    m.add_argument("--roster", default=None,
                   help="CSV with a 'student' column and the platform's identifier columns (Canvas: ID, SIS "
                        "User ID, SIS Login ID, Section; Moodle: Username, Email address or ID number)")
    m.add_argument("--report", action="store_true",
                   help="write <out>/report.html, the class report (also written after every grading run, and "
                        "after --merge-manual)")
    m.add_argument("--similarity-threshold", type=_threshold, default=similarity.DEFAULT_THRESHOLD,
                   help="pairs of hand-ins whose own code or written answers are at least this similar (0-1, "
                        "winnowed fingerprints) are listed in the report, flagged, never penalized "
                        f"(default {similarity.DEFAULT_THRESHOLD:g})")
    m.add_argument("--moodle-id", choices=sorted(export_mod.MOODLE_ID_COLUMNS), default="username",
                   help="the identifier column of the Moodle export")
    g = p.add_argument_group("scale-out (Dask)")
    g.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (tcp://host:8786)")
    g.add_argument("--cluster", choices=engine.CLUSTERS, default=None,
                   help="start workers as batch jobs through dask-jobqueue")
    g.add_argument("--queue", default=None, help="batch queue or partition")
    g.add_argument("--account", default=None, help="account or project charged for the jobs")
    g.add_argument("--cores", type=int, default=4, help="cores per job")
    g.add_argument("--memory", default="16GB", help="memory per job")
    g.add_argument("--walltime", default="02:00:00", help="wall-clock limit per job")
    g.add_argument("--gpus", type=int, default=0, help="GPUs per job")
    g.add_argument("--cluster-jobs", type=int, default=0,
                   help="batch jobs to start (default: -j, at most one per submission)")
    g.add_argument("--prologue", action="append", default=[],
                   help="a shell line run before each worker starts (e.g. 'source /shared/course/.venv/bin/"
                        "activate'); repeatable")
    g.add_argument("--dry-run", action="store_true", help="print the job script of --cluster and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spec = engine.EngineSpec(jobs=args.jobs, scheduler=args.scheduler, cluster=args.cluster, queue=args.queue,
                             cores=args.cores, memory=args.memory, walltime=args.walltime, gpus=args.gpus,
                             cluster_jobs=args.cluster_jobs, account=args.account, prologue=args.prologue)
    if args.dry_run:
        if not args.cluster:
            print("error: --dry-run prints the job script of --cluster; give --cluster", file=sys.stderr)
            return 2
        print(engine.job_script(spec))
        return 0
    if not args.submissions and not (args.merge_manual or args.export or args.report):
        print("error: no submissions given", file=sys.stderr)
        return 2
    if args.submissions:
        rc = _grade_main(args, spec)
        if rc:
            return rc
    rc = 0
    try:
        if args.merge_manual:
            changed, errors = merge_manual(args.lab, args.merge_manual, args.out, source=args.source)
            for e in errors:
                print(f"rejected: {e}", file=sys.stderr)
            print(f"merged {args.merge_manual}: {len(changed)} students changed, {len(errors)} lines rejected")
            rc = 1 if errors else 0
        if args.merge_manual or (args.report and not args.submissions):   # (a grading run wrote it already)
            path = class_report(args.lab, args.out, source=args.source,
                                similarity_threshold=args.similarity_threshold, quiet=True)
            print(f"class report: {path}")
        for kind in args.export:
            path = export_gradebook(args.lab, kind, args.out, source=args.source, roster=args.roster,
                                    moodle_id=args.moodle_id)
            print(f"export ({kind}): {path}")
    except (FileNotFoundError, ValueError, assign.FormatError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return rc


def _grade_main(args: argparse.Namespace, spec: engine.EngineSpec) -> int:
    try:
        rows = grade_submissions(args.lab, args.submissions, args.out, source=args.source,
                                 cell_timeout=args.cell_timeout, timeout=args.timeout,
                                 memory_gb=args.memory_gb, progress=True, sandbox=args.sandbox, spec=spec,
                                 similarity_threshold=args.similarity_threshold)
    except (FileNotFoundError, assign.FormatError, sandbox_mod.SandboxUnavailable, engine.ClusterUnavailable) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print()
    print(summary_table(rows, rows.elapsed))
    print(f"engine: {rows.engine}; sandbox: {rows.sandbox}")
    for w in rows.warnings:
        print(f"WARNING: {w}")
    print(f"\ngradebook: {Path(args.out) / 'gradebook.csv'}; feedback: {Path(args.out) / 'feedback'}/")
    if (Path(args.out) / "report.html").exists():
        print(f"class report: {Path(args.out) / 'report.html'}")
    if (Path(args.out) / "manual.csv").exists():
        print(f"written answers: {Path(args.out) / 'answers'}/; score them in {Path(args.out) / 'manual.csv'}, "
              "then --merge-manual")
    return 0


__all__ = ["Graded", "Row", "class_report", "export_gradebook", "grade_submissions", "main", "merge_manual", "parser"]
