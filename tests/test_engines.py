"""The grader's engines (issue 14): serial, ``-j 2`` (an embedded Dask LocalCluster) and an existing scheduler
give the same gradebook; a worker that dies loses only its task; ``--cluster slurm --dry-run`` prints a job
script. The sample lab (NumPy only) keeps this fast.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from xlalab import cli
from xlalab.grading import engine
from xlalab.grading.cli import grade_submissions
from xlalab.grading.options import GradeOptions
from xlalab.grading.score import Row
from xlalab.grading.submissions import HandIn
from xlalab.grading.task import Limits

from helpers import LIMITS, SAMPLE, answered, cell, outputs, released, write_handins

pytestmark = [pytest.mark.xdist_group("engines")]


@pytest.fixture(scope="module")
def handins(lab_root, tmp_path_factory) -> Path:
    wrong_total = answered(lab_root)
    cell(wrong_total, "p2-answer").source = "def total(x):\n    return 0.0"
    return write_handins(tmp_path_factory.mktemp("handins"), {
        "good": answered(lab_root), "blank": released(lab_root), "empty": "", "wrong_total": wrong_total})


@pytest.mark.slow
def test_serial_j2_and_a_scheduler_give_identical_gradebooks(lab_root, handins, tmp_path):
    from distributed import LocalCluster

    lab = lab_root / "solutions" / f"{SAMPLE}.ipynb"
    serial = grade_submissions(lab, [handins], GradeOptions(out=str(tmp_path / "serial"), jobs=1, **LIMITS))
    pooled = grade_submissions(lab, [handins], GradeOptions(out=str(tmp_path / "j2"), jobs=2, **LIMITS))
    assert "LocalCluster, 2 workers" in pooled.engine
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                      processes=True, memory_limit=0) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        remote = grade_submissions(lab, [handins],
                                         GradeOptions(out=str(tmp_path / "sched"), scheduler=cluster.scheduler_address,
                                                      **LIMITS))
    assert "scheduler tcp://127.0.0.1" in remote.engine
    by = {r.student: r.total for r in serial}
    assert by == {"good": 6, "blank": 0, "empty": 0, "wrong_total": 4}, by
    assert outputs(tmp_path / "serial") == outputs(tmp_path / "j2") == outputs(tmp_path / "sched")


def _dies_for_crash(lab, handin: HandIn, limits: Limits, *, marker: str) -> Row:
    """A task function whose worker dies on the student "crash", and on "flaky" the first time only."""
    student, died = handin.student, Path(marker)
    if student == "crash" or (student == "flaky" and not died.exists()):
        if student == "flaky":
            died.write_text("died once")
        os._exit(1)
    return Row(student, lab.name, lab.maximum)


@pytest.mark.heavy   # a Dask cluster
def test_a_worker_that_dies_loses_only_its_task(lab_root, tmp_path):
    from xlalab.grading.lab import load_lab

    lab = load_lab(lab_root / "solutions" / f"{SAMPLE}.ipynb")
    for name in ("a", "crash", "flaky", "b"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    entries = [HandIn.read(name, tmp_path / f"{name}.ipynb") for name in ("a", "crash", "flaky", "b")]
    seen: list[str] = []
    rows = engine.run(lab, entries, Limits(), engine.EngineSpec(jobs=2), lambda r: seen.append(r.student),
                      fn=functools.partial(_dies_for_crash, marker=str(tmp_path / "flaky.died")))
    status = {r.student: r.status for r in rows}
    assert status["a"] == status["b"] == "graded"
    assert status["flaky"] == "graded", "a task whose worker died once is retried"
    assert "the worker grading it died, twice" in status["crash"]
    assert sorted(seen) == ["a", "b", "crash", "flaky"], "the client got every row, the crashed one too"


@pytest.mark.parametrize("cluster, directive", [("slurm", "#SBATCH"), ("pbs", "#PBS"), ("sge", "#$"),
                                                 ("lsf", "#BSUB")])
def test_cluster_dry_run_prints_a_valid_job_script(cluster, directive, capsys, tmp_path):
    assert cli.main(["grade", SAMPLE, "--cluster", cluster, "--dry-run", "--queue", "short", "--cores", "8",
                       "--memory", "32GB", "--walltime", "01:30:00", "--gpus", "1",
                       "--prologue", "source /shared/course/.venv/bin/activate"]) == 0
    script = capsys.readouterr().out
    assert script.startswith("#!/") and directive in script
    assert "short" in script and "01:30:00" in script and "--nthreads 1" in script
    assert "source /shared/course/.venv/bin/activate" in script and "distributed.cli.dask_worker" in script
    if cluster == "slurm":
        assert "#SBATCH --gres=gpu:1" in script and "#SBATCH -p short" in script
    path = tmp_path / "job.sh"
    path.write_text(script)
    bash = shutil.which("bash")
    assert bash, "no bash"
    assert subprocess.run([bash, "-n", str(path)]).returncode == 0, "the job script is not valid shell"


def test_dry_run_needs_a_cluster(capsys):
    assert cli.main(["grade", SAMPLE, "--dry-run"]) == 2
    assert "--cluster" in capsys.readouterr().err


_CONNECT = """import sys
from distributed import Client
from distributed.security import Security
addr, how = sys.argv[1], sys.argv[2]
plain = addr.replace("tls://", "tcp://")
try:
    if how == "plain":
        Client(plain, timeout="4s").close()
    else:
        Client(addr, security=Security.temporary(), timeout="4s").close()
    print("connected")
except Exception as err:
    print("refused", type(err).__name__)
"""


def _attack_from_the_worker(lab, handin: HandIn, limits: Limits) -> Row:
    """A task that, on the worker, has another local process connect to the run's scheduler without the run's
    credentials: plainly (what another user did in the trial) or with a TLS certificate of its own."""
    import subprocess
    import sys

    from distributed import get_worker

    addr = get_worker().scheduler.address
    out = subprocess.run([sys.executable, "-c", _CONNECT, addr, handin.student], capture_output=True, text=True,
                         timeout=60).stdout.strip()
    return Row(handin.student, lab.name, lab.maximum, cell_errors=[f"{out} {addr}"])


@pytest.mark.heavy   # a Dask cluster
def test_the_run_cluster_refuses_connections_without_the_runs_credentials(lab_root, tmp_path):
    """Break (issue 25): under -j 2 another local user connected to the scheduler on 127.0.0.1 (no TLS, no
    authentication) and ran code in the workers. The run's cluster speaks TLS with a key made for the run."""
    from xlalab.grading.lab import load_lab

    lab = load_lab(lab_root / "solutions" / f"{SAMPLE}.ipynb")
    entries = [HandIn("plain", tmp_path / "a.ipynb"), HandIn("foreign-cert", tmp_path / "b.ipynb")]
    rows = engine.run(lab, entries, Limits(), engine.EngineSpec(jobs=2), lambda r: None, fn=_attack_from_the_worker)
    for r in rows:
        said = r.cell_errors[0]
        assert said.startswith("refused") and " tls://127.0.0.1:" in said, (r.student, said)


def test_the_slurm_job_script_has_workers_speak_tls_with_the_runs_key(capsys):
    """Break (issue 25): the Slurm job script had workers connect over plain TCP to the host's address."""
    import re

    assert cli.main(["grade", SAMPLE, "--cluster", "slurm", "--dry-run"]) == 0
    script = capsys.readouterr().out
    assert "tcp://" not in script and "--protocol tls://" in script, script
    for flag in ("--tls-ca-file", "--tls-cert", "--tls-key"):
        m = re.search(flag + r" (\S+)", script)
        assert m, (flag, script)
        assert str(engine.tls_dir()) in m.group(1)
    assert not list(engine.tls_dir().iterdir()), "the run's key outlived the dry run"
