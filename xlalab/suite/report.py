"""The suite's results: reading them (:func:`load_results`, what the book reads), checking them against
``schema.json`` (:func:`schema_errors`), and writing them as JSON, a table and two plots.

A results document has ``hardware`` (:func:`xlalab.hw.summary` plus measured ceilings), ``versions`` and
``results`` (one dict per workload, case and mode, with at least :data:`RESULT_KEYS`); ``schema.json`` beside
this module is its JSON Schema.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from xlalab import env as xlalab_env

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
TOP_KEYS = ("hardware", "versions", "results")
RESULT_KEYS = ("workload", "case", "mode", "correct", "skipped", "first_call_s", "median_ms", "iqr_ms",
               "throughput", "throughput_unit", "speedup_vs_graph", "speedup_ci", "achieved_gbps",
               "achieved_tflops", "roofline_fraction", "fusions", "kernels")
SCHEMA = Path(__file__).with_name("schema.json")


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


def results_api(repository: str) -> str:
    """The GitHub contents-API address of a repository's ``results/`` folder: ``https://github.com/o/n`` gives
    ``https://api.github.com/repos/o/n/contents/results``."""
    path = repository.rstrip("/").removesuffix(".git").split("github.com/", 1)[-1]
    if repository == path or path.count("/") != 1:
        raise ValueError(f"not a GitHub repository URL: {repository!r}")
    return f"https://api.github.com/repos/{path}/contents/results"


def course_results(candidates: Iterable[str | os.PathLike] = ("../results", "results"), *, download: bool = True,
                   timeout: float = 10.0) -> tuple[list[dict[str, Any]], str]:
    """The committed suite runs the book reads, and where they came from; never raises.

    Looks in ``$XLALAB_RESULTS``, then in each folder of ``candidates`` (the book executes chapters from ``book/``);
    outside a checkout (the package alone, as in Colab) it downloads ``results/*.json`` of the course's repository
    (``$XLALAB_REPOSITORY``, which each chapter's setup cell sets from ``_config.yml``) into a temporary folder when
    ``download`` is true. Returns ``(runs, source)``: the runs as :func:`load_results` gives them (``[]`` when none
    could be found or fetched) and a phrase naming the folder or URL, or why there are none.

    Example:
        >>> runs, source = course_results()
    """
    folder_env = os.environ.get(xlalab_env.RESULTS)
    for folder in ([Path(folder_env)] if folder_env else []) + [Path(c) for c in candidates]:
        if folder.exists():
            return load_results(folder), str(folder.resolve())
    repository = os.environ.get(xlalab_env.REPOSITORY, "")
    if not download or not repository:
        return [], "no results folder here (the course is not checked out)"
    try:
        return _download_results(results_api(repository), timeout), f"{repository.rstrip('/')}/tree/main/results"
    except Exception as err:  # noqa: BLE001 - offline, rate-limited or moved: the page says so instead of failing
        return [], f"no results folder here, and the course's could not be fetched ({type(err).__name__})"


def _download_results(api: str, timeout: float) -> list[dict[str, Any]]:
    """Every ``*.json`` of a results folder on GitHub (its contents-API address), loaded from a temporary copy."""
    import tempfile
    import urllib.request

    with urllib.request.urlopen(api, timeout=timeout) as r:
        listing = json.loads(r.read())
    folder = Path(tempfile.mkdtemp(prefix="xlalab-results-"))
    for item in listing:
        name, url = item.get("name", ""), item.get("download_url") or ""
        if name.endswith(".json") and url.startswith("https://") and "/" not in name:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                (folder / name).write_bytes(r.read())
    return load_results(folder)


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema of a results document (``schema.json`` beside this module)."""
    return json.loads(SCHEMA.read_text(encoding="utf-8"))


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """What in a suite JSON document breaks :func:`schema` (empty when it matches what the book reads), one line
    each, naming where: ``top level``, ``hardware``, or ``result 3 (gemv/matmul_col/graph)``."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{_where(doc, list(e.absolute_path))}: {e.message}" for e in errors]


def _where(doc: dict[str, Any], path: list[Any]) -> str:
    """A place in a results document, in words."""
    if len(path) >= 2 and path[0] == "results" and isinstance(path[1], int):
        r = doc["results"][path[1]]
        r = r if isinstance(r, dict) else {}
        rest = "".join(f".{p}" for p in path[2:])
        return f"result {path[1]} ({r.get('workload')}/{r.get('case')}/{r.get('mode')}){rest}"
    return ".".join(str(p) for p in path) or "top level"


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

    from xlalab import plot as xplot
    from xlalab.roofline import RooflinePoint

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

    from xlalab.workloads.gemv import FORMULATIONS

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
