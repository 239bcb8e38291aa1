"""Tests stay home (issue 34, item 11): the guard that ``tests/conftest.py`` runs around every test.

It snapshots the files of the repository checkout and of ``$HOME`` (path, size, mtime in ns; folders by their
presence) before and after each test, and plants canary ``gradebook.csv`` files outside every test's temporary
folder (one next to pytest's base temporary folder, one in the checkout's ``_build/``): a test that creates,
changes or deletes a watched file, or touches a canary, fails with the list. Left out, as what tests and the tools
they run legitimately write: version control, environments, build outputs and caches (:data:`SKIP_NAMES`,
``.venv*``, ``*.egg-info``), and in ``$HOME`` what :data:`HOME_SKIP` lists (the grader's own state,
``~/.local/state/xlalab``, stays watched). IPython's and
Jupyter's runtime state (kernels started unjailed write there) is sent to the session's temporary folder by the
conftest instead.

``XLALAB_TEST_REPO`` and ``XLALAB_TEST_HOME`` replace the watched folders (the guard's own test runs pytest on a
made-up checkout and home inside its temporary folder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKIP_NAMES = frozenset({".git", "_build", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                        ".ipynb_checkpoints", ".jupyter_cache", "node_modules"})
# In $HOME: caches and toolchains, and what the tools the tests run write there on their own whatever the test
# asks (Keras' config on first import, Dask's jobqueue.yaml, matplotlib's config folder, headless Chromium's crash
# reports beside its temporary profile), and kernels' runtime state, which other processes of the same user (a
# checkout without this guard) write at any time; this session's own goes to its temporary folder.
HOME_SKIP = frozenset({".cache", ".pyenv", ".rustup", ".cargo", ".m2", ".npm", ".claude", ".keras", ".config/dask",
                       ".config/matplotlib", ".config/chromium", ".config/chromium-headless", ".ipython",
                       ".local/share/jupyter", ".jupyter"})
CANARY = "student,total,max,status\nann,6,6,graded\n"

Entry = tuple[int, int]


def _skipped(name: str) -> bool:
    return name in SKIP_NAMES or name.startswith(".venv") or name.endswith(".egg-info")


def scan(root: Path, skip: frozenset[str] = frozenset()) -> dict[str, Entry]:
    """Every file and folder under ``root`` (not following links) as path -> (size, mtime_ns); folders as
    (-1, 0), so that only their presence counts (their mtime moves with their content, seen anyway). ``skip``:
    paths relative to ``root`` left out with what they hold."""
    found: dict[str, Entry] = {}
    base = str(root).rstrip(os.sep) + os.sep
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if _skipped(entry.name) or entry.path[len(base):] in skip:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    found[entry.path] = (-1, 0)
                    stack.append(entry.path)
                else:
                    st = entry.stat(follow_symlinks=False)
                    found[entry.path] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue
    return found


def diff(before: dict[str, Entry], after: dict[str, Entry]) -> list[str]:
    """What changed between two scans, one line each: ``created``, ``deleted``, ``changed`` and the path."""
    lines = [f"created {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"deleted {p}" for p in sorted(before.keys() - after.keys())]
    lines += [f"changed {p}" for p in sorted(p for p in before.keys() & after.keys() if before[p] != after[p])]
    return lines


@dataclass
class Guard:
    """The watched folders and the planted canaries of one pytest process."""

    repo: Path
    home: Path | None
    canaries: list[Path] = field(default_factory=list)

    @classmethod
    def from_env(cls) -> Guard:
        repo = Path(os.environ.get("XLALAB_TEST_REPO") or REPO)
        home = os.environ.get("XLALAB_TEST_HOME") or os.path.expanduser("~")
        return cls(repo, Path(home) if home and Path(home).is_dir() and Path(home) != repo else None)

    def snapshot(self) -> dict[str, Entry]:
        found = scan(self.repo)
        if self.home is not None and not self.repo.is_relative_to(self.home):
            found.update(scan(self.home, HOME_SKIP))
        elif self.home is not None:   # the checkout inside $HOME: scanned once, as the checkout
            found.update({p: e for p, e in scan(self.home, HOME_SKIP).items()
                          if not Path(p).is_relative_to(self.repo)})
        return found

    def plant(self, basetemp: Path) -> None:
        """A canary gradebook next to pytest's base temporary folder and one in the checkout's ``_build/``."""
        tag = f"xlalab-canary-{os.getpid()}"
        for folder in (basetemp.parent / tag, self.repo / "_build" / tag):
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "gradebook.csv"
            path.write_text(CANARY, encoding="utf-8")
            self.canaries.append(path)

    def touched_canaries(self) -> list[str]:
        out = []
        for path in self.canaries:
            try:
                same = path.read_text(encoding="utf-8") == CANARY
            except OSError as err:
                out.append(f"canary {path}: {type(err).__name__}")
                continue
            if not same:
                out.append(f"canary {path}: overwritten")
        for path in self.canaries:   # put back, so that only the test that touched one fails
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(CANARY, encoding="utf-8")
        return out

    def remove(self) -> None:
        for path in self.canaries:
            try:
                path.unlink()
                path.parent.rmdir()
            except OSError:
                pass
        self.canaries.clear()
