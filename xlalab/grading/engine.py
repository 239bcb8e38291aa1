"""Where submissions are graded: in this process, or as tasks on Dask distributed.

- ``serial`` (``-j 1``, the default): one after the other, in this process.
- ``local`` (``-j N`` with N > 1): an embedded Dask ``LocalCluster`` of N single-threaded worker processes on
  127.0.0.1 (no dashboard), so the one-machine command is unchanged.

The clusters the grader starts (``local``, ``jobqueue``) speak TLS only, with a key and certificate made for
the run (:func:`run_security`): another user of the machine or the cluster cannot connect to the scheduler or
a worker, so cannot run code there or change a row.
- ``scheduler`` (``--scheduler tcp://host:8786``): the workers of an existing Dask cluster.
- ``jobqueue`` (``--cluster slurm|pbs|sge|lsf``): batch jobs started through dask-jobqueue, each a worker that
  grades one notebook at a time (``--queue``, ``--cores``, ``--memory``, ``--walltime``, ``--gpus`` per job,
  ``--cluster-jobs`` jobs); ``--dry-run`` prints the job script.

Workers only run :func:`xlalab.grading.task.grade_one` and return the row; the client alone writes the
gradebook (:mod:`xlalab.grading.gradebook`), as each row arrives. The hand-in travels with the task (workers
need no view of the hand-in folder, only the course environment). A task whose worker dies is retried once
(on a cluster the grader starts, the scheduler's ``allowed-failures`` is 1); if it dies again, the submission
gets a row of its own saying so and the rest of the class is graded.

On a batch cluster (``jobqueue``) the grader first asks the batch system (``squeue``, ``qstat``, ``bjobs``)
whether it answers: if not, it stops at once with :class:`ClusterUnavailable`, having submitted nothing. While it
waits for rows it looks every :data:`WATCH_S` seconds: a job that ended (cancelled with ``scancel``, past its
wall time, the node lost) takes with it only the task its worker was running, which is retried on another
worker; when no worker is left and none of its jobs is still queued or running, the grader submits fresh jobs
(:data:`RESUBMITS` times at most); when no worker is left and the batch system stops answering, it stops with
:class:`ClusterUnavailable` naming the submissions not graded. Rows graded before that are in the gradebook.
"""

from __future__ import annotations

import concurrent.futures as futures
import getpass
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlalab.grading.lab import Lab
from xlalab.grading.model import Row
from xlalab.grading.options import CLUSTERS, GRADE
from xlalab.grading.score import zero_row
from xlalab.grading.submissions import HandIn
from xlalab.grading.task import Limits, grade_one

log = logging.getLogger(__name__)

# On a cluster the grader starts: a worker runs one notebook at a time (one thread; the job's cores are the
# notebook's), the scheduler hands a worker no task before it is free (so a worker that dies takes only the
# task it was running with it), and a task whose worker died twice is given up.
DASK_CONFIG = {"distributed.scheduler.allowed-failures": 1, "distributed.scheduler.worker-saturation": 1.0,
               "distributed.worker.daemon": False, "logging.distributed": "error"}


WATCH_S = 15.0        # seconds between looks at the batch system while no row arrives
PROBE_TIMEOUT_S = 30  # how long a batch-system command may take before it counts as not answering
RESUBMITS = 2         # fresh jobs submitted when every job ended with submissions left
# The command that says whether the batch system answers and which of the given jobs are still there.
QUEUE_COMMANDS = {"slurm": ["squeue", "-h", "-o", "%i", "-u", "{user}"], "pbs": ["qstat"], "sge": ["qstat"],
                  "lsf": ["bjobs", "-noheader", "-o", "jobid"]}


class ClusterUnavailable(RuntimeError):
    """The batch system does not answer (or every worker job ended for good); nothing more can be graded."""


def queue_jobs(cluster: str) -> set[str]:
    """The ids of this user's jobs the batch system lists; raise :class:`ClusterUnavailable` if it does not answer."""
    cmd = [part.format(user=getpass.getuser()) for part in QUEUE_COMMANDS[cluster]]
    if shutil.which(cmd[0]) is None:
        raise ClusterUnavailable(f"--cluster {cluster}: `{cmd[0]}` is not on PATH here; run the grader on a "
                                 "login node of the cluster (where sbatch/qsub/bsub work)")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ClusterUnavailable(f"the {cluster} controller did not answer `{' '.join(cmd)}` within "
                                 f"{PROBE_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise ClusterUnavailable(f"the {cluster} controller does not answer: `{' '.join(cmd)}` failed "
                                 f"({why[-1] if why else f'exit status {proc.returncode}'})")
    return {line.split()[0].split(".")[0] for line in proc.stdout.splitlines() if line.strip()
            and line.split()[0].split(".")[0].isdigit()}


@dataclass
class EngineSpec:
    """How to run the tasks (see the module docstring); ``jobs`` is ``-j``. The defaults are ``xlalab grade``'s
    (:class:`xlalab.grading.options.GradeOptions`)."""

    jobs: int = GRADE.jobs
    scheduler: str | None = GRADE.scheduler
    cluster: str | None = GRADE.cluster
    queue: str | None = GRADE.queue
    cores: int = GRADE.cores
    memory: str = GRADE.memory
    walltime: str = GRADE.walltime
    gpus: int = GRADE.gpus
    cluster_jobs: int = GRADE.cluster_jobs
    account: str | None = GRADE.account
    prologue: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.cluster:
            return "jobqueue"
        if self.scheduler:
            return "scheduler"
        return "local" if self.jobs > 1 else "serial"


def _gpu_directives(cluster: str, gpus: int) -> list[str]:
    if gpus <= 0:
        return []
    return {"slurm": [f"--gres=gpu:{gpus}"], "pbs": [f"-l ngpus={gpus}"], "sge": [f"-l gpu={gpus}"],
            "lsf": [f'-gpu "num={gpus}"']}[cluster]


def run_security():
    """The Dask security of one grading run: TLS with a key and self-signed certificate made for this run only
    (``distributed.security.Security.temporary``, RSA 2048), required on every connection of the scheduler,
    the workers, their nannies and the client. Dask's TLS is mutual: each side presents a certificate signed by
    the run's own, so a process without this run's key (another user of the machine or of the cluster, a
    student's code) is refused at the handshake."""
    from distributed.security import Security

    return Security.temporary()


def tls_dir() -> Path:
    """Where the worker jobs of a batch cluster read the run's key and certificate: ``tls/`` in the grader's
    private state folder (mode 0700; the files 0600), which the compute nodes see when the home folder is
    shared, as it is on a cluster. The files live as long as the run's cluster."""
    from xlalab.grading.gradebook import state_dir

    path = state_dir() / "tls"
    path.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)
    return path


def jobqueue_cluster(spec: EngineSpec, *, dashboard: bool = True):
    """The dask-jobqueue cluster object (no job is submitted until it is scaled); scheduler and workers talk
    TLS with the run's own key (:func:`run_security`), which the job script reads from :func:`tls_dir`."""
    if spec.cluster not in CLUSTERS:
        raise ValueError(f"--cluster must be one of {', '.join(CLUSTERS)}, not {spec.cluster!r}")
    from xlalab import compat

    dask_jobqueue = compat.require("dask_jobqueue", "grading on a batch cluster (--cluster)")

    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster,
           "sge": dask_jobqueue.SGECluster, "lsf": dask_jobqueue.LSFCluster}[spec.cluster]
    from xlalab.grading.sandbox import package_root

    prologue = [f"export PYTHONPATH={package_root()}${{PYTHONPATH:+:$PYTHONPATH}}", *spec.prologue]
    kwargs: dict[str, Any] = dict(
        cores=spec.cores, memory=spec.memory, processes=1, walltime=spec.walltime, queue=spec.queue,
        job_name="xlalab-grade", python=sys.executable, job_script_prologue=prologue,
        worker_extra_args=["--nthreads", "1"],
        job_extra_directives=_gpu_directives(spec.cluster, spec.gpus), silence_logs="error",
        security=run_security(), protocol="tls://", shared_temp_directory=str(tls_dir()))
    if not dashboard:
        kwargs["scheduler_options"] = {"dashboard_address": None}
    if spec.account:
        kwargs["account" if spec.cluster != "sge" else "project"] = spec.account
    if spec.cluster == "sge":
        kwargs["resource_spec"] = f"h_vmem={spec.memory}"
    return cls(**kwargs)


def job_script(spec: EngineSpec) -> str:
    """The batch script one worker job would be submitted with (``--dry-run``)."""
    cluster = jobqueue_cluster(spec, dashboard=False)
    try:
        return cluster.job_script()
    finally:
        close_cluster(cluster)


def close_cluster(cluster) -> None:
    """Close a cluster the grader started; for a batch cluster also delete the run's key and certificates that
    dask-jobqueue wrote for the job script (its ``_job_<name>`` temporary files)."""
    try:
        cluster.close()
    finally:
        for name in ("key", "cert", "ca_file"):
            f = getattr(cluster, f"_job_{name}", None)
            if f is not None:
                f.close()


def _task(fn: Callable[..., Row], lab: Lab, handin: HandIn, limits: Limits) -> Row:
    """What a worker runs: grade the hand-in it was sent (its bytes travel with the task), return the row."""
    return fn(lab, handin, limits)


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="sub", desc="graded", dynamic_ncols=True, file=sys.stderr,
                bar_format="{desc} {n_fmt}/{total_fmt} |{bar}| {elapsed} elapsed, {remaining} left, "
                           "{rate_fmt}{postfix}")


def run(lab: Lab, entries: list[HandIn], limits: Limits, spec: EngineSpec, on_row: Callable[[Row], None], *,
        progress: bool = False, fn: Callable[[Lab, HandIn, Limits], Row] = grade_one) -> list[Row]:
    """Grade the hand-ins ``entries`` with ``fn(lab, handin, limits)`` on the engine ``spec``; call ``on_row`` in
    this process as each row arrives; return the rows in the order of ``entries``."""
    bar = _progress(len(entries), progress)
    rows: dict[int, Row] = {}

    def done(i: int, row: Row) -> None:
        rows[i] = row
        on_row(row)
        if bar is not None:
            bar.set_postfix_str(f"last: {row.student}", refresh=False)
            bar.update(1)

    try:
        if spec.kind == "serial" or not entries:
            for i, handin in enumerate(entries):
                done(i, _safe(fn, lab, handin, limits))
        else:
            _run_dask(lab, entries, limits, spec, done, fn)
    finally:
        if bar is not None:
            bar.close()
    return [rows[i] for i in range(len(entries))]


def _safe(fn, lab: Lab, handin: HandIn, limits: Limits) -> Row:
    try:
        return fn(lab, handin, limits)
    except BaseException as err:  # grade_one does not raise; this is the last line of defence
        if isinstance(err, KeyboardInterrupt):
            raise
        return zero_row(lab, handin.student, f"grader error ({type(err).__name__})", str(handin.path))


def _run_dask(lab, entries: list[HandIn], limits: Limits, spec: EngineSpec, done, fn) -> None:
    try:
        import dask
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        log.warning("xlalab.grade: Dask distributed is not installed; grading with a thread pool "
                    "(pip install 'dask[distributed]')")
        with futures.ThreadPoolExecutor(max_workers=max(1, spec.jobs)) as pool:
            futs: dict[Any, int] = {pool.submit(_safe, fn, lab, h, limits): i for i, h in enumerate(entries)}
            for f in futures.as_completed(futs):
                done(futs[f], f.result())
        return

    cluster = None
    with dask.config.set(DASK_CONFIG):
        if spec.kind == "local":
            security = run_security()
            cluster = LocalCluster(n_workers=spec.jobs, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address=None, memory_limit=0,
                                   silence_logs=logging.ERROR, security=security, protocol="tls://")
            client = Client(cluster, security=security)
        elif spec.kind == "jobqueue":
            assert spec.cluster  # kind "jobqueue" is a spec with a cluster
            queue_jobs(spec.cluster)   # the batch system answers, or stop here, before anything is submitted
            cluster = jobqueue_cluster(spec)
            n = spec.cluster_jobs or min(len(entries), max(1, spec.jobs))
            cluster.scale(jobs=n)
            client = Client(cluster, security=cluster.security)
        else:
            assert spec.scheduler  # kind "scheduler" is a spec with a scheduler
            if not spec.scheduler.startswith("tls://"):
                log.warning("xlalab.grade: WARNING: %s is not a tls:// address: whoever reaches it can run code on "
                            "its workers and change grades; give a TLS scheduler (Dask's distributed.comm.tls "
                            "settings hold its certificates)", spec.scheduler)
            client = Client(spec.scheduler, timeout="30s")
        try:
            futs = {}
            for i, handin in enumerate(entries):
                fut = client.submit(_task, fn, lab, handin, limits, key=f"grade-{i}-{handin.student}"[:200],
                                    pure=False, retries=1)
                futs[fut] = i
            watch = _Watch(spec, cluster, n) if spec.kind == "jobqueue" else None
            waiting = as_completed(list(futs))
            left = set(futs)
            while not waiting.is_empty():
                batch = waiting.next_batch(block=False) if watch is not None else [next(waiting)]
                if not batch:
                    assert watch is not None  # only next_batch() comes back empty
                    watch.look(client, [entries[futs[f]].student for f in left])
                    time.sleep(0.5)
                    continue
                for fut in batch:
                    left.discard(fut)
                    i = futs[fut]
                    student, path = entries[i].student, entries[i].path
                    try:
                        row = fut.result()
                    except Exception as err:  # noqa: BLE001  (KilledWorker, a lost connection, ...)
                        name = type(err).__name__
                        why = ("the worker grading it died, twice" if name == "KilledWorker"
                               else f"{name}: {str(err)[:200]}")
                        row = zero_row(lab, student, f"grader error ({why})", str(path))
                    done(i, row)
                    if watch is not None:
                        watch.progress()
        finally:
            client.close()
            if cluster is not None:
                close_cluster(cluster)


class _Watch:
    """Looks after the worker jobs of a batch cluster while no row arrives (see the module docstring)."""

    def __init__(self, spec: EngineSpec, cluster, jobs: int):
        self.spec, self.cluster, self.jobs = spec, cluster, jobs
        self.last = self.start = time.monotonic()
        self.resubmitted = 0

    def progress(self) -> None:
        self.last = time.monotonic()

    def look(self, client, left: list[str]) -> None:
        if time.monotonic() - self.last < WATCH_S:
            return
        self.last = time.monotonic()
        if client.scheduler_info().get("workers"):
            return   # workers are grading (or idle, about to get a task)
        ours = {str(getattr(job, "job_id", "") or "") for job in self.cluster.workers.values()} - {""}
        if not ours:
            if time.monotonic() - self.start > 4 * WATCH_S:
                raise ClusterUnavailable(f"no worker job could be submitted in {4 * WATCH_S:g} s (the submit "
                                         "command's error is above; check --queue, --account, --memory); "
                                         f"{len(left)} submissions not graded")
            return   # still submitting
        try:
            assert self.spec.cluster  # a _Watch is made for kind "jobqueue" only
            listed = queue_jobs(self.spec.cluster)
        except ClusterUnavailable as err:
            raise ClusterUnavailable(f"{err}; no worker is left, so {len(left)} submissions were not graded "
                                     f"({', '.join(sorted(left)[:10])}{'...' if len(left) > 10 else ''}); the "
                                     "rows graded before are in the gradebook: grade the rest again later") from None
        if ours & listed:
            return   # jobs still queued or starting: a real cluster can take a while
        if self.resubmitted >= RESUBMITS:
            raise ClusterUnavailable(f"every worker job ended ({self.resubmitted} times resubmitted; cancelled, "
                                     f"or past --walltime?) with {len(left)} submissions not graded "
                                     f"({', '.join(sorted(left)[:10])}); the rows graded before are in the gradebook")
        self.resubmitted += 1
        log.info("xlalab.grade: every worker job ended with %d submissions left; submitting %d fresh jobs",
                 len(left), self.jobs)
        self.cluster.scale(jobs=0)   # forget the ended jobs (new worker names), then ask for fresh ones
        self.cluster.scale(jobs=self.jobs)


def describe(spec: EngineSpec) -> str:
    if spec.kind == "serial":
        return "serial (this process)"
    if spec.kind == "local":
        return f"Dask LocalCluster, {spec.jobs} workers"
    if spec.kind == "scheduler":
        return f"Dask scheduler {spec.scheduler}"
    return f"dask-jobqueue {spec.cluster} ({spec.cores} cores, {spec.memory}, {spec.walltime} per job)"

