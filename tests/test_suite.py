"""xlalab.suite: the tiny profile runs every workload in every mode, checks results, writes what the book reads."""

import json
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from xlalab import suite
from xlalab.workloads import MODES, WORKLOADS

RESULTS = Path(__file__).resolve().parent.parent / "results"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One in-process run of the tiny profile (the autocluster mode runs in a child process)."""
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("suite") / "tiny.json"
    doc = suite.run(profile="tiny", out=out)
    return doc, out


@pytest.mark.heavy   # tiny: a run of the whole suite, 2 minutes
@pytest.mark.timeout(900)
def test_tiny_run_has_every_workload_and_mode(tiny):
    doc, _ = tiny
    assert suite.schema_errors(doc) == []
    seen = {(r["workload"], r["mode"]) for r in doc["results"]}
    for w in WORKLOADS:
        for m in MODES:
            if m == "numpy" and w != "gemv":
                continue
            assert (w, m) in seen, f"{w}/{m} missing"


@pytest.mark.heavy   # tiny: a run of the whole suite
def test_tiny_run_is_correct_and_timed(tiny):
    doc, _ = tiny
    for r in doc["results"]:
        name = f"{r['workload']}/{r['case']}/{r['mode']}"
        if r["skipped"] is not None:
            # Only the documented skips: NumPy where it has no peer, xla_mixed where no policy helps.
            assert r["mode"] == "numpy" or (r["mode"] == "xla_mixed" and doc["hardware"]["mixed_policy"] is None), \
                f"{name} skipped: {r['skipped']}"
            continue
        assert r["correct"] is True, f"{name}: errors {r['errors']} beyond {r['tolerance']}"
        assert r["median_ms"] > 0 and r["first_call_s"] > 0, name
        assert r["throughput"] > 0 and r["achieved_gbps"] > 0 and r["roofline_fraction"] > 0, name
        lo, hi = r["speedup_ci"]
        assert lo <= hi, name
        if r["mode"] == "graph":
            assert r["speedup_vs_graph"] == pytest.approx(1.0)


@pytest.mark.heavy   # tiny: a run of the whole suite
def test_tiny_run_reports_fusions_and_targets(tiny):
    doc, _ = tiny
    mem = next(r for r in doc["results"] if r["case"] == "memory" and r["mode"] == "xla")
    assert mem["fusions"] == 1 and mem["kernels"] == 1
    assert doc["targets"]["fusion_memory"]["met_one_fusion"] is True
    gemv = doc["targets"]["gemv"]
    assert {"best", "best_gbps", "copy_gbps", "numpy_gbps", "formulations_gbps"} <= set(gemv)


@pytest.mark.heavy   # tiny: a run of the whole suite
def test_tiny_run_writes_json_and_plots(tiny):
    doc, out = tiny
    assert json.loads(out.read_text())["results"] == doc["results"]
    for name in doc["plots"]:
        assert (out.parent / name).stat().st_size > 1000
    runs = suite.load_results(out.parent)
    assert [r["name"] for r in runs] == ["tiny"]
    assert "gemv/matmul_col" in suite.table(doc)


def test_schema_errors_catches_missing_keys():
    assert suite.schema_errors({"results": []}) == ["missing top-level key 'hardware'",
                                                     "missing top-level key 'versions'"]
    bad = {"hardware": {}, "versions": {}, "results": [{"workload": "gemv", "mode": "graph"}]}
    errors = suite.schema_errors(bad)
    assert any("lacks" in e and "median_ms" in e for e in errors)


def test_committed_results_match_the_schema_the_book_reads():
    files = sorted(RESULTS.glob("*.json"))
    if not files:
        pytest.skip("no committed results yet")
    runs = suite.load_results(RESULTS)
    assert len(runs) == len(files), "every results/*.json must be a suite run"
    for run in runs:
        assert suite.schema_errors(run) == [], run["path"]
        for name in run.get("plots", []):
            assert (RESULTS / name).exists(), f"{run['path']} names a missing plot {name}"
        workloads = {r["workload"] for r in run["results"]}
        assert workloads, run["path"]
