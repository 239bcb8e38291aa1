"""A one-node Slurm cluster on this machine, owned by the test that starts it (``tests/test_slurm.py``).

:class:`LocalSlurm` writes a ``slurm.conf`` for 127.0.0.1 into a fresh folder, starts ``munged`` (its own key and
socket), ``slurmctld`` and ``slurmd`` as child processes in the foreground, waits for the node to be idle, and
stops them (and cancels every job) when it is closed. The Slurm commands find it through ``SLURM_CONF``, which
:meth:`LocalSlurm.env` sets; nothing under ``/etc`` is touched. Made for Debian's ``slurm-wlm`` (22.05) and
``munge`` (``apt-get install -y slurm-wlm munge``; ``.ci/run`` does it), run as root in a container:

- no cgroups (``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``), both daemons as root;
- accounting: ``AccountingStorageType=accounting_storage/none`` needs no database, so ``sacct`` proper has nothing;
  the job completion log (``JobCompType=jobcomp/filetxt``) is the lightest store it reads: ``sacct -c`` lists every
  ended job (id, name, state, node, times) from that file. Job steps and resource use (``sacct``'s MaxRSS, TRES)
  would need ``slurmdbd`` and a MariaDB, which this does not start.

:func:`unavailable` says why Slurm cannot run here (None: it can).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "squeue", "scancel", "sacct", "sinfo")


def _which(name: str) -> str | None:
    return shutil.which(name) or next((str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name)
                                       if p.exists()), None)


def unavailable() -> str | None:
    """Why a local Slurm cannot run on this machine, or None."""
    missing = [n for n in DAEMONS + COMMANDS if _which(n) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing); fix: apt-get install -y slurm-wlm munge "
                "(.ci/run does it)")
    if os.geteuid() != 0:
        return "the local Slurm runs its daemons as root (SlurmUser=root); this user is not root"
    return None


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class LocalSlurm:
    """A one-node Slurm (partition ``debug``, node ``localhost``) in ``root``; a context manager."""

    def __init__(self, root: str | Path | None = None, *, cpus: int | None = None, memory_mb: int = 4096):
        self.root = Path(root or tempfile.mkdtemp(prefix="xlalab-slurm-"))
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = memory_mb
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.jobcomp = self.root / "jobcomp.txt"
        self.ctld_port, self.slurmd_port = _free_ports(2)
        self.cluster = "xlalab" + secrets.token_hex(2)

    def env(self) -> dict[str, str]:
        """The environment the Slurm commands need to reach this cluster (``SLURM_CONF``), and dask-jobqueue's
        interface for this one-node test: the Dask scheduler and its workers talk over loopback only."""
        return {"SLURM_CONF": str(self.conf), "DASK_JOBQUEUE__SLURM__INTERFACE": "lo"}

    def _write(self) -> None:
        for d in ("state", "spool", "munge", "log"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        r = self.root
        self.conf.write_text(f"""# Written by tests/scripts/slurm_local.py: a one-node cluster on 127.0.0.1, run as \
root, no cgroups.
ClusterName={self.cluster}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/munge.socket
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
""", encoding="utf-8")
        (self.root / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n", encoding="utf-8")

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "wb")
        env = {**os.environ, **self.env()}
        exe = _which(name)
        assert exe is not None, f"{name} is not installed (unavailable() says so first)"
        self.procs[name] = subprocess.Popen([exe, *args], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        log.close()

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm command against this cluster (text output)."""
        return subprocess.run([_which(cmd[0]) or cmd[0], *cmd[1:]], capture_output=True, text=True, check=check,
                              timeout=timeout, env={**os.environ, **self.env()})

    def start(self, timeout: float = 60) -> LocalSlurm:
        self._write()
        m = self.root / "munge"
        self._start("munged", ["--foreground", "--force", f"--socket={m}/munge.socket", f"--key-file={m}/munge.key",
                               f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
                               f"--seed-file={m}/munged.seed"])
        self._wait(lambda: (m / "munge.socket").exists(), timeout, "munged did not make its socket")
        self._start("slurmctld", ["-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.run("sinfo", "-h", check=False).returncode == 0, timeout,
                   "slurmctld did not answer sinfo")
        self._start("slurmd", ["-D", "-f", str(self.conf), "-N", "localhost"])
        self._wait(lambda: self.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() in ("idle", "mixed"),
                   timeout, "the node did not become idle")
        return self

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited: {what}\n{self.logs()}")
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{what} within {timeout:g} s\n{self.logs()}")

    def logs(self, tail: int = 2000) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            try:
                out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}")
            except OSError:
                pass
        return "\n".join(out)

    def stop_controller(self) -> None:
        """Stop slurmctld only (the scheduler becomes unreachable; slurmd and its jobs go on)."""
        self._stop("slurmctld")

    def _stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        if "slurmctld" in self.procs:
            self.run("scancel", "--full", "-u", "root", check=False)
        for name in ("slurmd", "slurmctld", "munged"):
            self._stop(name)

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
