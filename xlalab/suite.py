"""The workload suite: every workload in every execution mode, checked, timed, placed on the roofline.

``xlalab suite [--profile cpu|gpu|tiny] [--only gemv,fusion,resnet,transformer] [--out results/NAME.json]`` (formerly
``python -m xlalab.suite``, which still works)

For each case of each workload (:mod:`xlalab.workloads`) the suite builds the step in every mode
(``eager``, ``graph``, ``xla``, ``xla_mixed``, ``autocluster``, and ``numpy`` for GEMV), times its first
call (trace and compile) apart, checks its result against the graph mode's on the same inputs (a
wrong answer is reported as wrong and not timed), then times the correct modes interleaved with
:func:`xlalab.bench.compare`. Auto-clustering is process-wide, so its mode runs in a child process
started with ``TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"``; its speedup is against the
parent's graph-mode samples (not interleaved, and marked so).

The JSON it writes has ``hardware`` (:func:`xlalab.hw.summary` plus measured ceilings), ``versions`` and
``results`` (one dict per workload, case and mode, with at least :data:`RESULT_KEYS`); the book reads
every ``results/*.json`` through :func:`load_results`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import workloads as W

if TYPE_CHECKING:
    from .options import SuiteOptions

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
AUTOCLUSTER_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
TOP_KEYS = ("hardware", "versions", "results")
RESULT_KEYS = ("workload", "case", "mode", "correct", "skipped", "first_call_s", "median_ms", "iqr_ms",
               "throughput", "throughput_unit", "speedup_vs_graph", "speedup_ci", "achieved_gbps",
               "achieved_tflops", "roofline_fraction", "fusions", "kernels")
XLA_MODES = ("xla", "xla_mixed")
# MatrixOp.impl values (xlalab.hlo.matrix_ops) of a product or convolution fused with other operations.
FUSED_IMPLS = ("fusion", "triton")


# ---------------------------------------------------------------------------------------------
# Reading results (the book's entry point).

def load_results(path_or_dir: str | os.PathLike = "results") -> list[dict[str, Any]]:
    """Every suite run stored at ``path_or_dir``: one JSON file, or every ``*.json`` in a folder (sorted by name).

    Each returned dict is the file's content (``hardware``, ``versions``, ``results``, ...) with
    ``name`` (the file stem, unless the file has one) and ``path`` added.

    Example:
        >>> runs = load_results("results")
        >>> [(r["name"], r["hardware"]["cpu"]) for r in runs]
    """
    path = Path(path_or_dir)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    runs = []
    for f in files:
        doc = json.loads(f.read_text())
        if not isinstance(doc, dict) or not all(k in doc for k in TOP_KEYS):
            continue
        doc.setdefault("name", f.stem)
        doc["path"] = str(f)
        runs.append(doc)
    return runs


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """What is missing or malformed in a suite JSON document (empty when it matches what the book reads)."""
    errors = [f"missing top-level key {k!r}" for k in TOP_KEYS if k not in doc]
    if errors:
        return errors
    for key in ("cpu", "cores", "gpus", "copy_gbps", "bandwidth_gbps", "peak_tflops"):
        if key not in doc["hardware"]:
            errors.append(f"hardware lacks {key!r}")
    for key in ("tensorflow", "keras", "numpy", "python"):
        if key not in doc["versions"]:
            errors.append(f"versions lacks {key!r}")
    for i, r in enumerate(doc["results"]):
        missing = [k for k in RESULT_KEYS if k not in r]
        if missing:
            errors.append(f"result {i} ({r.get('workload')}/{r.get('case')}/{r.get('mode')}) lacks {missing}")
            continue
        if r["workload"] not in W.WORKLOADS:
            errors.append(f"result {i}: unknown workload {r['workload']!r}")
        if r["mode"] not in W.MODES:
            errors.append(f"result {i}: unknown mode {r['mode']!r}")
        timed = r["skipped"] is None and r["correct"] is True
        if timed and not (isinstance(r["median_ms"], (int, float)) and r["median_ms"] > 0):
            errors.append(f"result {i}: timed but median_ms is {r['median_ms']!r}")
        if r["skipped"] is not None and not isinstance(r["skipped"], str):
            errors.append(f"result {i}: skipped must be null or a reason")
        if r["speedup_ci"] is not None and len(r["speedup_ci"]) != 2:
            errors.append(f"result {i}: speedup_ci must be [low, high]")
    return errors


# ---------------------------------------------------------------------------------------------
# Running.

def _progress(msg: str) -> None:
    log.info(msg)


def _select(profile: str, only: Iterable[str]) -> list[W.Case]:
    out: list[W.Case] = []
    for w in only:
        out.extend(W.cases(w, profile))
    return out


def _first_call(runner: W.Runner) -> tuple[Any, float]:
    from .bench import sync

    t0 = time.perf_counter()
    out = sync(runner())
    return out, time.perf_counter() - t0


def _errors(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: W.rel_error(outputs[k], reference[k]) for k in reference}


def _hlo_summary(runner: W.Runner) -> dict[str, Any] | None:
    from . import hlo

    try:
        module = hlo.parse(hlo.hlo_text(runner.fn, *runner.args, stage="optimized_hlo"))
        s = hlo.summary(module)
        mats = hlo.matrix_ops(module)
    except Exception as exc:  # noqa: BLE001 - record why, keep the run going
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    out = {k: s[k] for k in ("fusions", "fusions_by_kind", "kernels", "ops_by_opcode", "fused_ops_by_opcode",
                             "bytes_moved", "instructions")}
    # What the step's matmuls and convolutions became, whatever the backend (xlalab.hlo.matrix_ops): fused
    # with their neighbours (inside an XLA fusion, or a Triton GEMM fusion), or launched on their own (a bare
    # dot/convolution, a cuBLAS/cuDNN/oneDNN call).
    out["matrix_ops"] = [{"name": m.name, "kind": m.kind, "impl": m.impl, "flops": m.flops} for m in mats]
    for kind in ("dot", "convolution"):
        of_kind = [m for m in mats if m.kind == kind]
        out[f"{kind}_fused"] = sum(m.impl in FUSED_IMPLS for m in of_kind)
        out[f"{kind}_standalone"] = len(of_kind) - out[f"{kind}_fused"]
    return out


def _row(case: W.Case, mode: str, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in RESULT_KEYS}
    row.update(workload=case.workload, case=case.name, mode=mode, description=case.description,
               throughput_unit=case.unit, flops=case.flops, min_bytes=case.min_bytes, dtype="float32",
               tolerance=None, rel_error=None, errors=None, interleaved=None, hlo=None)
    row.update(kw)
    return row


def _fill_timing(row: dict[str, Any], case: W.Case, samples: list[float], peak: Any, bandwidth: float) -> None:
    from .roofline import RooflinePoint, bound

    med = float(np.median(samples))
    q1, q3 = np.percentile(samples, [25, 75])
    nbytes = row["min_bytes"]
    point = RooflinePoint(f"{case.workload}/{case.name}", case.flops, nbytes, med)
    dtype_key = {"bfloat16": "bf16", "float16": "fp16"}.get(row["dtype"], "fp32")
    peak_flops = peak(dtype_key)
    row.update(median_ms=med * 1e3, iqr_ms=float(q3 - q1) * 1e3, n_samples=len(samples),
               throughput=case.items / med, achieved_gbps=nbytes / med / 1e9,
               achieved_tflops=case.flops / med / 1e12, intensity=point.intensity,
               roofline_fraction=point.fraction(peak_flops, bandwidth),
               bound=bound(case.flops, nbytes, peak_flops, bandwidth),
               roofline_ms=max(case.flops / peak_flops, nbytes / bandwidth) * 1e3)


def _check(case: W.Case, mode: str, runner: W.Runner, out: Any, graph_out: dict[str, np.ndarray]) -> dict[str, Any]:
    outputs = runner.outputs(out)
    errs = _errors(outputs, graph_out)
    tol = case.tolerance.get(runner.dtype, W.TOLERANCE.get(runner.dtype, 1e-4))
    return {"errors": errs, "rel_error": max(errs.values()) if errs else 0.0, "tolerance": tol,
            "correct": _within(errs, tol), "dtype": runner.dtype}


def _within(errs: dict[str, float], tol: float | dict[str, float]) -> bool:
    """True when every output's relative error is within its tolerance (one number, or one per output)."""
    return all(e <= (tol[k] if isinstance(tol, dict) else tol) for k, e in errs.items())


def run_case(case: W.Case, peak: Any, bandwidth: float, min_time: float | None, cell: Callable[[str], None],
             mixed: str | None,
             hlo_training: tuple[str, ...] = XLA_MODES) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run one case in every in-process mode: first call, check, HLO summary, interleaved timing.

    ``hlo_training``: the modes whose training steps get an HLO summary (it compiles the step a second time).

    Returns the rows and what the autocluster mode needs from the parent (graph outputs and samples).
    """
    from .bench import compare

    rows: dict[str, dict[str, Any]] = {}
    runners: dict[str, W.Runner] = {}
    cell(f"{case.workload}/{case.name} graph")
    graph = case.build("graph")
    out, first = _first_call(graph)
    graph_out = graph.outputs(out)
    ref_err = None
    if case.reference is not None:
        ref_err = W.rel_error(graph_out["out"], case.reference())
    rows["graph"] = _row(case, "graph", first_call_s=first, correct=True, rel_error=0.0,
                         tolerance=case.tolerance["float32"], reference_error=ref_err)
    if ref_err is not None and not _within({"out": ref_err}, case.tolerance["float32"]):
        rows["graph"]["correct"] = False
    runners["graph"] = graph
    for mode in ("eager", "xla", "xla_mixed", "numpy"):
        if mode not in case.modes:
            if mode != "numpy" or case.workload == "gemv":
                rows[mode] = _row(case, mode, skipped=case.skip_reason)
            continue
        if mode == "xla_mixed" and mixed is None:
            rows[mode] = _row(case, mode, skipped="no mixed-precision policy helps on this device "
                                                  "(xlalab.hw.mixed_policy() is None)")
            continue
        cell(f"{case.workload}/{case.name} {mode}")
        try:
            runner = case.build(mode)
            out, first = _first_call(runner)
            check = _check(case, mode, runner, out, graph_out)
        except Exception as exc:  # noqa: BLE001 - a mode that fails is recorded, not fatal
            rows[mode] = _row(case, mode, skipped=f"failed: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        row = _row(case, mode, first_call_s=first, **check)
        if runner.min_bytes is not None:
            row["min_bytes"] = runner.min_bytes
        if mode in XLA_MODES and case.training and mode not in hlo_training:
            row["hlo"] = {"skipped": "this profile does not compile this training step a second time for its HLO"}
        elif mode in XLA_MODES:
            row["hlo"] = _hlo_summary(runner)
            if row["hlo"] and "fusions" in row["hlo"]:
                row["fusions"], row["kernels"] = row["hlo"]["fusions"], row["hlo"]["kernels"]
        rows[mode] = row
        if check["correct"]:
            runners[mode] = runner
        else:
            _progress(f"      {mode} is WRONG: relative errors {check['errors']} beyond {check['tolerance']}; "
                      "not timed")
    cell(f"{case.workload}/{case.name} timing {', '.join(runners)} interleaved")
    # Every runner has been called once already (the checked first call), and compare() calls each once
    # more before its rounds: one further warm-up call is enough.
    comp = compare({m: r for m, r in runners.items()}, baseline="graph", warmup=1,
                   min_time=case.min_time if min_time is None else min_time, min_rounds=5)
    for mode, t in comp.timings.items():
        row = rows[mode]
        _fill_timing(row, case, t.samples_s, peak, bandwidth)
        row.update(speedup_vs_graph=comp.speedups[mode], speedup_ci=list(comp.cis[mode]), interleaved=True)
    ordered = [rows[m] for m in W.MODES if m in rows]
    handoff = {"graph_out": graph_out, "graph_samples": comp.timings["graph"].samples_s}
    del runners, graph
    return ordered, handoff


class _Autocluster:
    """The autocluster mode of every case, run in one child process (``TF_XLA_FLAGS`` is process-wide)."""

    def __init__(self, cases: list[W.Case], profile: str, only: list[str], min_time: float | None) -> None:
        self.cases = cases
        self.todo = [c for c in cases if "autocluster" in c.modes]
        self.tmp = tempfile.mkdtemp(prefix="xlalab-autocluster-")
        self.proc: subprocess.Popen | None = None
        if not self.todo:
            return
        env = dict(os.environ, TF_XLA_FLAGS=AUTOCLUSTER_FLAGS, XLALAB_PROFILE=profile)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        cmd = [sys.executable, "-m", "xlalab.suite", "--worker", self.tmp, "--profile", profile,
               "--only", ",".join(only)]
        if min_time is not None:
            cmd += ["--min-time", str(min_time)]
        self.log = open(Path(self.tmp) / "stderr.txt", "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=self.log)

    def rows(self, handoffs: dict[tuple[str, str], dict[str, Any]], peak: Any,
             bandwidth: float) -> dict[tuple[str, str], dict[str, Any]]:
        """Wait for the child; check its outputs against the parent's graph outputs; one row per case."""
        import shutil

        from .bench import bootstrap_ratio_ci

        rows = {(c.workload, c.name): _row(c, "autocluster", skipped=c.skip_reason) for c in self.cases
                if "autocluster" not in c.modes}
        try:
            if self.proc is None:
                return rows
            code: int | str
            try:
                code = self.proc.wait(timeout=1200)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = "timeout"
            self.log.close()
            report_path = Path(self.tmp) / "report.json"
            if code != 0 or not report_path.exists():
                tail = (Path(self.tmp) / "stderr.txt").read_text().strip()[-300:]
                for c in self.todo:
                    rows[(c.workload, c.name)] = _row(c, "autocluster",
                                                      skipped=f"autocluster worker failed (exit {code}): {tail}")
                return rows
            report = json.loads(report_path.read_text())
            for c in self.todo:
                rows[(c.workload, c.name)] = self._row(c, report.get(f"{c.workload}/{c.name}"),
                                                       handoffs[(c.workload, c.name)], peak, bandwidth,
                                                       bootstrap_ratio_ci)
            return rows
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _row(self, c: W.Case, got: dict[str, Any] | None, handoff: dict[str, Any], peak: Any, bandwidth: float,
             ci: Callable) -> dict[str, Any]:
        if got is None or got.get("error"):
            return _row(c, "autocluster", skipped=f"failed: {got and got.get('error')}")
        with np.load(Path(self.tmp) / got["outputs"]) as npz:
            outputs = {k: npz[k] for k in npz.files}
        errs = _errors(outputs, handoff["graph_out"])
        tol = c.tolerance["float32"]
        row = _row(c, "autocluster", first_call_s=got["first_call_s"], errors=errs, rel_error=max(errs.values()),
                   tolerance=tol, correct=_within(errs, tol), interleaved=False,
                   note="timed in a child process; speedup against the parent's graph samples (not interleaved)")
        if row["correct"]:
            _fill_timing(row, c, got["samples_s"], peak, bandwidth)
            base = handoff["graph_samples"]
            row["speedup_vs_graph"] = float(np.median(base) / np.median(got["samples_s"]))
            row["speedup_ci"] = list(ci(base, got["samples_s"]))
        return row


def _worker(out_dir: str, profile: str, only: list[str], min_time: float | None) -> None:
    """The autocluster child: build each case's graph-mode step (auto-clustered by TF_XLA_FLAGS), check and time it."""
    from .bench import benchmark

    report: dict[str, Any] = {}
    for i, case in enumerate(_select(profile, only)):
        if "autocluster" not in case.modes:
            continue
        key = f"{case.workload}/{case.name}"
        _progress(f"      autocluster {key}")
        try:
            runner = case.build("autocluster")
            out, first = _first_call(runner)
            outputs = runner.outputs(out)
            np.savez(Path(out_dir) / f"out{i}.npz", **outputs)  # type: ignore[arg-type]  # mypy: a key could be allow_pickle
            t = benchmark(runner, warmup=2, min_time=case.min_time if min_time is None else min_time)
            report[key] = {"first_call_s": first, "samples_s": t.samples_s, "outputs": f"out{i}.npz"}
        except Exception as exc:  # noqa: BLE001
            report[key] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        _cleanup()
    (Path(out_dir) / "report.json").write_text(json.dumps(report))


def _cleanup() -> None:
    import keras

    keras.backend.clear_session()
    gc.collect()


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import keras
    import matplotlib
    import tensorflow as tf

    try:
        xv = version("xlalab")
    except PackageNotFoundError:
        xv = "unknown"
    return {"tensorflow": tf.__version__, "keras": keras.__version__, "numpy": np.__version__,
            "matplotlib": matplotlib.__version__, "python": platform.python_version(), "xlalab": xv}


def _hardware(profile: str) -> tuple[dict[str, Any], Any, float]:
    """The hardware summary plus the ceilings of the device that runs the work; returns (dict, peak_flops(dtype),
    bandwidth B/s).

    The roof is :func:`xlalab.hw.peaks` of that device: a GPU's datasheet entry (with its device copy
    bandwidth measured now), or the CPU's measured ceilings (multi-threaded copy bandwidth). Under
    ``XLALAB_FAKE_GPU`` the work runs on the CPU, so the roof is the CPU's.
    """
    from . import hw

    hwd = hw.summary().to_dict()
    hwd["profile"] = profile
    backend = hw.backend()
    refresh = profile != "tiny"
    peaks = hw.cpu_peaks(refresh=refresh) if backend.fake else hw.peaks(refresh=refresh)
    host = hw.measure_bandwidth(refresh=False)  # the host's NumPy figures (peaks() refreshed them on a CPU)
    hwd.update(copy_gbps=peaks.measured.get("copy_gbps", host["copy_gbps"]),
               host_copy_gbps=host["copy_gbps"], host_copy_threads_gbps=host["copy_threads_gbps"],
               triad_gbps=host["triad_gbps"], bandwidth_gbps=peaks.bandwidth_gbps, peak_tflops=dict(peaks.tflops),
               roof_device=peaks.name, peaks_source=peaks.source, measured=dict(peaks.measured),
               ran_on=("CPU (XLALAB_FAKE_GPU names a GPU, but TensorFlow ran on the CPU)" if backend.fake
                       else f"{backend.kind.upper()}: {backend.name}"))
    if backend.kind == "gpu" and not backend.fake:
        hwd["roof_note"] = ((peaks.note or "measured peaks for the roof (no datasheet row)") if peaks.is_measured else
                            "datasheet peaks for the roof; copy_gbps is the device-to-device copy measured now "
                            "(xlalab.hw.measure_bandwidth on /GPU:0)")
    else:
        hwd["roof_note"] = (f"memory roof: the faster of a NumPy copy over {peaks.measured['threads']} threads and "
                            "a single-threaded one, measured now (XLA:CPU and TensorFlow run their kernels "
                            "multi-threaded; on a busy machine one thread can beat the pool); copy_gbps is the "
                            "single-threaded NumPy copy; the fp32 roof (best measured matmul) is used for every dtype")
    hwd["load_average"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return hwd, peaks.peak_flops, peaks.bandwidth


def _targets(results: list[dict[str, Any]], copy_gbps: float) -> dict[str, Any]:
    """The issue's targets, computed from this run's rows."""
    def timed(r: dict[str, Any]) -> bool:
        return r["median_ms"] is not None and r["correct"]

    out: dict[str, Any] = {}
    from .workloads.gemv import FORMULATIONS

    gemv = [r for r in results if r["workload"] == "gemv" and r["case"] in FORMULATIONS and timed(r)]
    tf_rows = [r for r in gemv if r["mode"] not in ("numpy", "xla_mixed")]
    np_rows = [r for r in gemv if r["mode"] == "numpy"]
    if tf_rows and np_rows:
        best = max(tf_rows, key=lambda r: r["achieved_gbps"])
        npr = min(np_rows, key=lambda r: r["median_ms"])
        out["gemv"] = {
            "best": f"{best['case']} / {best['mode']}", "best_gbps": best["achieved_gbps"],
            "best_ms": best["median_ms"], "copy_gbps": copy_gbps,
            "fraction_of_copy": best["achieved_gbps"] / copy_gbps, "numpy_ms": npr["median_ms"],
            "numpy_gbps": npr["achieved_gbps"], "numpy_time_over_best_time": npr["median_ms"] / best["median_ms"],
            "met_70pct_copy": best["achieved_gbps"] >= 0.7 * copy_gbps,
            "met_0_8x_numpy": npr["median_ms"] / best["median_ms"] >= 0.8,
            "formulations_gbps": {f"{r['case']}/{r['mode']}": round(r["achieved_gbps"], 2) for r in gemv},
        }
    mem = {r["mode"]: r for r in results if r["workload"] == "fusion" and r["case"] == "memory"}
    if "xla" in mem and mem["xla"]["median_ms"] is not None:
        x = mem["xla"]
        out["fusion_memory"] = {"xla_fusions": x["fusions"], "xla_kernels": x["kernels"],
                                "speedup_vs_graph": x["speedup_vs_graph"], "speedup_ci": x["speedup_ci"],
                                "roofline_fraction": x["roofline_fraction"], "achieved_gbps": x["achieved_gbps"],
                                "met_one_fusion": x["fusions"] == 1, "met_3x": x["speedup_vs_graph"] >= 3,
                                "met_0_7_roof": x["roofline_fraction"] >= 0.7}
    return out


def run(profile: str | None = None, only: Iterable[str] = W.WORKLOADS, out: str | os.PathLike | None = None,
        min_time: float | None = None, autocluster: bool = True, plots: bool = True) -> dict[str, Any]:
    """Run the suite and return its JSON document; write it (and the PNGs) when ``out`` is given.

    ``profile``: ``"gpu"``, ``"cpu"`` or ``"tiny"`` (default :func:`xlalab.hw.profile`); ``only``: workload
    names; ``min_time``: seconds of interleaved timing per case (default per case; ``"tiny"`` uses 0.05).
    """
    from . import hw

    start = time.perf_counter()
    profile = profile or hw.profile()
    only = list(only)
    bad = [w for w in only if w not in W.WORKLOADS]
    if bad:
        raise ValueError(f"unknown workloads {bad}; expected some of {W.WORKLOADS}")
    if min_time is None and profile == "tiny":
        min_time = 0.05
    hwd, peak, bandwidth = _hardware(profile)
    _progress(f"xlalab.suite: profile {profile}, {hwd['cpu']} ({hwd['cores']} cores), "
              f"{len(hwd['gpus'])} GPU(s); ran on {hwd['ran_on']}; roof {hwd['bandwidth_gbps']} GB/s, "
              f"{hwd['peak_tflops']} TFLOP/s")
    mixed = hw.mixed_policy()
    cases = _select(profile, only)
    n_modes = sum(len([m for m in W.MODES if m in c.modes]) for c in cases)
    counter = {"i": 0}

    def cell(what: str) -> None:
        counter["i"] += 1
        _progress(f"[{min(counter['i'], n_modes + len(cases) + 1):>3}/{n_modes + len(cases) + 1}] "
                  f"{time.perf_counter() - start:6.1f}s  {what}")

    rows_by_case: dict[tuple[str, str], list[dict[str, Any]]] = {}
    handoffs: dict[tuple[str, str], dict[str, Any]] = {}
    # The tiny profile (a test) runs the autocluster child alongside; real profiles run it alone, afterwards.
    child = _Autocluster(cases, profile, only, min_time) if autocluster and profile == "tiny" else None
    for case in cases:
        # Getting the optimized HLO compiles the step again: on the CPU that costs a minute per training step.
        hlo_training = {"tiny": (), "cpu": ("xla",)}.get(profile, XLA_MODES)
        rows, handoff = run_case(case, peak, bandwidth, min_time, cell, mixed, hlo_training=hlo_training)
        rows_by_case[(case.workload, case.name)] = rows
        handoffs[(case.workload, case.name)] = handoff
        _cleanup()
    if autocluster:
        if child is None:
            cell(f"autocluster: {len(cases)} cases in a child process with TF_XLA_FLAGS=\"{AUTOCLUSTER_FLAGS}\"")
            child = _Autocluster(cases, profile, only, min_time)
        else:
            cell("autocluster: waiting for the child process")
        ac = child.rows(handoffs, peak, bandwidth)
    else:
        ac = {(c.workload, c.name): _row(c, "autocluster", skipped="not run (--no-autocluster)") for c in cases}
    results = []
    for case in cases:
        key = (case.workload, case.name)
        rows = rows_by_case[key] + [ac[key]]
        rows.sort(key=lambda r: W.MODES.index(r["mode"]))
        results.extend(rows)
    doc = {
        "schema": SCHEMA_VERSION,
        "profile": profile,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": _command(profile, only),
        "hardware": hwd,
        "versions": _versions(),
        "results": _clean(results),
    }
    doc["targets"] = _targets(doc["results"], hwd["copy_gbps"])
    doc["hardware"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    doc["wall_s"] = round(time.perf_counter() - start, 1)
    if out is not None:
        write(doc, out, plots=plots)
    return doc


def _clean(obj: Any) -> Any:
    """JSON-safe copy: NumPy scalars to Python, NaN and infinity to null."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if np.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


# ---------------------------------------------------------------------------------------------
# Output: JSON, table, plots.

def write(doc: dict[str, Any], out: str | os.PathLike, plots: bool = True) -> list[Path]:
    """Write ``doc`` to ``out`` and, with ``plots``, ``<stem>-speedups.png`` and ``<stem>-roofline.png`` beside it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = []
    if plots:
        written = plot(doc, out.parent, out.stem)
        doc["plots"] = [p.name for p in written]
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return [out, *written]


def plot(doc: dict[str, Any], directory: Path, stem: str) -> list[Path]:
    """Draw the speedup bars (one panel per case) and the roofline (each case's fastest correct mode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import plot as xplot
    from .roofline import RooflinePoint

    xplot.use_style()
    results = doc["results"]
    cases = list(dict.fromkeys((r["workload"], r["case"]) for r in results))
    timed = [r for r in results if r["speedup_vs_graph"] is not None]
    ncols = 4
    nrows = max(1, -(-len(cases) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (w, c) in zip(axes.flat, cases):
        rows = [r for r in timed if r["workload"] == w and r["case"] == c]
        xplot.speedup_bars({r["mode"]: r["speedup_vs_graph"] for r in rows},
                           {r["mode"]: r["speedup_ci"] for r in rows}, baseline="graph", ax=ax, title=f"{w}/{c}")
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.set_ylabel("speedup vs graph", fontsize=8)
    for ax in list(axes.flat)[len(cases):]:
        ax.axis("off")
    hwd = doc["hardware"]
    gpu = hwd["gpus"][0]["name"] if hwd["gpus"] else "no GPU"
    device = hwd.get("roof_device") or (hwd["cpu"] if not hwd["gpus"] else gpu)
    fig.suptitle(f"Speedup over graph mode, profile {doc['profile']}: {hwd['cpu']}, {hwd['cores']} cores, {gpu}")
    fig.tight_layout()
    speed_path = directory / f"{stem}-speedups.png"
    fig.savefig(speed_path)
    plt.close(fig)

    from .workloads.gemv import FORMULATIONS

    best_gemv = doc.get("targets", {}).get("gemv", {}).get("best", "").split(" / ")[0]
    points = []
    for w, c in cases:
        if w == "gemv" and c in FORMULATIONS and c != best_gemv:
            continue
        rows = [r for r in results if r["workload"] == w and r["case"] == c and r["median_ms"] and r["correct"]]
        for r in sorted(rows, key=lambda r: r["median_ms"])[:1] + [r for r in rows if r["mode"] == "graph"]:
            points.append(RooflinePoint(f"{w}/{c} ({r['mode']})", r["flops"], r["min_bytes"], r["median_ms"] / 1e3))
    points = list({p.label: p for p in points}.values())
    fig, ax = plt.subplots(figsize=(8, 5.5))
    peak = hwd["peak_tflops"]["fp32"] * 1e12
    xplot.roofline(points, peak, hwd["bandwidth_gbps"] * 1e9, ax=ax, device=device,
                   title=f"Roofline, profile {doc['profile']} (fastest mode and graph mode per case)")
    # The course palette has 8 colours: give every further 8 points another marker, so that labels stay unique.
    labels = {p.label for p in points}
    for i, line in enumerate(ln for ln in ax.lines if ln.get_label() in labels):
        line.set_marker("osD^v<>P*X"[(i // 8) % 10])
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    roof_path = directory / f"{stem}-roofline.png"
    fig.savefig(roof_path)
    plt.close(fig)
    return [speed_path, roof_path]


def table(doc: dict[str, Any]) -> str:
    """The results as a fixed-width text table, one line per workload, case and mode."""
    head = (f"{'workload/case':<26} {'mode':<12} {'ok':<3} {'first s':>8} {'median ms':>10} {'IQR ms':>8} "
            f"{'throughput':>16} {'vs graph [95% CI]':>22} {'GB/s':>7} {'TFLOP/s':>8} {'roof':>6} {'fus':>4} "
            f"{'kern':>5}")
    lines = [head, "-" * len(head)]
    for r in doc["results"]:
        name = f"{r['workload']}/{r['case']}"
        if r["skipped"]:
            lines.append(f"{name:<26} {r['mode']:<12} skipped: {r['skipped'][:90]}")
            continue
        ok = "yes" if r["correct"] else "NO"
        if r["median_ms"] is None:
            lines.append(f"{name:<26} {r['mode']:<12} {ok:<3} {r['first_call_s']:>8.2f}  not timed "
                         f"(relative errors {r['errors']}, tolerance {r['tolerance']})")
            continue
        unit = r["throughput_unit"].split("/")[0]
        ci = r["speedup_ci"] or [float("nan")] * 2
        sp = f"{r['speedup_vs_graph']:.2f}x [{ci[0]:.2f},{ci[1]:.2f}]" + ("" if r["interleaved"] else "*")
        lines.append(
            f"{name:<26} {r['mode']:<12} {ok:<3} {r['first_call_s']:>8.2f} {r['median_ms']:>10.3f} {r['iqr_ms']:>8.3f} "
            f"{r['throughput']:>10.3g} {unit[:5]:<5} {sp:>22} {r['achieved_gbps']:>7.2f} {r['achieved_tflops']:>8.4f} "
            f"{r['roofline_fraction']:>6.2f} {'' if r['fusions'] is None else r['fusions']:>4} "
            f"{'' if r['kernels'] is None else r['kernels']:>5}")
    lines.append("* autocluster runs in a child process: its speedup is against the parent's graph samples, "
                 "not interleaved")
    lines.append("")
    lines.append("Optimized HLO of the XLA modes (what was fused, what runs on its own):")
    for r in doc["results"]:
        h = r.get("hlo") or {}
        if "fusions" not in h:
            continue
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(h["fusions_by_kind"].items()))
        alone = ", ".join(f"{h[f'{op}_standalone']} {op}" for op in ("convolution", "dot") if h.get(f"{op}_standalone"))
        fused = ", ".join(f"{h[f'{op}_fused']} {op}" for op in ("convolution", "dot") if h.get(f"{op}_fused"))
        impls = sorted({m["impl"] for m in h.get("matrix_ops", [])})
        if impls:
            fused += f" (implementations: {', '.join(impls)})"
        lines.append(f"  {r['workload']}/{r['case']} {r['mode']}: {h['fusions']} fusions ({kinds or 'none'}), "
                     f"{h['kernels']} kernels; on their own: {alone or 'nothing'}; "
                     f"inside fusions: {fused or 'nothing'}; "
                     f"{h['ops_by_opcode'].get('copy', 0)} copies")
    return "\n".join(lines)


def default_out() -> Path:
    """``results/<short hostname>.json``."""
    return Path("results") / f"{socket.gethostname().split('.')[0]}.json"


def _command(profile: str, only: list[str]) -> str:
    """How this run was started, for the JSON document."""
    argv = sys.argv or [""]
    if Path(argv[0]).name in ("xlalab", "__main__.py") and argv[1:2] == ["suite"]:
        return " ".join(["xlalab", *argv[1:]])
    if "suite" in argv[0]:
        return " ".join(["python -m xlalab.suite", *argv[1:]])
    return f"xlalab.suite.run(profile={profile!r}, only={only!r})"


def main(argv: list[str] | None = None) -> None:
    """``python -m xlalab.suite``, the older form of ``xlalab suite`` (:func:`cli`)."""
    from . import log as log_setup
    from .options import SuiteOptions, add_options, from_args

    parser = argparse.ArgumentParser(prog="python -m xlalab.suite", description=__doc__.splitlines()[0])
    add_options(parser, SuiteOptions)
    log_setup.configure()
    cli(from_args(SuiteOptions, parser.parse_args(argv)))


def cli(args: SuiteOptions) -> int:
    """``xlalab suite``: run the matrix, print the table, write JSON and PNGs."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    if args.worker:
        from . import hw

        _worker(args.worker, args.profile or hw.profile(), only, args.min_time)
        return 0
    out = Path(args.out) if args.out else default_out()
    doc = run(args.profile, only, out, min_time=args.min_time, autocluster=not args.no_autocluster,
              plots=not args.no_plots)
    print(table(doc))
    for name, t in doc.get("targets", {}).items():
        print(f"target {name}: {json.dumps(t)}")
    print(f"wrote {out} ({doc['wall_s']} s)" + (f" and {', '.join(doc.get('plots', []))}" if doc.get("plots") else ""))
    return 0


if __name__ == "__main__":
    if "--worker" not in sys.argv:
        print("note: `python -m xlalab.suite` is now `xlalab suite`; this form keeps working", file=sys.stderr)
    main()
