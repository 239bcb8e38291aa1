"""The jail around one graded notebook: bubblewrap (``bwrap``), no daemon, no root needed.

Each submission runs (pytest, nbval and the kernel together) in a private root that holds only:

- the system's programs and libraries (``/usr`` and its ``/bin``, ``/lib`` links), a few files of ``/etc``
  (the dynamic linker's cache, users, time zone, certificates, fonts), read-only;
- the Python environment (the interpreter's prefix and the virtual environment), read-only, and the ``xlalab``
  package folder alone (not the repository around it, which holds ``solutions/``), read-only;
- the notebook's work folder and the grader's per-submission folder of this run, writable (nothing else of the
  grader's is: not ``--source``, not the gradebook or its spool, not another submission, not the home folder);
- a private ``/tmp``, a minimal ``/dev``, a ``/proc`` of its own PID namespace, CPU topology from ``/sys``;
- with an NVIDIA GPU: its device nodes, ``/sys`` and the driver's libraries (:func:`gpu_binds`).

Namespaces: user (the jail's user is 1000, without capabilities), PID (every process the notebook starts dies
with the jail, ``--die-with-parent`` ends it with the grader), network (only a loopback of its own: no
connection leaves, not even to 127.0.0.1 of the machine), IPC, UTS. The environment is rebuilt from a short
list (no tokens or keys of the grader's leak in).

``resolve("auto")`` uses bwrap where it works and otherwise returns an unsandboxed :class:`Sandbox` whose
``reason`` says why and the one command that fixes it; ``resolve("bwrap")`` raises :class:`SandboxUnavailable`
instead.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("auto", "bwrap", "none")
JAIL_UID = 1000

# What of /etc a Python process needs; never the whole folder (it may hold keys and tokens).
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts",
             "localtime", "timezone", "ssl", "ca-certificates", "pki", "fonts", "alternatives", "mime.types",
             "os-release", "debian_version", "matplotlibrc", "host.conf", "gai.conf")
# Environment variables that reach the jailed notebook (prefixes end with "_").
ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "OMP_NUM_THREADS", "PYTHONHASHSEED", "MPLBACKEND",
            "XLALAB_", "TF_", "XLA_", "CUDA_", "NVIDIA_", "LC_", "OMP_", "MKL_", "OPENBLAS_", "KMP_",
            "JAX_", "KERAS_")
# NVIDIA device nodes (in /dev) and where driver and CUDA libraries live outside /usr.
GPU_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps", "dxg")
GPU_LIB_DIRS = ("/usr/local/nvidia", "/usr/local/cuda", "/usr/lib/wsl", "/opt/nvidia", "/run/nvidia-persistenced",
                "/usr/lib64/nvidia", "/etc/OpenCL", "/etc/vulkan", "/etc/glvnd")


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


@functools.lru_cache(maxsize=None)
def probe(bwrap: str | None = None) -> tuple[str, str]:
    """``(path of bwrap, "")`` if a jail can be made here, else ``("", why and the command that fixes it)``."""
    exe = bwrap or shutil.which("bwrap") or ""
    if not exe:
        return "", f"bubblewrap is not installed; fix: {_fix_command()}"
    cmd = [exe, "--unshare-all", "--die-with-parent", "--cap-drop", "ALL", "--uid", str(JAIL_UID),
           "--gid", str(JAIL_UID), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return "", f"bwrap does not run ({err})"
    if proc.returncode == 0:
        return exe, ""
    err = (proc.stderr or proc.stdout).strip().splitlines()
    detail = err[-1] if err else f"exit code {proc.returncode}"
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


@functools.lru_cache(maxsize=None)
def _warn_once(text: str) -> None:
    print(f"xlalab.grade: WARNING: grading runs {text}. Student code can then read what this user can read "
          "(the instructor's sources, other hand-ins, the home folder) and reach the network.", file=sys.stderr)


def _python_roots() -> list[str]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).resolve().parent.parent)}
    return sorted(r for r in roots if r and Path(r).exists() and not r.startswith("/usr/"))


def package_root() -> Path:
    """The folder whose ``xlalab/`` is imported (the repository, for an editable install)."""
    return Path(__file__).resolve().parents[2]


def jail_env(base: dict[str, str], home: str) -> dict[str, str]:
    """The environment inside the jail: the kept variables of ``base``, HOME and Jupyter's folders in /tmp."""
    env = {k: v for k, v in base.items() if (k in ENV_KEEP or any(k.startswith(p) for p in ENV_KEEP
                                                                  if p.endswith("_")))
           and not k.startswith("XLALAB_GRADER")}
    env.update({"HOME": home, "USER": "student", "LOGNAME": "student", "TMPDIR": "/tmp",
                "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter-runtime", "JUPYTER_DATA_DIR": f"{home}/.jupyter-data",
                "JUPYTER_CONFIG_DIR": f"{home}/.jupyter", "IPYTHONDIR": f"{home}/.ipython",
                "MPLCONFIGDIR": f"{home}/.matplotlib", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONPATH": str(package_root())})
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return env


def command(box: Sandbox, argv: list[str], *, writable: list[Path], cwd: Path,
            env: dict[str, str] | None = None) -> list[str]:
    """``argv`` wrapped in a bwrap jail in which only ``writable`` folders (at their own paths) can be written;
    ``env`` is the environment the jailed command gets (default: this process's)."""
    if not box.on:
        return list(argv)
    args = [box.bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(JAIL_UID), "--gid", str(JAIL_UID), "--hostname", "grader"]
    # /tmp first: the binds that follow may lie under it (a repository or venv in /tmp) and must stay visible.
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/tmp/home"]
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
    if (os.environ if env is None else env).get("XLALAB_FAKE_GPU") and corpus.is_dir():
        args += ["--ro-bind", str(corpus), str(corpus)]
    for sub in ("devices/system/cpu", "devices/system/node", "fs/cgroup"):
        p = Path("/sys") / sub
        if p.exists() and not box.gpu_args:
            args += ["--ro-bind", str(p), str(p)]
    args += list(box.gpu_args)
    for w in writable:
        args += ["--bind", str(w), str(w)]
    args += ["--chdir", str(cwd), "--"]
    return args + list(argv)
