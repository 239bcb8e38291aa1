"""Where the course runs: its optional dependencies, the kernel-side installs of Colab, and the version it was built on.

Three jobs, one concept (the environment a lab runs in):

- :func:`require` imports an optional dependency or raises :class:`MissingDependency`, one error that names the
  command that fixes it (never a ``ModuleNotFoundError`` from deep inside a converter);
- :func:`install_missing` is what every lab's setup cell calls after ``pip install --no-deps`` of the course: it
  installs the kernel-side packages a Colab-like kernel lacks (:data:`KERNEL_SIDE`, e.g. ``xprof``) and pins the
  TensorFlow, Keras, NumPy and CUDA libraries already there, so they are never replaced;
- :func:`built_with` / :func:`record_built_with` / :func:`environment_note`: the TensorFlow version and backend the
  labs were generated and graded on (``xlalab/built_with.json``, written by ``python -m xlalab.assign``), and a
  one-line warning when the student's kernel differs from it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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
    """``{"tensorflow": "2.21.0", "backend": "XLA:CPU"}``: what the labs were generated and graded on ({} if unknown)."""
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
