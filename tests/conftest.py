"""The shared fixtures; the shared builders are in the ``helpers`` package (tests/helpers/)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from helpers import SAMPLE, SAMPLE_URL, make_lab_root, sample_solution


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
