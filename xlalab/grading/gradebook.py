"""The gradebook: rows kept where only the grader writes, ``gradebook.csv`` built from them.

A student's code may reach ``<out>/gradebook.csv`` (always, without the sandbox: it runs with the grader's
rights), so the grader never reads that file back to merge into it. Each graded row is kept in a spool folder
private to the grader, outside ``--out`` (``$XLALAB_GRADER_STATE``, else ``$XDG_STATE_HOME/xlalab``, else
``~/.local/state/xlalab``; mode 0700; the jail never shows it): ``spool/<hash of the out folder>/`` holds one
JSON file per student and ``manifest.json`` with the SHA-256 of the last ``gradebook.csv`` written.

:class:`Gradebook` reads the spool once, when it opens (before any student code of this run starts), keeps the
rows in memory, writes each new row to the spool and rebuilds ``gradebook.csv`` (atomically) from memory only.
Before each write it compares the file on disk with what it wrote last: a gradebook changed behind the
grader's back is kept as ``gradebook.csv.changed-<time>``, reported, and rebuilt, never merged into. When it
closes, it checks the spool and this run's feedback files against memory the same way.

A ``gradebook.csv`` with no spool yet (an older grader's, or a copied folder) is adopted once, at open. The out
folder holds a random token (``.xlalab-gradebook``) kept in the manifest too: a new folder at the same path (the
instructor started over) does not inherit the old rows (the old spool is set aside as ``<spool>.stale-<time>``).

Rows, columns and CSV live here. A lab with written answers adds ``auto``, ``max_auto``, ``manual``,
``max_manual`` and one column per question; the rows kept in the spool carry the answers, so that
``xlalab merge-manual`` (:mod:`.answers`) and ``xlalab export`` (:mod:`.export`) work from the grader's own copy.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import IO, Any

from xlalab import env, fmt
from xlalab.files import atomic_write
from xlalab.grading.feedback import feedback_text
from xlalab.grading.model import Row
from xlalab.grading.submissions import safe_name

log = logging.getLogger(__name__)

FIXED = ("student", "total", "max")
SPLIT = ("auto", "max_auto", "manual", "max_manual")   # a lab with written answers: automatic and manual apart


def state_dir() -> Path:
    """The grader's private state folder (created with mode 0700)."""
    base = os.environ.get(env.GRADER_STATE)
    if base:
        path = Path(base)
    else:
        xdg = os.environ.get("XDG_STATE_HOME")
        path = (Path(xdg) if xdg else Path.home() / ".local" / "state") / "xlalab"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def spool_dir(out: str | Path) -> Path:
    """The spool of the gradebook in ``out`` (one per out folder, named by the hash of its absolute path)."""
    key = hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:20]
    path = state_dir() / "spool" / key
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def csv_record(row: Row) -> dict[str, str]:
    """A row as the CSV writes it: student, total, max, one column per check, status; with written answers
    also auto, max_auto, manual, max_manual and one column per question (blank until scored)."""
    rec = {"student": row.student, "total": fmt.points(row.total), "max": fmt.points(row.maximum),
           "status": row.status_line()}
    rec.update({c.check: fmt.points(c.earned) for c in row.checks})
    if row.answers:
        rec.update({"auto": fmt.points(row.auto), "max_auto": fmt.points(row.max_auto),
                    "manual": fmt.points(row.manual), "max_manual": fmt.points(row.max_manual)})
        rec.update({a.answer: "" if a.earned is None else fmt.points(a.earned) for a in row.answers})
    return rec


def cell_text(value: str) -> str:
    """A CSV cell a spreadsheet shows as text: a value starting with ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return (a formula to Excel, LibreOffice and Google Sheets) gets a leading ``'`` (OWASP, "CSV
    Injection")."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return b"\0unreadable"


class Gradebook:
    """The gradebook of one ``out`` folder; use as a context manager around a grading run.

    ``record(row)`` keeps the row (spool + memory), writes its feedback and rebuilds ``gradebook.csv``;
    ``warnings`` lists what was found changed behind the grader's back.
    """

    def __init__(self, out: str | Path, check_ids: list[str], *, quiet: bool = False,
                 answer_ids: list[str] | None = None):
        self.out = Path(out)
        self.check_ids = list(check_ids)
        self.answer_ids = list(answer_ids or [])
        self.stored: dict[str, Row] = {}        # every row the spool holds (with its written answers)
        self.quiet = quiet
        self.warnings: list[str] = []
        self.records: dict[str, dict[str, str]] = {}
        self.rows: dict[str, Row] = {}          # rows graded in this run
        self.spool: Path | None = None
        self._lock: IO[str] | None = None
        self._written: str | None = None        # SHA-256 of the gradebook.csv expected on disk (None: none)
        self._since: list[str] = []             # students recorded since the last write
        self._feedback: dict[Path, bytes] = {}
        self._token = ""

    # -- opening: read everything once, before student code runs ------------------------------------------

    def __enter__(self) -> Gradebook:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.spool = spool_dir(self.out)
        self._lock = open(self.spool / ".lock", "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)   # one grader per gradebook at a time
        folder = self._folder_id()
        old = self._manifest()
        if old and (not folder or old.get("folder") != folder):
            # The out folder was made anew (deleted, or a new one at the same path): its old rows do not belong.
            stale = self.spool.with_name(f"{self.spool.name}.stale-{time.strftime('%Y%m%dT%H%M%S')}")
            if self.path.exists():
                self._warn(f"{self._marker} is missing or not this gradebook's: the rows graded earlier for "
                           f"{self.out} were set aside in {stale} and not used")
            for f in [*self.spool.glob("row-*.json"), self.spool / "manifest.json"]:
                stale.mkdir(mode=0o700, exist_ok=True)
                os.replace(f, stale / f.name)
        if not folder:
            folder = secrets.token_hex(16)
            atomic_write(self._marker, (folder + "\n").encode(), 0o644)
        self._token = folder
        (self.spool / "out.txt").write_text(str(self.out.resolve()) + "\n", encoding="utf-8")
        for f in sorted(self.spool.glob("row-*.json")):
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
                self.records[data["student"]] = {str(k): str(v) for k, v in data["record"].items()}
                if isinstance(data.get("row"), dict):
                    self.stored[data["student"]] = Row.from_dict(data["row"])
            except (OSError, ValueError, KeyError, TypeError):
                self._warn(f"spool file {f} is unreadable and was skipped")
        manifest = self._manifest()
        on_disk = _read(self.path)
        self._written = manifest.get("sha256")
        if on_disk is not None and not self.records and not manifest:
            adopted = self._parse_csv(on_disk)
            for rec in adopted:
                self.records[rec["student"]] = rec
                self._spool_write(rec["student"], rec, None)
            self._written = _sha256(on_disk)
            self._save_manifest()
        elif on_disk is not None and _sha256(on_disk) != self._written:
            self._changed(on_disk, "before this run")
        elif on_disk is None and self.records:
            self._warn(f"{self.path} was missing; rebuilt from the grader's spool")
        # From here on, what is on disk is what the grader expects; anything else was written behind its back.
        self._written = _sha256(on_disk) if on_disk is not None else None

    @property
    def _marker(self) -> Path:
        return self.out / ".xlalab-gradebook"

    def _folder_id(self) -> str:
        """The token that ties this out folder to its spool (a new folder at the same path gets a new one)."""
        data = _read(self._marker)
        return data.decode("ascii", errors="replace").strip() if data else ""

    @property
    def path(self) -> Path:
        return self.out / "gradebook.csv"

    @property
    def _spool(self) -> Path:
        """The spool folder (the gradebook is open)."""
        assert self.spool is not None, "open() the gradebook first"
        return self.spool

    def _manifest(self) -> dict[str, Any]:
        try:
            data = json.loads((self._spool / "manifest.json").read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save_manifest(self) -> None:
        data = {"out": str(self.out.resolve()), "folder": self._token, "sha256": self._written,
                "columns": self.columns()}
        atomic_write(self._spool / "manifest.json", json.dumps(data, indent=1).encode(), 0o600)

    @staticmethod
    def _parse_csv(data: bytes) -> list[dict[str, str]]:
        try:
            reader = csv.DictReader(io.StringIO(data.decode("utf-8")))
            return [{k: v or "" for k, v in r.items() if k} for r in reader if r.get("student")]
        except (UnicodeDecodeError, csv.Error):
            return []

    def _spool_file(self, student: str) -> Path:
        digest = hashlib.sha256(student.encode("utf-8", errors="surrogatepass")).hexdigest()[:10]
        return self._spool / f"row-{safe_name(student)[:60]}-{digest}.json"

    def _spool_write(self, student: str, record: dict[str, str], row: Row | None) -> bytes:
        data = json.dumps({"student": student, "record": record, "row": row.to_dict() if row else None},
                          sort_keys=True).encode("utf-8", errors="backslashreplace")
        atomic_write(self._spool_file(student), data, 0o600)
        return data

    # -- recording -------------------------------------------------------------------------------------

    def columns(self) -> list[str]:
        """student, total, max, the lab's checks, other columns already in the gradebook, status."""
        cols = [*FIXED, *SPLIT, *self.check_ids, *self.answer_ids] if self.answer_ids else \
            [*FIXED, *self.check_ids]
        for rec in self.records.values():
            for k in rec:
                if k not in cols and k != "status":
                    cols.append(k)
        return cols + ["status"]

    def record(self, row: Row, *, write: bool = True) -> None:
        """Keep ``row`` (replacing that student's earlier row), write its feedback, rebuild the CSV."""
        rec = csv_record(row)
        self.records[row.student] = rec
        self.rows[row.student] = row
        self.stored[row.student] = row
        self._spool_write(row.student, rec, row)
        self._write_feedback(row)
        self._since.append(row.student)
        if write:
            self.write_csv()

    def _write_feedback(self, row: Row) -> None:
        d = self.out / "feedback"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{safe_name(row.student)}.md"
        data = feedback_text(row).encode("utf-8", errors="backslashreplace")
        atomic_write(path, data, 0o644)
        self._feedback[path] = data

    def csv_text(self) -> str:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns(), lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for student in sorted(self.records):
            writer.writerow({k: cell_text(v) if isinstance(v, str) else v for k, v in self.records[student].items()})
        return buf.getvalue()

    def write_csv(self) -> Path:
        """Rebuild ``gradebook.csv`` from memory; first report it if it changed since the grader wrote it."""
        on_disk = _read(self.path)
        if on_disk is not None and _sha256(on_disk) != self._written:
            self._changed(on_disk, "while grading (noticed after " + (", ".join(self._since[-8:]) or "start")
                          + ")")
        elif on_disk is None and self._written is not None:
            self._warn(f"{self.path} was deleted while grading (noticed after {', '.join(self._since[-8:])}); "
                       "rebuilt from the grader's spool")
        if self._folder_id() != self._token:
            self._warn(f"{self._marker} was changed while grading; rewritten")
            atomic_write(self._marker, (self._token + "\n").encode(), 0o644)
        data = self.csv_text().encode("utf-8", errors="backslashreplace")
        atomic_write(self.path, data, 0o644)
        self._written = _sha256(data)
        self._since = []
        self._save_manifest()
        return self.path

    def _changed(self, data: bytes, when: str) -> None:
        keep = self.out / f"gradebook.csv.changed-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}"
        try:
            atomic_write(keep, data, 0o644)
        except OSError:
            keep = Path("(could not keep a copy)")
        self._warn(f"{self.path} was changed behind the grader's back {when}; the changed file is kept as "
                   f"{keep.name} and the gradebook was rebuilt from the grader's own records, not merged")

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        if not self.quiet:
            log.warning("xlalab.grade: WARNING: %s", text)

    # -- closing: check what a student could have reached ------------------------------------------------

    def close(self) -> None:
        if self.spool is None:
            return
        try:
            for student, row in self.rows.items():
                f = self._spool_file(student)
                expected = json.dumps({"student": student, "record": self.records[student],
                                       "row": row.to_dict()}, sort_keys=True).encode("utf-8",
                                                                                     errors="backslashreplace")
                if _read(f) != expected:
                    self._warn(f"the grader's spool record of {student} was changed; rewritten")
                    atomic_write(f, expected, 0o600)
            for path, data in self._feedback.items():
                if _read(path) != data:
                    self._warn(f"{path} was changed behind the grader's back; rewritten")
                    atomic_write(path, data, 0o644)
            self.write_csv()
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None
            self.spool = None
