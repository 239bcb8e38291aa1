"""The book's view of XLA:GPU beside XLA:CPU: a chapter's own programs compiled for a few GPUs, as plain rows.

A chapter section calls :func:`compile_programs` once (all its programs, all its targets, ONE compiler
subprocess through :func:`xlalab.hlo.gpu_compile.compile_jobs`), then :func:`gpu_row` / :func:`cpu_row` per program
and target, and :func:`label` for the words every GPU figure carries. On a machine whose GPU TensorFlow sees
(:func:`xlalab.hlo.gpu_compile.local_gpu_target`), that GPU is compiled on the device by TensorFlow (autotuned) and
:func:`gpu_row` can time the program there (:func:`xlalab.bench.benchmark`); every other target is compiled without a
device, and its only time is the datasheet's lower bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import gpu_compile as g

#: The GPUs a section shows when the build has none: an sm_75 card (cuBLAS), an sm_80 and an sm_90 (Triton GEMM).
DEFAULT_TARGETS = ("T4", "A100-SXM-40GB", "H100-SXM")
#: Short names for tables and prose.
SHORT = {"T4": "T4", "L4": "L4", "A100-SXM-40GB": "A100", "A100-SXM-80GB": "A100 80GB", "H100-SXM": "H100",
         "H200": "H200", "B200": "B200"}
CPU = "XLA:CPU"
NOT_RUN = "autotuning not run (default tile configurations and GEMM backend)"
BOUNDS = "times are lower bounds from the datasheet, not measurements"

Program = tuple[Callable[..., Any], Sequence[Any]]


def short(target: str) -> str:
    """The short name of a target (``"H100-SXM"`` -> ``"H100"``); ``XLA:CPU`` stays."""
    return SHORT.get(target, target)


def section_targets(default: Iterable[str] = DEFAULT_TARGETS) -> list[str]:
    """The targets a section compiles: this machine's GPU first where TensorFlow sees one with a shipped target,
    then ``default`` (each once)."""
    local = g.local_gpu_target()
    names = [g.target(t).name for t in default]
    return ([local] if local else []) + [t for t in names if t != local]


def on_device(result: g.GpuCompiled) -> bool:
    """Whether ``result`` was compiled by TensorFlow on this machine's GPU (autotuned), not without a device."""
    return result.autotuning == g.ON_DEVICE


def compile_programs(programs: Mapping[str, Program], targets: Iterable[str] | None = None, *,
                     xla_flags: Sequence[str] = (), timeout: float = g.DEFAULT_TIMEOUT_S, use_device: bool = True,
                     ) -> dict[str, dict[str, g.GpuCompiled]]:
    """Every program for every target: ``{program: {target: GpuCompiled}}``.

    TensorFlow's HLO of each program is taken here; the deviceless targets are compiled in ONE subprocess
    (:func:`xlalab.hlo.gpu_compile.compile_jobs`). The GPU TensorFlow sees here, if it is a target and no
    ``xla_flags`` are given, is compiled on the device instead (:func:`xlalab.hlo.gpu_compile.compile_tf`), unless
    ``use_device`` is False (e.g. to read the executable's planned memory, which only the deviceless compile gives).
    """
    names = [g.target(t).name for t in (section_targets() if targets is None else targets)]
    local = g.local_gpu_target() if use_device and not xla_flags else None
    out: dict[str, dict[str, g.GpuCompiled]] = {p: {} for p in programs}
    if local in names:
        for p, (fn, args) in programs.items():
            out[p].update(g.compile_tf(fn, *args, targets=[local]))
    rest = [t for t in names if t != local]
    if rest:
        jobs = [{"hlo": g.tf_hlo(fn, *args)} for fn, args in programs.values()]
        per = g.compile_jobs(jobs, rest, xla_flags=xla_flags, timeout=timeout)
        for t in rest:
            for p, result in zip(programs, per[t]):
                out[p][t] = result
    return {p: {t: out[p][t] for t in names} for p in programs}


def label(result: g.GpuCompiled) -> str:
    """The words one GPU figure carries: where and how it was compiled, and what its times are."""
    if on_device(result):
        return (f"compiled on this machine's {short(result.target)} ({result.device}) by {result.compiler}, "
                "autotuned; the measured time is this GPU's, the bound is from its datasheet")
    return (f"compiled for {short(result.target)} ({result.device}) by {result.compiler} without a device; "
            f"{NOT_RUN}; {BOUNDS}")


def labels(results: Iterable[g.GpuCompiled]) -> list[str]:
    """One :func:`label` per target, in order of first appearance."""
    seen: dict[str, str] = {}
    for r in results:
        seen.setdefault(r.target, label(r))
    return list(seen.values())


@dataclass(frozen=True)
class Row:
    """One program compiled for one backend, as a table shows it.

    ``target`` is a GPU key or :data:`CPU`; ``backends`` counts kernels by backend (Triton GEMM fusion, cuBLASLt
    call, loop fusion, ...; on the CPU the fusion kinds and library calls); ``bytes`` what the kernels read and
    write; ``flops`` their matrix FLOPs; ``lower_bound_s`` the sum of the kernels' roofline bounds on the target's
    datasheet (``None`` on the CPU); ``temp_bytes`` the temporaries the executable plans (``None`` where not read);
    ``measured_s`` a time measured on this machine's device (``None`` where nothing was measured);
    ``how``: ``"deviceless"``, ``"on device"`` or ``"this CPU"``.
    """

    program: str
    target: str
    kernels: int
    backends: dict[str, int]
    bytes: int
    flops: int
    lower_bound_s: float | None
    temp_bytes: int | None
    how: str
    measured_s: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def backends_text(self) -> str:
        """``"1 Triton GEMM fusion, 1 loop fusion"``: kernels by backend, most first."""
        items = sorted(self.backends.items(), key=lambda kv: (-kv[1], kv[0]))
        return ", ".join(f"{n} {b}" for b, n in items) or "none"


def gpu_row(program: str, result: g.GpuCompiled, *, measure: Program | None = None) -> Row:
    """The row of one GPU compile; with ``measure`` (the program) and a compile on this machine's GPU, the program
    is timed there under ``jit_compile=True`` (the median of :func:`xlalab.bench.benchmark`)."""
    t = result.totals()
    measured = None
    if measure is not None and on_device(result):
        import tensorflow as tf

        from xlalab import bench

        fn, args = measure
        measured = bench.benchmark(tf.function(fn, jit_compile=True), *args).median_s
    return Row(program, result.target, t["kernels"], result.backends(), t["bytes"], t["flops"], t["lower_bound_s"],
               result.memory.get("temp"), "on device" if on_device(result) else "deviceless", measured,
               notes={"product_kernels": sum(1 for k in result.kernels if k.flops)})


def cpu_hlo(fn: Callable[..., Any], *args: Any) -> str:
    """XLA:CPU's optimized module of ``fn(*args)``, even where TensorFlow sees a GPU or ``XLALAB_FAKE_GPU`` stands
    one in (TensorFlow compiles it for its CPU platform)."""
    from .source import as_jit

    text: str = as_jit(fn).experimental_get_compiler_ir(*args)(stage="optimized_hlo", platform_name="CPU")
    return text


def cpu_row(program: str, fn: Callable[..., Any], *args: Any) -> Row:
    """The row of ``fn(*args)`` as XLA:CPU compiles it on this machine (TensorFlow's optimized module for the CPU,
    whatever device TensorFlow would pick): kernels by backend named as on the GPU
    (:func:`xlalab.hlo.gpu_compile.kernels_of`), bytes and matrix FLOPs."""
    from xlalab import hw

    from .parser import parse

    text = cpu_hlo(fn, *args)
    no_roof = hw.DevicePeaks("no roof", 1.0, {"fp32": 1.0}, "CPU rows carry no bound")   # bounds not used
    kernels = g.kernels_of(parse(text), no_roof)
    backends: dict[str, int] = {}
    for k in kernels:
        backends[k.backend] = backends.get(k.backend, 0) + 1
    return Row(program, CPU, len(kernels), backends, sum(k.bytes or 0 for k in kernels), sum(k.flops for k in kernels),
               None, None, "this CPU", notes={"product_kernels": sum(1 for k in kernels if k.flops)})


def fused_ops(result: g.GpuCompiled, kernel: g.Kernel) -> set[str]:
    """The opcodes inside one kernel's fusion (parameters, bitcasts and reshapes aside); empty for a call."""
    from .walk import fused_instructions, fusion_of

    inst = next((i for i in result.module.instructions() if i.name == kernel.name), None)
    fusion = fusion_of(result.module, inst) if inst is not None else None
    if fusion is None:
        return set()
    return {i.opcode for i in fused_instructions(result.module, fusion)} - {
        "parameter", "bitcast", "reshape", "constant", "broadcast"}


@dataclass(frozen=True)
class Gemm:
    """How one target ran the matrix products of a program: ``backend`` of the product's kernel, ``epilogue``
    (the elementwise ops fused into it, or a cuBLAS epilogue), ``after`` (the ops of the kernel that reads the
    product, empty when none), ``split_k`` (the contraction split into partial products summed by a later kernel:
    the number of partials, 1 when not split), ``config`` (XLA's default tile or algorithm)."""

    target: str
    backend: str
    epilogue: tuple[str, ...]
    after: tuple[str, ...]
    split_k: int
    config: str


def gemms(result: g.GpuCompiled) -> list[Gemm]:
    """Each product kernel of ``result`` (a kernel with matrix FLOPs) with its epilogue and any split-K."""
    out = []
    for i, k in enumerate(result.kernels):
        if not k.flops:
            continue
        inside = fused_ops(result, k)
        epilogue = tuple(sorted(inside - {"dot", "convolution", "reduce", "transpose", "copy"}))
        if k.backend in ("cuBLASLt call", "cuBLAS call") and "epilogue" in k.config:
            epilogue = (k.config.split("epilogue ", 1)[1],)
        nxt = result.kernels[i + 1] if i + 1 < len(result.kernels) else None
        after = tuple(sorted(fused_ops(result, nxt))) if nxt is not None and not nxt.flops else ()
        out.append(Gemm(result.target, k.backend, epilogue, after, _split_k(result, k), k.config))
    return out


def _split_k(result: g.GpuCompiled, kernel: g.Kernel) -> int:
    """The number of partial products when XLA split a product's contraction (split-K): the product kernel writes
    one more leading dimension than the kernel reading it, which reduces that dimension away. 1 when not split."""
    from .walk import fused_instructions, fusion_of

    insts = {i.name: i for i in result.module.instructions()}
    inst = insts.get(kernel.name)
    if inst is None or inst.shape.is_tuple or len(inst.shape.dims) < 3:
        return 1
    for k in result.kernels:
        reader = insts.get(k.name)
        if reader is None or kernel.name not in reader.operands:
            continue
        fusion = fusion_of(result.module, reader)
        inner = list(fused_instructions(result.module, fusion)) if fusion is not None else []
        if any(i.opcode == "reduce" for i in inner) and len(reader.shape.dims) == len(inst.shape.dims) - 1:
            return int(inst.shape.dims[0])
    return 1


def where(results: Iterable[g.GpuCompiled]) -> str:
    """One sentence on how a section's GPU modules were made: compiled on this machine's GPU (and which), or every
    one without a device, saying whether the machine has a GPU at all."""
    from xlalab import hw

    results = list(results)
    local = sorted({short(r.target) for r in results if on_device(r)})
    if local:
        return (f"This page was built on a machine with a {', '.join(local)}: that GPU's modules were compiled on "
                "the device by TensorFlow (autotuned), and its measured time stands beside its bound; every other "
                "GPU's were compiled without a device.")
    found = [] if hw.fake_gpu() else hw.gpus()
    how = ("every GPU module here was compiled ahead of time from TensorFlow's HLO, without a device and without "
           "autotuning, and every GPU time is a lower bound from the GPU's datasheet, not a measurement.")
    if found:
        return f"The machine that built this page has a GPU ({found[0]['name']}), but {how}"
    return f"The machine that built this page has no GPU: {how}"


def _num(value: float | None, scale: float, fmt: str) -> str:
    return "–" if value is None else format(value * scale, fmt)


def table(rows: Iterable[Row], targets: Sequence[str] | None = None) -> Any:
    """The rows as a Markdown table (:func:`xlalab.fmt.md_table`), programs in order of first appearance, each
    program's rows in the order of ``targets`` (XLA:CPU first); a "measured" column only where a device measured."""
    from xlalab.fmt import md_table

    rows = list(rows)
    programs = list(dict.fromkeys(r.program for r in rows))
    order = {t: i for i, t in enumerate([CPU, *(targets or [])])}
    rows.sort(key=lambda r: (programs.index(r.program), order.get(r.target, len(order))))
    measured = any(r.measured_s is not None for r in rows)
    header = ["program", "compiled for", "kernels", "kernels by backend", "MB read + written",
              "lower bound (µs, datasheet)", *(["measured (µs)"] if measured else []), "planned temporaries (KiB)"]
    body = []
    for r in rows:
        cells: list[Any] = [r.program, short(r.target) + ("" if r.how == "deviceless" else f" ({r.how})"),
                            r.kernels, r.backends_text(), f"{r.bytes / 1e6:.2f}", _num(r.lower_bound_s, 1e6, ".2f")]
        if measured:
            cells.append(_num(r.measured_s, 1e6, ".1f"))
        cells.append(_num(r.temp_bytes, 1 / 1024, ",.0f"))
        body.append(cells)
    return md_table(header, body)


def labels_markdown(results: Iterable[g.GpuCompiled]) -> Any:
    """Every target's :func:`label` as a Markdown list, to print under a table of GPU figures."""
    from xlalab.fmt import Markdown

    return Markdown("\n".join(f"- {text}" for text in labels(results)))


def gemm_story(gemm: Gemm) -> str:
    """What the compiled module did with a product's epilogue, in words read from it (:func:`gemms`)."""
    if gemm.split_k > 1:
        return (f"XLA split the contraction into {gemm.split_k} partial products (split-K) that the "
                f"{gemm.backend} writes to memory; the next kernel sums them and applies the rest "
                f"({', '.join(op for op in gemm.after if op != 'reduce') or 'nothing'})")
    if gemm.epilogue:
        return f"the {gemm.backend} applies {', '.join(gemm.epilogue)} to the product before writing it"
    after = f"; the next kernel applies {', '.join(gemm.after)}" if gemm.after else ""
    return f"the {gemm.backend} writes the bare product{after}"


#: XLA:GPU's pipelines by stage, in the order the compiler runs them (matched on the pipeline's name, first match).
STAGES = (("sharding (SPMD)", ("spmd", "sharding", "host-compute")),
          ("simplification", ("optimization", "simplif", "canonicaliz", "collective-opt", "dynamic-slice")),
          ("layout", ("layout",)),
          ("normalization for the GPU", ("nvptx", "normalization", "float_normalization", "post-layout")),
          ("fusion", ("fusion",)),
          ("autotuning", ("autotun",)),
          ("scheduling and memory", ("schedul", "copy-insertion", "remat", "async", "collective-schedule")),
          ("emitter preparation", ("dispatch", "wrapper", "sanitize", "metadata")))


def stage_of(pipeline: str) -> str:
    """The stage of one XLA:GPU pipeline (:data:`STAGES`), ``"other"`` when none matches."""
    low = pipeline.lower()
    if low.startswith("post-fusion") or low.startswith("pre-fusion"):
        return "fusion"
    for stage, keys in STAGES:
        if any(k in low for k in keys):
            return stage
    return "other"


def pipeline_stages(frames: Any) -> list[dict[str, Any]]:
    """The passes of a GPU :func:`xlalab.hlo.passes` run grouped by stage, in the order they first ran: ``stage``,
    ``pipelines`` (names), ``passes`` (how many ran), ``frames`` (how many changed the module, drawn in the
    flipbook)."""
    out: dict[str, dict[str, Any]] = {}
    for run in frames.passes_run:
        row = out.setdefault(stage_of(run.pipeline), {"pipelines": [], "passes": 0, "frames": 0})
        if run.pipeline not in row["pipelines"]:
            row["pipelines"].append(run.pipeline)
        row["passes"] += 1
    for frame in list(frames)[1:]:
        row = out.setdefault(stage_of(frame.pipeline), {"pipelines": [frame.pipeline], "passes": 0, "frames": 0})
        row["frames"] += 1
    return [{"stage": stage, **row} for stage, row in out.items()]


def command_buffers(result: g.GpuCompiled) -> int:
    """How many command-buffer computations the compiled module calls (XLA:GPU's ``CommandBufferScheduling``
    outlines runs of kernels into computations recorded as CUDA graphs); 0 when the module shows none."""
    called = {c for i in result.module.entry for c in i.called if i.opcode == "call"}
    return sum(1 for c in called if "command_buffer" in c)


def dominant(result: g.GpuCompiled, n: int = 5) -> list[dict[str, Any]]:
    """The ``n`` kernels with the largest lower bounds, largest first: ``name``, ``backend``, ``ops`` (what is fused
    inside, or the call's configuration), ``bound_s`` and ``share`` of the module's summed bound."""
    total = sum(k.lower_bound_s for k in result.kernels) or 1.0
    top = sorted(result.kernels, key=lambda k: -k.lower_bound_s)[:n]
    return [{"name": k.name, "backend": k.backend,
             "ops": ", ".join(sorted(fused_ops(result, k))) or k.config or k.opcode,
             "bound_s": k.lower_bound_s, "share": k.lower_bound_s / total} for k in top]


def bound_by_backend(result: g.GpuCompiled) -> list[dict[str, Any]]:
    """Kernels, summed lower bound and share of the module's bound per backend, largest share first."""
    total = sum(k.lower_bound_s for k in result.kernels) or 1.0
    out: dict[str, dict[str, Any]] = {}
    for k in result.kernels:
        row = out.setdefault(k.backend, {"backend": k.backend, "kernels": 0, "bound_s": 0.0})
        row["kernels"] += 1
        row["bound_s"] += k.lower_bound_s
    rows = sorted(out.values(), key=lambda r: -r["bound_s"])
    return [{**r, "share": r["bound_s"] / total} for r in rows]


def recorded_cpu_row(program: str, record: Mapping[str, Any], source: str) -> Row:
    """An XLA:CPU row from a results file's record (:mod:`xlalab.suite`; mode ``xla``): the kernels and fusions its
    optimized module had, the bytes they move, its FLOPs, and its measured median time; ``source`` names the file
    and machine (``how``)."""
    h = record.get("hlo") or {}
    kernels = int(h.get("kernels", record.get("kernels", 0)) or 0)
    fusions = int(h.get("fusions", record.get("fusions", 0)) or 0)
    backends = {k: v for k, v in (("fusions", fusions), ("other kernels", kernels - fusions)) if v}
    median_ms = record.get("median_ms")
    return Row(program, CPU, kernels, backends, int(h.get("bytes_moved", 0) or 0), int(record.get("flops") or 0),
               None, None, source, None if median_ms is None else float(median_ms) / 1e3)


def compile_hlos(hlos: Mapping[str, str], targets: Iterable[str], *, xla_flags: Sequence[str] = (),
                 timeout: float = g.DEFAULT_TIMEOUT_S) -> dict[str, dict[str, g.GpuCompiled]]:
    """HLO texts taken by the caller (e.g. under a TensorFlow setting that must hold while lowering) compiled for
    every target in ONE subprocess, always without a device: ``{program: {target: GpuCompiled}}``."""
    names = [g.target(t).name for t in targets]
    per = g.compile_jobs([{"hlo": h} for h in hlos.values()], names, xla_flags=xla_flags, timeout=timeout)
    return {p: {t: per[t][i] for t in names} for i, p in enumerate(hlos)}


def _dot_precision(result: g.GpuCompiled, kernel: g.Kernel) -> str:
    """``"highest"`` when a product inside ``kernel`` asks for full float32 precision (TensorFlow with TF32 off
    writes ``operand_precision={highest,highest}``), else ``"default"``."""
    from .walk import fused_instructions, fusion_of

    inst = next((i for i in result.module.instructions() if i.name == kernel.name), None)
    fusion = fusion_of(result.module, inst) if inst is not None else None
    inner = list(fused_instructions(result.module, fusion)) if fusion is not None else [inst] if inst else []
    for d in inner:
        if d is not None and d.opcode in ("dot", "convolution", "custom-call"):
            text = d.attrs.get("operand_precision", "") + d.attrs.get("precision_config", "")
            if "highest" in text.lower():
                return "highest"
    return "default"


def products(result: g.GpuCompiled) -> list[dict[str, Any]]:
    """Each product kernel: ``backend``, operand ``dtype``, ``precision`` (``"highest"``/``"default"``), ``rate``
    (the datasheet row it runs at best: ``fp16``, ``bf16``, ``tf32`` or ``fp32``; float32 at ``highest`` is
    ``fp32``), ``tflops`` (that rate), ``flops`` and ``bound_s`` (bytes or FLOPs at that rate, whichever is
    slower). A bf16 or f16 product on a GPU without that rate in its datasheet row falls back to ``fp32``."""
    from xlalab.hw import GPU_PEAKS

    peaks = GPU_PEAKS[result.target]
    out = []
    for k in result.kernels:
        if not k.flops:
            continue
        precision = _dot_precision(result, k)
        rate = {"f16": "fp16", "bf16": "bf16"}.get(k.dtype, "fp32")
        if k.dtype == "f32" and precision == "default" and "tf32" in peaks.tflops:
            rate = "tf32"
        if rate not in peaks.tflops:
            rate = "fp32"
        bound = max((k.bytes or 0) / peaks.bandwidth, k.flops / peaks.peak_flops(rate))
        out.append({"name": k.name, "backend": k.backend, "dtype": k.dtype, "precision": precision, "rate": rate,
                    "tflops": peaks.tflops[rate], "flops": k.flops, "bound_s": bound})
    return out


def converts(result: g.GpuCompiled) -> int:
    """How many ``convert`` instructions the compiled module holds (inside fusions too)."""
    return sum(1 for i in result.module.instructions() if i.opcode == "convert")


CENSUS = "census: "


def census_programs() -> dict[str, Program]:
    """The five functions of the fusion chapter's version table (:mod:`xlalab.hlo.census`, its fixed shapes), named
    ``"census: <function>"`` so that they can share one :func:`compile_programs` call with a section's own."""
    from . import census

    return {CENSUS + name: (fn, list(args)) for name, (fn, args) in census._cases().items()}


def census_table(compiled: Mapping[str, Mapping[str, g.GpuCompiled]]) -> Any:
    """The version table's GPU columns: one row per census function, one column per target, each cell
    ``kernels (fusions)`` as the census counts them (a fusion: a kernel whose backend is a fusion of any kind)."""
    from xlalab.fmt import md_table

    names = [p for p in compiled if p.startswith(CENSUS)]
    targets = list(compiled[names[0]]) if names else []

    def cell(r: g.GpuCompiled) -> str:
        return f"{len(r.kernels)} ({sum(1 for k in r.kernels if 'fusion' in k.backend)})"

    def head(r: g.GpuCompiled) -> str:
        how = (f"TensorFlow {r.versions.get('tensorflow', '?')} on this GPU" if on_device(r)
               else f"jaxlib {r.versions.get('jaxlib', '?')}")
        return f"XLA:GPU {short(r.target)}, {how}"

    header = ["function", *(head(compiled[names[0]][t]) for t in targets)]
    return md_table(header, [[p[len(CENSUS):], *(cell(compiled[p][t]) for t in targets)] for p in names])


__all__ = ["bound_by_backend", "BOUNDS", "CENSUS", "census_programs", "census_table", "command_buffers",
           "compile_hlos", "compile_programs", "converts", "CPU", "cpu_hlo", "cpu_row", "DEFAULT_TARGETS",
           "dominant", "fused_ops", "Gemm", "gemm_story", "gemms", "gpu_row", "label", "labels", "labels_markdown",
           "NOT_RUN", "on_device", "pipeline_stages", "products", "Program", "recorded_cpu_row", "Row",
           "section_targets", "short", "SHORT", "stage_of", "STAGES", "table", "where"]
