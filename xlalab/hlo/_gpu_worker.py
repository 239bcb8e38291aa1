"""The subprocess of :mod:`xlalab.hlo.gpu_compile`: XLA:GPU compiles HLO for a target, with no GPU attached.

Run as ``python _gpu_worker.py REQUEST.json RESULT.json`` by :func:`xlalab.hlo.gpu_compile.compile_hlo`, which sets
its environment (``JAX_PLATFORMS=cpu``, ``XLA_FLAGS``). It imports JAX only, never TensorFlow nor ``xlalab``, so
that it runs as a plain script. The request names the target configurations (``GpuTargetConfigProto`` text) and
the jobs: HLO text (``{"hlo": text}``) or a JAX function (``{"jax": "module:function", "args": [[shape, dtype],
...], "path": [folders]}``). The result holds, per target and job, the optimized module's text, the memory the
executable plans, or XLA's error. The calls into jaxlib that are not public API are all in
:func:`compile_hlo_text`; :func:`private_api_problems` says which of them this jaxlib lacks.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# What compile_hlo_text reaches for, as (module, attribute path) pairs.
PRIVATE_API = (
    ("jaxlib._hlo", "hlo_module_from_text"),
    ("jaxlib._jax", "mlir.hlo_to_stablehlo"),
    ("jaxlib._jax", "CompileOnlyPyClient.compile"),
    ("jaxlib._jax", "Executable.hlo_modules"),
    ("jaxlib._jax", "Executable.get_compiled_memory_stats"),
    ("jax._src.compiler", "get_compile_options"),
    ("jax._src.interpreters.mlir", "make_ir_context"),
)


def private_api_problems() -> list[str]:
    """The entries of :data:`PRIVATE_API` this jaxlib lacks (empty when every one is there)."""
    missing = []
    for module_name, path in PRIVATE_API:
        try:
            obj: Any = importlib.import_module(module_name)
            for part in path.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            missing.append(f"{module_name}.{path}")
    return missing


def versions() -> dict[str, str]:
    """jax, jaxlib (and its commit), the CUDA plugin and ptxas versions, as installed."""
    from importlib import metadata

    from jaxlib import version as jaxlib_version

    out = {}
    for key, dist in (("jax", "jax"), ("jaxlib", "jaxlib"), ("cuda_plugin", "jax-cuda12-plugin"),
                      ("cuda_pjrt", "jax-cuda12-pjrt"), ("nvcc_wheel", "nvidia-cuda-nvcc-cu12")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = "not installed"
    out["jaxlib_commit"] = str(getattr(jaxlib_version, "_git_hash", "") or "")
    out["ptxas"] = ptxas_version()
    return out


def ptxas_path() -> Path | None:
    """The ``ptxas`` that XLA will use: nvcc's wheel's (where JAX looks first), else one on ``PATH``."""
    try:
        import nvidia.cuda_nvcc

        for root in nvidia.cuda_nvcc.__path__:
            candidate = Path(root) / "bin" / "ptxas"
            if candidate.exists():
                return candidate
    except ImportError:
        pass
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder and (Path(folder) / "ptxas").exists():
            return Path(folder) / "ptxas"
    return None


def ptxas_version() -> str:
    """``ptxas --version``'s release line (``"release 12.9, V12.9.86"``), or ``"not found"``."""
    path = ptxas_path()
    if path is None:
        return "not found"
    try:
        text = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return f"unknown ({err})"
    for line in text.splitlines():
        if "release" in line:
            return line.split("tools, ")[-1].strip()
    return text.strip().splitlines()[-1] if text.strip() else "unknown"


def topology_device(config_text: str) -> Any:
    """A compile-only CUDA device for a target configuration (no GPU, no driver needed)."""
    from jax.experimental import topologies

    topology = topologies.get_topology_desc(platform="cuda", target_config=config_text, topology="1x1x1")
    return topology.devices[0]


# An array-shaped ``copy`` instruction: "%name = f32[4,8]{1,0} copy(" (a tuple's shape starts with "(").
_COPY = re.compile(r"^(\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?\s+)copy\(", re.M)


def without_copies(hlo_text: str) -> tuple[str, int]:
    """``hlo_text`` with each array ``copy`` written as a reshape to the same shape, and how many there were.

    A ``copy`` is the identity on values (TensorFlow puts one on each variable it returns); jaxlib's HLO-to-StableHLO
    conversion turns it into ``mhlo.copy``, which its GPU pipeline then rejects ("failed to legalize operation
    'mhlo.copy'"). A same-shape reshape is the same value, and XLA's simplifier removes both alike.
    """
    return _COPY.subn(r"\1reshape(", hlo_text)


def compile_hlo_text(device: Any, hlo_text: str) -> tuple[str, dict[str, int]]:
    """Compile HLO text for ``device``'s target: the optimized module's text and the planned memory.

    Every call into jaxlib that is not public API is here: jaxlib's HLO parser to an ``HloModuleProto``, its
    conversion to a StableHLO MLIR module, the compile-only client's ``compile``, and the executable's modules
    and memory statistics. A ``copy`` becomes a same-shape reshape first (:func:`without_copies`).
    """
    from jax._src import compiler
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import _jax, xla_client
    from jax._src.lib.mlir import ir
    _hlo = importlib.import_module("jaxlib._hlo")
    proto = _hlo.hlo_module_from_text(without_copies(hlo_text)[0]).as_serialized_hlo_module_proto()
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(_jax.mlir.hlo_to_stablehlo(proto))
        options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
        executable = device.client.compile(module, executable_devices=xla_client.DeviceList((device,)),
                                           compile_options=options)
    text = "\n\n".join(m.to_string() for m in executable.hlo_modules())
    return text, _memory(executable.get_compiled_memory_stats())


def compile_jax(device: Any, job: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """Compile a JAX function (``job["jax"]`` = ``"module:function"``) on abstract arguments, with public API."""
    import jax
    import numpy as np

    for folder in job.get("path", []):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module_name, _, name = job["jax"].partition(":")
    fn = getattr(importlib.import_module(module_name), name)
    sharding = jax.sharding.SingleDeviceSharding(device)
    args = [jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype), sharding=sharding) for shape, dtype in job["args"]]
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled.as_text() or "", _memory(compiled.memory_analysis())


def _memory(stats: Any) -> dict[str, int]:
    keys = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
            "generated_code_size_in_bytes")
    return {k.replace("_size_in_bytes", ""): int(getattr(stats, k)) for k in keys if hasattr(stats, k)}


def _one(device: Any, job: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        text, memory = compile_hlo_text(device, job["hlo"]) if "hlo" in job else compile_jax(device, job)
    except Exception as err:  # noqa: BLE001 - XLA's error, whatever its type, is the job's answer
        return {"error": f"{type(err).__name__}: {err}"}
    return {"text": text, "memory": memory, "compile_seconds": time.perf_counter() - start}


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Compile every job for every target of ``request``; errors are per target or per job, never raised."""
    missing = private_api_problems()
    import jaxlib

    result: dict[str, Any] = {"versions": versions(), "xla_flags": os.environ.get("XLA_FLAGS", ""), "targets": {}}
    if missing:
        result["error"] = (f"jaxlib {jaxlib.__version__} lacks what xlalab.hlo.gpu_compile calls: "
                           f"{', '.join(missing)}")
        return result
    for name, config_text in request["targets"].items():
        try:
            device = topology_device(config_text)
        except Exception as err:  # noqa: BLE001 - the target's own error (a field jaxlib rejects, no plugin)
            result["targets"][name] = {"error": f"{type(err).__name__}: {err}"}
            continue
        result["targets"][name] = {"device_kind": device.device_kind,
                                   "jobs": [_one(device, job) for job in request["jobs"]]}
    return result


def main(argv: list[str]) -> int:
    """``_gpu_worker.py REQUEST.json RESULT.json``."""
    request = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(run(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
