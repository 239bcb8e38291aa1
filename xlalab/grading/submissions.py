"""Reading and naming hand-ins.

A submission is a notebook (the student is its file name) or a folder: each notebook in it is one student, and
each sub-folder holding a notebook is one student named after the folder. A file that cannot be graded (not
readable, not a notebook, the wrong lab) raises :class:`Unreadable` with a reason a student understands; it
becomes a row with 0 points.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from xlalab.grading.lab import Lab
from xlalab.grading.notebook import parse_header

MAX_BYTES = 50 * 2**20   # the largest hand-in read (a notebook with its outputs); larger ones are refused
# The most cells a hand-in may have (the labs have 37-55; a student's extra cells are welcome up to this): the
# grader's own work on a hand-in (validating, comparing, similarity) grows with its cells and runs outside the jail
# and --timeout, so a hand-in of 130,000 Markdown cells must not cost a minute there.
MAX_CELLS = 2000
_SURROGATE = re.compile("[\ud800-\udfff]")


SOURCE_FILES_LIMIT = 20_000   # files of the source folder whose identity is taken (a folder of a few labs)


class Unreadable(Exception):
    """A submission that cannot be graded; the message is the reason shown in the gradebook."""


@dataclass(frozen=True)
class Sources:
    """The instructor's source files as a hand-in must not be: ``files`` maps (st_dev, st_ino) to a file's
    name, ``digests`` the SHA-256 of each source notebook's bytes to its name."""

    files: dict[tuple[int, int], str]
    digests: dict[str, str]


_SOURCES: dict[str, Sources] = {}   # by source folder, in this process; every read_handin checks against them


def guard_sources(lab: Lab) -> Sources:
    """Take (once per process and source folder) the identity of every file under the folder of ``lab``'s
    source; from then on :func:`read_handin` refuses a hand-in that is one of them (a hard link, which a tar
    or zip unpacked with Python's defaults makes)."""
    folder = str(Path(lab.source_path).resolve().parent)
    if folder in _SOURCES:
        return _SOURCES[folder]
    files: dict[tuple[int, int], str] = {}
    digests: dict[str, str] = {}
    count = 0
    for d, _subdirs, names in os.walk(folder):
        for name in names:
            count += 1
            if count > SOURCE_FILES_LIMIT:
                break
            p = os.path.join(d, name)
            for st in _stats(p):
                files[(st.st_dev, st.st_ino)] = os.path.relpath(p, folder)
            if name.endswith(".ipynb"):
                try:
                    with open(p, "rb") as f:
                        digests[hashlib.sha256(f.read(MAX_BYTES + 1)).hexdigest()] = name
                except OSError:
                    pass
    _SOURCES[folder] = Sources(files, digests)
    return _SOURCES[folder]


def _stats(path: str) -> list[os.stat_result]:
    out = []
    for fn in (os.lstat, os.stat):
        try:
            out.append(fn(path))
        except OSError:
            pass
    return out


def copy_of_source(raw: bytes) -> str | None:
    """The name of the source notebook whose bytes ``raw`` equals (a copy of the model answers), else None."""
    digest = hashlib.sha256(raw).hexdigest()
    return next((s.digests[digest] for s in _SOURCES.values() if digest in s.digests), None)


def read_handin(path: str | Path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of a hand-in that is a regular file, not a symbolic link, of at most ``limit`` bytes, and
    not one of the instructor's source files (:func:`guard_sources`); else raise :class:`Unreadable` with the
    reason. Never follows a link (to the instructor's solution, to /dev/zero), never blocks on a FIFO, never
    reads more than ``limit`` + 1 bytes."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        if path.is_symlink():
            raise Unreadable("a symbolic link, not a file of the hand-in folder (links are not followed)") from None
        raise Unreadable(f"cannot read the file ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable("not a regular file (a FIFO, device or folder)")
        for sources in _SOURCES.values():
            if (info.st_dev, info.st_ino) in sources.files:
                raise Unreadable(f"the same file as the instructor's source {sources.files[(info.st_dev, info.st_ino)]}"
                                 " (a hard link to it, not a hand-in); refused")
        if info.st_size > limit:
            raise Unreadable(f"larger than the limit of {limit // 2**20} MB ({info.st_size / 2**20:.0f} MB)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(2**20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise Unreadable(f"larger than the limit of {limit // 2**20} MB")
        return b"".join(chunks)
    except OSError as err:
        raise Unreadable(f"cannot read the file ({err.strerror})") from None
    finally:
        os.close(fd)


def parse_json(raw: bytes) -> Any:
    """JSON of a hand-in, every lone surrogate of its strings (``"\ud800"``, which no UTF-8 file can hold)
    replaced by U+FFFD, so that nothing read from a hand-in can stop a file the grader writes; raise
    :class:`Unreadable` (not UTF-8, bad JSON, nested too deeply, more than :data:`MAX_CELLS` cells)."""
    if not raw.strip():
        raise Unreadable("empty file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Unreadable("not a text file (not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise Unreadable(f"not valid JSON (line {err.lineno}: {err.msg}); not a notebook") from None
    except RecursionError:
        raise Unreadable("not a notebook (JSON nested too deeply)") from None
    if isinstance(data, dict) and isinstance(data.get("cells"), list) and len(data["cells"]) > MAX_CELLS:
        raise Unreadable(f"{len(data['cells'])} cells, more than the {MAX_CELLS} a hand-in may have (the lab has "
                         "about 50)")
    # A lone surrogate can come only from a JSON escape (UTF-8 cannot hold one): \uD800 to \uDFFF.
    return _without_surrogates(data) if re.search(rb"\\[uU][dD][89abAB]", raw) else data


def _without_surrogates(data: Any) -> Any:
    """``data`` (parsed JSON) with lone surrogates in its strings and keys replaced by U+FFFD (no recursion:
    the depth is what json.loads accepted)."""
    def fix(x: Any) -> Any:
        return _SURROGATE.sub("\ufffd", x) if isinstance(x, str) else x

    root = [fix(data)]
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, v in enumerate(node):
                node[i] = fix(v)
                if isinstance(node[i], (list, dict)):
                    stack.append(node[i])
        elif isinstance(node, dict):
            for k in list(node):
                v, key = fix(node[k]), fix(k)
                if key != k:
                    del node[k]
                node[key] = v
                if isinstance(v, (list, dict)):
                    stack.append(v)
    return root[0]


@dataclass(frozen=True)
class HandIn:
    """One student's hand-in, read once by the grading client before any student code of the run starts: what
    the written answers (:func:`xlalab.grading.answers.collect`), the similarity (:func:`xlalab.grading.similarity.
    collect`) and the engine (shipped to its worker, :func:`xlalab.grading.task.grade_one`) all use."""

    student: str
    """The student's name."""
    path: Path
    """Where it was read (what the row names as the submission)."""
    raw: bytes | None = None
    """Its bytes (:func:`read_handin`: a regular file, no link, size-capped), or None if it could not be read."""
    error: str = ""
    """Why it could not be read (a reason a student understands), else ""."""

    @classmethod
    def read(cls, student: str, path: str | Path) -> HandIn:
        """Read ``path`` once; an unreadable file becomes a hand-in that says why."""
        try:
            return cls(student, Path(path), read_handin(path))
        except Unreadable as err:
            return cls(student, Path(path), None, str(err))

    def json(self) -> Any:
        """Its JSON (:func:`parse_json`); raise :class:`Unreadable` with the reason."""
        if self.raw is None:
            raise Unreadable(self.error)
        return parse_json(self.raw)


def read_submission(path: Path, lab: Lab, flags: list[str] | None = None) -> Any:
    """Read and parse a submission notebook (:func:`submission_of`); raise Unreadable with the reason."""
    return submission_of(read_handin(path), lab, flags)


def submission_of(raw: bytes, lab: Lab, flags: list[str] | None = None) -> Any:
    """Parse a hand-in's bytes as a notebook of ``lab``; raise Unreadable with a reason a student understands.
    One whose bytes equal a source notebook's is graded and flagged: a line is added to ``flags``."""
    guard_sources(lab)
    copied = copy_of_source(raw)
    if copied and flags is not None:
        flags.append(f"the hand-in is byte for byte the instructor's source {copied}")
    data = parse_json(raw)
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Unreadable("not a Jupyter notebook (no list of cells)")
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as err:  # noqa: BLE001  (nbformat raises several kinds)
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
    """``(student, notebook path)`` for each submission argument (a notebook, or a folder of them).

    A symbolic link named here, by the instructor, is followed (a class folder kept elsewhere); links *inside*
    a folder are not (they become rows that say so). A notebook named after the lab (``handin/ann/lab01_timing.ipynb``,
    as a shell glob gives them) is the student of its folder, ``ann``.
    """
    out: list[tuple[str, Path]] = []
    for given in map(Path, paths):
        p = Path(os.path.realpath(given)) if given.is_symlink() else given
        if p.is_dir():
            for child in sorted(p.iterdir()):
                if child.name.startswith("."):
                    continue
                if child.is_symlink() and not child.name.endswith(".ipynb"):
                    out.append((printable(child.name), child))   # a linked folder: refused, with the reason
                elif child.suffix == ".ipynb" and not (child.is_dir() and not child.is_symlink()):
                    out.append((printable(child.stem), child))
                elif child.is_dir():
                    nbs = sorted(child.glob("*.ipynb"))
                    pick = [n for n in nbs if n.stem == lab_name] or nbs
                    out.append((printable(child.name), pick[0] if pick else child / f"{lab_name}.ipynb"))
        else:
            name = given.stem   # the name the instructor gave (a link's own name, not its target's)
            folder = Path(os.path.abspath(given)).parent.name
            if name == lab_name and folder:
                name = folder
            out.append((printable(name), p))
    return _distinct_names(out)


def printable(name: str) -> str:
    """A student's name as the grader writes it: control characters (newlines) and bytes that are not UTF-8
    (a file name's surrogate escapes) shown as ``\\n``/``\\xNN``, so that a name can start no line of
    its own in the feedback, the answer files or the summary, and every file it names can be written."""
    out = []
    for ch in name:
        if "\udc80" <= ch <= "\udcff":
            out.append(f"\\x{ord(ch) - 0xdc00:02x}")
        elif "\ud800" <= ch <= "\udfff" or (not ch.isprintable() and ch != " "):
            out.append(repr(ch)[1:-1] if len(repr(ch)) > 3 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


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
    """A file-system-safe name for a student's files (``feedback/<name>.md``), distinct for distinct students.

    A name of letters, digits, ``_``, ``-`` and ``.`` (not starting with ``.``, at most 120 characters) is
    kept; any other gets the safe characters, then ``-`` and 10 hex digits of its SHA-256 (``ann b`` and
    ``ann_b`` are two files).
    """
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,119}", student) and not re.search(r"-[0-9a-f]{10}$", student):
        return student
    digest = hashlib.sha256(student.encode("utf-8", errors="surrogatepass")).hexdigest()[:10]
    base = re.sub(r"[^A-Za-z0-9_.\-]+", "_", student).strip("._")[:100]
    return f"{base or 'student'}-{digest}"
