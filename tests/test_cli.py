"""The one ``xlalab`` command: subcommands, options defined once, the config file, and the older forms."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from xlalab import cli, options
from xlalab.grading import cli as grading_cli, engine, task
from xlalab.grading.options import GradeOptions
from xlalab.options import ConfigError

REPO = Path(__file__).resolve().parent.parent
POSITIONALS = {"grade": ["lab01"], "report": ["lab01"], "merge-manual": ["lab01", "m.csv"],
               "export": ["lab01", "csv"], "assign": [], "suite": [], "gpu-check": [], "hw": [], "hlo-census": [],
               "gpu-compile": ["step.hlo"]}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for name in ("grade", "report", "merge-manual", "export", "assign", "suite", "gpu-check", "hw", "hlo-census",
                 "gpu-compile"):
        assert name in text


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_each_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    assert done.value.code == 0
    assert f"usage: xlalab {name}" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_the_options_defaults_are_the_parsers(name, tmp_path, monkeypatch):
    """Parsing only the required arguments gives the options object's own defaults."""
    monkeypatch.chdir(tmp_path)   # no config file here
    cmd = cli.COMMANDS[name]
    args = cli.parser().parse_args([name, *POSITIONALS[name]])
    got: Any = options.from_args(cmd.options, args)
    names = [f.name for f in dataclasses.fields(cmd.options) if f.metadata.get("positional")]
    given: dict[str, Any] = {}
    for field, value in zip(names, POSITIONALS[name]):
        given[field] = [value] if field in ("kinds", "submissions", "solutions") else value
    assert got == cmd.options(**given)


def test_the_python_api_reads_the_same_defaults():
    grade = GradeOptions()
    assert grading_cli.engine_spec(grade) == engine.EngineSpec() and task.Limits.of(grade) == task.Limits()
    # The values themselves are the course's (unchanged by moving them here).
    assert (grade.cell_timeout, grade.timeout, grade.memory_gb, grade.jobs, grade.sandbox) == (600, 1800, 8, 1, "auto")
    assert (grade.cores, grade.memory, grade.walltime, grade.similarity_threshold) == (4, "16GB", "02:00:00", 0.6)


def _record(monkeypatch, name: str) -> list[dict[str, Any]]:
    """Replace the grading function ``name`` of xlalab.grading.cli by one that records its calls."""
    calls: list[dict[str, Any]] = []

    def fake(*args: Any, **kw: Any) -> Any:
        calls.append({"args": args, **kw})
        if name == "grade_submissions":
            rows = grading_cli.Graded([])
            rows.warnings, rows.elapsed, rows.sandbox, rows.engine = [], 0.0, "none", "serial"
            return rows
        return ([], []) if name == "merge_manual" else Path("somewhere")

    monkeypatch.setattr(grading_cli, name, fake)
    return calls


def _config(tmp_path: Path, text: str, name: str = "pyproject.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_config_then_flags_override_the_defaults(tmp_path, monkeypatch):
    _config(tmp_path, '[project]\nname = "course"\n\n[tool.xlalab.grade]\nsource = "~/private/solutions"\n'
                      'cluster = "slurm"\nqueue = "short"\nmemory_gb = 4\njobs = 4\nprologue = ["module load x"]\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")   # found in the folder above
    calls = _record(monkeypatch, "grade_submissions")
    assert cli.main(["grade", "lab01", "a.ipynb"]) == 0
    kw = calls[-1]
    opts = kw["args"][2]
    assert opts.source == str(Path("~/private/solutions").expanduser())
    assert opts.memory_gb == 4.0 and opts.cell_timeout == GradeOptions.cell_timeout   # config, then default
    spec = kw["spec"]
    assert (spec.cluster, spec.queue, spec.jobs, spec.prologue) == ("slurm", "short", 4, ["module load x"])
    assert cli.main(["grade", "lab01", "a.ipynb", "--memory-gb", "6", "-j", "2", "--queue", "long",
                     "--prologue", "true"]) == 0
    kw = calls[-1]
    assert kw["args"][2].memory_gb == 6.0
    assert (kw["spec"].jobs, kw["spec"].queue, kw["spec"].prologue) == (2, "long", ["true"])   # flags win
    # [grade] also serves the other grading commands, each with the keys it has.
    report = _record(monkeypatch, "class_report")
    assert cli.main(["report", "lab01"]) == 0
    assert report[-1]["source"] == str(Path("~/private/solutions").expanduser())


def test_an_xlalab_toml_wins_over_pyproject_and_config_names_one(tmp_path, monkeypatch):
    _config(tmp_path, "[tool.xlalab.grade]\njobs = 3\n")
    _config(tmp_path, "[grade]\njobs = 5\nout = \"marks\"\n", "xlalab.toml")
    monkeypatch.chdir(tmp_path)
    calls = _record(monkeypatch, "grade_submissions")
    assert cli.main(["grade", "lab01", "a.ipynb"]) == 0
    assert calls[-1]["spec"].jobs == 5 and calls[-1]["args"][2].out == str(tmp_path / "marks")
    other = _config(tmp_path, "[tool.xlalab.grade]\njobs = 7\n", "other.toml")
    assert cli.main(["--config", str(other), "grade", "lab01", "a.ipynb"]) == 0
    assert calls[-1]["spec"].jobs == 7


@pytest.mark.parametrize("text, message", [
    ("[tool.xlalab.grade]\nmemroy_gb = 4\n", "unknown key 'memroy_gb' in section [grade]"),
    ("[tool.xlalab.grading]\njobs = 4\n", "unknown section 'grading'"),
    ("[tool.xlalab]\njobs = 4\n", "unknown key 'jobs'"),
    ("[tool.xlalab.grade]\njobs = \"four\"\n", "[grade] jobs expects int"),
    ("[tool.xlalab.grade]\nsandbox = \"docker\"\n", "[grade] sandbox must be one of auto, bwrap, none"),
    ("[tool.xlalab.grade]\nsimilarity_threshold = 2\n", "must be in (0, 1]"),
    ("[tool.xlalab.suite]\nworker = \"x\"\n", "unknown key 'worker' in section [suite]"),
])
def test_a_bad_config_is_a_clear_error(tmp_path, monkeypatch, capsys, text, message):
    _config(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    calls = _record(monkeypatch, "grade_submissions")
    assert cli.main(["grade", "lab01", "a.ipynb"]) == 2
    err = capsys.readouterr().err
    assert message in err and "pyproject.toml" in err, err
    assert not calls
    with pytest.raises(ConfigError, match="unknown|expects|must"):
        cli.load_defaults(tmp_path / "pyproject.toml")


@pytest.mark.parametrize("argv, name, expected", [
    (["report", "lab01", "--out", "g"], "class_report", {"args": ("lab01", "g"), "source": None,
                                                         "similarity_threshold": 0.6, "quiet": True}),
    (["merge-manual", "lab01", "m.csv", "--out", "g"], "merge_manual", {"args": ("lab01", "m.csv", "g"),
                                                                       "source": None}),
    (["export", "lab01", "canvas", "moodle", "--out", "g", "--moodle-id", "email"], "export_gradebook",
     {"args": ("lab01", "canvas", "g"), "source": None, "roster": None, "moodle_id": "email"}),
])
def test_each_subcommand_calls_its_function(tmp_path, monkeypatch, argv, name, expected):
    monkeypatch.chdir(tmp_path)
    calls = _record(monkeypatch, name)
    reports = _record(monkeypatch, "class_report") if name == "merge_manual" else []
    assert cli.main(argv) == 0
    assert calls and calls[0] == expected, calls
    if name == "merge_manual":
        assert len(reports) == 1, "merge-manual remakes the report"
    if name == "export_gradebook":
        assert [c["args"][1] for c in calls] == ["canvas", "moodle"]


def test_verbosity_flags_set_the_log_level(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _record(monkeypatch, "class_report")
    for argv, level in ((["report", "lab01"], logging.INFO), (["-v", "report", "lab01"], logging.DEBUG),
                        (["report", "lab01", "-q"], logging.WARNING)):
        assert cli.main(argv) == 0
        assert logging.getLogger("xlalab").level == level, argv


def test_python_m_xlalab_is_the_command():
    out = _run("-m", "xlalab", "--help")
    assert out.returncode == 0 and "merge-manual" in out.stdout, out.stderr


@pytest.mark.parametrize("module", ["xlalab.grade", "xlalab.assign", "xlalab.hlo_draw", "xlalab.nbval_plugin"])
def test_the_old_module_forms_are_gone(module):
    """One way in per command: ``xlalab <subcommand>`` (or ``python -m xlalab <subcommand>``)."""
    import importlib.util

    assert importlib.util.find_spec(module) is None


@pytest.mark.parametrize("old, new, name", [("xlalab.flops", "xlalab.hlo.flops", "dot_flops"),
                                            ("xlalab.hlo_memory", "xlalab.hlo.memory", "peak_live_bytes")])
def test_the_deprecated_names_warn_and_reexport(old, new, name, monkeypatch):
    """Chapters and Lab 7 hand-ins already out may use these for one term: a plain re-export that warns."""
    import importlib

    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    assert sys.modules[old] is module, "a module of its own, not a sys.modules swap"


def test_no_module_below_the_command_has_a_main_of_its_own():
    """One way in per command (review s5, 2.3): ``xlalab hw`` etc., never ``python -m xlalab.hw``."""
    import importlib

    for module in ("xlalab.hw", "xlalab.hlo.census", "xlalab.suite", "xlalab.gpu_check"):
        assert not hasattr(importlib.import_module(module), "main"), module
        source = Path(importlib.import_module(module).__file__ or "").read_text()
        assert '__name__ == "__main__"' not in source, module


@pytest.mark.parametrize("name, module", [("hw", "xlalab.hw"), ("hlo-census", "xlalab.hlo.census")])
def test_hw_and_hlo_census_run_their_modules(name, module, monkeypatch, tmp_path):
    import importlib

    monkeypatch.chdir(tmp_path)
    seen: list[object] = []

    def run(opts: object) -> int:
        seen.append(opts)
        return 0

    monkeypatch.setattr(importlib.import_module(module), "run", run)
    assert cli.main([name]) == 0
    assert len(seen) == 1


def test_the_console_script_is_registered():
    scripts = options.tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"xlalab": "xlalab.cli:main"}, "one console script: the xlalab command"


def test_messages_reach_stderr_and_q_keeps_only_warnings(tmp_path, monkeypatch, capsys):
    from xlalab import log as log_setup

    monkeypatch.chdir(tmp_path)
    _record(monkeypatch, "class_report")
    log = logging.getLogger("xlalab.grading.cli")
    try:
        assert cli.main(["report", "lab01"]) == 0
        log.info("progress line")
        assert "progress line\n" in capsys.readouterr().err
        assert cli.main(["-q", "report", "lab01"]) == 0
        log.info("progress line")
        log.warning("a warning")
        assert capsys.readouterr().err == "a warning\n"
    finally:
        log_setup.configure()


def test_a_missing_config_file_is_an_error(tmp_path, capsys):
    assert cli.main(["--config", str(tmp_path / "nope.toml"), "report", "lab01"]) == 2
    assert "no such config file" in capsys.readouterr().err
