"""The jail around one graded notebook: bubblewrap (``bwrap``), no daemon, no root needed.

Each submission runs (pytest, nbval and the kernel together) in a private root that holds only:

- the system's programs and libraries (``/usr`` and its ``/bin``, ``/lib`` links), a few files of ``/etc``
  (the dynamic linker's cache, users, time zone, certificates, fonts), read-only;
- the Python environment (the interpreter's prefix and the virtual environment), read-only, and the ``xlalab``
  package folder alone (not the repository around it, which holds ``solutions/``), read-only;
- the folders the caller names: read-only (the notebook to run), writable, or empty size-capped tmpfs (the work
  folder); nothing else of the grader's (not ``--source``, not the gradebook or its spool, not another
  submission, not the home folder);
- ``/tmp`` and ``/dev/shm`` as size-capped tmpfs (:data:`TMP_BYTES`, :data:`SHM_BYTES`; they are memory), a
  minimal ``/dev``, a ``/proc`` of its own PID namespace, CPU topology from ``/sys``;
- with an NVIDIA GPU: its device nodes, ``/sys`` and the driver's libraries (:func:`gpu_binds`).

Namespaces: user (the jail's user is 1000, without capabilities), PID (every process the notebook starts dies
with the jail, ``--die-with-parent`` ends it with the grader), network (only a loopback of its own: no
connection leaves, not even to 127.0.0.1 of the machine), IPC, UTS. When the grader runs as root, a user
namespace would map the jail's user to root outside, so bwrap runs without one and the jail's first process
becomes a uid of its own (:func:`host_uid`) before anything else starts. The environment is rebuilt from an exact
list of names (:data:`ENV_KEEP`; no tokens or keys of the grader's leak in).

``resolve("auto")`` uses bwrap where it works and otherwise returns an unsandboxed :class:`Sandbox` whose
``reason`` says why and the one command that fixes it; ``resolve("bwrap")`` raises :class:`SandboxUnavailable`
instead.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xlalab import env as xlalab_env

log = logging.getLogger(__name__)

MODES = ("auto", "bwrap", "none")
JAIL_UID = 1000

# What of /etc a Python process needs; never the whole folder (it may hold keys and tokens).
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts",
             "localtime", "timezone", "ssl", "ca-certificates", "pki", "fonts", "alternatives", "mime.types",
             "os-release", "debian_version", "matplotlibrc", "host.conf", "gai.conf")
# Environment variables that reach the jailed notebook: these exact names, no prefixes (a prefix such as
# "TF_" would let TF_TOKEN_<host> or TF_VAR_db_password in).
ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONHASHSEED", "MPLBACKEND",
            "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_MESSAGES", "LC_COLLATE", "LC_TIME",
            xlalab_env.PROFILE, xlalab_env.FAKE_GPU,
            "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_XLA_FLAGS", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS",
            "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS",
            "TF_DETERMINISTIC_OPS", "TF_USE_LEGACY_KERAS", "KERAS_BACKEND", "KERAS_HOME",
            "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_CACHE_DISABLE", "CUDA_MODULE_LOADING",
            "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME")
# Size caps of the jail's RAM-backed folders (tmpfs, bytes): they count towards the machine's memory,
# outside --memory-gb (an address-space limit of each process).
TMP_BYTES = 1 * 2**30          # /tmp (HOME is /tmp/home)
SHM_BYTES = 256 * 2**20        # /dev/shm
WORK_BYTES = 1 * 2**30         # the notebook's work folder
MAX_TASKS = 1024               # processes and threads of one jail (RLIMIT_NPROC, counted in its user namespace)
# When the grader runs as root the jail runs as this user (bwrap's --uid in a user namespace would only
# rename root): root-only files under the bound folders stay unreadable. bwrap then runs as root without a
# user namespace, keeps only CAP_SETUID/CAP_SETGID, and the jail's first process (:data:`_DROP`) becomes this
# user (no groups, no capabilities, no new privileges) before it starts anything else.
# As root, each grading process's jails run as a uid of their own (JAIL_HOST_UID_BASE + its pid, a uid no account
# uses), so RLIMIT_NPROC counts one jail's processes only: a fork bomb in one hand-in cannot starve the jail of
# another graded at the same time. $XLALAB_JAIL_HOST_UID fixes one uid instead.
JAIL_HOST_UID_BASE = 3_000_000_000
_DROP = Path(__file__).with_name("dropuid.py")   # the privilege drop (a real file the jail runs)

# NVIDIA device nodes (in /dev) and where driver and CUDA libraries live outside /usr.
GPU_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps", "dxg")
GPU_LIB_DIRS = ("/usr/local/nvidia", "/usr/local/cuda", "/usr/lib/wsl", "/opt/nvidia", "/run/nvidia-persistenced",
                "/usr/lib64/nvidia", "/etc/OpenCL", "/etc/vulkan", "/etc/glvnd")


# Memory cgroups: the whole jail (every process of it, and the tmpfs pages it writes) under one limit.
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1 = Path("/sys/fs/cgroup/memory")


@dataclass
class MemoryCgroup:
    """A memory cgroup made for one jail (cgroup v2 or v1): ``limit`` bytes for all its processes together.

    :meth:`wrap` makes a command enter it before it starts anything (a shell writes its own pid to
    ``cgroup.procs``, then execs the command), so every process the jail starts is in it; :meth:`report`
    reads the peak and whether the kernel killed a process for the limit; :meth:`remove` deletes it.
    """

    path: Path
    version: int
    limit: int

    def _file(self, v2: str, v1: str) -> Path:
        return self.path / (v2 if self.version == 2 else v1)

    def wrap(self, argv: list[str]) -> list[str]:
        return ["/bin/sh", "-c", 'echo $$ > "$0" || exit 125; exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def report(self) -> tuple[int | None, int]:
        """(peak bytes or None where the kernel does not say, processes the kernel killed at the limit)."""
        peak = None
        try:
            peak = int(self._file("memory.peak", "memory.max_usage_in_bytes").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
        kills = 0
        try:
            text = self._file("memory.events", "memory.oom_control").read_text()
            kills = int(dict(line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)
                        .get("oom_kill", 0))
        except (OSError, ValueError):
            pass
        return peak, kills

    def remove(self, wait: float = 2.0) -> None:
        """Delete the cgroup once its processes are gone (the jail's PID namespace ended them)."""
        import time

        end = time.monotonic() + wait
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > end:
                    return
                time.sleep(0.05)


def memory_cgroup(limit: int, *, v2: Path = CGROUP_V2, v1: Path = CGROUP_V1) -> tuple[MemoryCgroup | None, str]:
    """A new memory cgroup of ``limit`` bytes (swap included where the kernel accounts it) for one jail, or
    ``(None, why)`` where this machine does not let the grader make one (not root, no memory controller, a
    read-only ``/sys/fs/cgroup``): then only the per-process limits hold."""
    import secrets

    if limit <= 0:
        return None, "no --memory-gb limit"
    if os.geteuid() != 0:
        return None, "the grader is not root, so it cannot make a memory cgroup"
    name = f"xlalab-jail-{os.getpid()}-{secrets.token_hex(4)}"
    tries: list[tuple[int, Path, list[tuple[str, str]]]] = []
    try:
        if "memory" in (v2 / "cgroup.subtree_control").read_text().split():
            tries.append((2, v2, [("memory.max", str(limit)), ("memory.swap.max", "0")]))
    except OSError:
        pass
    if (v1 / "memory.limit_in_bytes").exists():
        tries.append((1, v1, [("memory.limit_in_bytes", str(limit)), ("memory.memsw.limit_in_bytes", str(limit))]))
    why = "no cgroup memory controller is mounted at /sys/fs/cgroup"
    for version, base, settings in tries:
        path = base / name
        try:
            path.mkdir(mode=0o700)
        except OSError as err:
            why = f"cannot make a cgroup in {base} ({err.strerror})"
            continue
        try:
            for i, (key, value) in enumerate(settings):
                try:
                    (path / key).write_text(value)
                except OSError:
                    if i == 0:
                        raise   # the memory limit itself; swap accounting may be off
            return MemoryCgroup(path, version, limit), ""
        except OSError as err:
            why = f"cannot set a memory limit in {base} ({err.strerror})"
            MemoryCgroup(path, version, limit).remove(0)
    return None, why


class SandboxUnavailable(RuntimeError):
    """``--sandbox bwrap`` was asked for and bwrap cannot run here; the message says why and the fix."""


@dataclass(frozen=True)
class Sandbox:
    """How submissions run: ``kind`` is "bwrap" or "none"; ``reason`` says why "auto" fell back to none."""

    kind: str
    reason: str = ""
    bwrap: str = ""
    gpu_args: tuple[str, ...] = field(default=())

    @property
    def on(self) -> bool:
        return self.kind == "bwrap"

    def describe(self) -> str:
        if self.on:
            return "bwrap (no network, no view of sources, gradebook, other hand-ins or home" + \
                   (", NVIDIA GPU bound)" if self.gpu_args else ")")
        return "none (" + (self.reason or "--sandbox none") + ")"


def _fix_command() -> str:
    if shutil.which("apt-get"):
        return "sudo apt-get install -y bubblewrap"
    if shutil.which("dnf"):
        return "sudo dnf install -y bubblewrap"
    if shutil.which("conda"):
        return "conda install -c conda-forge bubblewrap"
    return "install bubblewrap (your distribution's package `bubblewrap`)"


@functools.cache
def probe(bwrap: str | None = None) -> tuple[str, str]:
    """``(path of bwrap, "")`` if a jail can be made here, else ``("", why and the command that fixes it)``."""
    exe = bwrap or shutil.which("bwrap") or ""
    if not exe:
        return "", f"bubblewrap is not installed; fix: {_fix_command()}"
    cmd = [exe, *_namespaces(), "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
           "--size", "1048576", "--tmpfs", "/dev/shm", *_dropped(["true"])]   # not /tmp: Python may live under it
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as err:
        return "", f"bwrap does not run ({err})"
    if proc.returncode == 0:
        return exe, ""
    said = (proc.stderr or proc.stdout).strip().splitlines()
    detail = said[-1] if said else f"exit code {proc.returncode}"
    if Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").exists() and \
            Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").read_text().strip() == "1":
        fix = "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
    elif Path("/proc/sys/kernel/unprivileged_userns_clone").exists():
        fix = "sudo sysctl -w kernel.unprivileged_userns_clone=1"
    elif Path("/proc/sys/user/max_user_namespaces").exists() and \
            Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
        fix = "sudo sysctl -w user.max_user_namespaces=15000"
    else:
        fix = "allow unprivileged user namespaces (in a container: run it with --security-opt seccomp=unconfined)"
    return "", f"bwrap cannot create its namespaces here ({detail}): user namespaces are off; fix: {fix}"


def host_uid() -> int | None:
    """The user the jail runs as when the grader is root, else None: ``$XLALAB_JAIL_HOST_UID`` if set, else
    :data:`JAIL_HOST_UID_BASE` plus this process's pid (one uid per grading process, so that the process-count
    limit is per jail, not shared by jails graded at the same time)."""
    if os.geteuid() != 0:
        return None
    fixed = os.environ.get(xlalab_env.JAIL_HOST_UID)
    return int(fixed) if fixed else JAIL_HOST_UID_BASE + os.getpid()


def jail_uid() -> int:
    """The uid the notebook sees in the jail: :data:`JAIL_UID` in a user namespace, the real one as root."""
    uid = host_uid()
    return JAIL_UID if uid is None else uid


def _namespaces() -> list[str]:
    """bwrap's namespace and capability arguments: a user namespace (uid 1000, no capabilities) for a normal
    grader; as root, the other namespaces and only the capabilities :data:`_DROP` needs to leave root."""
    if host_uid() is None:
        return ["--unshare-all", "--cap-drop", "ALL", "--uid", str(JAIL_UID), "--gid", str(JAIL_UID)]
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


def _dropped(argv: list[str]) -> list[str]:
    """``--`` and ``argv``, first becoming the unprivileged jail user when the grader is root."""
    uid = host_uid()
    if uid is None:
        return ["--", *argv]
    exe = argv[0] if os.path.isabs(argv[0]) else (shutil.which(argv[0]) or argv[0])
    return ["--", sys.executable, "-I", str(_DROP), str(uid), exe, *argv[1:]]


def gpu_binds(dev: str | Path = "/dev", lib_dirs: tuple[str, ...] = GPU_LIB_DIRS,
              sys_dir: str | Path = "/sys") -> list[str]:
    """bwrap arguments that give the jail the NVIDIA GPU: device nodes, ``/sys`` and driver libraries.

    Empty when ``dev`` holds no ``nvidia<N>`` node (no GPU). ``dev`` is a parameter so the list can be checked
    on a made-up listing; nodes are bound at ``/dev/<name>`` whatever ``dev`` is.
    """
    dev = Path(dev)
    try:
        names = sorted(os.listdir(dev))
    except OSError:
        return []
    cards = [n for n in names if n.startswith("nvidia") and n[len("nvidia"):].isdigit()]
    if not cards:
        return []
    args: list[str] = []
    for name in cards + [n for n in GPU_DEVICES if n in names]:
        args += ["--dev-bind", str(dev / name), f"/dev/{name}"]
    if Path(sys_dir).exists():
        args += ["--ro-bind", str(sys_dir), "/sys"]
    for d in lib_dirs:
        if Path(d).exists():
            args += ["--ro-bind", d, d]
    return args


def resolve(mode: str = "auto", *, quiet: bool = False) -> Sandbox:
    """The sandbox for ``--sandbox MODE``; under "auto" without bwrap, say once (on stderr) why and the fix."""
    if mode not in MODES:
        raise ValueError(f"--sandbox must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "none":
        return Sandbox("none", "--sandbox none: student code runs with the grader's rights")
    exe, why = probe()
    if exe:
        return Sandbox("bwrap", "", exe, tuple(gpu_binds()))
    if mode == "bwrap":
        raise SandboxUnavailable(f"--sandbox bwrap: {why}")
    reason = f"UNSANDBOXED: {why}"
    if not quiet:
        _warn_once(reason)
    return Sandbox("none", reason)


@functools.cache
def _warn_once(text: str) -> None:
    log.warning("xlalab.grade: WARNING: grading runs %s. Student code can then read what this user can read "
                "(the instructor's sources, other hand-ins, the home folder) and reach the network.", text)


def _python_roots() -> list[str]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).resolve().parent.parent)}
    return sorted(r for r in roots if r and Path(r).exists() and not r.startswith("/usr/"))


def package_root() -> Path:
    """The folder whose ``xlalab/`` is imported (the repository, for an editable install)."""
    return Path(__file__).resolve().parents[2]


def jail_env(base: dict[str, str], home: str) -> dict[str, str]:
    """The environment inside the jail: the variables of ``base`` named in :data:`ENV_KEEP` (exact names),
    HOME and Jupyter's folders in /tmp."""
    env = {k: v for k, v in base.items() if k in ENV_KEEP}
    env.update({"HOME": home, "USER": "student", "LOGNAME": "student", "TMPDIR": "/tmp",
                "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter-runtime", "JUPYTER_DATA_DIR": f"{home}/.jupyter-data",
                "JUPYTER_CONFIG_DIR": f"{home}/.jupyter", "IPYTHONDIR": f"{home}/.ipython",
                "MPLCONFIGDIR": f"{home}/.matplotlib", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONPATH": str(package_root())})
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return env


def command(box: Sandbox, argv: list[str], *, writable: Sequence[Path] = (), cwd: Path,
            env: dict[str, str] | None = None, readonly: Sequence[Path] = (),
            scratch: Sequence[Path] = ()) -> list[str]:
    """``argv`` wrapped in a bwrap jail in which only ``writable`` folders (at their own paths) and the
    ``scratch`` folders (empty, size-capped tmpfs of :data:`WORK_BYTES` at those paths) can be written;
    ``readonly`` folders are bound read-only; ``env`` is the environment the jailed command gets (default: this
    process's). ``/tmp`` and ``/dev/shm`` are capped tmpfs too (:data:`TMP_BYTES`, :data:`SHM_BYTES`)."""
    if not box.on:
        return list(argv)
    args = [box.bwrap, *_namespaces(), "--die-with-parent", "--new-session", "--hostname", "grader"]
    # /tmp first: the binds that follow may lie under it (a repository or venv in /tmp) and must stay visible.
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--perms", "0777", "--dir", "/tmp/home"]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for name in ETC_FILES:
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    for root in _python_roots():
        args += ["--ro-bind", root, root]
    pkg = package_root() / "xlalab"
    if not any(str(pkg).startswith(r + "/") for r in _python_roots()):
        args += ["--ro-bind", str(pkg), str(pkg)]
    # Under XLALAB_FAKE_GPU, xlalab.hlo reads recorded XLA:GPU modules from the repository's tests/data/hlo.
    corpus = package_root() / "tests" / "data" / "hlo"
    if (os.environ if env is None else env).get(xlalab_env.FAKE_GPU) and corpus.is_dir():
        args += ["--ro-bind", str(corpus), str(corpus)]
    for sub in ("devices/system/cpu", "devices/system/node", "fs/cgroup"):
        p = Path("/sys") / sub
        if p.exists() and not box.gpu_args:
            args += ["--ro-bind", str(p), str(p)]
    args += list(box.gpu_args)
    for r in readonly:
        args += ["--ro-bind", str(r), str(r)]
    for w in writable:
        args += ["--bind", str(w), str(w)]
    for s in scratch:
        args += ["--perms", "0777", "--size", str(WORK_BYTES), "--tmpfs", str(s)]
    args += ["--chdir", str(cwd)]
    return _with_parents(args) + _dropped(list(argv))


def _with_parents(args: list[str]) -> list[str]:
    """``args`` with each folder above a mount point made first, mode 0755 (bwrap would make them with the
    grader's umask, which may keep the jail's user out, e.g. of /root above a Python under /root/.pyenv)."""
    out: list[str] = []
    made = {"/"}
    mounts: list[str] = []     # folders already bound: what lies under them exists (or cannot be made)

    def under_mount(p: str) -> bool:
        return any(p == m or p.startswith(m.rstrip("/") + "/") for m in mounts)

    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--ro-bind", "--bind", "--dev-bind", "--tmpfs", "--symlink", "--proc", "--dev") and i + 1 < len(args):
            dest = args[i + 2] if a in ("--ro-bind", "--bind", "--dev-bind", "--symlink") else args[i + 1]
            for parent in reversed(Path(dest).parents):
                p = str(parent)
                if p not in made and not under_mount(p):
                    made.add(p)
                    if out[-2:-1] == ["--perms"] or out[-2:-1] == ["--size"]:
                        # keep "--perms M"/"--size N" next to the operation they belong to
                        pending = out[-2:]
                        del out[-2:]
                        out += ["--perms", "0755", "--dir", p] + pending
                    else:
                        out += ["--perms", "0755", "--dir", p]
            made.add(dest)
            if a in ("--ro-bind", "--bind", "--dev-bind", "--proc"):   # under a tmpfs, folders can be made
                mounts.append(dest)
        out.append(a)
        i += 1
    return out
