"""The answers of GPU prediction checks: the instructor's reference compiled by XLA:GPU without a GPU, once per run.

A lab can ask a student to predict what XLA:GPU makes of a function for a target (how many kernels, and which
backend runs each: a Triton GEMM fusion, a cuBLASLt call, a loop or input fusion, ...). The answer is the
instructor's reference function compiled in the judge (:func:`reference_kernels`), never the student's code:
the student's kernel only records the prediction. A prediction has no forging problem of its own (the answer is
the compiled reference's, the same for everyone), so such a check is declared self-reported.

Compiling costs seconds (a subprocess that imports JAX, see :mod:`xlalab.hlo.gpu_compile`), and the answer is the
same for every hand-in, so each (reference HLO, target, compiler) answer is kept in a cache folder: the judge of
each hand-in reads it, and only the first one compiles. The grader makes that folder once per grading process
(:func:`judge_cache`), binds it writable into the judge's jail only (never into the student's), and names it in
``$XLALAB_GPU_ANSWERS``. A compile that XLA refuses is cached too, as its message, so that every hand-in's check
fails with the same message without compiling again. Without the folder (a student working) answers are kept
in memory for the kernel's life.

In a student's kernel without the ``gpu-compile`` extra (Colab, usually), :func:`graded_later` is true and a check
only validates the prediction's form; in the judge a missing extra is that check's failure
(:class:`GpuAnswerUnavailable`), never the class's.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from xlalab import env as xlalab_env

ENV = xlalab_env.GPU_ANSWERS
_MEMORY: dict[str, dict[str, Any]] = {}
_PROCESS_DIR: Path | None = None


class GpuAnswerUnavailable(RuntimeError):
    """The GPU compile cannot run here (the ``gpu-compile`` extra is missing): no answer to compare with."""


def available() -> bool:
    """Whether this Python has the ``gpu-compile`` extra (the deviceless XLA:GPU compile can run)."""
    from xlalab.hlo import gpu_compile

    return not gpu_compile.missing_packages()


def graded_later() -> bool:
    """True in a student's kernel (live mode) without the ``gpu-compile`` extra: a GPU prediction can only be
    checked when it is graded (the judge has the extra)."""
    from xlalab.grading import probe

    return probe.mode() == "live" and not available()


def _compiler_version() -> str:
    try:
        return f"jaxlib {metadata.version('jaxlib')}, plugin {metadata.version('jax-cuda12-plugin')}"
    except metadata.PackageNotFoundError:
        return "unknown"


_TRACE_ID = re.compile(r"(_inference_\w+?)_\d+__")
_METADATA = re.compile(r",? metadata=\{[^}]*\}")


def canonical(hlo: str) -> str:
    """HLO text without what differs between two traces of the same function: the trace's number in TensorFlow's
    module and computation names (``a_inference_f_18__`` and ``a_inference_f_42__``) and the metadata."""
    return _METADATA.sub("", _TRACE_ID.sub(r"\1__", hlo))


def answer_key(program: str, target: str) -> str:
    """The cache key of one answer: SHA-256 of the reference (its HLO, or the key that names it), the target's
    configuration and the compiler's version (a new jaxlib or an edited target compiles again)."""
    from xlalab.hlo import gpu_compile

    t = gpu_compile.target(target)
    blob = json.dumps({"program": program, "target": t.name, "config": t.config_text,
                       "compiler": _compiler_version()})
    return hashlib.sha256(blob.encode()).hexdigest()


def _cache_dir() -> Path | None:
    path = os.environ.get(ENV)
    return Path(path) if path and Path(path).is_dir() else None


def _read(key: str) -> dict[str, Any] | None:
    if key in _MEMORY:
        return _MEMORY[key]
    folder = _cache_dir()
    if folder is None:
        return None
    try:
        entry = json.loads((folder / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    answer = entry.get("answer") if isinstance(entry, dict) else None
    well_formed = isinstance(entry, dict) and (isinstance(entry.get("error"), str) or (
        isinstance(answer, dict) and type(answer.get("kernels")) is int and isinstance(answer.get("backends"), dict)))
    if not well_formed:
        return None
    _MEMORY[key] = entry
    return entry


def _write(key: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` in memory and, where there is a cache folder, in it (written whole, then renamed)."""
    _MEMORY[key] = entry
    folder = _cache_dir()
    if folder is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key}.", suffix=".tmp")
    except OSError:
        return   # a read-only folder: the answer is still right, only not shared
    try:
        os.fchmod(fd, 0o644)   # readable by the judges of other grading processes (other jail uids as root)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        Path(tmp).unlink(missing_ok=True)   # a full folder: likewise


def _summary(result: Any) -> dict[str, Any]:
    """What a prediction is compared with: the kernel count and the kernels per backend."""
    return {"kernels": len(result.kernels), "backends": dict(sorted(result.backends().items())),
            "compiler": result.compiler}


def _compile(jobs: dict[str, str], targets: Sequence[str], timeout: float) -> dict[tuple[str, str], dict]:
    """Compile every HLO of ``jobs`` ({key name: hlo}) for every target: one subprocess, and where XLA refuses
    something, one per (job, target) so that each refusal is attributed. Entries: ``{"answer": ...}`` or
    ``{"error": XLA's message}``."""
    from xlalab.hlo import gpu_compile

    names = list(jobs)
    try:
        per = gpu_compile.compile_jobs([{"hlo": jobs[n]} for n in names], targets, timeout=timeout)
        return {(n, t): {"answer": _summary(per[t][i])} for t in targets for i, n in enumerate(names)}
    except gpu_compile.GpuCompileFailed as err:
        if len(names) * len(targets) == 1:
            return {(names[0], targets[0]): {"error": str(err)}}
    out: dict[tuple[str, str], dict] = {}
    for n in names:
        for t in targets:
            try:
                out[n, t] = {"answer": _summary(gpu_compile.compile_hlo(jobs[n], t, timeout=timeout)[t])}
            except gpu_compile.GpuCompileFailed as err:
                out[n, t] = {"error": str(err)}
    return out


Case = tuple[Callable, Sequence[Any]] | Callable[[], tuple[Callable, Sequence[Any]]]


def _hlo(case: Case) -> str:
    from xlalab.hlo import gpu_compile

    fn, args = case() if callable(case) else case
    return gpu_compile.tf_hlo(fn, *args)


def reference_kernels(cases: Mapping[str, Case], targets: Sequence[str], *, key: str | None = None,
                      timeout: float = 300.0) -> dict[str, dict[str, dict[str, Any]]]:
    """``{target: {case: {"kernels": n, "backends": {backend: count}, "compiler": ...}}}`` of each reference
    function ``cases[name] = (fn, args)`` compiled by XLA:GPU for each target without a GPU, from the cache where
    this run compiled it before.

    A case may also be a function that returns ``(fn, args)`` (e.g. one that builds a model), with ``key``: a
    text that names the reference and its versions; the cache is then looked up by ``key`` and the case is built
    and traced only when its answer is missing (a reference that takes seconds to trace is traced once per run).
    Without ``key`` the cache key is the reference's HLO.

    Raises :class:`GpuAnswerUnavailable` without the ``gpu-compile`` extra, and
    :class:`xlalab.hlo.gpu_compile.GpuCompileFailed` with XLA's message when XLA refused a case for a target.
    """
    from xlalab.hlo import gpu_compile

    hlos = {} if key is not None else {name: _hlo(case) for name, case in cases.items()}
    keys = {(name, t): answer_key(canonical(hlos[name]) if key is None else f"{key}\n{name}", t) for name in cases
            for t in targets}
    entries = {pair: _read(k) for pair, k in keys.items()}
    missing = [pair for pair, entry in entries.items() if entry is None]
    if missing:
        if not available():
            raise GpuAnswerUnavailable(
                "gpu compile unavailable: the reference cannot be compiled for a GPU here, the "
                f"{gpu_compile.EXTRA!r} extra is missing ({', '.join(gpu_compile.missing_packages())})")
        todo_names = sorted({name for name, _ in missing})
        todo_targets = [t for t in targets if any(pt == t for _, pt in missing)]
        for name in todo_names:
            if name not in hlos:
                hlos[name] = _hlo(cases[name])
        compiled = _compile({n: hlos[n] for n in todo_names}, todo_targets, timeout)
        for pair in missing:
            entries[pair] = compiled[pair]
            _write(keys[pair], compiled[pair])
    out: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in targets}
    for (name, t), entry in entries.items():
        assert entry is not None
        if "error" in entry:
            raise gpu_compile.GpuCompileFailed(f"XLA:GPU could not compile the reference {name} for {t}: "
                                               f"{entry['error']}")
        out[t][name] = entry["answer"]
    return out


def judge_cache(env: Mapping[str, str | None] | None = None) -> Path:
    """The cache folder of the judges of this grading process: ``env``'s ``$XLALAB_GPU_ANSWERS`` where the caller
    names one, else a folder made once per process (removed at its exit). When the grader is root, the folder is
    given to the jail's user of this process (:func:`xlalab.grading.sandbox.host_uid`), so that the judge can
    write it; only the judge's jail binds it."""
    global _PROCESS_DIR
    from xlalab.grading import sandbox

    chosen = (env or {}).get(ENV)
    if chosen:
        folder = Path(chosen)
    else:
        if _PROCESS_DIR is None or not _PROCESS_DIR.is_dir():
            _PROCESS_DIR = Path(tempfile.mkdtemp(prefix="xlalab-gpu-answers-"))
            atexit.register(shutil.rmtree, _PROCESS_DIR, True)
        folder = _PROCESS_DIR
    uid = sandbox.host_uid()
    try:
        if uid is not None and folder.is_dir() and folder.stat().st_uid != uid:
            os.chown(folder, uid, -1)   # as root, the jail runs as a uid of this process's own
    except OSError:
        pass   # the judge then compiles for every hand-in: right answers, only slower
    return folder


__all__ = ["ENV", "Case", "GpuAnswerUnavailable", "answer_key", "available", "graded_later", "judge_cache",
           "reference_kernels"]
