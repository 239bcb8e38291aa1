"""The GPU check: on a machine where TensorFlow sees a GPU, run everything a maintainer needs to trust the course there.

``xlalab gpu-check [--out-dir results] [--skip-suite] [--skip-grading] [--skip-book]`` (``make gpu-check``):

1. the workload suite at the ``gpu`` profile (:func:`xlalab.suite.run`), placed on the GPU's own roofline
   (:func:`xlalab.hw.peaks`: the datasheet entry of its exact model plus a measured device copy);
2. every solution graded (it must score full points) and every unmodified student lab graded (it must
   score 0), with :func:`xlalab.grading.cli.grade_submissions` as ``tests/test_labs.py`` does;
3. the book built (``jupyter-book build . -W -n --keep-going``: every chapter executes on the GPU, warnings
   are errors).

It writes ``<out-dir>/<gpu-model>.json`` (the suite's document with a ``gpu_check`` block added), its two
plots and ``<out-dir>/<gpu-model>-report.md``, a short report for a maintainer to commit. On a machine
where TensorFlow sees no GPU it says so and exits with status 2; ``XLALAB_FAKE_GPU`` does not count.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlalab import env
from xlalab.grading.options import GradeOptions

if TYPE_CHECKING:
    from .options import GpuCheckOptions

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger(__name__)
NO_GPU_EXIT = 2

NO_GPU_MESSAGE = """xlalab.gpu_check: TensorFlow sees no GPU on this machine, so there is nothing to check.
  The GPU check needs a CUDA GPU visible to TensorFlow: install the course with `pip install -e '.[gpu]'`,
  check `python -c "import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))"`, or run
  gpu_check.ipynb in Colab (Runtime > Change runtime type > GPU). XLALAB_FAKE_GPU does not count: it only
  names a GPU for tests while the work runs on the CPU."""


def model_slug(name: str) -> str:
    """A file name for a GPU model: its :data:`xlalab.hw.GPU_PEAKS` key in lower case, e.g. ``"a100-sxm-40gb"``.

    A model missing from the table gets its device name, slugged (``"nvidia-geforce-rtx-4090"``).
    """
    from . import hw

    key = hw.gpu_key(name)
    return (key or re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")).lower()


def _progress(msg: str) -> None:
    log.info("[gpu_check %s] %s", time.strftime("%H:%M:%S"), msg)


def grade_all(out: Path, root: Path = REPO) -> list[dict[str, Any]]:
    """Grade every solution (expects full points) and every unmodified student lab (expects 0); one dict each."""
    from .grading import cli

    rows = []
    for sol in sorted((root / "solutions").glob("lab*.ipynb")):
        for kind, submission, want in (("solution", sol, "full"), ("student lab", root / "labs" / sol.name, "zero")):
            if not submission.exists():
                rows.append({"lab": sol.stem, "kind": kind, "ok": False, "score": None, "maximum": None,
                             "status": f"missing {submission.relative_to(root)}", "failed": []})
                continue
            _progress(f"grading {kind} {sol.stem}")
            # memory_gb=0: no address-space limit. The CUDA driver reserves large ranges of virtual address
            # space when it starts, which an RLIMIT_AS sized for host memory can make fail.
            (row,) = cli.grade_submissions(sol, [submission],
                                           GradeOptions(out=str(out / kind.replace(" ", "_") / sol.stem),
                                                        cell_timeout=900, timeout=2400, memory_gb=0))
            passed = [c.check for c in row.checks if c.passed]
            failed = [c.check for c in row.checks if not c.passed]
            ok = row.auto == row.max_auto if want == "full" else not passed
            rows.append({"lab": sol.stem, "kind": kind, "ok": ok, "score": row.auto, "maximum": row.max_auto,
                         "status": row.status, "failed": failed if want == "full" else passed,
                         "seconds": round(row.seconds, 1)})
    return rows


def build_book(root: Path = REPO, timeout: float = 5400) -> dict[str, Any]:
    """Build the book the way CI does; return ``{"ok", "returncode", "seconds", "tail"}``."""
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(root), "-W", "-n", "--keep-going"]
    _progress("building the book: " + " ".join(cmd))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
        code, text = proc.returncode, proc.stdout + proc.stderr
    except (OSError, subprocess.TimeoutExpired) as err:
        code, text = -1, f"{type(err).__name__}: {err}"
    return {"ok": code == 0, "returncode": code, "seconds": round(time.perf_counter() - t0, 1),
            "tail": "\n".join(text.strip().splitlines()[-30:])}


def report(doc: dict[str, Any]) -> str:
    """The markdown report of one GPU check (what a maintainer reads before committing the run)."""
    hwd, check = doc.get("hardware", {}), doc["gpu_check"]
    lines = [f"# GPU check: {check['gpu']}", "",
             f"- When: {check['created_utc']}; command: `xlalab gpu-check`",
             f"- Machine: {check['machine']}",
             f"- Software: TensorFlow {check['versions'].get('tensorflow')}, Keras {check['versions'].get('keras')}, "
             f"Python {check['versions'].get('python')}",
             f"- Roof: {hwd.get('bandwidth_gbps')} GB/s, {hwd.get('peak_tflops')} TFLOP/s ({hwd.get('peaks_source')})",
             f"- Verdict: **{'PASS' if check['ok'] else 'FAIL'}**", ""]
    lines += ["## Suite", ""]
    if check.get("suite") == "skipped":
        lines.append("Skipped (--skip-suite).")
    else:
        fm = doc.get("targets", {}).get("fusion_memory", {})
        lines.append(f"Profile `{doc.get('profile')}`, {doc.get('wall_s')} s; "
                     f"{sum(1 for r in doc.get('results', []) if r.get('median_ms'))} rows timed, "
                     f"{sum(1 for r in doc.get('results', []) if r.get('correct') is False)} wrong.")
        if fm:
            lines.append(f"Memory-bound chain under XLA: {fm.get('xla_fusions')} fusion(s), "
                         f"{fm.get('roofline_fraction', 0):.2f} of the memory roof, "
                         f"{fm.get('speedup_vs_graph', 0):.2f}x over graph mode.")
        lines += ["", "```", check.get("table", ""), "```"]
    lines += ["", "## Labs", ""]
    if check.get("grading") == "skipped":
        lines.append("Skipped (--skip-grading).")
    else:
        lines += ["| lab | version | score | expected | ok | note |", "|---|---|---|---|---|---|"]
        for g in check["grading"]:
            want = "full" if g["kind"] == "solution" else "0"
            note = ", ".join(g["failed"]) if g["failed"] else g["status"]
            lines.append(f"| {g['lab']} | {g['kind']} | {g['score']} / {g['maximum']} | {want} | "
                         f"{'yes' if g['ok'] else 'NO'} | {note} |")
    lines += ["", "## Book", ""]
    book = check.get("book")
    if book == "skipped":
        lines.append("Skipped (--skip-book).")
    else:
        lines.append(f"`jupyter-book build . -W -n --keep-going`: {'built' if book['ok'] else 'FAILED'} "
                     f"(exit {book['returncode']}, {book['seconds']} s).")
        if not book["ok"]:
            lines += ["", "```", book["tail"], "```"]
    lines += ["", "To contribute this run: commit the JSON, its two PNGs and this report under `results/` "
              "and open a pull request (see README, 'Contribute a GPU run')."]
    return "\n".join(lines) + "\n"


def run(args: GpuCheckOptions) -> int:
    """``xlalab gpu-check``: suite, grading and book on this machine's GPU; 0 when all passed, 2 without a GPU."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from . import hw

    devices = hw.gpus()  # what TensorFlow sees; XLALAB_FAKE_GPU is ignored here on purpose
    if not devices:
        log.error(NO_GPU_MESSAGE)
        return NO_GPU_EXIT
    os.environ.pop(hw.FAKE_GPU_ENV, None)
    os.environ.pop(env.PROFILE, None)
    gpu = devices[0]["name"]
    slug = model_slug(gpu)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{slug}.json"
    _progress(f"GPU {gpu!r} -> {json_path}")
    from . import suite

    if args.skip_suite:
        import keras
        import numpy as np
        import tensorflow as tf

        doc: dict[str, Any] = {"hardware": {**hw.summary().to_dict()}, "versions": {
            "tensorflow": tf.__version__, "keras": keras.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0]}, "results": []}
        table = ""
    else:
        only = [w for w in args.only.split(",") if w] if args.only else list(suite.W.WORKLOADS)
        doc = suite.run(profile="gpu", only=only, out=None)
        table = suite.table(doc)
    with tempfile.TemporaryDirectory(prefix="xlalab-gpu-check-") as tmp:
        grading = "skipped" if args.skip_grading else grade_all(Path(tmp))
    book = "skipped" if args.skip_book else build_book()
    ok = ((isinstance(grading, str) or all(g["ok"] for g in grading))   # a str: "skipped"
          and (isinstance(book, str) or book["ok"])
          and all(r.get("correct") is not False for r in doc.get("results", [])))
    doc["gpu_check"] = {
        "gpu": gpu, "model": slug, "ok": ok,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": hw.summary().describe(), "versions": doc.get("versions", {}),
        "suite": "skipped" if args.skip_suite else "ran", "table": table, "grading": grading, "book": book,
    }
    if not args.skip_suite:  # without the suite there is no run to store: the report alone
        suite.write(doc, json_path)
    report_path = out_dir / f"{slug}-report.md"
    report_path.write_text(report(doc))
    print(report(doc))
    print(f"wrote {report_path}" + ("" if args.skip_suite else f", {json_path} and its plots"))
    return 0 if ok else 1
