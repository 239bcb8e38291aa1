"""The shared fixtures; the shared builders are in the ``helpers`` package (tests/helpers/)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from helpers import SAMPLE, SAMPLE_URL, make_lab_root, sample_solution
from helpers.stay_home import Guard, diff


@pytest.fixture
def sample_root(tmp_path: Path) -> Path:
    """A repository root with _config.yml and solutions/lab90_sample.ipynb (no labs/ yet)."""
    (tmp_path / "_config.yml").write_text(f"title: t\nrepository:\n  url: {SAMPLE_URL}\n", encoding="utf-8")
    (tmp_path / "solutions").mkdir()
    nbformat.write(sample_solution(), str(tmp_path / "solutions" / f"{SAMPLE}.ipynb"))
    return tmp_path


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory) -> Path:
    """A repository with the sample lab in solutions/ and labs/, one per test module."""
    return make_lab_root(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="session", autouse=True)
def grader_state(tmp_path_factory) -> Iterator[Path]:
    """The grader's private spool goes to a folder of this test session, not ~/.local/state."""
    path = tmp_path_factory.mktemp("grader-state")
    old = os.environ.get("XLALAB_GRADER_STATE")
    os.environ["XLALAB_GRADER_STATE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("XLALAB_GRADER_STATE", None)
    else:
        os.environ["XLALAB_GRADER_STATE"] = old


@pytest.fixture(scope="session")
def home_guard(tmp_path_factory) -> Iterator[Guard]:
    """Issue 34, item 11 (:mod:`helpers.stay_home`): the checkout and $HOME watched, canary gradebooks planted;
    IPython's and Jupyter's runtime state (unjailed kernels write there) goes to this session's folder."""
    state = tmp_path_factory.mktemp("ipython-jupyter")
    saved = {k: os.environ.get(k) for k in ("IPYTHONDIR", "JUPYTER_RUNTIME_DIR")}
    os.environ["IPYTHONDIR"] = str(state / "ipython")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(state / "runtime")
    guard = Guard.from_env()
    guard.plant(tmp_path_factory.getbasetemp())
    yield guard
    guard.remove()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def stays_home(home_guard: Guard) -> Iterator[None]:
    """Fails a test that created, changed or deleted a file outside its temporary folders (in the checkout or
    $HOME), or touched a canary gradebook."""
    before = home_guard.snapshot()
    yield
    found = diff(before, home_guard.snapshot()) + home_guard.touched_canaries()
    if found:
        pytest.fail("the test wrote outside its temporary folder:\n" + "\n".join(found[:20]), pytrace=False)
