"""Grading on a real Slurm cluster (issue 20): a one-node Slurm started by this test (``tests/scripts/slurm_local.py``),
the class graded with ``--cluster slurm`` through dask-jobqueue, jobs seen in ``squeue`` and ``sacct``; the
gradebook and feedback equal the local engine's. Faults: a worker job cancelled mid-grading (its submission is
graded again on the other worker), the controller unreachable (a clear error within a minute, earlier rows kept).

Needs Debian's ``slurm-wlm`` and ``munge`` and root (``.ci/run`` installs them and runs ``make slurm-test``);
skipped with the reason elsewhere. The sample lab (NumPy only) keeps it short: about a minute on 2 cores.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from xlalab import cli
from xlalab.grading import engine

from helpers import LIMIT_ARGS, SAMPLE, answered, cell, insert_after, outputs, released, write_handins
from scripts.slurm_local import LocalSlurm, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


JOBS = ["--cluster", "slurm", "--cores", "1", "--memory", "1GB", "--walltime", "00:10:00", "--cluster-jobs", "2"]
HOSTILE = """import os
try:   # outside the work folder: read-only in the jail
    open(os.path.join(os.path.dirname(os.getcwd()), 'gradebook.csv'), 'w').write('hostile,1000\\n')
except OSError as err:
    print('blocked:', err)
try:
    print(open('/work/main/solutions/lab90_sample.ipynb').read()[:100])
except OSError as err:
    print('blocked:', err)
os._exit(3)
"""


@pytest.fixture(scope="module")
def handins(lab_root, tmp_path_factory) -> Path:
    """The solution, the blank lab, two faulty hand-ins and one hostile one."""
    wrong_total, syntax_error = answered(lab_root), answered(lab_root)
    cell(wrong_total, "p2-answer").source = "def total(x):\n    return 0.0"
    cell(syntax_error, "p1-answer").source = "def scale(x, k):\n    return [v * k for v in x"   # a syntax error
    return write_handins(tmp_path_factory.mktemp("handins"), {
        "solution": answered(lab_root), "blank": released(lab_root), "wrong_total": wrong_total,
        "syntax_error": syntax_error, "hostile": insert_after(answered(lab_root), "p1-check", HOSTILE)})


@pytest.fixture(scope="module")
def local_book(lab_root, handins, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local")
    assert cli.main(["grade", str(lab_root / "solutions" / f"{SAMPLE}.ipynb"), str(handins), "--out", str(out),
                       *LIMIT_ARGS]) == 0
    return out


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    why = unavailable()
    if why:
        pytest.skip(why)
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except RuntimeError as err:
        cluster.close()
        pytest.fail(f"Slurm is installed but would not start here: {err}")
    old = {k: os.environ.get(k) for k in cluster.env()}
    os.environ.update(cluster.env())
    yield cluster
    cluster.close()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class Queue:
    """Polls ``squeue`` in a thread: every (job id, name, state) seen while grading."""

    def __init__(self, slurm: LocalSlurm):
        self.seen: set[tuple[str, ...]] = set()
        self.slurm, self._stop = slurm, threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            r = self.slurm.run("squeue", "-h", "-o", "%i %j %T", check=False)
            self.seen.update(tuple(line.split()) for line in r.stdout.splitlines() if line.strip())
            time.sleep(0.3)

    def __enter__(self) -> Queue:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join(5)

    def running(self) -> list[str]:
        return sorted({i for i, name, state in self.seen if name == "xlalab-grade" and state == "RUNNING"}, key=int)


def ended_jobs(slurm: LocalSlurm) -> dict[str, str]:
    """job id -> state of the ended jobs, from ``sacct -c`` (the job completion log)."""
    out = slurm.run("sacct", "-c", "-a", "-n", "-P", "--format=JobID,JobName,State").stdout
    return {i: s for i, n, s in (line.split("|")[:3] for line in out.splitlines() if line.strip())}


@pytest.fixture(autouse=True)
def _job_logs_here(tmp_path, monkeypatch):
    """sbatch writes each job's slurm-<id>.out into the folder it was called from: the test's, not the clone."""
    monkeypatch.chdir(tmp_path)


def test_grading_on_slurm_equals_the_local_engine(lab_root, handins, local_book, slurm, tmp_path):
    out = tmp_path / "slurm"
    start = time.monotonic()
    with Queue(slurm) as queue:
        assert cli.main(["grade", str(lab_root / "solutions" / f"{SAMPLE}.ipynb"), str(handins), "--out", str(out),
                           *JOBS, *LIMIT_ARGS]) == 0
    wall = time.monotonic() - start
    print(f"graded 5 hand-ins on the local Slurm in {wall:.1f} s ({60 * 5 / wall:.1f} per minute), "
          f"2 one-core jobs, load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs; jobs seen: "
          f"{sorted(queue.seen)}")
    jobs = queue.running()
    assert len(jobs) == 2, f"two worker jobs should have run (squeue saw {queue.seen})"
    deadline = time.monotonic() + 20
    while not set(jobs) <= set(ended_jobs(slurm)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert set(jobs) <= set(ended_jobs(slurm)), f"sacct -c does not list {jobs}: {ended_jobs(slurm)}"
    assert outputs(out) == outputs(local_book), "the Slurm gradebook differs from the local engine's"
    totals = {line.split(",")[0]: line.split(",")[1] for line in outputs(out)["gradebook.csv"].splitlines()[1:]}
    # hostile: the visible p1-scale only (its kernel dies, and hidden checks run after every student cell, issue 34)
    assert totals == {"blank": "0", "hostile": "2", "solution": "6", "syntax_error": "2", "wrong_total": "4"}, totals
    assert "the kernel died" in outputs(out)["hostile.md"]
    assert (out / "report.html").exists()
    assert not list(engine.tls_dir().iterdir()), "the run's TLS key outlived the run"


def test_a_cancelled_worker_job_loses_no_submission(lab_root, handins, local_book, slurm, tmp_path):
    out = tmp_path / "cancel"
    result: dict[str, int] = {}
    argv = [str(lab_root / "solutions" / f"{SAMPLE}.ipynb"), str(handins), "--out", str(out), *JOBS, *LIMIT_ARGS]
    with Queue(slurm) as queue:
        t = threading.Thread(target=lambda: result.setdefault("rc", cli.main(["grade", *argv])))
        t.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:   # the first row is in: both workers are grading the next ones
            book = out / "gradebook.csv"
            if book.exists() and len(book.read_text().splitlines()) >= 2 and len(queue.running()) == 2:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"no row within 120 s (squeue saw {queue.seen})")
        victim = queue.running()[0]
        slurm.run("scancel", victim)
        t.join(240)
    assert not t.is_alive(), "grading did not finish after a job was cancelled"
    assert result["rc"] == 0
    assert ended_jobs(slurm).get(victim, "").startswith("CANCELLED")
    assert outputs(out) == outputs(local_book), "a submission was lost or changed when its job was cancelled"


def test_an_unreachable_controller_is_a_clear_error_and_keeps_the_rows(lab_root, handins, slurm, tmp_path, capsys):
    out = tmp_path / "down"
    lab = str(lab_root / "solutions" / f"{SAMPLE}.ipynb")
    assert cli.main(["grade", lab, str(handins / "solution.ipynb"), "--out", str(out), *LIMIT_ARGS]) == 0
    before = (out / "gradebook.csv").read_text()
    slurm.stop_controller()
    capsys.readouterr()
    start = time.monotonic()
    assert cli.main(["grade", lab, str(handins), "--out", str(out), *JOBS, *LIMIT_ARGS]) == 2
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert took < 60, f"the error took {took:.0f} s"
    assert "slurm controller does not answer" in err and "squeue" in err, err
    assert (out / "gradebook.csv").read_text() == before, "the rows graded before were changed"


def test_the_watch_reports_what_was_not_graded_when_the_controller_goes(monkeypatch):
    """No worker left and squeue failing mid-run: ClusterUnavailable names the submissions not graded."""
    def down(cluster):
        raise engine.ClusterUnavailable("the slurm controller does not answer: `squeue` failed (connect failure)")

    class Job:
        job_id = "7"

    class Cluster:
        workers = {"w": Job()}

    class Client:
        def scheduler_info(self):
            return {"workers": {}}

    monkeypatch.setattr(engine, "queue_jobs", down)
    watch = engine._Watch(engine.EngineSpec(cluster="slurm"), Cluster(), 2)
    watch.last -= engine.WATCH_S + 1
    with pytest.raises(engine.ClusterUnavailable, match=r"2 submissions were not graded \(ann, bob\)"):
        watch.look(Client(), ["bob", "ann"])


def test_the_watch_resubmits_when_every_job_ended_then_gives_up(monkeypatch, capsys):
    """No worker left and none of the jobs in the queue (all cancelled): fresh jobs, twice; then a clear error."""
    monkeypatch.setattr(engine, "queue_jobs", lambda cluster: {"99"})   # someone else's job only

    class Job:
        job_id = "7"

    class Cluster:
        workers = {"w": Job()}
        scaled: list[int] = []

        def scale(self, jobs):
            self.scaled.append(jobs)

    class Client:
        def scheduler_info(self):
            return {"workers": {}}

    cluster = Cluster()
    watch = engine._Watch(engine.EngineSpec(cluster="slurm"), cluster, 2)
    for _ in range(engine.RESUBMITS):
        watch.last -= engine.WATCH_S + 1
        watch.look(Client(), ["ann"])
    assert cluster.scaled == [0, 2] * engine.RESUBMITS
    assert "submitting 2 fresh jobs" in capsys.readouterr().err
    watch.last -= engine.WATCH_S + 1
    with pytest.raises(engine.ClusterUnavailable, match=r"every worker job ended .* 1 submissions not graded \(ann\)"):
        watch.look(Client(), ["ann"])
