"""Grade lab submissions with nbval, one isolated process per submission.

``python -m xlalab.grade LAB SUBMISSIONS... --out grades/ [-j N] [--source DIR] [--cell-timeout S]
[--timeout S] [--memory-gb G]``

LAB is a lab name (``lab01_timing``, looked up as ``<source>/<name>.ipynb``, default ``solutions/``) or the
path of a solution notebook. A submission is a notebook (the student is its file name) or a folder: each
notebook in it is one student, and each sub-folder holding a notebook is one student named after the folder.

For each submission the grader reads it (an unreadable file, a non-notebook or the wrong lab becomes a row
with 0 points and the reason), compares every visible check cell with the released lab (tampered or deleted
cells are reported and the released cell is used), puts the hidden checks back from the instructor source,
and runs the notebook with ``pytest --nbval-lax --nbval-current-env`` in a fresh temporary folder holding only
the notebook, in its own process session with a cell timeout, a wall-clock limit and an address-space limit.
Points, ids and hidden checks always come from the instructor source, never from the submission.

Outputs: ``<out>/gradebook.csv`` (student, total, max, one column per check, status; merged atomically under
a file lock, so re-grading one student replaces only that row) and ``<out>/feedback/<student>.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import csv
import fcntl
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import nbformat

from xlalab import assign
from xlalab._guard import INIT as GUARD_INIT
from xlalab.grading import parse_header

NBVAL_TAGS = {"raises-exception", "nbval-raises-exception", "nbval-skip", "nbval-check-output",
              "nbval-ignore-output", "pytest-validate-ignore-output"}
STATUS_OK = "graded"


# ----------------------------------------------------------------------------------------------------------
# Data


@dataclass
class CheckResult:
    """One check of one submission: passed only if nbval passed its cell and the guard saw it pass."""

    check: str
    points: float
    hidden: bool
    passed: bool
    message: str = ""

    @property
    def earned(self) -> float:
        return self.points if self.passed else 0.0


@dataclass
class Row:
    """One student's line of the gradebook, with what the feedback file needs."""

    student: str
    lab: str
    maximum: float
    checks: list[CheckResult] = field(default_factory=list)
    status: str = STATUS_OK
    tampering: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    cell_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    submission: str = ""

    @property
    def total(self) -> float:
        return sum(c.earned for c in self.checks)

    def points(self) -> dict[str, float]:
        return {c.check: c.earned for c in self.checks}


@dataclass
class Lab:
    """The instructor's source of one lab and the released student version made from it."""

    name: str
    source_path: Path
    source: Any
    released: Any
    checks: list[assign.Check]
    url: str = assign.REPOSITORY_TOKEN

    @property
    def maximum(self) -> float:
        return sum(c.points for c in self.checks)


# ----------------------------------------------------------------------------------------------------------
# The lab


def _find_config_root(start: Path) -> Path | None:
    for d in [start, *start.parents, Path.cwd(), Path(__file__).resolve().parent.parent]:
        if (d / "_config.yml").exists():
            return d
    return None


def load_lab(lab: str | Path, source: str | Path | None = None) -> Lab:
    """The instructor source of ``lab`` (a name or a path to a solution notebook).

    A name is looked up as ``<source>/<name>.ipynb``, where ``source`` defaults to ``solutions/`` in the
    current folder, then next to this package.
    """
    path = Path(lab)
    if not (path.suffix == ".ipynb" and path.exists()):
        name = assign.lab_name(lab)
        dirs = [Path(source)] if source else [Path("solutions"), Path(__file__).resolve().parent.parent / "solutions"]
        for d in dirs:
            if (d / f"{name}.ipynb").exists():
                path = d / f"{name}.ipynb"
                break
        else:
            raise FileNotFoundError(f"no instructor source for {lab!r} in " + ", ".join(map(str, dirs)))
    nb = assign.read(path)
    name = assign.lab_name(path)
    root = _find_config_root(path.resolve().parent)
    url = assign.repository_url(root) if root else assign.REPOSITORY_TOKEN
    released = assign.student_notebook(nb, url, name)
    return Lab(name, path, nb, released, assign.checks(nb), url)


# ----------------------------------------------------------------------------------------------------------
# Reading submissions


class Unreadable(Exception):
    """A submission that cannot be graded; the message is the reason shown in the gradebook."""


def read_submission(path: Path, lab: Lab) -> Any:
    """Parse a submission notebook; raise Unreadable with a reason a student understands."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise Unreadable(f"cannot read the file ({err.strerror})") from None
    if not raw.strip():
        raise Unreadable("empty file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Unreadable("not a text file (not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise Unreadable(f"not valid JSON (line {err.lineno}: {err.msg}); not a notebook") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Unreadable("not a Jupyter notebook (no list of cells)")
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as err:  # nbformat raises several kinds
        raise Unreadable(f"not a valid notebook ({type(err).__name__}: {str(err)[:200]})") from None
    for cell in nb.cells:
        if not isinstance(cell.get("source", ""), str) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise Unreadable("not a valid notebook (a cell has no text source or an unknown type)")
    meta = nb.metadata.get("xlalab", {})
    claimed = meta.get("lab") if isinstance(meta, dict) else None
    if isinstance(claimed, str) and claimed != lab.name:
        raise Unreadable(f"wrong lab: this notebook is {claimed}, expected {lab.name}")
    ids = {c.get("id") for c in lab.source.cells if c.get("id")}
    check_ids = {c.check for c in lab.checks}
    known = any(c.get("id") in ids for c in nb.cells) or any(
        (parse_header(c.source) or ("",))[0] in check_ids for c in nb.cells if c.cell_type == "code")
    if not known:
        raise Unreadable(f"wrong lab: no cell or check of {lab.name} found in this notebook")
    return nb


def expand_submissions(paths: Iterable[str | Path], lab_name: str) -> list[tuple[str, Path]]:
    """``(student, notebook path)`` for each submission argument (a notebook, or a folder of them)."""
    out: list[tuple[str, Path]] = []
    for p in map(Path, paths):
        if p.is_dir():
            for child in sorted(p.iterdir()):
                if child.is_file() and child.suffix == ".ipynb":
                    out.append((child.stem, child))
                elif child.is_dir() and not child.name.startswith("."):
                    nbs = sorted(child.glob("*.ipynb"))
                    pick = [n for n in nbs if n.stem == lab_name] or nbs
                    out.append((child.name, pick[0] if pick else child / f"{lab_name}.ipynb"))
        else:
            out.append((p.stem, p))
    return _distinct_names(out)


def _distinct_names(subs: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """Make student names unique: a clash is renamed ``<parent folder>-<name>``, then numbered."""
    counts: dict[str, int] = {}
    for name, _ in subs:
        counts[name] = counts.get(name, 0) + 1
    seen: set[str] = set()
    out = []
    for name, path in subs:
        unique = name if counts[name] == 1 else f"{path.resolve().parent.name}-{name}"
        base, k = unique, 2
        while unique in seen:
            unique, k = f"{base}-{k}", k + 1
        seen.add(unique)
        out.append((unique, path))
    return out


def safe_name(student: str) -> str:
    """A file-system-safe version of a student's name (for feedback/<student>.md)."""
    return re.sub(r"[^\w.\-]+", "_", student).strip("._") or "student"


# ----------------------------------------------------------------------------------------------------------
# Building the notebook that is run


def _is_check_like(cell: Any, lab: Lab) -> str | None:
    """The check id a submission cell claims to be (by source cell id, metadata or header), if any."""
    by_id = {c.cell_id: c.check for c in lab.checks if c.cell_id}
    if cell.get("id") in by_id:
        return by_id[cell.get("id")]
    meta = assign.xmeta(cell)
    if isinstance(meta.get("check"), str):
        return meta["check"]
    if cell.cell_type == "code":
        header = parse_header(cell.source)
        if header:
            return header[0]
    return None


def build_graded(lab: Lab, sub: Any, nonce: str, log_path: Path, nb_path: Path) -> tuple[Any, list[str]]:
    """The notebook to run for one submission, and the tampering found.

    A visible check stays where the student has it (its text replaced by the graded version); a hidden or
    deleted check is inserted after the nearest preceding source cell the submission still has (matched by
    cell id, or by identical text for cells that are not answers) and after the student's own cells that
    follow it. Check cells call the guard; their bodies travel in the injected first cell.
    """
    tampering: list[str] = []
    source_cells = lab.source.cells
    released_by_id = {c.get("id"): c for c in lab.released.cells}
    setup_ids = {c.get("id") for c in source_cells if assign.xmeta(c).get("setup")}
    check_by_id = {c.check: c for c in lab.checks}
    guard_name, bind_name = f"_xlalab_guard_{nonce}", f"_xlalab_bind_{nonce}"

    def graded_check(check: assign.Check) -> Any:
        return nbformat.v4.new_code_cell(
            source=f"# CHECK {check.check} ({check.points:g} points)\n{guard_name}({check.check!r})",
            id=f"xlalab-check-{lab.checks.index(check)}",
            metadata={"xlalab": {"check": check.check, "points": check.points, "hidden": check.hidden}})

    # The submission's cells in order: a cell claiming a known visible check becomes the graded check (at
    # the student's position); other check-like cells and the setup cell are dropped; the rest keep their
    # text but lose metadata and outputs (no nbval tags, no claimed checks) and get valid, unique ids.
    found: dict[str, Any] = {}
    body: list[Any] = []
    from_source: list[bool] = []  # whether body[i] is a cell of the source (a placed check counts)
    ids: set[str] = set()
    for i, cell in enumerate(sub.cells):
        claimed = _is_check_like(cell, lab)
        if claimed is not None:
            check = check_by_id.get(claimed)
            if check is not None and not check.hidden and claimed not in found:
                found[claimed] = cell
                body.append(graded_check(check))
                from_source.append(True)
            continue
        if cell.get("id") in setup_ids or assign.xmeta(cell).get("setup"):
            found.setdefault("__setup__", cell)
            continue
        cid = str(cell.get("id") or "")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,56}", cid) or cid.startswith("xlalab-"):
            cid = f"student-{i}"
        while cid in ids:
            cid += "-dup"
        ids.add(cid)
        if cell.cell_type == "code":
            body.append(nbformat.v4.new_code_cell(source=cell.source, id=cid))
        elif cell.cell_type == "markdown":
            body.append(nbformat.v4.new_markdown_cell(source=cell.source, id=cid))
        else:
            body.append(nbformat.v4.new_raw_cell(source=cell.source, id=cid))
        from_source.append(False)

    for check in lab.checks:
        if check.hidden:
            continue
        cell = found.get(check.check)
        if cell is None:
            tampering.append(f"check `{check.check}` was deleted; the released check was run")
        elif assign.source_digest(cell.source) != check.digest:
            tampering.append(f"check `{check.check}` was changed; the released check was run instead")
    setup_source = next((c for c in lab.released.cells if assign.xmeta(c).get("setup")), None)
    if setup_source is not None and "__setup__" in found and assign.source_digest(
            found["__setup__"].source.replace(assign.REPOSITORY_TOKEN, lab.url)) != \
            assign.source_digest(setup_source.source):
        tampering.append("the setup cell was changed; the released setup cell was run")

    def source_index(src: Any) -> int | None:
        """Where a non-check source cell is in the body (by id, or by identical text if not an answer)."""
        rel = released_by_id.get(src.get("id"))
        is_answer = assign.xmeta(src).get("solution") or assign.has_inline(src.source)
        digest = assign.source_digest(rel.source) if rel is not None and not is_answer else None
        for j, cell in enumerate(body):
            if cell.get("id") == src.get("id") or (digest and cell.cell_type == src.cell_type
                                                    and assign.source_digest(cell.source) == digest):
                return j
        return None

    # Mark the body cells that match source cells, then put each missing check (hidden, or a deleted visible
    # one) after the nearest preceding source cell present, and after the student's own cells that follow it.
    for src in source_cells:
        if "check" not in assign.xmeta(src) and not assign.xmeta(src).get("setup"):
            j = source_index(src)
            if j is not None:
                from_source[j] = True
    pos, after_answer = 0, False
    for src in source_cells:
        meta = assign.xmeta(src)
        if meta.get("setup"):
            continue
        if "check" in meta:
            check = check_by_id[meta["check"]]
            cell_id = f"xlalab-check-{lab.checks.index(check)}"
            placed = next((j for j, c in enumerate(body) if c.get("id") == cell_id), None)
            if placed is None:
                # After an answer cell, skip the student's own cells (their work on that answer); right
                # after another check (a hidden check following its visible one), do not.
                while after_answer and pos < len(body) and not from_source[pos]:
                    pos += 1
                body.insert(pos, graded_check(check))
                from_source.insert(pos, True)
                placed = pos
            pos, after_answer = placed + 1, False
        else:
            j = source_index(src)
            if j is not None:
                pos, after_answer = j + 1, True

    bodies = {c.check: c.source for c in lab.checks}
    visible = [c.check for c in lab.checks if not c.hidden]
    args = ", ".join(repr(a) for a in (str(log_path), str(nb_path), json.dumps(bodies), visible,
                                       guard_name, bind_name))
    init = nbformat.v4.new_code_cell(source=GUARD_INIT % {"args": args}, id="xlalab-grader-init")
    cells = [init]
    if setup_source is not None:
        cells.append(nbformat.v4.new_code_cell(source=setup_source.source, id=setup_source.get("id") or "setup",
                                               metadata={"xlalab": {"setup": True}}))
    cells.append(nbformat.v4.new_code_cell(source=f"{bind_name}()", id="xlalab-grader-bind"))
    nb = nbformat.v4.new_notebook(cells=cells + body,
                                  metadata={"kernelspec": dict(assign.KERNELSPEC), "xlalab": {"lab": lab.name}})
    return nb, tampering


# ----------------------------------------------------------------------------------------------------------
# Running one notebook


_LAUNCHER = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "if limit > 0:\n"
    "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'pytest'] + sys.argv[2:])\n"
)


def _child_env(extra: dict[str, str | None] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PYTEST_") or k.startswith("COV_") or k.startswith("COVERAGE_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("MPLBACKEND", "Agg")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Make sure the kernel imports this xlalab even when it is not installed.
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), package_root) if p)
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _is_kernel(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"ipykernel" in cmdline


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                records.append(rec)
    return records


@dataclass
class RunOutcome:
    plugin: list[dict]
    guard: list[dict]
    timed_out: bool
    returncode: int | None
    log_tail: str


def run_notebook(nb: Any, work: Path, priv: Path, nb_path: Path, *, cell_timeout: float, timeout: float,
                 memory_gb: float, env: dict[str, str | None] | None = None) -> RunOutcome:
    """Run a graded notebook under nbval in its own session; kill it (and its kernel) at ``timeout``."""
    nb_path.write_text(nbformat.writes(nb), encoding="utf-8")
    results = priv / "results.jsonl"
    ini = priv / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    log = priv / "pytest.log"
    limit = int(memory_gb * 2**30) if memory_gb and memory_gb > 0 else 0
    cmd = [sys.executable, "-c", _LAUNCHER, str(limit), str(nb_path), "-c", str(ini), "--rootdir", str(work),
           "-p", "xlalab.nbval_plugin", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
           "--nbval-lax", "--nbval-current-env", f"--nbval-cell-timeout={cell_timeout:g}",
           f"--xlalab-results={results}", "-q", "--tb=line", "-o", "addopts=", "-W", "ignore"]
    timed_out = False
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_child_env(env), start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
    plugin = _read_jsonl(results)
    for rec in plugin:  # the kernel runs in a session of its own: end it (and what it started) too
        if rec.get("event") == "kernel" and isinstance(rec.get("pid"), int) and _is_kernel(rec["pid"]):
            _kill_group(rec["pid"])
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - 4000))
        tail = f.read().decode("utf-8", errors="replace")
    return RunOutcome(plugin, _read_jsonl(priv / "guard.jsonl"), timed_out, proc.returncode, tail)


# ----------------------------------------------------------------------------------------------------------
# Scoring


GRADER_CELLS = ("xlalab-grader-init", "xlalab-grader-bind")


def score(lab: Lab, outcome: RunOutcome, timeout: float) -> tuple[list[CheckResult], list[str], list[str], str]:
    """Per-check results, notes of what the guard restored, errors of other cells, and the status."""
    lab_setup_id = next((c.get("id") for c in lab.released.cells if assign.xmeta(c).get("setup")), None)
    results = {}
    other_errors: list[str] = []
    died = None
    for rec in outcome.plugin:
        if rec.get("event") != "result":
            continue
        if rec.get("check"):
            prev = results.get(rec["check"])
            # A failure in any phase wins over a pass.
            if prev is None or prev.get("outcome") == "passed":
                results[rec["check"]] = rec
        elif rec.get("outcome") != "passed" and rec.get("phase") == "call":
            where = f"cell `{rec['id']}`" if rec.get("id") else f"code cell {rec.get('cell')}"
            other_errors.append(f"{where}: {rec.get('message') or rec.get('outcome')}")
        if "the kernel died" in (rec.get("message") or "") and died is None:
            died = rec["message"].replace(" while this cell ran", "")
    setup_failed = None
    for rec in outcome.plugin:
        if rec.get("event") == "result" and rec.get("outcome") != "passed" and rec.get("id") in GRADER_CELLS:
            setup_failed = f"the grader could not set up the kernel ({rec.get('message') or 'failed'})"
            break
        if rec.get("event") == "result" and rec.get("outcome") != "passed" and rec.get("id") == lab_setup_id:
            setup_failed = f"the lab's setup cell failed ({rec.get('message') or 'failed'})"
            break
    guard_end = {r["check"]: r for r in outcome.guard if r.get("event") == "end" and "check" in r}
    guard_start = {r["check"]: r for r in outcome.guard if r.get("event") == "start" and "check" in r}
    restored: list[str] = []
    for rec in outcome.guard:
        for note in rec.get("notes") or []:
            if note not in restored:
                restored.append(note)
    checks = []
    for check in lab.checks:
        rec, end = results.get(check.check), guard_end.get(check.check)
        nb_pass = rec is not None and rec.get("phase") == "call" and rec.get("outcome") == "passed"
        passed = bool(nb_pass and end is not None and end.get("passed") is True)
        if passed:
            message = ""
        elif setup_failed and end is None:
            message = f"did not run: {setup_failed}"
        elif end is not None and end.get("passed") is False:
            message = end.get("message") or "failed"
            if message.startswith("KeyboardInterrupt") and rec is not None and "Timeout" in rec.get("message", ""):
                message = rec["message"]
        elif rec is not None and rec.get("outcome") != "passed":
            message = rec.get("message") or rec.get("outcome", "failed")
            if message == "RuntimeError: Kernel dead on test start":
                message = "did not run: the kernel had died in an earlier cell"
            elif rec.get("xfail") and rec.get("outcome") == "skipped":
                message = "did not run normally: an earlier cell timed out"
        elif rec is not None and nb_pass and check.check in guard_start:
            message = "the check did not finish"
        elif rec is not None and nb_pass:
            message = "the check's code did not run (was the cell transformed?)"
        elif outcome.timed_out:
            message = f"did not run: the notebook reached the time limit ({timeout:g} s)"
        else:
            message = "did not run"
        checks.append(CheckResult(check.check, check.points, check.hidden, passed, message))
    status = STATUS_OK
    flags = []
    if setup_failed:
        flags.append(setup_failed)
    if outcome.timed_out:
        flags.append(f"time limit {timeout:g} s reached")
    if died:
        flags.append(died)
    if not any(r.get("event") == "result" for r in outcome.plugin) and not outcome.timed_out:
        flags.append("nbval did not run (see the grader log)")
    if flags:
        status += "; " + "; ".join(flags)
    return checks, restored, other_errors[:10], status


# ----------------------------------------------------------------------------------------------------------
# One submission, end to end


def grade_one(lab: Lab, student: str, path: Path, *, cell_timeout: float = 600, timeout: float = 1800,
              memory_gb: float = 8, env: dict[str, str | None] | None = None, keep: bool = False) -> Row:
    """Grade one submission; never raises (a grader error becomes the row's status).

    ``env`` adds (or, with a value of None, removes) environment variables of the grading process,
    e.g. ``{"XLALAB_PROFILE": "tiny"}``; ``keep`` leaves the temporary folder for debugging.
    """
    start = time.monotonic()
    row = Row(student, lab.name, lab.maximum, submission=str(path))
    zero = [CheckResult(c.check, c.points, c.hidden, False, "not graded") for c in lab.checks]
    tmp = None
    try:
        try:
            sub = read_submission(path, lab)
        except Unreadable as err:
            row.checks, row.status = zero, f"not graded: {err}"
            return row
        tmp = Path(tempfile.mkdtemp(prefix="xlalab-grade-"))
        work, priv = tmp / "work", tmp / "priv"
        work.mkdir()
        priv.mkdir()
        nb_path = work / f"{lab.name}.ipynb"
        nonce = secrets.token_hex(8)
        graded, row.tampering = build_graded(lab, sub, nonce, priv / "guard.jsonl", nb_path)
        outcome = run_notebook(graded, work, priv, nb_path, cell_timeout=cell_timeout, timeout=timeout,
                               memory_gb=memory_gb, env=env)
        row.checks, row.restored, row.cell_errors, row.status = score(lab, outcome, timeout)
        if row.tampering:
            row.status += "; tampered"
        if row.restored:
            row.status += "; guard restored " + str(len(row.restored))
    except Exception as err:  # the grader itself failed on this submission: record it, go on
        row.checks = zero
        row.status = f"not graded: grader error ({type(err).__name__}: {str(err)[:200]})"
    finally:
        row.seconds = time.monotonic() - start
        if tmp is not None and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return row


# ----------------------------------------------------------------------------------------------------------
# Outputs


def _fmt(x: float) -> str:
    return f"{x:g}"


def feedback_text(row: Row) -> str:
    """The Markdown feedback for one student."""
    lines = [f"# {row.lab}: feedback for {row.student}", "",
             f"**Score: {_fmt(row.total)} / {_fmt(row.maximum)} points** ({row.status})", ""]
    if row.status.startswith("not graded"):
        lines += [f"Your submission could not be graded: {row.status.removeprefix('not graded: ')}.", ""]
    lines += ["| check | kind | points | result |", "|---|---|---|---|"]
    for c in row.checks:
        result = "pass" if c.passed else "FAIL: " + c.message.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{c.check}` | {'hidden' if c.hidden else 'visible'} | {_fmt(c.earned)} / "
                     f"{_fmt(c.points)} | {result} |")
    if row.tampering:
        lines += ["", "## Tampering", ""] + [f"- {t}" for t in row.tampering]
    if row.restored:
        lines += ["", "## Put back before the checks ran", "",
                  "Your notebook had replaced these; the checks ran with the originals:", ""]
        lines += [f"- `{n}`" for n in row.restored[:30]]
    if row.cell_errors:
        lines += ["", "## Errors in your cells", ""] + [f"- {e}" for e in row.cell_errors]
    return "\n".join(lines) + "\n"


def _locked(out: Path):
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / ".gradebook.lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def merge_gradebook(out: Path, rows: list[Row], check_ids: list[str]) -> Path:
    """Replace these students' rows in ``out/gradebook.csv`` (atomic write under a lock); keep the others."""
    path = out / "gradebook.csv"
    lock = _locked(out)
    try:
        existing: dict[str, dict[str, str]] = {}
        columns = ["student", "total", "max", *check_ids, "status"]
        if path.exists():
            with open(path, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                for name in reader.fieldnames or []:
                    if name not in columns:
                        columns.insert(columns.index("status"), name)
                for rec in reader:
                    existing[rec["student"]] = rec
        for row in rows:
            rec = {"student": row.student, "total": _fmt(row.total), "max": _fmt(row.maximum),
                   "status": row.status}
            rec.update({c.check: _fmt(c.earned) for c in row.checks})
            existing[row.student] = rec
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for student in sorted(existing):
            writer.writerow(existing[student])
        tmp = path.with_name(f".gradebook.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        tmp.write_text(buf.getvalue(), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        lock.close()
    return path


def write_feedback(out: Path, row: Row) -> Path:
    """Write ``out/feedback/<student>.md`` atomically."""
    d = out / "feedback"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{safe_name(row.student)}.md"
    tmp = d / f".{path.name}.{secrets.token_hex(4)}.tmp"
    tmp.write_text(feedback_text(row), encoding="utf-8")
    os.replace(tmp, path)
    return path


def summary_table(rows: list[Row]) -> str:
    """A plain-text table: student, total / max, status."""
    width = max([len(r.student) for r in rows] + [7])
    lines = [f"{'student':<{width}}  {'points':>11}  {'time':>6}  status"]
    for r in sorted(rows, key=lambda r: r.student):
        lines.append(f"{r.student:<{width}}  {_fmt(r.total) + ' / ' + _fmt(r.maximum):>11}  "
                     f"{r.seconds:5.0f}s  {r.status}")
    return "\n".join(lines)


def grade_submissions(lab: str | Path, submissions: Iterable[str | Path], out: str | Path = "grades", *,
                      jobs: int = 1, source: str | Path | None = None, cell_timeout: float = 600,
                      timeout: float = 1800, memory_gb: float = 8, env: dict[str, str | None] | None = None,
                      progress: bool = False) -> list[Row]:
    """Grade every submission of one lab; write the gradebook and feedback under ``out``; return the rows.

    Example: ``grade_submissions("lab01_timing", ["hand-ins/"], "grades", jobs=2)``.
    """
    the_lab = load_lab(lab, source)
    out = Path(out)
    entries = expand_submissions(submissions, the_lab.name)
    ids = [c.check for c in the_lab.checks]
    rows: list[Row] = []

    def one(entry: tuple[str, Path]) -> Row:
        student, path = entry
        try:
            row = grade_one(the_lab, student, path, cell_timeout=cell_timeout, timeout=timeout,
                            memory_gb=memory_gb, env=env)
        except BaseException as err:  # grade_one does not raise; this is the last line of defence
            row = Row(student, the_lab.name, the_lab.maximum,
                      [CheckResult(c.check, c.points, c.hidden, False, "not graded") for c in the_lab.checks],
                      status=f"not graded: grader error ({type(err).__name__})", submission=str(path))
        write_feedback(out, row)
        merge_gradebook(out, [row], ids)
        if progress:
            print(f"{row.student}: {_fmt(row.total)} / {_fmt(row.maximum)} ({row.status})", flush=True)
        return row

    if jobs <= 1:
        rows = [one(e) for e in entries]
    else:
        with futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(one, entries))
    if not entries:
        merge_gradebook(out, [], ids)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xlalab.grade", description=__doc__.split("\n\n")[0])
    parser.add_argument("lab", help="lab name (lab01_timing) or path to its solution notebook")
    parser.add_argument("submissions", nargs="+", help="notebooks or folders of them")
    parser.add_argument("--out", default="grades", help="output folder (gradebook.csv, feedback/)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="submissions graded at once")
    parser.add_argument("--source", default=None,
                        help="folder with the instructor's lab sources (with hidden checks); default solutions/")
    parser.add_argument("--cell-timeout", type=float, default=600, help="seconds per cell (nbval)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for a whole notebook")
    parser.add_argument("--memory-gb", type=float, default=8,
                        help="address-space limit of the grading process and its kernel (TF+XLA needs >= 4)")
    args = parser.parse_args(argv)
    try:
        rows = grade_submissions(args.lab, args.submissions, args.out, jobs=args.jobs, source=args.source,
                                 cell_timeout=args.cell_timeout, timeout=args.timeout,
                                 memory_gb=args.memory_gb, progress=True)
    except (FileNotFoundError, assign.FormatError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print()
    print(summary_table(rows))
    print(f"\ngradebook: {Path(args.out) / 'gradebook.csv'}; feedback: {Path(args.out) / 'feedback'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
