"""Tests stay home (issue 34, item 11): the guard of ``tests/conftest.py`` can fail.

pytest runs, in this test's temporary folder, this suite's own ``conftest.py`` and ``helpers`` on a made-up checkout
and home (``XLALAB_TEST_REPO``, ``XLALAB_TEST_HOME``), with tests that write outside their temporary folder in each
of the ways the guard watches, and one that stays home.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import stay_home

TESTS = Path(__file__).resolve().parent

INNER = '''import glob, os
from pathlib import Path

REPO, HOME = Path(os.environ["XLALAB_TEST_REPO"]), Path(os.environ["XLALAB_TEST_HOME"])


def test_creates_in_the_checkout(tmp_path):
    (REPO / "stray.txt").write_text("x")


def test_changes_a_file_of_home(tmp_path):
    (HOME / ".bashrc").write_text("changed")


def test_deletes_in_the_checkout(tmp_path):
    (REPO / "solutions" / "lab.ipynb").unlink()


def test_overwrites_every_gradebook_it_finds(tmp_path):
    for top in (REPO, tmp_path.parents[1]):
        for d, _, files in os.walk(top):
            if "gradebook.csv" in files:
                Path(d, "gradebook.csv").write_text("hacker,1000")


def test_writes_in_a_cache_and_its_own_folder(tmp_path):
    (tmp_path / "mine.txt").write_text("fine")
    (REPO / "__pycache__").mkdir(exist_ok=True)
    (REPO / "__pycache__" / "x.pyc").write_text("fine")
    (HOME / ".cache").mkdir(exist_ok=True)
    (HOME / ".cache" / "pip.txt").write_text("fine")
'''


def test_the_guard_fails_each_test_that_writes_outside_its_folder(tmp_path):
    repo, home, inner = tmp_path / "repo", tmp_path / "home", tmp_path / "inner"
    (repo / "solutions").mkdir(parents=True)
    (repo / "solutions" / "lab.ipynb").write_text("{}")
    home.mkdir()
    (home / ".bashrc").write_text("# bash\n")
    (inner / "tests").mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", inner / "tests" / "conftest.py")
    shutil.copytree(TESTS / "helpers", inner / "tests" / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    (inner / "tests" / "test_inner.py").write_text(INNER)
    env = {**os.environ, "XLALAB_TEST_REPO": str(repo), "XLALAB_TEST_HOME": str(home),
           "PYTHONDONTWRITEBYTECODE": "1"}
    env = {k: v for k, v in env.items() if not k.startswith(("PYTEST_", "COV_"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:randomly", "-p", "no:xdist",
                           "-p", "no:cacheprovider", "-rE", f"--basetemp={tmp_path / 'base'}"],
                          cwd=inner, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "5 passed, 4 errors" in out, out
    assert f"created {repo / 'stray.txt'}" in out, out
    assert f"changed {home / '.bashrc'}" in out, out
    assert f"deleted {repo / 'solutions' / 'lab.ipynb'}" in out, out
    canaries = [line for line in out.splitlines() if "canary" in line and "overwritten" in line]
    assert len({line.split("canary ")[1] for line in canaries}) == 2, out   # both canaries, once each
    assert "test_writes_in_a_cache_and_its_own_folder" not in "".join(
        line for line in out.splitlines() if line.startswith("ERROR")), out
    assert not list(tmp_path.glob("xlalab-canary-*")) and not list((repo / "_build").glob("xlalab-canary-*")), \
        "the canaries are removed at the end"


def test_a_scan_sees_created_changed_and_deleted_files_and_skips_caches(tmp_path):
    (tmp_path / "a").write_text("1")
    (tmp_path / ".venv-x").mkdir()
    before = stay_home.scan(tmp_path)
    (tmp_path / "a").write_text("22")
    (tmp_path / "b").mkdir()
    (tmp_path / ".venv-x" / "c").write_text("ignored")
    after = stay_home.scan(tmp_path)
    assert stay_home.diff(before, after) == [f"created {tmp_path / 'b'}", f"changed {tmp_path / 'a'}"]
    (tmp_path / "b" / "tool").mkdir()
    (tmp_path / "b" / "tool" / "state").write_text("skipped by its path")
    (tmp_path / "b" / "mine").write_text("seen")
    later = stay_home.scan(tmp_path, frozenset({"b/tool"}))
    assert stay_home.diff(after, later) == [f"created {tmp_path / 'b' / 'mine'}"]
