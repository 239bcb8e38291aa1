"""Building the notebook that is run in the student's kernel for one submission.

The student's cells keep their text (not their metadata or outputs); every visible check is the released one,
at the student's position (a tampered or deleted check is reported and the released one is run; a check of an
earlier release is noted, not called tampering); hidden checks are put back from the instructor source, after all
the student's cells. Every check cell holds only its probing part (the lines before ``# JUDGE``), run by the
grader in a namespace of its own with its own seed: its assertions and expected values never reach the student's
kernel, nor the grading run's master seed. The first cell sets the
probes to record (:mod:`xlalab.grading.probe`); the verdicts come from the judge (:mod:`xlalab.grading.judge`).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading import assign
from xlalab.grading.judge import probing_part
from xlalab.grading.lab import Lab
from xlalab.grading.notebook import parse_header
from xlalab.grading.probe import derive

NBVAL_TAGS = {"raises-exception", "nbval-raises-exception", "nbval-skip", "nbval-check-output",
              "nbval-ignore-output", "pytest-validate-ignore-output"}

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


RECORD_INIT = ("# xlalab grader: probes record what the student's code returns (injected; not part of the lab)\n"
               "import xlalab.grading.probe\n"
               "xlalab.grading.probe.configure('record', %(path)r)\n")
REPLAY_INIT = ("# xlalab judge: probes return what the student's kernel recorded (no student code runs here)\n"
               "import xlalab.grading.probe\n"
               "xlalab.grading.probe.configure('replay', %(path)r, %(seed)d, sources=%(sources)r, "
               "verdicts=%(verdicts)r)\n")
# A graded check cell: its header, then its probing part run by the grader (probe.run_check), reached through the
# import system (not a global name a student's cell could rebind), with the check's own seed.
CHECK_CALL = "__import__('xlalab.grading.probe', fromlist=['run_check']).run_check(%(check)r, %(seed)d, %(source)r)\n"


def graded_check_source(check: assign.Check, master: int) -> str:
    """The source of a check cell in the student's graded notebook: the header line (what nbval, the notebook's
    report and the feedback name it by) and a call of :func:`xlalab.grading.probe.run_check` with the check's
    probing part and its seed derived from the grading run's ``master`` seed (the only seed in that cell)."""
    probing = probing_part(check.source)
    header = probing.splitlines()[0] if probing.strip() else f"# CHECK {check.check} ({check.points:g} points)"
    return header + "\n" + CHECK_CALL % {"check": check.check, "seed": derive(master, check.check),
                                         "source": probing}


def _older_release(lab: Lab, key: str, digest: str) -> bool:
    """Whether ``digest`` is the text of check ``key`` (or ``__setup__``) in an earlier release of ``lab``."""
    return digest in released_digests().get(lab.name, {}).get("checks", {}).get(key, ())


def _added_later(lab: Lab, missing: str, present: dict[str, str]) -> bool:
    """Whether a hand-in without check ``missing`` is an earlier release of ``lab`` that did not have that check
    yet: a release without it that has the hand-in's checks of a released text (``present``: id -> digest; an
    edited check, tampering of its own, says nothing of the release)."""
    known = released_digests().get(lab.name, {}).get("checks", {})
    mine = {k: d for k, d in present.items() if d in known.get(k, ())}
    for release in released_digests().get(lab.name, {}).get("releases", []):
        if missing not in release and mine and all(release.get(k) == d for k, d in mine.items()):
            return True
    return False


def _compare(lab: Lab, key: str, what: str, digest: str, current: str, tampering: list[str],
             notes: list[str] | None) -> None:
    """Report a submitted cell (``digest``) that differs from the released text (``current``): the text of an
    earlier release is a note (``notes``), anything else tampering. ``what`` is ``check `id``` or ``setup cell``."""
    if digest == current:
        return
    noun = what.split(" `")[0]
    if _older_release(lab, key, digest):
        if notes is not None:
            notes.append(f"your notebook has an older version of this {what}; the released {noun} ran")
        return
    if key == "__setup__":
        tampering.append("the setup cell was changed; the released setup cell was run")
    else:
        tampering.append(f"{what} was changed; the released {noun} was run instead")


def build_graded(lab: Lab, sub: Any, records_path: Path, seed: int,
                 notes: list[str] | None = None) -> tuple[Any, list[str]]:
    """The notebook to run for one submission, and the tampering found.

    A visible check stays where the student has it (its text replaced by the graded version); a deleted visible
    check is inserted after the nearest preceding source cell the submission still has (matched by cell id, or
    by identical text for cells that are not answers) and after the student's own cells that follow it. Hidden
    checks come after all the student's cells, in the source's order: their secret inputs reach the kernel only
    once the student's code has run. A check cell runs its probing part only, in a namespace of its own
    (:func:`graded_check_source`); ``records_path`` is where the probes write (in the work folder), ``seed`` the
    grading run's master seed, from which each check's seed is derived (the master is not in the notebook).
    ``notes`` receives what is not tampering: check cells of an earlier release of the lab.
    """
    tampering: list[str] = []
    source_cells = lab.source.cells
    released_by_id = {c.get("id"): c for c in lab.released.cells}
    setup_ids = {c.get("id") for c in source_cells if assign.xmeta(c).get("setup")}
    check_by_id = {c.check: c for c in lab.checks}

    def graded_check(check: assign.Check) -> Any:
        return nbformat.v4.new_code_cell(
            source=graded_check_source(check, seed),
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

    present = {k: assign.source_digest(c.source) for k, c in found.items() if k != "__setup__"}
    for check in lab.checks:
        if check.hidden:
            continue
        cell = found.get(check.check)
        if cell is None and present and _added_later(lab, check.check, present):
            if notes is not None:
                notes.append(f"your notebook is from an earlier release of the lab, without the check "
                             f"`{check.check}`; the released check ran")
        elif cell is None:
            tampering.append(f"check `{check.check}` was deleted; the released check was run")
        else:
            _compare(lab, check.check, f"check `{check.check}`", assign.source_digest(cell.source), check.digest,
                     tampering, notes)
    setup_source = next((c for c in lab.released.cells if assign.xmeta(c).get("setup")), None)
    if setup_source is not None and "__setup__" in found:
        _compare(lab, "__setup__", "setup cell",
                 assign.source_digest(found["__setup__"].source.replace(assign.REPOSITORY_TOKEN, lab.url)),
                 assign.source_digest(setup_source.source), tampering, notes)

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

    # Mark the body cells that match source cells, then put each deleted visible check after the nearest
    # preceding source cell present, and after the student's own cells that follow it (their work on that
    # answer); right after another check, not.
    for src in source_cells:
        if "check" not in assign.xmeta(src) and not assign.xmeta(src).get("setup"):
            j = source_index(src)
            if j is not None:
                from_source[j] = True
    pos, after_answer = 0, False
    for src in source_cells:
        meta = assign.xmeta(src)
        if meta.get("setup") or meta.get("hidden"):
            continue
        if "check" in meta:
            check = check_by_id[meta["check"]]
            cell_id = f"xlalab-check-{lab.checks.index(check)}"
            placed = next((j for j, c in enumerate(body) if c.get("id") == cell_id), None)
            if placed is None:
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
    body += [graded_check(check) for check in lab.checks if check.hidden]

    init = nbformat.v4.new_code_cell(source=RECORD_INIT % {"path": str(records_path)}, id="xlalab-grader-init")
    cells = [init]
    if setup_source is not None:
        cells.append(nbformat.v4.new_code_cell(source=setup_source.source, id=setup_source.get("id") or "setup",
                                               metadata={"xlalab": {"setup": True}}))
    nb = nbformat.v4.new_notebook(cells=cells + body,
                                  metadata={"kernelspec": dict(assign.KERNELSPEC), "xlalab": {"lab": lab.name}})
    return nb, tampering


# ------------------------------------------------------------------------------- check cells of earlier releases
RELEASED_CHECKS = Path(__file__).with_name("released_checks.json")


@functools.lru_cache(maxsize=1)
def released_digests() -> dict[str, Any]:
    """``{lab: {"checks": {check id or "__setup__": [digest, ...]}, "releases": [{check id: digest}, ...]}}``: the
    text of every released version of each visible check (and setup cell), and which checks each release had, from
    :data:`RELEASED_CHECKS` (written by :func:`record_released_checks`)."""
    try:
        data = json.loads(RELEASED_CHECKS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def released_cell_digests(nb: Any) -> dict[str, str]:
    """``{check id or "__setup__": digest}`` of a released lab notebook's visible checks and setup cell."""
    out: dict[str, str] = {}
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        meta = assign.xmeta(cell)
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        key = meta.get("check") if isinstance(meta.get("check"), str) else None
        if key is None and meta.get("setup"):
            key = "__setup__"
        if key is None:
            header = parse_header(source) if cell.get("cell_type") == "code" else None
            key = header[0] if header else None
        if key is not None:
            out.setdefault(key, assign.source_digest(source))
    return out


def history_digests(root: Path) -> dict[str, Any]:
    """What :func:`released_digests` reads, from the git history of ``root/labs/lab*.ipynb`` (``git log --follow``
    of each file, ``git show`` of each commit), the current file included."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout

    out: dict[str, Any] = {}
    for path in sorted(Path(root, "labs").glob("lab*.ipynb")):
        rel = path.relative_to(root).as_posix()
        texts = [path.read_text(encoding="utf-8")]
        for entry in git("log", "--follow", "--format=%x00%H", "--name-only", "--", rel).split("\0"):
            words = entry.split()
            if len(words) < 2:
                continue
            rev, names = words[0], words[1:]
            try:
                texts.append(git("show", f"{rev}:{names[-1]}"))
            except subprocess.CalledProcessError:
                continue
        checks: dict[str, list[str]] = {}
        releases: list[dict[str, str]] = []
        for text in texts:
            try:
                digests = released_cell_digests(json.loads(text))
            except (ValueError, AttributeError, TypeError):
                continue
            for key, digest in digests.items():
                if digest not in checks.setdefault(key, []):
                    checks[key].append(digest)
            release = {k: d for k, d in digests.items() if k != "__setup__"}
            if release not in releases:
                releases.append(release)
        out[assign.lab_name(path)] = {"checks": checks, "releases": releases}
    return out


def record_released_checks(root: Path, target: Path = RELEASED_CHECKS) -> Path:
    """Write :data:`RELEASED_CHECKS` from the git history of ``root/labs`` (``xlalab assign
    --record-built-with``, what ``make labs`` runs): the grader then names a check cell of an earlier release an
    older version, not tampering."""
    data = history_digests(Path(root))
    target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    released_digests.cache_clear()
    return target
