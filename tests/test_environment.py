"""The project's setup files agree: environment.yml installs this package, pyproject holds the dependencies."""

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_installs_this_package_and_nothing_else():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert pip_sections == [["-e .[dev]"]], "environment.yml must install the package with pip: -e .[dev]"
    conda_names = {re.split(r"[=<> ]", d)[0] for d in deps if isinstance(d, str)}
    # Besides Python and pip, only programs pip cannot install (Graphviz's `dot`, which xlalab.hlo.draw runs); each
    # is one that .ci/run installs from Debian too, so conda and CI environments have the same programs.
    system_programs = {"graphviz"}
    assert conda_names - system_programs == {"python", "pip"}, \
        f"dependencies belong in pyproject.toml, not environment.yml: {conda_names}"
    ci = (ROOT / ".ci" / "run").read_text()
    for program in conda_names & system_programs:
        assert f"install -y -qq {program}" in ci, f"environment.yml installs {program}, .ci/run does not"


def test_python_versions_agree():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    py = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    version = tuple(int(x) for x in py.split("=")[1].split("."))
    m = re.search(r">=\s*([\d.]+)", _pyproject()["project"]["requires-python"])
    assert m, "requires-python has no lower bound"
    minimum = tuple(int(x) for x in m[1].split("."))
    assert version >= minimum


def test_pyproject_pins_what_the_course_needs():
    project = _pyproject()["project"]
    deps = " ".join(project["dependencies"])
    for name in ("tensorflow>=2.18", "jupyter-book>=1.0.4,<2", "matplotlib", "nbval", "pytest", "ipykernel",
                 "nbconvert"):
        assert name in deps, name
    assert re.search(r"tensorflow>=2\.18,<2\.\d+", deps), \
        "TensorFlow needs an upper bound below the next untested minor"
    assert {"dev", "gpu"} <= set(project["optional-dependencies"])
    assert any("and-cuda" in d for d in project["optional-dependencies"]["gpu"])


def test_tensorflow_range_is_what_make_test_compat_tests():
    """The range's lower bound is the oldest TensorFlow `make test-compat` runs; every version it runs is inside."""
    deps = " ".join(_pyproject()["project"]["dependencies"])
    bounds = re.search(r"tensorflow>=2\.(\d+),<2\.(\d+)", deps)
    compat_line = re.search(r"^COMPAT_TF\s*\?=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert bounds and compat_line, "no TensorFlow range in pyproject.toml or no COMPAT_TF in the Makefile"
    low, high = (int(x) for x in bounds.groups())
    pins = compat_line[1].split()
    minors = sorted(int(v.split(".")[1]) for v in pins)
    assert minors[0] == low, f"pyproject allows TensorFlow 2.{low}, make test-compat's oldest is 2.{minors[0]}"
    assert all(low <= m < high for m in minors), (pins, low, high)
    # Every minor the range admits is tested: by make test-compat, or by make test itself (the newest, which a
    # plain install resolves to); the others are excluded with !=2.N.*.
    excluded = {int(m) for m in re.findall(r"tensorflow[^\"]*?!=2\.(\d+)\.\*", deps)}
    tested = set(minors) | {high - 1}
    untested = [f"2.{m}" for m in range(low, high) if m not in tested | excluded]
    assert not untested, f"pyproject allows TensorFlow {untested}, which no run tests; test them or exclude them"


def test_installed_tensorflow_is_inside_the_pinned_range():
    import tensorflow as tf

    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    deps = " ".join(_pyproject()["project"]["dependencies"])
    bounds = re.search(r"tensorflow>=2\.(\d+),<2\.(\d+)", deps)
    assert bounds, "no TensorFlow range in pyproject.toml"
    low, upper = (int(x) for x in bounds.groups())
    assert (major, minor) >= (2, low) and minor < upper
    assert f"!=2.{minor}.*" not in deps, f"TensorFlow {tf.__version__} is installed, but the range excludes it"


def test_repository_url_lives_in_config():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"].startswith("https://")
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def test_ci_runs_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_ci_runs_make_test_compat():
    assert "make test-compat" in (ROOT / ".ci" / "run").read_text()


def test_nbconvert_runs_a_notebook_headless():
    """`jupyter nbconvert --to notebook --execute lab.ipynb` works in the course environment (issue 26)."""
    import shutil
    import subprocess

    exe = Path(sys.executable).parent / "jupyter-nbconvert"
    assert exe.exists() or shutil.which("jupyter-nbconvert"), "nbconvert is not installed: pip install -e '.[dev]'"
    out = subprocess.run([sys.executable, "-m", "nbconvert", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip()[0].isdigit(), out.stderr


def _compat_versions() -> list[str]:
    m = re.search(r"^COMPAT_TF\s*\?=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, "the Makefile sets no COMPAT_TF"
    return m[1].split()


def test_each_compat_tensorflow_has_colabs_pins_with_their_source():
    """Every TensorFlow `make test-compat` runs is pinned as Colab shipped it (.ci/colab-tf<version>.txt): the
    TensorFlow itself, Keras, NumPy and Matplotlib at least, from Colab's published pip freeze (its URL)."""
    versions = _compat_versions()
    assert {v.rsplit(".", 1)[0] for v in versions} >= {"2.18", "2.19", "2.20"}
    for v in versions:
        path = ROOT / ".ci" / f"colab-tf{v}.txt"
        assert path.exists(), f"make test-compat runs TensorFlow {v} without Colab's pins ({path.name})"
        text = path.read_text()
        header = [line for line in text.splitlines() if line.startswith("#")]
        assert any("https://github.com/googlecolab/backend-info/blob/" in line for line in header), path.name
        assert re.search(r"^# python: 3\.\d+$", text, re.M), path.name
        pins = dict(line.split("==", 1) for line in text.splitlines() if line and not line.startswith("#"))
        pins = {k.lower().replace("_", "-"): val for k, val in pins.items()}
        assert pins.get("tensorflow") == v, f"{path.name} pins TensorFlow {pins.get('tensorflow')}, not {v}"
        for name in ("keras", "numpy", "matplotlib", "ipykernel", "protobuf", "ml-dtypes"):
            assert name in pins, f"{path.name} does not pin {name}"
    make = (ROOT / "Makefile").read_text()
    assert "-c .ci/colab-tf$*.txt" in make, "the compat venvs must install under Colab's pins"
