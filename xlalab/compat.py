"""Where the course runs: its optional dependencies, the kernel-side installs of Colab, and the version it was built on.

Three jobs, one concept (the environment a lab runs in):

- :func:`require` imports an optional dependency or raises :class:`MissingDependency`, one error that names the
  command that fixes it (never a ``ModuleNotFoundError`` from deep inside a converter);
- :func:`install_missing` is what every lab's setup cell calls after ``pip install --no-deps`` of the course: it
  installs the kernel-side packages a Colab-like kernel lacks (:data:`KERNEL_SIDE`, e.g. ``xprof``) and pins the
  TensorFlow, Keras, NumPy and CUDA libraries already there, so they are never replaced;
- :func:`built_with` / :func:`record_built_with` / :func:`environment_note`: the TensorFlow version and backend the
  labs were generated and graded on (``xlalab/built_with.json``, written by ``xlalab assign``), and a
  one-line warning when the student's kernel differs from it;
- :func:`quiet_tensorflow` / :func:`chapter_setup`: what a lab's and a chapter's setup cell call, so that a machine
  without a GPU shows one line saying so instead of TensorFlow's CUDA probe messages (:func:`held_probe_messages`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xlalab import env

# Optional dependency -> the requirement that provides it (the same specifiers as pyproject.toml; a unit test
# keeps them equal). Imported by module name; installed by requirement.
OPTIONAL: dict[str, str] = {
    "xprof": "xprof>=2.24,<3",
    "nbval": "nbval>=0.11",
    "nbformat": "nbformat>=5.9",
    "yaml": "pyyaml>=6",
    "dask": "dask>=2024.1",
    "distributed": "distributed>=2024.1",
    "dask_jobqueue": "dask-jobqueue>=0.8.5",
    "tqdm": "tqdm>=4.66",
    "matplotlib": "matplotlib>=3.7",
    "IPython": "ipykernel>=6.25",
}

# What a lab's kernel imports beyond TensorFlow, Keras and NumPy, and that Colab does not ship (import names).
KERNEL_SIDE: tuple[str, ...] = ("xprof",)

# Never replaced by install_missing: the kernel's own TensorFlow, Keras, NumPy and CUDA libraries.
_PROTECTED = re.compile(r"^(tensorflow.*|tf[-_]keras|keras|numpy|ml[-_]dtypes|protobuf|jax.*|nvidia[-_].*)$", re.I)

BUILT_WITH = Path(__file__).with_name("built_with.json")


class MissingDependency(ImportError):
    """An optional dependency of xlalab is not installed; the message says the command that installs it."""


def fix_command(module: str) -> str:
    """The shell command that installs the package providing ``module`` (e.g. ``pip install 'xprof>=2.24,<3'``)."""
    return f"pip install '{OPTIONAL.get(module, module)}'"


def require(module: str, purpose: str) -> Any:
    """Import and return ``module``, or raise :class:`MissingDependency` naming ``purpose`` and the fixing command.

    Args:
        module: the import name, e.g. ``"xprof.convert.raw_to_tool_data"`` (its top-level name is what is checked).
        purpose: what needs it, e.g. ``"xlalab.profile (the profiler's converters)"``.
    """
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is None or err.name.split(".")[0] != top:
            raise  # a module that is installed but itself broken: its own error is the useful one
        raise MissingDependency(f"{purpose} needs {top!r}, which is not installed here; run "
                                f"`{fix_command(top)}` (in a notebook: `%pip install '{OPTIONAL.get(top, top)}'`) "
                                "and restart the kernel") from None


def missing(modules: tuple[str, ...] = KERNEL_SIDE) -> list[str]:
    """The import names in ``modules`` that this interpreter cannot find."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _protected_pins() -> list[str]:
    pins = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if _PROTECTED.match(name):
            pins.append(f"{name}=={dist.version}")
    return sorted(set(pins))


def install_command(modules: list[str], constraints: str) -> list[str]:
    """The pip command that installs the requirements of ``modules`` under the constraints file ``constraints``."""
    return [sys.executable, "-m", "pip", "install", "-q", "-c", constraints, *[OPTIONAL.get(m, m) for m in modules]]


def install_missing(modules: tuple[str, ...] = KERNEL_SIDE) -> list[str]:
    """Install what the kernel lacks of ``modules`` (default :data:`KERNEL_SIDE`); return the modules installed.

    TensorFlow, Keras, NumPy, protobuf, ml_dtypes and the NVIDIA libraries already installed are pinned to their
    versions (a pip constraints file), so a Colab kernel keeps its own. Does nothing (and needs no network) when
    nothing is missing, as in the course's own environment and in the grading jail.

    Raises:
        MissingDependency: pip could not install them (no network, or a conflict with the pinned packages).
    """
    todo = missing(modules)
    if not todo:
        return []
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(_protected_pins()) + "\n")
    try:
        done = subprocess.run(install_command(todo, f.name), capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise MissingDependency(f"could not install {', '.join(OPTIONAL.get(m, m) for m in todo)} "
                                f"(pip said: {done.stderr.strip()[-400:]}); run `{fix_command(todo[0])}` yourself")
    importlib.invalidate_caches()
    return todo


def tensorflow_version() -> str | None:
    """The installed TensorFlow's version (from its package metadata; TensorFlow is not imported), or None."""
    for name in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def built_with(path: str | Path = BUILT_WITH) -> dict[str, str]:
    """``{"tensorflow": "2.21.0", "backend": "XLA:CPU"}``: what the labs were generated and graded on
    ({} if unknown)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: str(v) for k, v in data.items() if k in ("tensorflow", "backend")} if isinstance(data, dict) else {}


def record_built_with(backend: str, path: str | Path = BUILT_WITH) -> dict[str, str]:
    """Write this environment's TensorFlow version and ``backend`` (e.g. ``"XLA:CPU"``) to ``path``; return them."""
    data = {"tensorflow": tensorflow_version() or "unknown", "backend": backend}
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return data


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def environment_note(backend: str, tf_version: str | None = None, reference: dict[str, str] | None = None) -> str:
    """One line saying how this kernel differs from the course's build (``""`` when it does not, or is unknown).

    Args:
        backend: this kernel's XLA backend, ``"XLA:CPU"`` or ``"XLA:GPU"`` (``xlalab.hw.backend().xla``).
        tf_version: this kernel's TensorFlow version (default: the installed one).
        reference: what the course was built on (default: :func:`built_with`).
    """
    ref = built_with() if reference is None else reference
    mine = tf_version or tensorflow_version() or "unknown"
    if not ref:
        return ""
    diffs = []
    if ref.get("tensorflow") and _minor(ref["tensorflow"]) != _minor(mine):
        diffs.append(f"TensorFlow {mine} (the course: {ref['tensorflow']})")
    if ref.get("backend") and ref["backend"] != backend:
        diffs.append(f"{backend} (the course: {ref['backend']})")
    if not diffs:
        return ""
    return ("note: this kernel runs " + " and ".join(diffs) + "; fusion and kernel counts may differ from the "
            "book's, and a literal prediction is graded against the grader's compiler (see the lab's text)")


def matches_build(backend: str, tf_version: str | None = None, reference: dict[str, str] | None = None) -> bool:
    """Whether this kernel compiles as the course's build did: same backend and TensorFlow minor version.

    True when nothing is recorded (then there is no other compiler to compare with). A check whose right answer
    depends on the compiler version grades a literal answer exactly only where this holds.
    """
    return not environment_note(backend, tf_version, reference)


def warn(backend: str) -> None:
    """Print :func:`environment_note` (one line) when this kernel differs from the course's build; else nothing."""
    note = environment_note(backend)
    if note:
        print(note)


# ---------------------------------------------------------------------------------------------
# A quiet start on a machine without a GPU.

# What TensorFlow's CUDA probe writes to file descriptor 2 (below Python's sys.stderr, so TF_CPP_MIN_LOG_LEVEL=2 does
# not hide it) when it finds no GPU, and the factory-registration chatter of its CUDA plugins: on import
# "cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used." after absl's
# "All log messages before absl::InitializeLog() is called are written to STDERR", and on the first device listing
# "cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
# (TensorFlow 2.21 on a CPU machine). Also the INFO line "port.cc:153] oneDNN custom operations are on. ...", which
# is written before absl's log is set up, so that TF_CPP_MIN_LOG_LEVEL=2 does not hide it (twice per import in
# 2.21, on any x86 machine). Only lines matching these are dropped; any other line is written back.
PROBE_NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine"
    r"|failed call to cuInit"
    r"|cuda_diagnostics\.cc:\d+\]"
    r"|Unable to register cu(DNN|FFT|BLAS) factory: Attempting to register factory"
    r"|computation_placer\.cc:\d+\] computation placer already registered"
    r"|port\.cc:\d+\] oneDNN custom operations are on")

NO_GPU_LINE = ("No GPU found: TensorFlow runs on the CPU and the course uses its CPU sizes. That is fine; for the "
               "full sizes in Colab, pick a GPU under Runtime > Change runtime type.")


# The filter between the held descriptor 2 and the real one: a process of its own, so that a fatal message (an
# abort inside TensorFlow's import) still reaches the real stderr after this process is gone.
_FILTER = (
    "import re, sys\n"
    "noise = re.compile(sys.argv[1])\n"
    "for line in sys.stdin.buffer:\n"
    "    if not noise.search(line.decode('utf-8', 'replace')):\n"
    "        sys.stderr.buffer.write(line); sys.stderr.buffer.flush()\n")


@contextlib.contextmanager
def held_probe_messages() -> Iterator[None]:
    """Inside the block, pass what is written to file descriptor 2 through a filter that drops :data:`PROBE_NOISE`.

    Catches TensorFlow's C++ logging, which bypasses ``sys.stderr``; every other line reaches the real stderr, also
    when the process dies inside the block (the filter is a separate process). Where descriptor 2 cannot be
    duplicated or the filter cannot start, the block runs unfiltered.
    """
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        filt = subprocess.Popen([sys.executable, "-c", _FILTER, PROBE_NOISE.pattern], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=saved, close_fds=True)
    except OSError:
        os.close(saved)
        yield
        return
    assert filt.stdin is not None  # stdin=PIPE
    os.dup2(filt.stdin.fileno(), 2)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        filt.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            filt.wait(timeout=30)


def _fake_gpu_set() -> bool:
    return bool(os.environ.get(env.FAKE_GPU, "").strip())


def quiet_tensorflow(list_devices: bool = True) -> list[str]:
    """Import TensorFlow with its CUDA probe's messages held back; return the GPUs it sees (names like
    ``/physical_device:GPU:0``).

    What every lab's setup cell calls before its imports. Sets ``TF_CPP_MIN_LOG_LEVEL=2`` unless it is set. With
    ``list_devices`` (the default) it also lists the GPUs, the moment TensorFlow runs its ``cuInit`` probe, and
    prints :data:`NO_GPU_LINE` when there is none (nothing under ``XLALAB_FAKE_GPU``, which tests a GPU branch).
    Without it, nothing is listed (a chapter may set ``TF_XLA_FLAGS`` first, which TensorFlow reads when it first
    lists its devices) and ``[]`` is returned; :func:`xlalab.hw.gpus` holds the ``cuInit`` messages back later.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with held_probe_messages():
        import tensorflow as tf

        found = [d.name for d in tf.config.list_physical_devices("GPU")] if list_devices else []
    if list_devices and not found and not _fake_gpu_set():
        print(NO_GPU_LINE)
    return found


def nvidia_driver_present() -> bool:
    """Whether this machine shows an NVIDIA driver (``/proc/driver/nvidia``, ``nvidia-smi``, or WSL's ``/dev/dxg``).

    Answers without TensorFlow, so without running its CUDA probe.
    """
    import shutil

    return (Path("/proc/driver/nvidia").exists() or shutil.which("nvidia-smi") is not None
            or Path("/dev/dxg").exists())


def glue_stand_in() -> types.ModuleType:
    """A ``myst_nb`` module whose ``glue(name, value, display=True)`` shows ``value`` as the book's glue does in a
    notebook.

    The chapters glue their measured numbers into the text with ``myst_nb.glue``, which only the book build needs;
    Colab has no ``myst_nb``, and installing it pulls in Sphinx.
    """
    module = types.ModuleType("myst_nb")

    def glue(name: str, variable: Any, display: bool = True) -> None:
        if display:
            from IPython.display import display as show

            show(variable)

    module.glue = glue  # type: ignore[attr-defined]
    module.__spec__ = importlib.machinery.ModuleSpec("myst_nb", None)
    module.__doc__ = "xlalab.compat.glue_stand_in(): the book's glue outside the book build"
    return module


def importable(name: str) -> bool:
    """Whether ``import name`` finds a module: one already imported (a stand-in included) or one on the path."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def chapter_setup(repository: str = "") -> list[str]:
    """What each chapter's first (hidden) cell calls once ``xlalab`` is importable; returns what it installed.

    Installs the kernel-side packages the chapter imports that the kernel lacks (:func:`install_missing`), gives
    the kernel a stand-in ``myst_nb`` where it has none (:func:`glue_stand_in`), imports TensorFlow quietly
    (:func:`quiet_tensorflow` without listing devices) and prints :data:`NO_GPU_LINE` where no NVIDIA driver shows.
    In the course's own environment it installs nothing and changes nothing but the held-back messages.
    ``repository`` (the setup cell passes ``_config.yml``'s repository URL) becomes ``$XLALAB_REPOSITORY`` unless set,
    so that a chapter outside a checkout can fetch the course's committed results.
    """
    if repository:
        os.environ.setdefault(env.REPOSITORY, repository)
    done = install_missing()
    if not importable("myst_nb"):
        sys.modules["myst_nb"] = glue_stand_in()
    quiet_tensorflow(list_devices=False)
    if not nvidia_driver_present() and not _fake_gpu_set():
        print(NO_GPU_LINE)
    return done
