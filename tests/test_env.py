"""Every ``XLALAB_*`` environment variable is named once, in :mod:`xlalab.env`, with its meaning (review s5, 7.7)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from xlalab import env

REPO = Path(__file__).resolve().parent.parent
NAME = re.compile(r"\bXLALAB_[A-Z][A-Z0-9_]*\b")
# Where the variables are set or read: the package, the tests and their scripts, the Makefile, CI, docs, chapters.
PLACES = ["xlalab/**/*.py", "tests/**/*.py", "Makefile", ".ci/*", "*.md", "book/*.ipynb", "book/*.md",
          "solutions/*.ipynb"]


def _used() -> dict[str, set[str]]:
    """Each ``XLALAB_*`` name found in the repository's files -> the files naming it."""
    found: dict[str, set[str]] = {}
    for pattern in PLACES:
        for path in REPO.glob(pattern):
            if path.is_file() and "_build" not in path.parts:
                for name in NAME.findall(path.read_text(encoding="utf-8", errors="replace")):
                    found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def spelled_out(source: str) -> list[tuple[int, str]]:
    """Lines of ``source`` that name a variable in code (a string that is exactly ``XLALAB_...``, or a keyword
    argument of that name) instead of taking it from :mod:`xlalab.env`; prose in strings does not count."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.keyword) and node.arg and NAME.fullmatch(node.arg):
            out.append((node.value.lineno, node.arg))
    return out


def test_every_variable_used_is_listed_with_its_meaning():
    used = _used()
    assert env.PROFILE in used and env.FAKE_GPU in used, "the scan found nothing: wrong folder?"
    missing = {name: sorted(files) for name, files in used.items() if name not in env.VARIABLES}
    assert not missing, f"add these to xlalab/env.py VARIABLES: {missing}"
    stale = [name for name in env.VARIABLES if name not in used or used[name] == {"xlalab/env.py"}]
    assert not stale, f"listed in xlalab/env.py but used nowhere: {stale}"
    assert all(len(meaning) > 20 for meaning in env.VARIABLES.values())


def test_the_package_takes_the_names_from_env():
    found = {str(path.relative_to(REPO)): spelled_out(path.read_text(encoding="utf-8"))
             for path in sorted((REPO / "xlalab").rglob("*.py")) if path.name != "env.py"}
    found = {path: lines for path, lines in found.items() if lines}
    assert not found, f"use xlalab.env's constants: {found}"


def test_spelled_out_finds_a_literal_and_a_keyword_but_not_prose():
    source = ('import os\nos.environ.get("XLALAB_CACHE")\ndict(XLALAB_PROFILE="tiny")\n'
              'x = "set XLALAB_FAKE_GPU to a name"\nos.environ.get(env.CACHE)\n')
    assert spelled_out(source) == [(2, "XLALAB_CACHE"), (3, "XLALAB_PROFILE")]
