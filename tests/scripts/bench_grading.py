"""Throughput of the grader (a benchmark, not a test): grade N hand-ins (half the lab's solution, half the
unmodified student lab) serially, with ``-j 2`` (an embedded Dask LocalCluster) and on a 2-worker LocalCluster
reached by its scheduler address; report submissions per minute and the grader's overhead per submission
beyond the notebook's own cells (the run under nbval, minus the time its cells ran: pytest and kernel start,
the grader's two cells, the sandbox, building the notebook, scoring, the gradebook).

    PYTHONPATH=. python tests/scripts/bench_grading.py                       # the sample lab (NumPy only), 40 hand-ins
    PYTHONPATH=. XLALAB_PROFILE=tiny python tests/scripts/bench_grading.py --lab lab01_timing --copies 20
    PYTHONPATH=. XLALAB_PROFILE=tiny python tests/scripts/bench_grading.py --lab lab01_timing --copies 2 \
        --compare-with /path/to/older/checkout --rounds 3     # serial, interleaved: older, this, older, this ...

``--compare-with`` grades the same hand-ins serially with an older checkout of the repository (its own
``tests/scripts/bench_grading.py``, or ``tests/bench_grading.py`` where it is older, its ``xlalab`` first on
``PYTHONPATH``) and with this one, alternating, and reports the seconds per hand-in of each round, their medians
and the ratio, with the machine's 1-minute load at each round.

Writes a JSON summary with ``--json PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: helpers and scripts import from there

from xlalab.grading import sandbox
from xlalab.grading.cli import grade_submissions
from xlalab.grading.options import GradeOptions

from helpers import SAMPLE, answered, make_lab_root, released

REPO = Path(__file__).resolve().parents[2]


def handins(lab: str | None, copies: int, root: Path) -> tuple[Path, Path]:
    """(solution path, folder of ``copies`` hand-ins: half solutions, half unmodified labs)."""
    subs = root / "handins"
    subs.mkdir()
    if lab is None:
        (root / "repo").mkdir()
        make_lab_root(root / "repo")
        source = root / "repo" / "solutions" / f"{SAMPLE}.ipynb"
        good, blank = answered(root / "repo"), released(root / "repo")
        texts = [json.dumps(good), json.dumps(blank)]
    else:
        source = REPO / "solutions" / f"{lab}.ipynb"
        texts = [source.read_text(encoding="utf-8"), (REPO / "labs" / f"{lab}.ipynb").read_text(encoding="utf-8")]
    for i in range(copies):
        kind = "solution" if i % 2 == 0 else "unmodified"
        (subs / f"{kind}-{i:03d}.ipynb").write_text(texts[i % 2], encoding="utf-8")
    return source, subs


def measure(name: str, source: Path, subs: Path, out: Path, box: str, **kw) -> dict:
    start = time.monotonic()
    rows = grade_submissions(source, [subs],
                                   GradeOptions(out=str(out), sandbox=box, cell_timeout=600, timeout=1800, memory_gb=8,
                                                **kw), quiet=True)
    wall = time.monotonic() - start
    overhead = [r.seconds - r.cells_seconds for r in rows]
    result = {
        "engine": name, "submissions": len(rows), "wall_s": round(wall, 1),
        "per_minute": round(60 * len(rows) / wall, 1),
        "overhead_s_mean": round(statistics.mean(overhead), 2),
        "overhead_s_median": round(statistics.median(overhead), 2),
        "cells_s_mean": round(statistics.mean(r.cells_seconds for r in rows), 2),
        "row_s_mean": round(statistics.mean(r.seconds for r in rows), 2),
        "cpu_s_mean": round(statistics.mean(r.cpu_seconds for r in rows), 2),
        "load_avg_1min": round(os.getloadavg()[0], 1),
        "totals": sorted({r.total for r in rows}), "sandbox": rows.sandbox,
    }
    print(f"{name:<28} {result['submissions']:>4} in {wall:6.1f} s  {result['per_minute']:6.1f}/min  "
          f"overhead {result['overhead_s_mean']:5.2f} s (median {result['overhead_s_median']:.2f})  "
          f"cells {result['cells_s_mean']:5.2f} s  CPU {result['cpu_s_mean']:5.2f} s/sub  "
          f"load {result['load_avg_1min']}  points {result['totals']}", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lab", default=None, help="a lab of solutions/ (default: the tests' sample lab)")
    p.add_argument("--copies", type=int, default=40, help="hand-ins (half solution, half unmodified)")
    p.add_argument("--sandbox", default="auto", choices=sandbox.MODES)
    p.add_argument("--engines", default="serial,j2,scheduler", help="comma-separated: serial, j2, scheduler")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--compare-with", default=None, help="an older checkout: grade serially with it and with this "
                                                        "one, alternating (see above)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each checkout with --compare-with")
    args = p.parse_args(argv)
    if args.compare_with:
        return compare(args)
    os.environ.setdefault("XLALAB_GRADER_STATE", tempfile.mkdtemp(prefix="xlalab-bench-state-"))
    root = Path(tempfile.mkdtemp(prefix="xlalab-bench-"))
    try:
        source, subs = handins(args.lab, args.copies, root)
        box = sandbox.resolve(args.sandbox)
        print(f"lab {args.lab or SAMPLE}, {args.copies} hand-ins, sandbox {box.describe()}, "
              f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
              f"XLALAB_PROFILE={os.environ.get('XLALAB_PROFILE', '')}", flush=True)
        results = []
        for engine in args.engines.split(","):
            out = root / f"out-{engine}"
            if engine == "serial":
                results.append(measure("serial", source, subs, out, args.sandbox, jobs=1))
            elif engine == "j2":
                results.append(measure("-j 2 (LocalCluster)", source, subs, out, args.sandbox, jobs=2))
            elif engine == "scheduler":
                from distributed import LocalCluster

                with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                                  memory_limit=0) as cluster:
                    results.append(measure("2-worker cluster (--scheduler)", source, subs, out, args.sandbox,
                                           scheduler=cluster.scheduler_address))
            else:
                raise SystemExit(f"unknown engine {engine!r}")
        books = {r["engine"]: (root / f"out-{e}" / "gradebook.csv").read_text()
                 for r, e in zip(results, args.engines.split(","))}
        print("identical gradebooks:", len(set(books.values())) == 1)
        if args.json:
            Path(args.json).write_text(json.dumps({"lab": args.lab or SAMPLE, "copies": args.copies,
                                                   "cpus": os.cpu_count(), "results": results}, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def compare(args: argparse.Namespace) -> int:
    """Serial grading with an older checkout and with this one, alternating; seconds per hand-in of each."""
    import subprocess

    trees = {"older": Path(args.compare_with).resolve(), "this": REPO}
    seconds: dict[str, list[float]] = {"older": [], "this": []}
    rounds = []
    for i in range(args.rounds):
        for name, tree in trees.items():
            out = Path(tempfile.mkdtemp(prefix="xlalab-bench-cmp-")) / "r.json"
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
            places = (tree / "tests" / "scripts" / "bench_grading.py", tree / "tests" / "bench_grading.py")
            script = next(p for p in places if p.exists())   # an older checkout has it in tests/
            cmd = [sys.executable, str(script), "--copies", str(args.copies),
                   "--engines", "serial", "--sandbox", args.sandbox, "--json", str(out)]
            if args.lab:
                cmd += ["--lab", args.lab]
            subprocess.run(cmd, cwd=tree, env=env, check=True)
            res = json.loads(out.read_text())["results"][0]
            seconds[name].append(res["row_s_mean"])
            rounds.append({"round": i, "code": name, "row_s_mean": res["row_s_mean"], "cpu_s_mean": res["cpu_s_mean"],
                           "load_avg_1min": res["load_avg_1min"], "totals": res["totals"]})
            print(f"round {i} {name:<6} {res['row_s_mean']:6.2f} s per hand-in, CPU {res['cpu_s_mean']:5.2f} s, "
                  f"load {res['load_avg_1min']}, points {res['totals']}", flush=True)
    old, new = statistics.median(seconds["older"]), statistics.median(seconds["this"])
    print(f"median seconds per hand-in: older {old:.2f}, this {new:.2f}: {new / old:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"lab": args.lab or SAMPLE, "copies": args.copies, "rounds": rounds,
                                               "median_older_s": old, "median_this_s": new}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
