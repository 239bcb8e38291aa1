"""xlalab.compat: optional dependencies fail with the fixing command, Colab's kernel-side install, the build note."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from xlalab import compat

REPO = Path(__file__).resolve().parent.parent


def test_require_names_the_fixing_command():
    with pytest.raises(compat.MissingDependency, match=r"a test needs 'no_such_mod'.*pip install 'no_such_mod'"):
        compat.require("no_such_mod.sub", "a test")  # an unknown name: the command installs that name
    assert compat.fix_command("xprof") == "pip install 'xprof>=2.24,<3'"


def test_require_returns_the_module():
    assert compat.require("json", "a test").dumps([1]) == "[1]"


def test_missing_xprof_is_one_clear_error(monkeypatch):
    """Without xprof, xlalab.profile's converters raise MissingDependency naming the command (not deep inside)."""
    import xlalab.profile as profile

    monkeypatch.setitem(sys.modules, "xprof", None)   # import xprof -> ModuleNotFoundError
    monkeypatch.setitem(sys.modules, "xprof.convert", None)
    prof = profile.Profile("/nonexistent", "/nonexistent/run", [], 1, "step")
    with pytest.raises(compat.MissingDependency, match=r"pip install 'xprof>=2.24,<3'"):
        profile.tool_names(prof)


def test_optional_pins_equal_pyproject():
    """Each requirement the fixing command installs is the one pyproject.toml declares."""
    text = (REPO / "pyproject.toml").read_text()
    declared = set(re.findall(r'"([A-Za-z0-9_.\[\]-]+[<>=!~][^"]*)"', text))
    for module, req in compat.OPTIONAL.items():
        assert req in declared, f"{module}: {req!r} is not a requirement in pyproject.toml"


def test_install_missing_does_nothing_when_present(monkeypatch):
    monkeypatch.setattr(compat.subprocess, "run", lambda *a, **k: pytest.fail("pip ran"))
    assert compat.install_missing(("json",)) == []


def test_install_missing_pins_tensorflow_and_reports_failure(monkeypatch):
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        seen["constraints"] = Path(cmd[cmd.index("-c") + 1]).read_text()
        return compat.subprocess.CompletedProcess(cmd, 1, "", "no network")

    monkeypatch.setattr(compat.subprocess, "run", fake_run)
    with pytest.raises(compat.MissingDependency, match="no network"):
        compat.install_missing(("xprof_absent_module",))
    assert seen["cmd"][-1] == "xprof_absent_module"
    assert re.search(r"^tensorflow==", seen["constraints"], re.M), seen["constraints"]
    assert re.search(r"^numpy==", seen["constraints"], re.M)


def test_environment_note():
    ref = {"tensorflow": "2.21.0", "backend": "XLA:CPU"}
    assert compat.environment_note("XLA:CPU", "2.21.3", ref) == ""
    note = compat.environment_note("XLA:GPU", "2.19.1", ref)
    assert "TensorFlow 2.19.1 (the course: 2.21.0)" in note and "XLA:GPU (the course: XLA:CPU)" in note
    assert "\n" not in note
    assert compat.matches_build("XLA:CPU", "2.21.0", ref) and not compat.matches_build("XLA:CPU", "2.19.1", ref)
    assert compat.matches_build("XLA:GPU", "2.19.1", {})   # nothing recorded: nothing to differ from


def test_built_with_is_recorded_and_shipped(tmp_path):
    ref = compat.built_with()
    assert set(ref) == {"tensorflow", "backend"} and ref["backend"] in ("XLA:CPU", "XLA:GPU")
    assert 'xlalab = ["built_with.json"]' in (REPO / "pyproject.toml").read_text()
    out = compat.record_built_with("XLA:CPU", tmp_path / "b.json")
    assert compat.built_with(tmp_path / "b.json") == out and out["tensorflow"] == compat.tensorflow_version()


def test_setup_cells_install_kernel_side_and_warn():
    import nbformat

    for path in sorted((REPO / "solutions").glob("lab*.ipynb")):
        setup = [c for c in nbformat.read(path, as_version=4).cells
                 if c.cell_type == "code" and c.metadata.get("xlalab", {}).get("setup")]
        assert len(setup) == 1, path
        src = setup[0].source
        assert "--no-deps" in src and "xlalab.compat.install_missing()" in src, path
        assert "xlalab.compat.warn(" in src, path
