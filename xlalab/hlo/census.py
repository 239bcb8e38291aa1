"""Fusion across TensorFlow versions: the kernels and fusions of the book's key functions, per version.

:func:`census` compiles five small functions with the TensorFlow that runs it (the fusion chain, softmax, layer
norm, matmul + bias + ReLU, one ResNet basic block, forward, at fixed shapes) and counts the optimized modules'
kernels and fusions with :func:`xlalab.hlo.summary`. :func:`record` adds that census to a JSON file under the
version and backend (``make test-compat`` records every TensorFlow it tests into ``results/compat/fusion.json``);
:func:`table` turns the file into the Markdown table of the fusion chapter, marking where a release changed a
count. Run ``xlalab hlo-census --record results/compat/fusion.json`` in a venv to add its version.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .launches import summary

FUNCTIONS = ("fusion chain", "softmax", "layer norm", "matmul + bias + ReLU", "ResNet basic block")


def _cases() -> dict[str, tuple[Callable, tuple]]:
    """name -> (function, arguments): float32, fixed seeds; shapes in the docstrings."""
    import tensorflow as tf

    g = tf.random.Generator.from_seed(0)

    def chain(x):
        """The fusion chapter's eight elementwise ops: float32[65536] -> float32[65536]."""
        y = x * 1.5
        y = y + 0.5
        y = y * y
        y = y - 1.0
        y = tf.abs(y)
        y = y * 0.25
        y = y + x
        return tf.maximum(y, 0.0)

    def softmax(x):
        """Row softmax: float32[256, 512] -> float32[256, 512]."""
        return tf.nn.softmax(x, axis=-1)

    def layer_norm(x, gamma, beta):
        """Layer norm over the last axis: float32[256, 512], [512], [512] -> float32[256, 512]."""
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-5) * gamma + beta

    def dense(x, w, b):
        """relu(x @ w + b): float32[256, 512], [512, 128], [128] -> float32[256, 128]."""
        return tf.nn.relu(tf.matmul(x, w) + b)

    def block(x, k1, k2, s1, s2):
        """A ResNet basic block, training-mode batch norm without parameters' updates:
        float32[8, 16, 16, 32] and two [3, 3, 32, 32] kernels -> float32[8, 16, 16, 32]."""
        def bn(h, scale):
            mean, var = tf.nn.moments(h, axes=[0, 1, 2])
            return (h - mean) * tf.math.rsqrt(var + 1e-5) * scale
        h = tf.nn.relu(bn(tf.nn.conv2d(x, k1, 1, "SAME"), s1))
        h = bn(tf.nn.conv2d(h, k2, 1, "SAME"), s2)
        return tf.nn.relu(h + x)

    n = g.normal
    return {
        "fusion chain": (chain, (n([65536]),)),
        "softmax": (softmax, (n([256, 512]),)),
        "layer norm": (layer_norm, (n([256, 512]), n([512]), n([512]))),
        "matmul + bias + ReLU": (dense, (n([256, 512]), n([512, 128]), n([128]))),
        "ResNet basic block": (block, (n([8, 16, 16, 32]), n([3, 3, 32, 32]), n([3, 3, 32, 32]), n([32]), n([32]))),
    }


def census() -> dict[str, Any]:
    """``{"tensorflow", "backend", "functions": {name: {"kernels", "fusions", "fusions_by_kind", "bytes"}}}`` for
    the TensorFlow in this process (its default device's XLA backend)."""
    import tensorflow as tf

    from .source import as_jit

    out: dict[str, Any] = {}
    backend = "XLA:GPU" if tf.config.list_physical_devices("GPU") else "XLA:CPU"
    for name, (fn, args) in _cases().items():
        text = as_jit(fn).experimental_get_compiler_ir(*args)(stage="optimized_hlo")
        s = summary(text)
        out[name] = {"kernels": s["kernels"], "fusions": s["fusions"], "fusions_by_kind": s["fusions_by_kind"],
                     "bytes": s["bytes_moved"]}
    return {"tensorflow": tf.__version__, "backend": backend, "functions": out}


def record(path: str | os.PathLike) -> dict[str, Any]:
    """Add this process's :func:`census` to the JSON file at ``path`` (created if absent), keyed
    ``"<tensorflow> <backend>"``, with the machine it ran on; returns the census."""
    path = Path(path)
    data = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    c = census()
    c["machine"] = {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count()}
    data.setdefault("runs", {})[f"{c['tensorflow']} {c['backend']}"] = c
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return c


def _version_key(key: str) -> tuple:
    version, _, backend = key.partition(" ")
    return backend, tuple(int(p) if p.isdigit() else p for p in version.replace("-", ".").split("."))


def cell(got: dict[str, Any]) -> str:
    """A census entry as the table prints it: kernels, then fusions with their kinds, e.g.
    ``"4 (4 = 2 kCustom + 2 kLoop)"``; ``"8 (6)"`` where the entry records no kinds."""
    kinds = " + ".join(f"{n} {kind}" for kind, n in sorted(got.get("fusions_by_kind", {}).items()))
    return f"{got['kernels']} ({got['fusions']} = {kinds})" if kinds else f"{got['kernels']} ({got['fusions']})"


def kind_changes(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What changed from census entry ``a`` to ``b`` of one function, kind by kind (``"kCustom 0 → 2"``)."""
    ka, kb = a.get("fusions_by_kind", {}), b.get("fusions_by_kind", {})
    out = [f"{k} {ka.get(k, 0)} → {kb.get(k, 0)}" for k in sorted(set(ka) | set(kb)) if ka.get(k, 0) != kb.get(k, 0)]
    return ", ".join(out) or "the same fusions"


def _runs(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    return json.loads(path.read_text()).get("runs", {}) if path.exists() else {}


def table(path: str | os.PathLike) -> str:
    """The Markdown table of a census file: one row per function, one column per recorded TensorFlow and
    backend, each cell :func:`cell` (kernels, fusions and their kinds); a cell is bold where it differs from the
    previous version's on the same backend. ``""`` if the file does not exist."""
    runs = _runs(path)
    if not runs:
        return ""
    keys = sorted(runs, key=_version_key)
    head = "| function | " + " | ".join(f"TF {k.split(' ')[0]}, {k.split(' ', 1)[1]}" for k in keys) + " |"
    lines = [head, "|---|" + "---|" * len(keys)]
    for name in FUNCTIONS:
        cells = []
        for i, k in enumerate(keys):
            got = runs[k]["functions"].get(name)
            if got is None:
                cells.append("—")
                continue
            prev = next((runs[p]["functions"].get(name) for p in reversed(keys[:i])
                         if p.split(" ", 1)[1] == k.split(" ", 1)[1]), None)
            changed = prev is not None and cell(prev) != cell(got)
            cells.append(f"**{cell(got)}**" if changed else cell(got))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def changes(path: str | os.PathLike) -> list[tuple[str, str, str]]:
    """``(function, from key, to key)`` wherever consecutive recorded versions on one backend differ in
    :func:`cell` (kernels, fusions or their kinds)."""
    runs = _runs(path)
    keys = sorted(runs, key=_version_key)
    out = []
    for name in FUNCTIONS:     # by function, then by version, as the table reads
        for a, b in zip(keys, keys[1:]):
            x, y = runs[a]["functions"].get(name), runs[b]["functions"].get(name)
            if a.split(" ", 1)[1] == b.split(" ", 1)[1] and x and y and cell(x) != cell(y):
                out.append((name, a, b))
    return out


def run(args: Any) -> int:
    """``xlalab hlo-census``: print the census as JSON; ``args.record`` adds it to that file first."""
    c = record(args.record) if args.record else census()
    print(json.dumps(c, indent=1, sort_keys=True))
    return 0
