"""xlalab.suite: the tiny profile runs every workload in every mode, checks results, writes what the book reads."""

import json
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from xlalab import suite
from xlalab.workloads import MODES, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"


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
    assert suite.schema_errors({"results": []}) == ["top level: 'hardware' is a required property",
                                                     "top level: 'versions' is a required property"]
    bad = {"hardware": {}, "versions": {}, "results": [{"workload": "gemv", "mode": "graph"}]}
    errors = suite.schema_errors(bad)
    assert "result 0 (gemv/None/graph): 'median_ms' is a required property" in errors
    assert "hardware: 'copy_gbps' is a required property" in errors


def _result(**changed):
    row: dict[str, object] = {k: None for k in suite.RESULT_KEYS}
    row.update(workload="gemv", case="matmul_col", mode="xla", correct=True, median_ms=1.5)
    return {**row, **changed}


def _doc(*results):
    return {"hardware": {k: 1 for k in ("cpu", "cores", "gpus", "copy_gbps", "bandwidth_gbps", "peak_tflops")},
            "versions": {k: "1" for k in ("tensorflow", "keras", "numpy", "python")}, "results": list(results)}


@pytest.mark.parametrize("changed, message", [
    ({"median_ms": 0}, "0 is less than or equal to the minimum of 0"),
    ({"median_ms": None}, "None is not of type 'number'"),
    ({"workload": "bert"}, "'bert' is not one of"),
    ({"mode": "jit"}, "'jit' is not one of"),
    ({"skipped": 3}, "3 is not of type 'string', 'null'"),
    ({"speedup_ci": [1, 2, 3]}, "is not valid under any of the given schemas"),
])
def test_the_schema_refuses_each_broken_field(changed, message):
    """Each rule of schema.json can fail; the unbroken result passes."""
    assert suite.schema_errors(_doc(_result())) == []
    errors = suite.schema_errors(_doc(_result(), _result(**changed)))
    assert len(errors) == 1 and errors[0].startswith("result 1 (") and message in errors[0], errors


def test_an_untimed_result_needs_no_time():
    """Skipped, or wrong: median_ms may be null."""
    assert suite.schema_errors(_doc(_result(median_ms=None, skipped="no GPU"), _result(median_ms=None,
                                                                                        correct=False))) == []


def test_the_schema_names_the_workloads_modes_and_keys_the_code_uses():
    import jsonschema

    schema = suite.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    result = schema["$defs"]["result"]
    assert tuple(result["properties"]["workload"]["enum"]) == WORKLOADS
    assert tuple(result["properties"]["mode"]["enum"]) == MODES
    assert tuple(result["required"]) == suite.RESULT_KEYS and tuple(schema["required"]) == suite.TOP_KEYS


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


def test_course_results_finds_the_folder_or_says_why_not(tmp_path, monkeypatch):
    """Issue 39 item 6: outside a checkout the chapter's first cell gets no runs and a reason, never an error."""
    monkeypatch.delenv("XLALAB_RESULTS", raising=False)
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"hardware": {}, "versions": {}, "results": []}))
    (folder / "other.json").write_text("[1, 2]")                      # not a suite run: skipped
    runs, source = suite.course_results([tmp_path / "missing", folder], download=False)
    assert [r["name"] for r in runs] == ["run"] and source == str(folder.resolve())
    monkeypatch.setenv("XLALAB_RESULTS", str(folder / "run.json"))
    assert [r["name"] for r in suite.course_results([tmp_path / "missing"], download=False)[0]] == ["run"]
    monkeypatch.delenv("XLALAB_RESULTS")
    runs, source = suite.course_results([tmp_path / "missing"], download=False)
    assert runs == [] and "not checked out" in source

    monkeypatch.delenv("XLALAB_REPOSITORY", raising=False)
    runs, source = suite.course_results([tmp_path / "missing"])          # no repository named: no download
    assert runs == [] and "not checked out" in source

    asked = []

    def offline(api, timeout):
        asked.append(api)
        raise OSError("network unreachable")

    monkeypatch.setenv("XLALAB_REPOSITORY", "https://github.com/o/n")
    monkeypatch.setattr(suite.report, "_download_results", offline)
    runs, source = suite.course_results([tmp_path / "missing"])
    assert runs == [] and "could not be fetched (OSError)" in source
    assert asked == ["https://api.github.com/repos/o/n/contents/results"]


def test_results_api_comes_from_the_configured_repository():
    """The course's URL lives in _config.yml only: the setup cell passes it on, the package holds no copy."""
    import yaml

    url = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]
    assert suite.report.results_api(url).startswith("https://api.github.com/repos/")
    assert suite.report.results_api("https://github.com/o/n.git/") == "https://api.github.com/repos/o/n/contents/results"
    with pytest.raises(ValueError):
        suite.report.results_api("https://example.org/o/n")
    owner_name = url.split("github.com/", 1)[1]
    for path in (REPO / "xlalab").rglob("*.py"):
        assert owner_name not in path.read_text(), f"{path} holds a copy of the repository URL"
