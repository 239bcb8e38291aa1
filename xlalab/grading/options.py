"""The options of the grading commands (``xlalab grade``, ``report``, ``merge-manual``, ``export``), each a dataclass
whose fields are the flags, the config keys and the Python API's defaults (:data:`GRADE`).

The choices of ``--sandbox``, ``--cluster``, the export kinds and ``--moodle-id`` are data here or in the leaf
module that owns them (:mod:`.sandbox`), so that this module imports no grading step: every step
may import it. The machinery that turns a dataclass into flags and config keys is :mod:`xlalab.options`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xlalab.grading.sandbox import MODES as SANDBOX_MODES
from xlalab.options import opt, threshold

# The batch systems ``--cluster`` starts workers on (through dask-jobqueue; :mod:`xlalab.grading.engine`).
CLUSTERS = ("slurm", "pbs", "sge", "lsf")
# The forms ``xlalab export`` writes (:mod:`xlalab.grading.export`), and the identifier columns of its Moodle form.
EXPORT_KINDS = ("canvas", "moodle", "csv")
MOODLE_ID_COLUMNS = {"username": "Username", "email": "Email address", "idnumber": "ID number"}
MOODLE_IDS = tuple(sorted(MOODLE_ID_COLUMNS))
# Pairs of hand-ins at least this similar are listed in the class report (why 0.6: xlalab.grading.similarity).
DEFAULT_THRESHOLD = 0.6


@dataclass
class LabOptions:
    """What every grading command names: the lab, the output folder and the instructor's sources."""

    lab: str = opt("", positional=True, help="lab name (lab01_timing) or path to its solution notebook")
    out: str = opt("grades", help="output folder (gradebook.csv, feedback/)", path=True)
    source: str | None = opt(None, help="folder with the instructor's lab sources (with hidden checks); "
                                        "default solutions/", path=True)


@dataclass
class ReportOptions(LabOptions):
    """``xlalab report``: remake ``<out>/report.html``, the class report, from the grader's rows."""

    similarity_threshold: float = opt(
        DEFAULT_THRESHOLD, type=threshold, group="written answers and exports",
        help="pairs of hand-ins whose own code or written answers are at least this similar (0-1, winnowed "
             f"fingerprints) are listed in the report, flagged, never penalized (default {DEFAULT_THRESHOLD:g})")


@dataclass
class MergeManualOptions(ReportOptions):
    """``xlalab merge-manual``: fold the instructor's scores of the written answers in, then remake the report."""

    manual: str = opt("", positional=True, metavar="CSV",
                      help="the instructor's scores (student,question,points,comment; the grader writes "
                           "<out>/manual.csv as a template)")


@dataclass
class ExportOptions(LabOptions):
    """``xlalab export``: write ``<out>/export-<kind>.csv`` for Canvas, Moodle or as a plain CSV."""

    kinds: list[str] = opt(factory=list, positional=True, nargs="+", metavar="KIND", choices=EXPORT_KINDS,
                           help="canvas, moodle or csv (one or more)")
    roster: str | None = opt(None, path=True, group="written answers and exports",
                             help="CSV with a 'student' column and the platform's identifier columns (Canvas: ID, "
                                  "SIS User ID, SIS Login ID, Section; Moodle: Username, Email address or ID number)")
    moodle_id: str = opt("username", choices=MOODLE_IDS, group="written answers and exports",
                         help="the identifier column of the Moodle export")


_DASK = "scale-out (Dask)"


@dataclass
class GradeOptions(ReportOptions):
    """``xlalab grade``: grade a class's hand-ins of one lab (:func:`xlalab.grading.cli.grade_submissions`)."""

    submissions: list[str] = opt(factory=list, positional=True, nargs="*", help="notebooks or folders of them")
    jobs: int = opt(1, "-j", "--jobs", type=int,
                    help="submissions graded at once on this machine (a local Dask cluster of that many workers)")
    sandbox: str = opt("auto", choices=SANDBOX_MODES,
                       help="bwrap: run each notebook in a bubblewrap jail (required); auto: bwrap where it works, "
                            "else say why and run unsandboxed; none: no jail")
    cell_timeout: float = opt(600, type=float, help="seconds per cell (nbval)")
    timeout: float = opt(1800, type=float, help="seconds for a whole notebook")
    memory_gb: float = opt(8, type=float,
                           help="address-space limit of the grading process and its kernel (TF+XLA needs >= 4)")
    scheduler: str | None = opt(None, group=_DASK, help="address of a running Dask scheduler (tcp://host:8786)")
    cluster: str | None = opt(None, choices=CLUSTERS, group=_DASK,
                              help="start workers as batch jobs through dask-jobqueue")
    queue: str | None = opt(None, group=_DASK, help="batch queue or partition")
    account: str | None = opt(None, group=_DASK, help="account or project charged for the jobs")
    cores: int = opt(4, type=int, group=_DASK, help="cores per job")
    memory: str = opt("16GB", group=_DASK, help="memory per job")
    walltime: str = opt("02:00:00", group=_DASK, help="wall-clock limit per job")
    gpus: int = opt(0, type=int, group=_DASK, help="GPUs per job")
    cluster_jobs: int = opt(0, type=int, group=_DASK,
                            help="batch jobs to start (default: -j, at most one per submission)")
    prologue: list[str] = opt(factory=list, action="append", group=_DASK,
                              help="a shell line run before each worker starts (e.g. 'source /shared/course/.venv/"
                                   "bin/activate'); repeatable")
    dry_run: bool = opt(False, action="store_true", config=False, group=_DASK,
                        help="print the job script of --cluster and exit")


GRADE = GradeOptions()   # the defaults the Python API reads (grade_submissions, grade_one, EngineSpec)
