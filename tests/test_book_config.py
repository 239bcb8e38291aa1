"""_config.yml: the book reads only the course's own pages (review s5, item 7 of the book issue).

`make book` after `make test-compat` failed: Sphinx read 882 Markdown and reST files inside `.venv-compat/` (package
READMEs and licences), and `-W` turned their warnings into a failed build. Every folder that .gitignore names is
something a make target, pip, pytest or the grader creates; each must be excluded from the book.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _excluded(path: str, patterns: list[str]) -> bool:
    """Whether Sphinx's exclude_patterns (globs relative to the root) exclude ``path`` or a folder above it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p, pat.removeprefix("**/")) for p in prefixes
               for pat in patterns)


def _ignored_folders() -> list[str]:
    """The folders .gitignore names, as paths relative to the root (leading and trailing slashes dropped)."""
    out = []
    for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and line.endswith("/"):
            out.append(line.strip("/"))
    return out


def test_every_gitignored_folder_is_excluded_from_the_book():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    patterns = config["exclude_patterns"]
    folders = _ignored_folders()
    assert ".venv-compat" in folders and "_build" in folders
    missing = [f for f in folders if not _excluded(f.replace("*", "x"), patterns)]
    assert not missing, f"_config.yml exclude_patterns should exclude {missing} (gitignored, made by the tools)"


def test_the_rule_can_fail():
    assert not _excluded(".venv-compat/tf2.20/README.md", ["_build", ".venv"])
    assert _excluded(".venv-compat/tf2.20/README.md", [".venv-compat"])
    assert _excluded("pkg.egg-info", ["*.egg-info"])
