"""xlalab.compat: optional dependencies fail with the fixing command, Colab's kernel-side install, the build note."""

from __future__ import annotations

import os
import re
import subprocess
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
    from xlalab.options import tomllib

    shipped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["xlalab"]
    assert "built_with.json" in shipped
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


LAB02_HLO = REPO / "tests" / "data" / "hlo" / "lab02"


def _lab02_cells():
    import nbformat

    nb = nbformat.read(REPO / "solutions" / "lab02_hlo_fusion.ipynb", as_version=4)
    answer = next(c.source for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith(
        "# BEGIN SOLUTION") and "PREDICTED = {" in c.source)
    check = next(c.source for c in nb.cells if c.metadata.get("xlalab", {}).get("check") == "fusion-predictions")
    return answer, check


def _grade_lab02(monkeypatch, answer: str, tf_version: str, built: dict) -> str:
    """Run Lab 2's answer and fusion-predictions check on the HLO XLA:CPU of TensorFlow 2.19.1 wrote; its output."""
    import contextlib
    import io
    import types

    import numpy as np

    import xlalab.hlo

    def fake_fn(name):
        f = lambda *a: None  # noqa: E731
        f.__name__ = name
        return f

    def hlo_text(fn, *args, stage="optimized_hlo"):
        return (LAB02_HLO / f"tf2.19.1_cpu_lab02_{fn.__name__}.{stage}.txt").read_text()

    monkeypatch.setattr(xlalab.hlo, "hlo_text", hlo_text)
    monkeypatch.setattr(compat, "tensorflow_version", lambda: tf_version)
    monkeypatch.setattr(compat, "built_with", lambda path=None: dict(built))
    names = ["elementwise_chain", "row_sum", "dense_relu", "softmax", "layer_norm"]
    # The check cell's two parts run in one namespace, as while a student works: probe calls its function.
    ns = {"np": np, "xlalab": xlalab, "tf": types.SimpleNamespace(__version__=tf_version), "backend": "XLA:CPU",
          "CASES": {n: (fake_fn(n), ()) for n in names}, "probe": lambda name, fn: fn(),
          "written": lambda *names: {}}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(answer, ns)  # the course's own solution cell
        exec(_lab02_cells()[1], ns)  # the check cell
    return out.getvalue()


def test_lab02_reference_passes_on_another_tensorflow(monkeypatch):
    """The reference predictions (written for TF 2.21's XLA:CPU) earn the check on TF 2.19.1's XLA:CPU too, which
    makes 0 fusions of a row sum (a failure of today's main: 'PREDICTED['row_sum']['fusions'] is 1, but XLA:CPU
    makes 0')."""
    answer, _ = _lab02_cells()
    out = _grade_lab02(monkeypatch, answer, "2.19.1", {"tensorflow": "2.21.0", "backend": "XLA:CPU"})
    assert "only 0 <= fusions <= kernels <= unfused kernels was checked" in out


def test_lab02_exact_on_the_course_compiler(monkeypatch):
    """Where the grading compiler is the course's, the literal counts are graded exactly (here: the 2.19.1 HLO with
    2.19 recorded as the build, so the 2.21 numbers of the reference are wrong)."""
    answer, _ = _lab02_cells()
    with pytest.raises(AssertionError, match=r"PREDICTED\['row_sum'\]\['fusions'\] is 1, but XLA:CPU makes 0"):
        _grade_lab02(monkeypatch, answer, "2.19.1", {"tensorflow": "2.19.1", "backend": "XLA:CPU"})
    right = answer.replace('"row_sum": {"fusions": 1, "kernels": 1}', '"row_sum": {"fusions": 0, "kernels": 2}')
    right = right.replace('"softmax": {"fusions": 4, "kernels": 4}', '"softmax": {"fusions": 2, "kernels": 6}')
    right = right.replace('"layer_norm": {"fusions": 5, "kernels": 5}', '"layer_norm": {"fusions": 3, "kernels": 6}')
    out = _grade_lab02(monkeypatch, right, "2.19.1", {"tensorflow": "2.19.1", "backend": "XLA:CPU"})
    assert "row_sum            fusions 0" in out and "was checked" not in out


@pytest.mark.parametrize("bad", ['"softmax": {"fusions": 5, "kernels": 4}', '"softmax": {"fusions": 4, "kernels": 99}',
                                 '"softmax": {"fusions": -1, "kernels": 4}'])
def test_lab02_lenient_grading_still_fails_impossible_counts(monkeypatch, bad):
    answer, _ = _lab02_cells()
    wrong = answer.replace('"softmax": {"fusions": 4, "kernels": 4}', bad)
    assert wrong != answer
    with pytest.raises(AssertionError, match=r"PREDICTED\['softmax'\] is"):
        _grade_lab02(monkeypatch, wrong, "2.19.1", {"tensorflow": "2.21.0", "backend": "XLA:CPU"})


def test_lab_text_names_the_course_compiler():
    """@BUILT_WITH@ in a lab's text becomes the recorded compiler (Lab 2 says what its predictions are graded on)."""
    from xlalab.grading import assign

    _, text = assign.build(REPO / "solutions" / "lab02_hlo_fusion.ipynb", REPO)
    ref = compat.built_with()
    assert "@BUILT_WITH@" not in text
    assert f"{ref['backend']} of TensorFlow {ref['tensorflow']}" in text
    assert "@BUILT_WITH@" in (REPO / "solutions" / "lab02_hlo_fusion.ipynb").read_text()


# --- issue 26: a quiet start on a machine without a GPU, the chapters' setup cell --------------------------------

PROBE_LINES = (b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
               b"I0000 00:00:1796386532.202844   10631 port.cc:153] oneDNN custom operations are on. You may see "
               b"slightly different numerical results due to floating-point round-off errors from different "
               b"computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
               b"I0000 00:00:1796327193.390510   16311 cudart_stub.cc:31] Could not find cuda drivers on your "
               b"machine, GPU will not be used.\n"
               b"E0000 00:00:1796327202.954515   16311 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
               b"error: Failed call to cuInit: UNKNOWN ERROR (303)\n")


def _python(code: str, timeout: int = 300, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def test_held_probe_messages_drop_only_the_cuda_probe():
    """TensorFlow 2.21's probe lines on a CPU machine (recorded) go; any other line written to fd 2 stays."""
    code = ("import os\nfrom xlalab import compat\nwith compat.held_probe_messages():\n"
            f"    os.write(2, {PROBE_LINES!r} + b'a real problem\\n')\n"
            "os.write(2, b'after\\n')\n")
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == ["a real problem", "after"], out.stderr


def test_held_probe_messages_keep_a_fatal_message_when_the_process_dies():
    code = ("import os\nfrom xlalab import compat\nwith compat.held_probe_messages():\n"
            "    os.write(2, b'F0000 parse_flags_from_env.cc:234] Unknown flag in TF_XLA_FLAGS\\n')\n"
            "    os._exit(3)\n")
    out = _python(code)
    assert out.returncode == 3 and "Unknown flag in TF_XLA_FLAGS" in out.stderr, out.stderr


@pytest.mark.heavy   # two Python subprocesses import TensorFlow
def test_quiet_tensorflow_says_no_gpu_in_one_line():
    """On this CPU machine, importing TensorFlow prints the CUDA probe's messages; quiet_tensorflow() prints one
    line instead (what a lab's setup cell shows)."""
    from xlalab import hw

    if hw.gpus() or compat.nvidia_driver_present():
        pytest.skip("a machine with an NVIDIA driver: TensorFlow's probe finds it and prints nothing to hold back")
    loud = _python("import tensorflow as tf\ntf.config.list_physical_devices('GPU')", TF_CPP_MIN_LOG_LEVEL="2")
    assert "cuInit" in loud.stderr or "Could not find cuda drivers" in loud.stderr, loud.stderr
    quiet = _python("from xlalab import compat\nprint(compat.quiet_tensorflow())", TF_CPP_MIN_LOG_LEVEL="2")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.splitlines() == [compat.NO_GPU_LINE, "[]"], quiet.stdout
    assert "cuInit" not in quiet.stderr and "cuda drivers" not in quiet.stderr, quiet.stderr
    assert "oneDNN custom operations" not in quiet.stderr, quiet.stderr  # INFO, printed before TF_CPP_MIN_LOG_LEVEL


@pytest.mark.heavy   # a Python subprocess imports TensorFlow
def test_quiet_tensorflow_under_a_fake_gpu_prints_nothing(monkeypatch):
    monkeypatch.setenv("XLALAB_FAKE_GPU", "NVIDIA A100-SXM4-40GB")
    out = _python("from xlalab import compat\ncompat.quiet_tensorflow(list_devices=False)",
                  XLALAB_FAKE_GPU="NVIDIA A100-SXM4-40GB")
    assert out.returncode == 0 and out.stdout == "", out.stdout


def test_glue_stand_in_shows_what_the_book_would_show(capsys):
    glue = compat.glue_stand_in().glue
    glue("hidden", 12345, display=False)
    glue("shown", 678)
    assert capsys.readouterr().out.strip() == "678"


@pytest.mark.heavy   # a Python subprocess runs chapter_setup(), which imports TensorFlow
def test_chapter_setup_gives_a_kernel_without_myst_nb_the_stand_in():
    """In a kernel without myst_nb (Colab), `from myst_nb import glue` works after the chapter's setup cell."""
    code = ("import importlib.util, sys\n"
            "real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'myst_nb' else real(name, *a)\n"
            "sys.modules.pop('myst_nb', None)\n"
            "from xlalab import compat\n"
            "compat.install_missing = lambda modules=compat.KERNEL_SIDE: []\n"
            "compat.chapter_setup()\n"
            "from myst_nb import glue\n"
            "print('glue_stand_in' in (sys.modules['myst_nb'].__doc__ or ''))\n")
    out = _python(code, TF_CPP_MIN_LOG_LEVEL="2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "True", out.stdout


def test_every_book_page_starts_with_the_hidden_setup_cell():
    """Each book/*.ipynb's FIRST cell installs the course where xlalab is missing (Colab), hidden in the HTML."""
    import json

    sys.path.insert(0, str(REPO / "tests"))
    from scripts import chapter_setup

    pages = sorted((REPO / "book").glob("*.ipynb"))
    assert len(pages) >= 10
    for path in pages:
        first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
        assert first == chapter_setup.setup_cell(), f"{path.name}: run python tests/scripts/chapter_setup.py"
        assert first["metadata"]["tags"] == ["remove-cell"]
        src = "".join(first["source"])
        assert 'find_spec("xlalab") is None' in src and "--no-deps" in src
        import yaml

        url = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]
        assert f'"git+{url}"' in src and f'xlalab.compat.chapter_setup(repository="{url}")' in src
    assert chapter_setup.main(["--check"]) == 0


def test_lab_setup_cells_start_tensorflow_quietly():
    import nbformat

    for path in sorted((REPO / "solutions").glob("lab*.ipynb")):
        setup = next(c for c in nbformat.read(path, as_version=4).cells
                     if c.cell_type == "code" and c.metadata.get("xlalab", {}).get("setup"))
        src = setup.source
        assert "xlalab.compat.quiet_tensorflow()" in src, path.name
        assert src.index("xlalab.compat.quiet_tensorflow()") < src.index("import tensorflow"), path.name


@pytest.mark.heavy   # a Python subprocess runs chapter_setup(), which imports TensorFlow
def test_chapter_setup_runs_twice_and_beside_another_stand_in():
    """A setup cell run twice (the stand-in is then in sys.modules), or after a test's own stub without __spec__
    (compat_matrix's profiler capture): importlib's find_spec raised ValueError there."""
    code = ("import sys, types\n"
            "sys.modules['myst_nb'] = types.SimpleNamespace(glue=lambda *a, **k: None)\n"
            "from xlalab import compat\n"
            "compat.install_missing = lambda modules=compat.KERNEL_SIDE: []\n"
            "compat.chapter_setup()\n"
            "del sys.modules['myst_nb']\n"
            "import importlib.util\n"
            "real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'myst_nb' else real(name, *a)\n"
            "compat.chapter_setup()\n"
            "compat.chapter_setup()\n"
            "print(compat.importable('myst_nb'))\n")
    out = _python(code, TF_CPP_MIN_LOG_LEVEL="2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "True", out.stdout
