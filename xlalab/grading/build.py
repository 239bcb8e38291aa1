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

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading import labformat, releases
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
    meta = labformat.xmeta(cell)
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


def graded_check_source(check: labformat.Check, master: int) -> str:
    """The source of a check cell in the student's graded notebook: the header line (what nbval, the notebook's
    report and the feedback name it by) and a call of :func:`xlalab.grading.probe.run_check` with the check's
    probing part and its seed derived from the grading run's ``master`` seed (the only seed in that cell)."""
    probing = probing_part(check.source)
    header = probing.splitlines()[0] if probing.strip() else f"# CHECK {check.check} ({check.points:g} points)"
    return header + "\n" + CHECK_CALL % {"check": check.check, "seed": derive(master, check.check),
                                         "source": probing}


def _older_release(lab: Lab, key: str, digest: str) -> bool:
    """Whether ``digest`` is the text of check ``key`` (or ``__setup__``) in an earlier release of ``lab``."""
    return digest in releases.released_digests().get(lab.name, {}).get("checks", {}).get(key, ())


def _added_later(lab: Lab, missing: str, present: dict[str, str]) -> bool:
    """Whether a hand-in without check ``missing`` is an earlier release of ``lab`` that did not have that check
    yet: a release without it that has the hand-in's checks of a released text (``present``: id -> digest; an
    edited check, tampering of its own, says nothing of the release)."""
    known = releases.released_digests().get(lab.name, {}).get("checks", {})
    mine = {k: d for k, d in present.items() if d in known.get(k, ())}
    for release in releases.released_digests().get(lab.name, {}).get("releases", []):
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


@dataclass
class Build:
    """One submission's graded notebook as the transforms (:data:`TRANSFORMS`) make it, and what they found."""

    lab: Lab
    """The lab."""
    sub: Any
    """The submission (a NotebookNode)."""
    records_path: Path
    """Where the probes write (in the work folder)."""
    seed: int
    """The grading run's master seed (each check's seed derives from it; it is never in the notebook)."""
    notes: list[str] | None = None
    """What is not tampering: check cells of an earlier release of the lab (None: not collected)."""
    tampering: list[str] = field(default_factory=list)
    """Check or setup cells changed or deleted (the released ones run)."""
    found: dict[str, Any] = field(default_factory=dict)
    """The submission's cell of each visible check it has, and of the setup cell (``"__setup__"``)."""
    body: list[Any] = field(default_factory=list)
    """The cells after the grader's (the student's, the checks)."""
    from_source: list[bool] = field(default_factory=list)
    """Whether ``body[i]`` is a cell of the source (a placed check counts)."""
    cells: list[Any] = field(default_factory=list)
    """The grader's first cells (the records' set-up, the released setup cell)."""

    def graded_check(self, check: labformat.Check) -> Any:
        """The graded cell of ``check`` (:func:`graded_check_source`)."""
        return nbformat.v4.new_code_cell(
            source=graded_check_source(check, self.seed), id=_check_cell_id(self.lab, check),
            metadata={"xlalab": {"check": check.check, "points": check.points, "hidden": check.hidden}})

    def notebook(self) -> Any:
        """The notebook to run."""
        return nbformat.v4.new_notebook(cells=self.cells + self.body, metadata={
            "kernelspec": dict(labformat.KERNELSPEC), "xlalab": {"lab": self.lab.name}})


def _check_cell_id(lab: Lab, check: labformat.Check) -> str:
    return f"xlalab-check-{lab.checks.index(check)}"


def _student_cell(cell: Any, index: int, ids: set[str]) -> Any:
    """A submission cell as it runs: its text only (no metadata, no outputs: no nbval tags, no claimed checks),
    under a valid id not used before (``ids``, updated)."""
    cid = str(cell.get("id") or "")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,56}", cid) or cid.startswith("xlalab-"):
        cid = f"student-{index}"
    while cid in ids:
        cid += "-dup"
    ids.add(cid)
    if cell.cell_type == "code":
        return nbformat.v4.new_code_cell(source=cell.source, id=cid)
    if cell.cell_type == "markdown":
        return nbformat.v4.new_markdown_cell(source=cell.source, id=cid)
    return nbformat.v4.new_raw_cell(source=cell.source, id=cid)


def take_cells(b: Build) -> None:
    """The submission's cells in order: a cell claiming a known visible check becomes the graded check (at the
    student's position; its first claim only); other check-like cells and the setup cell are dropped (kept in
    ``found`` to compare); the rest keep their text only (:func:`_student_cell`)."""
    setup_ids = {c.get("id") for c in b.lab.source.cells if labformat.xmeta(c).get("setup")}
    check_by_id = {c.check: c for c in b.lab.checks}
    ids: set[str] = set()
    for i, cell in enumerate(b.sub.cells):
        claimed = _is_check_like(cell, b.lab)
        if claimed is not None:
            check = check_by_id.get(claimed)
            if check is not None and not check.hidden and claimed not in b.found:
                b.found[claimed] = cell
                b.body.append(b.graded_check(check))
                b.from_source.append(True)
        elif cell.get("id") in setup_ids or labformat.xmeta(cell).get("setup"):
            b.found.setdefault("__setup__", cell)
        else:
            b.body.append(_student_cell(cell, i, ids))
            b.from_source.append(False)


def _released_setup(lab: Lab) -> Any:
    return next((c for c in lab.released.cells if labformat.xmeta(c).get("setup")), None)


def find_tampering(b: Build) -> None:
    """Each visible check the submission deleted or changed, and a changed setup cell, is tampering (the released
    one runs); a check or setup cell of an earlier release, or a check added after the submission's release, is
    a note."""
    lab = b.lab
    present = {k: labformat.source_digest(c.source) for k, c in b.found.items() if k != "__setup__"}
    for check in lab.checks:
        if check.hidden:
            continue
        cell = b.found.get(check.check)
        if cell is None and present and _added_later(lab, check.check, present):
            if b.notes is not None:
                b.notes.append(f"your notebook is from an earlier release of the lab, without the check "
                               f"`{check.check}`; the released check ran")
        elif cell is None:
            b.tampering.append(f"check `{check.check}` was deleted; the released check was run")
        else:
            _compare(lab, check.check, f"check `{check.check}`", labformat.source_digest(cell.source), check.digest,
                     b.tampering, b.notes)
    setup_source = _released_setup(lab)
    if setup_source is not None and "__setup__" in b.found:
        _compare(lab, "__setup__", "setup cell",
                 labformat.source_digest(b.found["__setup__"].source.replace(labformat.REPOSITORY_TOKEN, lab.url)),
                 labformat.source_digest(setup_source.source), b.tampering, b.notes)


def _source_index(b: Build, src: Any) -> int | None:
    """Where a non-check source cell is in the body (by id, or by identical text if not an answer)."""
    rel = {c.get("id"): c for c in b.lab.released.cells}.get(src.get("id"))
    is_answer = labformat.xmeta(src).get("solution") or labformat.has_inline(src.source)
    digest = labformat.source_digest(rel.source) if rel is not None and not is_answer else None
    for j, cell in enumerate(b.body):
        if cell.get("id") == src.get("id") or (digest and cell.cell_type == src.cell_type
                                                and labformat.source_digest(cell.source) == digest):
            return j
    return None


def place_deleted_checks(b: Build) -> None:
    """Put each deleted visible check after the nearest preceding source cell the submission still has (matched
    by id, or by identical text for cells that are not answers), and after the student's own cells that follow
    it (their work on that answer); right after another check, not."""
    for src in b.lab.source.cells:
        if "check" not in labformat.xmeta(src) and not labformat.xmeta(src).get("setup"):
            j = _source_index(b, src)
            if j is not None:
                b.from_source[j] = True
    check_by_id = {c.check: c for c in b.lab.checks}
    pos, after_answer = 0, False
    for src in b.lab.source.cells:
        meta = labformat.xmeta(src)
        if meta.get("setup") or meta.get("hidden"):
            continue
        if "check" not in meta:
            j = _source_index(b, src)
            if j is not None:
                pos, after_answer = j + 1, True
            continue
        check = check_by_id[meta["check"]]
        placed = next((j for j, c in enumerate(b.body) if c.get("id") == _check_cell_id(b.lab, check)), None)
        if placed is None:
            while after_answer and pos < len(b.body) and not b.from_source[pos]:
                pos += 1
            b.body.insert(pos, b.graded_check(check))
            b.from_source.insert(pos, True)
            placed = pos
        pos, after_answer = placed + 1, False


def append_hidden_checks(b: Build) -> None:
    """The hidden checks, after all the student's cells, in the source's order: their secret inputs reach the
    kernel only once the student's code has run."""
    hidden = [b.graded_check(check) for check in b.lab.checks if check.hidden]
    b.body += hidden
    b.from_source += [True] * len(hidden)


def add_grader_cells(b: Build) -> None:
    """The grader's first cells: the probes set to record into ``records_path``, then the released setup cell."""
    b.cells = [nbformat.v4.new_code_cell(source=RECORD_INIT % {"path": str(b.records_path)}, id="xlalab-grader-init")]
    setup_source = _released_setup(b.lab)
    if setup_source is not None:
        b.cells.append(nbformat.v4.new_code_cell(source=setup_source.source, id=setup_source.get("id") or "setup",
                                                 metadata={"xlalab": {"setup": True}}))


# The steps of :func:`build_graded`, in order; each reads and changes one :class:`Build`.
TRANSFORMS: tuple[Callable[[Build], None], ...] = (take_cells, find_tampering, place_deleted_checks,
                                                   append_hidden_checks, add_grader_cells)


def build_graded(lab: Lab, sub: Any, records_path: Path, seed: int,
                 notes: list[str] | None = None) -> tuple[Any, list[str]]:
    """The notebook to run for one submission, and the tampering found: :data:`TRANSFORMS` in turn.

    A visible check stays where the student has it (its text replaced by the graded version); a deleted visible
    check is inserted after the nearest preceding source cell the submission still has and after the student's
    own cells that follow it. Hidden checks come after all the student's cells, in the source's order. A check
    cell runs its probing part only, in a namespace of its own (:func:`graded_check_source`); ``records_path`` is
    where the probes write (in the work folder), ``seed`` the grading run's master seed, from which each check's
    seed is derived (the master is not in the notebook). ``notes`` receives what is not tampering: check cells of
    an earlier release of the lab.
    """
    b = Build(lab, sub, records_path, seed, notes)
    for transform in TRANSFORMS:
        transform(b)
    return b.notebook(), b.tampering
