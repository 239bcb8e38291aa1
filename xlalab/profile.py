"""Capture a TensorFlow profile of a few steps and read it with XProf's converters, as plain tables.

:func:`capture` runs a function under ``tf.profiler.experimental`` (the same ``.xplane.pb`` files that
``tf.profiler.experimental.start(logdir)`` writes and TensorBoard's Profile tab reads). Everything else
reads that capture with the converters of the ``xprof`` package (``xprof.convert.raw_to_tool_data``, the
code behind TensorBoard's profile plugin), never with a hand-written protobuf reader:

* :func:`framework_ops`: the ``framework_op_stats`` tool, one row per TensorFlow op (graph mode), per step;
* :func:`hlo_ops`: the ``trace_viewer`` tool's events that carry an ``hlo_op`` (XLA mode), per HLO op and step;
  on a GPU the events of the device's streams (kernels), on a CPU those of the host threads (thunks);
* :func:`kernels`: the ``kernel_stats`` tool (GPU kernels; empty on a CPU);
* :func:`hlo_module_text`: the ``graph_viewer`` tool's text of an XLA module the profile ran (the optimized HLO,
  with the instruction names the trace uses);
* :func:`step_times_ms`: the step markers :func:`capture` put around each call.

Example::

    prof = capture(step_xla, tokens, labels, steps=3, logdir="/tmp/tb")
    top = hlo_ops(prof)[:5]          # [OpTime(name="fusion.3", us_per_step=812.0, ...), ...]
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The name of the step markers :func:`capture` writes (``tf.profiler.experimental.Trace(STEP, step_num=i)``).
STEP = "train"

#: The lines the converters log to standard error on every call of a tool that has no processor of the newer kinds
#: (``E... unified_profile_processor_factory.cc:65] No UnifiedProfileProcessor registered for tool: trace_viewer``):
#: they report a lookup that falls back to the classic converter, which then answers, not a failure.
CONVERTER_NOISE = re.compile(r"No (?:Unified)?ProfileProcessor registered for tool")


@dataclass
class Profile:
    """One capture: where its files are and how many steps it holds.

    Attributes:
        logdir: the log directory given to the profiler; ``tensorboard --logdir LOGDIR`` (with the ``xprof``
            plugin installed) or ``xprof --logdir LOGDIR`` opens it.
        run_dir: ``LOGDIR/plugins/profile/<run>``, the folder of this capture's ``*.xplane.pb``.
        xspace: the ``.xplane.pb`` files of the capture (one per host).
        steps: how many steps were traced.
        label: the step markers' name.
    """

    logdir: str
    run_dir: str
    xspace: list[str]
    steps: int
    label: str = STEP


@dataclass
class TraceEvent:
    """One complete event (``"ph": "X"``) of the trace viewer: times in microseconds."""

    process: str          # "/host:CPU", "/device:GPU:0", ...
    thread: str           # "python", "tf_Compute/...", "Stream #14(...)", ...
    name: str
    ts_us: float
    dur_us: float
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class OpTime:
    """Time of one HLO op (XLA) summed over the traced steps.

    Attributes:
        name: the HLO instruction name (``"fusion.3"``, ``"dot.2"``), as in the module's optimized HLO.
        module: the HLO module's name.
        calls: events per step (1 for an op that runs once a step; more inside a loop).
        us_per_step: microseconds per step, summed over the op's events.
        process: where the events were recorded (``"/device:GPU:0"`` for kernels, ``"/host:CPU"`` on a CPU).
        share: fraction of the summed time of all HLO ops of the capture.
    """

    name: str
    module: str
    calls: float
    us_per_step: float
    process: str
    share: float = 0.0


def capture(fn: Callable, *args: Any, steps: int = 3, warmup: int = 1, logdir: str | os.PathLike | None = None,
            label: str = STEP) -> Profile:
    """Run ``fn(*args)`` ``warmup`` times untraced, then ``steps`` times under the TensorFlow profiler.

    Each traced call is wrapped in ``tf.profiler.experimental.Trace(label, step_num=i, _r=1)`` (a step marker
    the converters recognize) and its result is waited for (:func:`xlalab.bench.sync`), so a step's marker
    covers its device work. Compile ``fn`` before (``warmup >= 1``): a first call inside the trace records the
    compiler, not the step. ``logdir`` defaults to a new temporary folder. Returns a :class:`Profile`.
    """
    import tensorflow as tf

    from .bench import sync

    for _ in range(warmup):
        sync(fn(*args))
    logdir = str(logdir) if logdir is not None else tempfile.mkdtemp(prefix="xlalab-profile-")
    before = set(glob.glob(os.path.join(logdir, "plugins", "profile", "*")))
    tf.profiler.experimental.start(logdir)
    try:
        for i in range(steps):
            with tf.profiler.experimental.Trace(label, step_num=i, _r=1):
                sync(fn(*args))
    finally:
        tf.profiler.experimental.stop()
    runs = sorted(set(glob.glob(os.path.join(logdir, "plugins", "profile", "*"))) - before)
    if not runs:
        raise RuntimeError(f"the profiler wrote no run under {logdir}/plugins/profile")
    run_dir = runs[-1]
    return Profile(logdir, run_dir, sorted(glob.glob(os.path.join(run_dir, "*.xplane.pb"))), steps, label)


def from_logdir(logdir: str | os.PathLike, steps: int, label: str = STEP) -> Profile:
    """The newest capture under ``logdir`` (written by ``tf.profiler.experimental.start(logdir)``/``stop()``).

    ``steps`` is how many steps the capture holds (the per-step figures divide by it); ``label`` is the name
    of its step markers (``tf.profiler.experimental.Trace(label, step_num=i, _r=1)``).
    """
    runs = sorted(glob.glob(os.path.join(str(logdir), "plugins", "profile", "*")))
    runs = [r for r in runs if glob.glob(os.path.join(r, "*.xplane.pb"))]
    if not runs:
        raise FileNotFoundError(f"no capture (plugins/profile/<run>/*.xplane.pb) under {logdir}")
    return Profile(str(logdir), runs[-1], sorted(glob.glob(os.path.join(runs[-1], "*.xplane.pb"))), steps, label)


def _converters() -> Any:
    """XProf's converter module, or one clear error naming the command that installs it."""
    from xlalab import compat

    return compat.require("xprof.convert.raw_to_tool_data", "xlalab.profile (the profiler's converters)")


@contextlib.contextmanager
def quiet_converter_log():
    """Run a block with file descriptor 2 captured, then pass on what it wrote except :data:`CONVERTER_NOISE` lines.

    XProf's converters log from C++ (absl/tsl logging straight to fd 2, which ``TF_CPP_MIN_LOG_LEVEL=2`` does not
    silence and Python's ``sys.stderr`` never sees), so the capture is at the descriptor. Every other line the
    block writes to fd 2 is written back to it afterwards, in order: nothing but the noise is lost. Where fd 2
    cannot be duplicated the block runs uncaptured.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True)
                    if not CONVERTER_NOISE.search(line.decode("utf-8", "replace"))]
            if kept:
                os.write(2, b"".join(kept))


def tool_names(prof: Profile) -> list[str]:
    """The converter tools that have data in this capture (e.g. ``["trace_viewer@", "framework_op_stats", ...]``)."""
    raw_to_tool_data = _converters()

    with quiet_converter_log():
        return raw_to_tool_data.xspace_to_tool_names(prof.xspace)


def tool_data(prof: Profile, tool: str, params: dict[str, Any] | None = None) -> str:
    """The raw output of one XProf converter ``tool`` as text (JSON for most tools; ``""`` when it has none)."""
    raw_to_tool_data = _converters()

    with quiet_converter_log():
        data, _ = raw_to_tool_data.xspace_to_tool_data(prof.xspace, tool, params or {})
    if data is None:
        return ""
    return data.decode() if isinstance(data, bytes) else str(data)


def gviz_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of a Google Visualization DataTable (``{"cols": [...], "rows": [{"c": [...]}]}``) as dicts by column id."""
    ids = [c["id"] for c in table["cols"]]
    return [dict(zip(ids, [(cell or {}).get("v") for cell in row["c"]])) for row in table.get("rows", [])]


def _json(text: str) -> Any:
    return json.loads(text) if text.strip() else None


def trace_events(prof: Profile) -> list[TraceEvent]:
    """Every complete event of the ``trace_viewer`` tool, with process and thread names resolved."""
    data = _json(tool_data(prof, "trace_viewer"))
    events = (data or {}).get("traceEvents", [])
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return [TraceEvent(processes.get(e["pid"], str(e["pid"])), threads.get((e["pid"], e.get("tid")), str(e.get("tid"))),
                       e["name"], float(e["ts"]), float(e.get("dur", 0.0)), dict(e.get("args", {})))
            for e in events if e.get("ph") == "X"]


def step_times_ms(prof: Profile, events: list[TraceEvent] | None = None) -> list[float]:
    """Wall time of each traced step in milliseconds, from the step markers (``"train 0"``, ``"train 1"``, ...)."""
    events = trace_events(prof) if events is None else events
    pattern = re.compile(rf"^{re.escape(prof.label)} \d+$")
    return [e.dur_us / 1e3 for e in sorted(events, key=lambda e: e.ts_us) if pattern.match(e.name)]


def framework_ops(prof: Profile, idle: bool = False) -> list[dict[str, Any]]:
    """TensorFlow ops by self time, from the ``framework_op_stats`` tool, slowest first.

    One dict per op: ``op`` (the op's name in the graph), ``type`` (``"MatMul"``, ``"_MklMatMul"``...),
    ``where`` (``"Host"`` or ``"Device"``), ``us_per_step`` (self time per traced step: the op's own time,
    without ops it called), ``share`` (fraction of all ops' self time on that side). ``idle`` keeps the
    ``IDLE`` row. In XLA mode the whole compiled cluster is one op (``__inference_...``): see :func:`hlo_ops`.
    """
    tables = _json(tool_data(prof, "framework_op_stats")) or []
    if isinstance(tables, dict):
        tables = [tables]
    # The converter sends the table with IDLE first and the same table without it second.
    table = tables[0] if idle or len(tables) < 2 else tables[1]
    rows = []
    for r in gviz_rows(table):
        where = str(r.get("host_or_device"))
        share = r.get("device_total_self_time_percent") if where == "Device" else r.get("host_total_self_time_percent")
        rows.append({"op": r.get("operation"), "type": r.get("type"), "where": where,
                     "us_per_step": float(r.get("total_self_time") or 0.0) / prof.steps, "share": float(share or 0.0)})
    return sorted(rows, key=lambda r: -r["us_per_step"])


def by_type(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`framework_ops` rows summed by op ``type`` (and ``where``):
    ``{"type", "where", "ops", "us_per_step", "share"}``."""
    sums: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["type"], r["where"])
        s = sums.setdefault(key, {"type": r["type"], "where": r["where"], "ops": 0, "us_per_step": 0.0, "share": 0.0})
        s["ops"] += 1
        s["us_per_step"] += r["us_per_step"]
        s["share"] += r["share"]
    return sorted(sums.values(), key=lambda s: -s["us_per_step"])


def hlo_ops(prof: Profile, events: list[TraceEvent] | None = None, module: str | None = None) -> list[OpTime]:
    """HLO ops of the capture's XLA modules by time per step, slowest first (from the ``trace_viewer`` tool).

    The events that carry an ``hlo_op`` argument are grouped by (module, op). Where a device process has such
    events (a GPU: one event per kernel launched for the op) only those count; otherwise the host's (XLA:CPU:
    one event per thunk, on the thread that ran it). Ops of one step can overlap (several threads or streams),
    so the times add up to the op time of a step, which can be more or less than its wall time. ``module``
    keeps one module (a name from :func:`hlo_modules`).
    """
    events = trace_events(prof) if events is None else events
    tagged = [e for e in events if "hlo_op" in e.args and (module is None or e.args.get("hlo_module") == module)]
    on_device = [e for e in tagged if not e.process.startswith("/host")]
    chosen = on_device or tagged
    total: dict[tuple[str, str], float] = defaultdict(float)
    count: dict[tuple[str, str], int] = defaultdict(int)
    where: dict[tuple[str, str], str] = {}
    for e in chosen:
        key = (str(e.args.get("hlo_module", "")), str(e.args["hlo_op"]))
        total[key] += e.dur_us
        count[key] += 1
        where[key] = e.process
    grand = sum(total.values()) or 1.0
    ops = [OpTime(op, mod, count[(mod, op)] / prof.steps, t / prof.steps, where[(mod, op)], t / grand)
           for (mod, op), t in total.items()]
    return sorted(ops, key=lambda o: -o.us_per_step)


def kernels(prof: Profile) -> list[dict[str, Any]]:
    """GPU kernels from the ``kernel_stats`` tool, slowest first: ``kernel``, ``op`` (the HLO or TF op that
    launched it), ``calls`` and ``us_per_step`` per traced step, ``tensor_core`` (bool). Empty on a CPU."""
    data = _json(tool_data(prof, "kernel_stats"))
    if not data:
        return []
    table = data[0] if isinstance(data, list) else data
    rows = [{"kernel": r.get("kernel_name"), "op": r.get("op_name"),
             "calls": float(r.get("occurrences") or 0) / prof.steps,
             "us_per_step": float(r.get("total_duration_us") or 0.0) / prof.steps,
             "tensor_core": bool(r.get("is_kernel_using_tensor_core"))} for r in gviz_rows(table)]
    return sorted(rows, key=lambda r: -r["us_per_step"])


def hlo_modules(prof: Profile) -> list[str]:
    """Names of the XLA modules whose HLO the capture holds (``"<module name>(<program id>)"``).

    The converters write one ``<name>.hlo_proto.pb`` per module next to the ``.xplane.pb`` the first time a
    capture's tools are listed; this lists them (calling :func:`tool_names` once if needed).
    """
    def found() -> list[str]:
        return sorted(f[: -len(".hlo_proto.pb")] for f in os.listdir(prof.run_dir) if f.endswith(".hlo_proto.pb"))

    return found() or (tool_names(prof) and found()) or []


def hlo_module_text(prof: Profile, module: str | None = None) -> str:
    """The optimized HLO text of one XLA module the capture ran (``graph_viewer`` tool, ``long_txt``).

    ``module`` is a name from :func:`hlo_modules` or a module name as the trace events give it
    (``OpTime.module``); default: the module with the most HLO-op time in the capture (a ValueError when no XLA
    op ran in it, even if the process compiled modules before: the converters list those too). The instruction names
    are those of the trace's ``hlo_op`` events, so the text can go to :func:`xlalab.hlo.summary` and its
    launches be matched with :func:`hlo_ops` by name.
    """
    names = hlo_modules(prof)
    if not names:
        raise ValueError("the capture holds no XLA module (was the function compiled with jit_compile=True?)")
    if module is None:
        ops = hlo_ops(prof)
        if not ops:
            # The converters list every module the process had compiled, also ones that did not run here.
            raise ValueError(f"no XLA op ran during the capture (was the function compiled with "
                             f"jit_compile=True?); modules compiled earlier in this process: {names}")
        module = ops[0].module
    matches = [n for n in names if n == module or re.sub(r"\(\d+\)$", "", n) == module]
    if not matches:
        raise ValueError(f"no module {module!r} in the capture; it has {names}")
    return tool_data(prof, "graph_viewer", {"graph_viewer_options": {"module_name": matches[0], "type": "long_txt"}})


def step_timeline(prof: Profile, step: int = -1, events: list[TraceEvent] | None = None) -> dict[str, Any]:
    """The HLO ops of one traced step on one time axis, from the ``trace_viewer`` events.

    ``step`` indexes the step markers (``"train 0"``, ``"train 1"``, ...; ``-1``: the last, warmest one). The ops
    are the events that carry an ``hlo_op`` argument and start inside that step's marker: on a device where it has
    such events (a GPU's kernels), else on the host threads (XLA:CPU's thunks), as :func:`hlo_ops` chooses them.

    Returns ``{"step": index, "step_us": the marker's duration, "ops": [{"op", "module", "lane", "start_us",
    "dur_us"}, ...] (``start_us`` from the step's start, sorted by start), "lanes": [lane names in order of first
    use], "busy_us": the time at least one op ran}``. ``lane`` is ``"process / thread"``.

    Example:
        >>> t = step_timeline(profile.capture(step, steps=3)); plot.timeline(t)
    """
    events = trace_events(prof) if events is None else events
    pattern = re.compile(rf"^{re.escape(prof.label)} \d+$")
    markers = sorted((e for e in events if pattern.match(e.name)), key=lambda e: e.ts_us)
    if not markers:
        raise ValueError(f"no step markers named {prof.label!r} <n> in the trace: capture with profile.capture, or "
                         "wrap each step in tf.profiler.experimental.Trace(label, step_num=i, _r=1)")
    try:
        marker = markers[step]
    except IndexError:
        raise ValueError(f"step={step}, but the trace has {len(markers)} steps") from None
    t0, t1 = marker.ts_us, marker.ts_us + marker.dur_us
    tagged = [e for e in events if "hlo_op" in e.args and t0 <= e.ts_us < t1]
    on_device = [e for e in tagged if not e.process.startswith("/host")]
    chosen = sorted(on_device or tagged, key=lambda e: (e.ts_us, e.process, e.thread, str(e.args["hlo_op"])))
    lanes: list[str] = []
    ops: list[dict[str, Any]] = []
    for e in chosen:
        lane = f"{e.process} / {e.thread}"
        if lane not in lanes:
            lanes.append(lane)
        ops.append({"op": str(e.args["hlo_op"]), "module": str(e.args.get("hlo_module", "")), "lane": lane,
                    "start_us": e.ts_us - t0, "dur_us": min(e.dur_us, t1 - e.ts_us)})
    busy, end = 0.0, 0.0
    for o in sorted(ops, key=lambda o: o["start_us"]):
        s, f = max(o["start_us"], end), o["start_us"] + o["dur_us"]
        if f > s:
            busy += f - s
        end = max(end, f)
    return {"step": markers.index(marker), "step_us": marker.dur_us, "ops": ops, "lanes": lanes, "busy_us": busy}
