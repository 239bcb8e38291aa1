"""XLA dumps of every pass: run a script with ``XLA_FLAGS`` set, and name the snapshots it wrote."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# Dumps of every pass.

@dataclass(frozen=True)
class DumpFile:
    """One file of an ``--xla_dump_to`` directory.

    ``stage`` is ``"before_optimizations"``, ``"after_optimizations"``, ``"buffer-assignment"``,
    ``"pass"`` (a per-pass snapshot) or ``"other"``; a pass snapshot has ``index`` (its order),
    ``pipeline``, ``after`` (the pass that just ran) and ``before`` (the pass about to run).
    """

    path: Path
    module: str
    stage: str
    index: int = -1
    pipeline: str = ""
    after: str = ""
    before: str = ""


_PASS_FILE = re.compile(r"^module_\d+\.(?P<module>.+)\.(?P<index>\d{4})\.(?P<pipeline>[^.]+)\.after_(?P<after>.+?)"
                        r"(?:\.before_(?P<before>.+))?\.txt$")


def list_dump(directory: str | os.PathLike) -> list[DumpFile]:
    """List an XLA dump directory: module snapshots in pass order, then the other text files."""
    out: list[DumpFile] = []
    for p in sorted(Path(directory).glob("module_*.txt")):
        m = _PASS_FILE.match(p.name)
        if m:
            out.append(DumpFile(p, m["module"], "pass", int(m["index"]), m["pipeline"], m["after"], m["before"] or ""))
            continue
        name = p.name[len("module_0000."):-len(".txt")]
        for suffix, stage in ((".before_optimizations", "before_optimizations"),
                              ("-buffer-assignment", "buffer-assignment"),
                              ("-memory-usage-report", "memory-usage-report"),
                              ("_after_optimizations", "after_optimizations")):
            # "-live-range" and such extras of XLA:GPU's final module are other files, not the module.
            if suffix in name and (stage != "after_optimizations" or name.endswith(suffix)):
                # The backend's tag ends the name: ".cpu", or XLA:GPU's ".sm_9.0a_gpu" (a dot inside it).
                module = re.sub(r"\.(?:sm_[\d.]+a?_)?\w+_after_optimizations$", "", name.split(suffix)[0])
                if stage == "after_optimizations":
                    module = re.sub(r"\.(?:sm_[\d.]+a?_)?\w+$", "", module)
                out.append(DumpFile(p, module, stage))
                break
        else:
            out.append(DumpFile(p, name, "other"))
    out.sort(key=lambda f: (f.module, f.stage != "before_optimizations", f.stage != "pass", f.index))
    return out


def first_pass_creating(directory: str | os.PathLike, opcode: str = "fusion", module: str | None = None) -> DumpFile:
    """The first per-pass snapshot in which an instruction with ``opcode`` appears (``after`` names the pass)."""
    needle = re.compile(rf"=\s*\S.*?\s{re.escape(opcode)}\(")
    for f in list_dump(directory):
        if f.stage == "pass" and (module is None or module in f.module) and needle.search(f.path.read_text()):
            return f
    raise LookupError(f"no pass snapshot in {directory} contains a {opcode!r} instruction")


def dump_passes(source: str, directory: str | os.PathLike, pass_re: str = ".*", timeout: float = 300) -> list[DumpFile]:
    """Run Python ``source`` in a fresh process with XLA dumping every pass into ``directory``.

    XLA reads ``XLA_FLAGS`` once per process, so a dump needs a new process. ``source`` must build and
    call the jit-compiled function itself. Returns :func:`list_dump` of the directory.

    Example:
        >>> files = dump_passes("import tensorflow as tf\\n"
        ...                     "f = tf.function(lambda x: tf.nn.relu(x * 2 + 1), jit_compile=True)\\n"
        ...                     "f(tf.ones([8]))", "/tmp/xla_dump")
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={directory} --xla_dump_hlo_pass_re={pass_re}".strip()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    done = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"dump script failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return list_dump(directory)
