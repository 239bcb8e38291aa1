"""XLA:GPU on a machine without a GPU: compile HLO ahead of time for a T4, an A100, an H100 or a B200.

JAX's CUDA plugin holds XLA's GPU compiler; given a target configuration (``GpuTargetConfigProto`` text, shipped
in ``xlalab/hlo/gpu_targets/``, one per :data:`xlalab.hw.GPU_PEAKS` key) it compiles with no GPU and no driver,
and ``ptxas`` from nvcc's wheel turns the kernels into machine code. :func:`compile_hlo` takes HLO text (from
TensorFlow: :func:`tf_hlo`, computed in the caller's process) and runs the compiler in a subprocess that imports
JAX and never TensorFlow; the environment is set in one place (:func:`worker_env`). The answer, per target, is
a :class:`GpuCompiled`: the optimized module parsed by :func:`xlalab.hlo.parse`, its kernels with their backend
(Triton GEMM fusion, cuBLAS/cuBLASLt call, cuDNN, loop/input fusion, copy), bytes and matrix FLOPs, a roofline
lower bound per kernel on the target's datasheet row, the memory the executable plans, and the compiler's and
ptxas's versions.

What it cannot tell: no GPU means no autotuning (XLA keeps each GEMM's default configuration, where a real GPU
would time candidates and may pick others), and no time is measured: the only time it gives is a lower bound
from the datasheet (bytes over bandwidth, FLOPs over peak), named as such.

Needs the ``gpu-compile`` extra (``pip install 'xlalab[gpu-compile]'``, included in ``.[dev]``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .launches import summary
from .matrix import matrix_ops
from .parser import Module, parse

EXTRA = "gpu-compile"
TARGETS_DIR = Path(__file__).resolve().parent / "gpu_targets"
WORKER = Path(__file__).resolve().parent / "_gpu_worker.py"
AUTOTUNING = "not run: default configurations (no GPU to time candidates on)"
DEFAULT_TIMEOUT_S = 600.0
# Modules the worker imports, with the distribution that brings each (what a missing one is reported as).
REQUIRED = {"jax": "jax", "jaxlib": "jaxlib", "jax_plugins.xla_cuda12": "jax-cuda12-plugin",
            "nvidia.cuda_nvcc": "nvidia-cuda-nvcc-cu12"}


class GpuCompileError(RuntimeError):
    """The deviceless GPU compile could not give an answer; the message says why."""


class GpuCompileMissing(GpuCompileError):
    """A package of the ``gpu-compile`` extra is not installed."""


class UnknownTarget(GpuCompileError, ValueError):
    """A target name with no configuration in ``xlalab/hlo/gpu_targets``."""


class GpuCompileFailed(GpuCompileError):
    """XLA refused the program or the target (its message is included)."""


class GpuCompileTimeout(GpuCompileError):
    """The compiler's subprocess ran past its timeout and was killed."""


# ---------------------------------------------------------------------------------------------
# Targets.

@dataclass(frozen=True)
class Target:
    """One shipped GPU target: its :data:`xlalab.hw.GPU_PEAKS` key, the configuration file and its source."""

    name: str
    path: Path
    source: str
    compute_capability: tuple[int, int]

    @property
    def config_text(self) -> str:
        return self.path.read_text()

    @property
    def device_name(self) -> str:
        m = re.search(r'^device_description_str:\s*"([^"]*)"', self.config_text, re.M)
        return m.group(1) if m else self.name


def _read_target(path: Path) -> Target:
    text = path.read_text()
    source = re.search(r"^# Source: (.*)$", text, re.M)
    major = re.search(r"cuda_compute_capability \{[^}]*?major: (\d+)", text, re.S)
    minor = re.search(r"cuda_compute_capability \{[^}]*?minor: (\d+)", text, re.S)
    return Target(path.stem, path, source.group(1) if source else "not stated",
                  (int(major.group(1)) if major else 0, int(minor.group(1)) if minor else 0))


@cache
def targets() -> dict[str, Target]:
    """Every shipped target by name (its ``GPU_PEAKS`` key)."""
    return {p.stem: _read_target(p) for p in sorted(TARGETS_DIR.glob("*.txtpb"))}


def target(name: str) -> Target:
    """The shipped target ``name`` (a ``GPU_PEAKS`` key such as ``"H100-SXM"``; case and ``_`` forgiven)."""
    table = targets()
    key = {k.upper().replace("_", "-"): k for k in table}.get(name.upper().replace("_", "-"))
    if key is None:
        raise UnknownTarget(f"no GPU target {name!r}; shipped: {', '.join(table)} (xlalab/hlo/gpu_targets/)")
    return table[key]


# ---------------------------------------------------------------------------------------------
# Results.

@dataclass(frozen=True)
class Kernel:
    """One launch of the compiled module.

    Attributes:
        name: the launching instruction; backend: what runs it (``"Triton GEMM fusion"``, ``"cuBLASLt call"``,
        ``"cuBLAS call"``, ``"cuDNN call"``, ``"cuDNN fusion"``, ``"Triton fusion"``, ``"loop fusion"``,
        ``"input fusion"`` (a reduction), ``"custom fusion"``, ``"copy"``, or the opcode); bytes: what it must
        read and write (:func:`xlalab.hlo.kernel_bytes`; ``None`` if unknown); flops: its matrix-product and
        convolution FLOPs (:func:`xlalab.hlo.matrix_ops`; elementwise arithmetic is not counted); dtype: the
        operand type of its product (``""`` without one); lower_bound_s: the roofline lower bound on the
        target's datasheet, ``max(bytes / bandwidth, flops / peak)``: no kernel can run faster, and real ones
        run slower; config: the library or tiling configuration XLA chose (a Triton GEMM's output tile, warps and
        stages; a cuBLAS call's algorithm and fused epilogue): without a GPU, XLA's default, not an autotuned one.
    """

    name: str
    backend: str
    opcode: str
    bytes: int | None
    flops: int
    dtype: str
    lower_bound_s: float
    config: str = ""


@dataclass
class GpuCompiled:
    """What XLA:GPU made of one program for one target, compiled without a GPU.

    Attributes:
        target: the target's name (its ``GPU_PEAKS`` key); device: the device name in its configuration.
        text: the optimized, scheduled HLO module; module: it parsed (:class:`xlalab.hlo.Module`).
        kernels: one :class:`Kernel` per launch, in schedule order.
        memory: what the executable plans (bytes): ``argument``, ``output``, ``alias``, ``temp``,
            ``generated_code``, read from the compiled executable's memory statistics.
        versions: ``jax``, ``jaxlib``, ``jaxlib_commit``, ``cuda_plugin``, ``ptxas``.
        autotuning: always :data:`AUTOTUNING`; xla_flags: the ``XLA_FLAGS`` it ran with.
        compile_seconds: the compile's wall time in the subprocess (not the program's run time).
        roof: the datasheet row the lower bounds use (its source).
    """

    target: str
    device: str
    text: str
    module: Module
    kernels: list[Kernel]
    memory: dict[str, int]
    versions: dict[str, str]
    autotuning: str = AUTOTUNING
    xla_flags: str = ""
    compile_seconds: float = 0.0
    roof: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def compiler(self) -> str:
        """The compiler in words: ``"XLA:GPU from jaxlib 0.10.2 (CUDA plugin 0.10.2), ptxas 12.9"``."""
        v = self.versions
        if "tensorflow" in v:
            return f"XLA:GPU in TensorFlow {v['tensorflow']}, on this machine's GPU"
        return (f"XLA:GPU from jaxlib {v.get('jaxlib', '?')} (CUDA plugin {v.get('cuda_plugin', '?')}), "
                f"ptxas {v.get('ptxas', '?')}")

    def backends(self) -> dict[str, int]:
        """Kernels per backend."""
        out: dict[str, int] = {}
        for k in self.kernels:
            out[k.backend] = out.get(k.backend, 0) + 1
        return out

    def totals(self) -> dict[str, Any]:
        """Kernels, bytes, FLOPs, temporaries and the summed lower bound (``lower_bound_s``: not a measurement)."""
        return {"kernels": len(self.kernels), "bytes": sum(k.bytes or 0 for k in self.kernels),
                "bytes_unknown": sum(1 for k in self.kernels if k.bytes is None),
                "flops": sum(k.flops for k in self.kernels), "temp_bytes": self.memory.get("temp"),
                "lower_bound_s": sum(k.lower_bound_s for k in self.kernels)}

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON (the module as text, not parsed)."""
        return {"target": self.target, "device": self.device, "compiler": self.compiler, "versions": self.versions,
                "autotuning": self.autotuning, "xla_flags": self.xla_flags, "roof": self.roof,
                "compile_seconds": self.compile_seconds, "memory": self.memory, "totals": self.totals(),
                "backends": self.backends(), "kernels": [asdict(k) for k in self.kernels], "text": self.text}


# ---------------------------------------------------------------------------------------------
# Kernels, backends, bounds.

_CALL_BACKENDS = (("__cublas$lt$matmul", "cuBLASLt call"), ("__cublas$gemm", "cuBLAS call"),
                  ("__cudnn$", "cuDNN call"))


def _backend(module: Module, entry: dict[str, Any]) -> str:
    kind, backend_kind, opcode = entry.get("kind") or "", entry.get("backend_kind") or "", entry["opcode"]
    if opcode == "fusion" or kind:
        if "triton" in backend_kind and "gemm" in backend_kind:
            return "Triton GEMM fusion"
        if "triton" in backend_kind:
            return "Triton fusion"
        if "cudnn" in backend_kind:
            return "cuDNN fusion"
        return {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion"}.get(
            kind, "custom fusion" if kind == "kCustom" else "fusion")
    if opcode in ("custom-call", "custom-call-start"):
        comp = module.computations.get(entry["computation"])
        inst = next((i for i in comp if i.name == entry["name"]), None) if comp is not None else None
        call_target = inst.custom_call_target if inst is not None else ""
        for prefix, name in _CALL_BACKENDS:
            if call_target.startswith(prefix):
                return name
        return f"custom call {call_target}" if call_target else "custom call"
    return opcode


def _config(inst: Any) -> str:
    """A launch's chosen configuration in words: Triton tile, warps, stages; cuBLAS algorithm and epilogue."""
    cfg = inst.backend_config if inst is not None and isinstance(inst.backend_config, dict) else {}
    gemm = cfg.get("gemm_backend_config")
    if isinstance(gemm, dict):
        epilogue = gemm.get("epilogue", "DEFAULT")
        return f"algorithm {gemm.get('selected_algorithm', '?')}" + (
            f", epilogue {epilogue}" if epilogue not in ("DEFAULT", "", None) else "")
    block = (cfg.get("fusion_backend_config") or {}).get("block_level_fusion_config")
    if isinstance(block, dict):
        tiles = ["x".join(t.get("sizes", [])) for t in block.get("output_tiles", [])]
        return (f"tile {', '.join(tiles)}, {block.get('num_warps', '?')} warps, "
                f"{block.get('num_stages', '?')} stages")
    return ""


def _peak_key(dtype: str, tflops: dict[str, float]) -> str:
    """The datasheet rate a product of ``dtype`` can at best run at (the faster where two apply)."""
    if dtype == "f16":
        return "fp16"
    if dtype == "bf16":
        return "bf16"
    if dtype == "f32" and "tf32" in tflops:
        return "tf32"
    return "fp32"


def kernels_of(module: Module, peaks: Any) -> list[Kernel]:
    """The launches of ``module`` with backend, bytes, matrix FLOPs and a lower bound on ``peaks``
    (a :class:`xlalab.hw.DevicePeaks`)."""
    flops: dict[str, int] = {}
    dtypes: dict[str, str] = {}
    for op in matrix_ops(module):
        flops[op.name] = flops.get(op.name, 0) + op.flops
        dtypes.setdefault(op.name, op.lhs.dtype)
    out = []
    for entry in summary(module)["kernel_list"]:
        name, nbytes = entry["name"], entry["bytes"]
        f, dtype = flops.get(name, 0), dtypes.get(name, "")
        bound = (nbytes or 0) / peaks.bandwidth
        if f:
            bound = max(bound, f / peaks.peak_flops(_peak_key(dtype, peaks.tflops)))
        comp = module.computations.get(entry["computation"])
        inst = next((i for i in comp if i.name == name), None) if comp is not None else None
        out.append(Kernel(name, _backend(module, entry), entry["opcode"], nbytes, f, dtype, bound, _config(inst)))
    return out


# ---------------------------------------------------------------------------------------------
# The subprocess.

def missing_packages() -> list[str]:
    """The distributions of the ``gpu-compile`` extra whose modules cannot be found here."""
    out = []
    for module_name, dist in REQUIRED.items():
        try:
            found = importlib.util.find_spec(module_name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(dist)
    return out


def worker_env(xla_flags: Sequence[str] = (), vmodule: str = "") -> dict[str, str]:
    """The compiler subprocess's environment: the one place it is set.

    ``JAX_PLATFORMS=cpu`` keeps the CUDA plugin from calling ``cuInit`` (no driver here) while its compile-only
    topology stays available; ``XLA_FLAGS`` is exactly ``xla_flags`` (the caller's own is not inherited);
    XLA's informational logging is quietened, unless ``vmodule`` asks for some modules' log (``TF_CPP_VMODULE``).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_", "TF_"))}
    env.update({"JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(xla_flags), "TF_CPP_MIN_LOG_LEVEL": "2",
                "JAX_ENABLE_COMPILATION_CACHE": "false"})
    if vmodule:
        env.update({"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": vmodule})
    return env


def _run_worker(request: dict[str, Any], xla_flags: Sequence[str], timeout: float,
                vmodule: str = "") -> tuple[dict[str, Any], str]:
    """Run the worker on ``request``: its result and its stderr (XLA's log)."""
    missing = missing_packages()
    if missing:
        raise GpuCompileMissing(f"compiling for a GPU without one needs the {EXTRA!r} extra: "
                                f"pip install 'xlalab[{EXTRA}]' (missing: {', '.join(missing)})")
    with tempfile.TemporaryDirectory(prefix="xlalab-gpu-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        try:
            proc = subprocess.run([sys.executable, "-I", str(WORKER), str(req), str(res)],
                                  env=worker_env(xla_flags, vmodule), cwd=tmp, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise GpuCompileTimeout(f"the XLA:GPU compile ran past its timeout of {timeout:g} s and was killed "
                                    "(raise timeout=, or compile fewer targets at once)") from None
        if proc.returncode != 0 or not res.exists():
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise GpuCompileFailed(f"the XLA:GPU compiler's process exited with status {proc.returncode}:\n{tail}")
        result: dict[str, Any] = json.loads(res.read_text())
    if result.get("error"):
        raise GpuCompileFailed(result["error"])
    return result, proc.stderr


def _build(name: str, answer: dict[str, Any], result: dict[str, Any]) -> GpuCompiled:
    from xlalab.hw import GPU_PEAKS

    if "error" in answer:
        raise GpuCompileFailed(f"XLA:GPU could not compile for {name}: {answer['error']}")
    module = parse(answer["text"])
    peaks = GPU_PEAKS[name]
    return GpuCompiled(target=name, device=target(name).device_name, text=answer["text"], module=module,
                       kernels=kernels_of(module, peaks), memory=answer["memory"], versions=result["versions"],
                       xla_flags=result.get("xla_flags", ""), compile_seconds=answer.get("compile_seconds", 0.0),
                       roof=f"{peaks.name}: {peaks.bandwidth_gbps:g} GB/s, "
                       + ", ".join(f"{k} {v:g}" for k, v in peaks.tflops.items())
                       + f" TFLOP/s; f32 products at the TF32 rate where there is one ({peaks.source})")


def compile_jobs(jobs: Sequence[dict[str, Any]], targets_: Iterable[str], *, xla_flags: Sequence[str] = (),
                 timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, list[GpuCompiled]]:
    """Compile every job for every target in one subprocess: ``{target: [GpuCompiled per job]}``.

    A job is ``{"hlo": text}`` or ``{"jax": "module:function", "args": [[shape, dtype], ...], "path": [folder]}``
    (a JAX function, compiled with JAX's public API in the same subprocess, e.g. to compare with TensorFlow's HLO).
    Raises :class:`UnknownTarget`, :class:`GpuCompileMissing`, :class:`GpuCompileTimeout` or
    :class:`GpuCompileFailed` (with XLA's message).
    """
    chosen = [target(t) for t in targets_]
    if not chosen:
        raise UnknownTarget(f"no target given; shipped: {', '.join(targets())}")
    request = {"targets": {t.name: t.config_text for t in chosen}, "jobs": list(jobs)}
    result, _ = _run_worker(request, xla_flags, timeout)
    out: dict[str, list[GpuCompiled]] = {}
    for t in chosen:
        answer = result["targets"].get(t.name, {"error": "no answer"})
        if "error" in answer:
            raise GpuCompileFailed(f"XLA:GPU could not set up target {t.name}: {answer['error']}")
        out[t.name] = [_build(t.name, job, result) for job in answer["jobs"]]
    return out


def compile_hlo(hlo: str, targets_: str | Iterable[str], *, xla_flags: Sequence[str] = (),
                timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, GpuCompiled]:
    """Compile HLO text for each target with XLA:GPU, without a GPU: ``{target: GpuCompiled}``.

    Args:
        hlo: unoptimized HLO text (:func:`tf_hlo`, or ``experimental_get_compiler_ir(...)(stage="hlo")``).
        targets_: one name or several (``GPU_PEAKS`` keys with a shipped configuration: :func:`targets`).
        xla_flags: XLA flags for the compile, e.g. ``["--xla_gpu_enable_triton_gemm=false"]``.
        timeout: seconds before the subprocess is killed (:class:`GpuCompileTimeout`).
    """
    names = [targets_] if isinstance(targets_, str) else list(targets_)
    per = compile_jobs([{"hlo": hlo}], names, xla_flags=xla_flags, timeout=timeout)
    return {name: results[0] for name, results in per.items()}


def compile_with_dump(hlo: str, target_name: str, directory: str | os.PathLike, *, vmodule: str = "",
                      xla_flags: Sequence[str] = (), timeout: float = DEFAULT_TIMEOUT_S) -> tuple[GpuCompiled, str]:
    """Compile ``hlo`` for one target with XLA writing the module after every pass that changed it into
    ``directory`` (``--xla_dump_to``, ``--xla_dump_hlo_pass_re=.*``; XLA:GPU's priority fusion adds its decisions
    file); returns the result and the compiler's log (its stderr, with ``vmodule``'s logging on)."""
    t = target(target_name)
    flags = [*xla_flags, f"--xla_dump_to={Path(directory)}", "--xla_dump_hlo_pass_re=.*"]
    result, log = _run_worker({"targets": {t.name: t.config_text}, "jobs": [{"hlo": hlo}]}, flags, timeout, vmodule)
    answer = result["targets"].get(t.name, {"error": "no answer"})
    if "error" in answer:
        raise GpuCompileFailed(f"XLA:GPU could not set up target {t.name}: {answer['error']}")
    return _build(t.name, answer["jobs"][0], result), log


def as_jit(fn: Callable) -> Any:
    """Return ``fn`` as a ``tf.function(jit_compile=True)``; a plain or non-jit function is wrapped."""
    import tensorflow as tf

    if getattr(fn, "_jit_compile", None) is True and hasattr(fn, "experimental_get_compiler_ir"):
        return fn
    python_fn = getattr(fn, "python_function", fn)
    return tf.function(python_fn, jit_compile=True)


def tf_hlo(fn: Callable, *args: Any) -> str:
    """TensorFlow's HLO of ``fn(*args)`` before XLA's passes, computed in this (TensorFlow's) process."""
    return as_jit(fn).experimental_get_compiler_ir(*args)(stage="hlo")


ON_DEVICE = "run on this machine's GPU by TensorFlow (autotuned)"


def local_gpu_target() -> str | None:
    """The ``GPU_PEAKS`` key of the GPU TensorFlow sees on this machine (the first), else ``None``.

    ``XLALAB_FAKE_GPU`` names no device here: a faked GPU is still compiled without a GPU.
    """
    from xlalab import hw

    if hw.fake_gpu():
        return None
    found = hw.gpus()
    return hw.gpu_key(found[0]["name"]) if found else None


def _on_device(fn: Callable, args: Sequence[Any], name: str) -> GpuCompiled:
    """``fn(*args)`` compiled by TensorFlow on this machine's GPU, autotuned: its optimized module."""
    import tensorflow as tf

    from xlalab.hw import GPU_PEAKS

    text = as_jit(fn).experimental_get_compiler_ir(*args)(stage="optimized_hlo")   # TensorFlow's own, never faked
    module = parse(text)
    peaks = GPU_PEAKS[name]
    return GpuCompiled(target=name, device=name, text=text, module=module, kernels=kernels_of(module, peaks),
                       memory={}, versions={"tensorflow": tf.__version__}, autotuning=ON_DEVICE,
                       roof=f"{peaks.name}: {peaks.bandwidth_gbps:g} GB/s ({peaks.source})",
                       extra={"memory": "not read: TensorFlow's API does not give the executable's memory statistics"})


def compile_tf(fn: Callable, *args: Any, targets: str | Iterable[str], xla_flags: Sequence[str] = (),
               timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, GpuCompiled]:
    """Compile a TensorFlow function on ``args`` for each target (:func:`tf_hlo`, then :func:`compile_hlo`).

    A target that is the GPU TensorFlow sees here (:func:`local_gpu_target`, without ``xla_flags``) is compiled by
    TensorFlow on that GPU instead, autotuned; its ``autotuning`` says so (:data:`ON_DEVICE`) and its ``memory``
    is empty (not read).
    """
    names = [target(t).name for t in ([targets] if isinstance(targets, str) else targets)]
    local = local_gpu_target() if not xla_flags else None
    out = {n: _on_device(fn, args, n) for n in names if n == local}
    rest = [n for n in names if n not in out]
    if rest:
        out.update(compile_hlo(tf_hlo(fn, *args), rest, xla_flags=xla_flags, timeout=timeout))
    return {n: out[n] for n in names}


def private_api_check(timeout: float = 300.0) -> list[str]:
    """The jaxlib functions (not public API) the compile calls that this jaxlib lacks, asked in a subprocess;
    each entry names the jaxlib version."""
    missing = missing_packages()
    if missing:
        raise GpuCompileMissing(f"needs the {EXTRA!r} extra (missing: {', '.join(missing)})")
    code = ("import importlib.util, json, sys; spec = importlib.util.spec_from_file_location('w', sys.argv[1]); "
            "w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w); import jaxlib; "
            "print(json.dumps([f'jaxlib {jaxlib.__version__}: ' + m for m in w.private_api_problems()]))")
    proc = subprocess.run([sys.executable, "-I", "-c", code, str(WORKER)], env=worker_env(),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise GpuCompileFailed(proc.stderr.strip()[-2000:])
    problems: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return problems


# ---------------------------------------------------------------------------------------------
# Reports and the command.

def _flops_text(n: int) -> str:
    if not n:
        return "0"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} FLOP"


def header(result: GpuCompiled) -> str:
    """The lines that say where every figure of ``result`` comes from: compiler, target, autotuning, roof."""
    flags = f"; XLA_FLAGS: {result.xla_flags}" if result.xla_flags else ""
    how = "compiled by" if result.autotuning == ON_DEVICE else "compiled without a GPU by"
    return (f"XLA:GPU for {result.target} ({result.device}), {how} {result.compiler}{flags}\n"
            f"autotuning: {result.autotuning}; no time here is a measurement\n"
            f"roof for the lower bounds: {result.roof}")


def report(result: GpuCompiled, *, with_hlo: bool = False) -> str:
    """The kernel table of one compile (backend, bytes, FLOPs, lower bound) and its totals, as text."""
    from xlalab.fmt import byte_size, duration

    rows = [("#", "kernel", "backend", "bytes", "FLOPs", "lower bound", "configuration")]
    for i, k in enumerate(result.kernels, 1):
        rows.append((str(i), k.name, k.backend, byte_size(k.bytes), _flops_text(k.flops), duration(k.lower_bound_s),
                     k.config))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [header(result), ""]
    for r in rows:
        lines.append("  ".join(r[c].rjust(widths[c]) if c in (0, 3, 4, 5) else r[c].ljust(widths[c])
                               for c in range(len(r))).rstrip())
    t, m = result.totals(), result.memory
    plural = "" if t["kernels"] == 1 else "s"
    lines += ["", f"totals: {t['kernels']} kernel{plural}, {byte_size(t['bytes'])} read and written, "
              f"{_flops_text(t['flops'])} in products; planned memory: arguments {byte_size(m.get('argument'))}, "
              f"outputs {byte_size(m.get('output'))}, temporaries {byte_size(m.get('temp'))}, aliased "
              f"{byte_size(m.get('alias'))}",
              f"lower-bound time (sum of the kernels' datasheet roofline bounds, not a measurement): "
              f"{duration(t['lower_bound_s'])}"]
    if any(k.config for k in result.kernels) and result.autotuning == AUTOTUNING:
        lines.append("configurations: XLA's defaults (no GPU to autotune on); a real GPU may choose others")
    if with_hlo:
        lines += ["", result.text]
    return "\n".join(lines)


def _parse_arg(spec: str) -> Any:
    import tensorflow as tf

    shape_text, _, dtype = spec.partition(":")
    dims = [int(d) for d in shape_text.replace("x", ",").split(",") if d.strip()]
    return tf.TensorSpec(dims, tf.dtypes.as_dtype(dtype or "float32"))


def program_hlo(program: str, arg_specs: Sequence[str] = ()) -> tuple[str, str]:
    """``(name, HLO text)`` of an HLO file, or of ``module:function`` (a TensorFlow function) on its
    ``input_signature`` or on ``arg_specs`` (``"256,512"``, ``"8,128:bfloat16"``)."""
    path = Path(program)
    if path.is_file():
        return path.name, path.read_text()
    module_name, sep, name = program.partition(":")
    if not sep or not name:
        raise GpuCompileError(f"{program!r} is neither an HLO file nor module:function")
    import importlib

    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    fn = getattr(importlib.import_module(module_name), name)
    if arg_specs:
        args = [_parse_arg(a) for a in arg_specs]
    else:
        signature = getattr(fn, "input_signature", None)
        if not signature:
            raise GpuCompileError(f"{program}: give the argument shapes with --arg (it has no input_signature)")
        args = list(signature)
    return program, tf_hlo(fn, *args)


def run(opts: Any) -> int:
    """``xlalab gpu-compile``: print each target's kernel table (or JSON); 1 with a clear message on failure."""
    try:
        name, hlo = program_hlo(opts.program, opts.arg)
        results = compile_hlo(hlo, opts.target, xla_flags=opts.xla_flag, timeout=opts.timeout)
    except (GpuCompileError, ImportError, AttributeError, OSError) as err:
        print(f"xlalab gpu-compile: error: {err}", file=sys.stderr)
        return 1
    if opts.json:
        data = []
        for r in results.values():
            d = r.as_dict()
            if not opts.hlo:
                d.pop("text")
            data.append({"program": name, **d})
        print(json.dumps(data, indent=1))
        return 0
    print("\n\n".join(f"== {name} on {r.target}\n{report(r, with_hlo=opts.hlo)}" for r in results.values()))
    return 0


__all__ = ["AUTOTUNING", "EXTRA", "GpuCompileError", "GpuCompileFailed", "GpuCompileMissing", "GpuCompileTimeout",
           "GpuCompiled", "as_jit", "Kernel", "ON_DEVICE", "Target", "UnknownTarget", "compile_hlo", "compile_jobs",
           "compile_tf", "compile_with_dump", "header", "kernels_of", "local_gpu_target", "missing_packages",
           "private_api_check", "program_hlo", "report", "run", "target", "targets", "tf_hlo", "worker_env"]
