"""The workload suite: every workload in every execution mode, checked, timed, placed on the roofline.

``xlalab suite [--profile cpu|gpu|tiny] [--only gemv,fusion,resnet,transformer] [--out results/NAME.json]``

For each case of each workload (:mod:`xlalab.workloads`) the suite builds the step in every mode
(``eager``, ``graph``, ``xla``, ``xla_mixed``, ``autocluster``, and ``numpy`` for GEMV), times its first
call (trace and compile) apart, checks its result against the graph mode's on the same inputs (a
wrong answer is reported as wrong and not timed), then times the correct modes interleaved with
:func:`xlalab.bench.compare`. Auto-clustering is process-wide, so its mode runs in a child process
started with ``TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"``; its speedup is against the
parent's graph-mode samples (not interleaved, and marked so).

The document it writes is described in :mod:`xlalab.suite.report` (which also reads, checks, tabulates and plots
it).
"""

from __future__ import annotations

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

from xlalab import env as xlalab_env, workloads as W
from xlalab.suite.report import RESULT_KEYS, SCHEMA_VERSION, table, write

if TYPE_CHECKING:
    from xlalab.options import SuiteOptions

log = logging.getLogger(__name__)

AUTOCLUSTER_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
XLA_MODES = ("xla", "xla_mixed")
# MatrixOp.impl values (xlalab.hlo.matrix_ops) of a product or convolution fused with other operations.
FUSED_IMPLS = ("fusion", "triton")


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
    from xlalab.bench import sync

    t0 = time.perf_counter()
    out = sync(runner())
    return out, time.perf_counter() - t0


def _errors(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: W.rel_error(outputs[k], reference[k]) for k in reference}


def _hlo_summary(runner: W.Runner) -> dict[str, Any] | None:
    from xlalab import hlo

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
    from xlalab.roofline import RooflinePoint, bound

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
    from xlalab.bench import compare

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
        env = dict(os.environ, TF_XLA_FLAGS=AUTOCLUSTER_FLAGS, **{xlalab_env.PROFILE: profile})
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        cmd = [sys.executable, "-m", "xlalab", "suite", "--worker", self.tmp, "--profile", profile,
               "--only", ",".join(only)]
        if min_time is not None:
            cmd += ["--min-time", str(min_time)]
        self.log = open(Path(self.tmp) / "stderr.txt", "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=self.log)

    def rows(self, handoffs: dict[tuple[str, str], dict[str, Any]], peak: Any,
             bandwidth: float) -> dict[tuple[str, str], dict[str, Any]]:
        """Wait for the child; check its outputs against the parent's graph outputs; one row per case."""
        import shutil

        from xlalab.bench import bootstrap_ratio_ci

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
    from xlalab.bench import benchmark

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
    from xlalab import hw

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
    from xlalab.workloads.gemv import FORMULATIONS

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
    from xlalab import hw

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


def default_out() -> Path:
    """``results/<short hostname>.json``."""
    return Path("results") / f"{socket.gethostname().split('.')[0]}.json"


def _command(profile: str, only: list[str]) -> str:
    """How this run was started, for the JSON document."""
    argv = sys.argv or [""]
    if Path(argv[0]).name in ("xlalab", "__main__.py") and argv[1:2] == ["suite"]:
        return " ".join(["xlalab", *argv[1:]])
    return f"xlalab.suite.run(profile={profile!r}, only={only!r})"


def cli(args: SuiteOptions) -> int:
    """``xlalab suite``: run the matrix, print the table, write JSON and PNGs."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    if args.worker:
        from xlalab import hw

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
