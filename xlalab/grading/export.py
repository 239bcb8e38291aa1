"""Gradebook files in the form a course platform imports (``xlalab export LAB KIND``).

One grade per student: the lab's total (automatic checks + written answers scored so far), out of the lab's
maximum. Students are named as the grader names them (the submission's file or folder name); a roster
(``--roster roster.csv``: a ``student`` column plus the platform's identifier columns, e.g. Canvas's own
gradebook export with a ``student`` column added) supplies the platform's identifiers where that name is not
one.

- ``canvas``: the Canvas gradebook CSV. Canvas imports the columns ``Student``, ``ID``, ``SIS User ID``,
  ``SIS Login ID`` and ``Section`` (the student is matched by ID, then SIS User ID, then SIS Login ID), then
  one column per assignment; an assignment column whose name matches no assignment creates one, and the row
  ``Points Possible`` under the header gives its maximum (Canvas Instructor Guide, "How do I import grades in
  the Gradebook?", https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/
  ta-p/807; the file Canvas itself exports, which the import reads back, is written by ``lib/gradebook_exporter.rb``
  in https://github.com/instructure/canvas-lms: header ``Student, ID, SIS User ID, SIS Login ID, Section``,
  the assignments, then a second row whose first cell is ``"    Points Possible"`` with each assignment's
  points). Without a roster, ``Student`` and ``SIS Login ID`` are the grader's name.
- ``moodle``: Moodle's "Import grades from CSV file": one identifier column that the import maps to a user
  field (``Identify user by``: user id, username, ID number or email address) and one column per grade item,
  each mapped to a grade item (or to a new one) on the import form (Moodle docs, "Import grades",
  https://docs.moodle.org/en/Import_grades; the importer, ``grade/import/csv/classes/load_data.php`` in
  https://github.com/moodle/moodle, maps ``userid``, ``username``, ``useridnumber`` or ``useremail``).
  The file has ``Username`` (``--moodle-id email|idnumber`` writes ``Email address`` or ``ID number``
  instead), the lab's total, and its automatic and written parts as separate columns that may be mapped to
  grade items or ignored.
- ``csv``: the gradebook as ``gradebook.csv`` has it (student, total, max, automatic and written points, one
  column per check and question, status), for a spreadsheet or any other platform.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from xlalab import fmt
from xlalab.grading.model import Row
from xlalab.grading.options import EXPORT_KINDS, MOODLE_ID_COLUMNS

KINDS = EXPORT_KINDS
CANVAS_ID_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_POINTS_ROW = "    Points Possible"


def read_roster(path: str | Path | None) -> dict[str, dict[str, str]]:
    """``{student: {column: value}}`` from a roster CSV with a ``student`` column (empty without one)."""
    if not path:
        return {}
    text = Path(path).read_text(encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text))
    if "student" not in (reader.fieldnames or []):
        raise ValueError(f"{path}: a roster needs a 'student' column (the names the grader gives)")
    return {r["student"]: {k: (v or "") for k, v in r.items() if k} for r in reader if r.get("student")}


def _write(header: list[str], rows: list[list[str]], raw_first: bool = False) -> str:
    """CSV text; every string cell through :func:`~xlalab.grading.gradebook.cell_text` (no formulas), except the
    first row when ``raw_first`` (the Canvas points row, which the grader writes itself)."""
    from xlalab.grading.gradebook import cell_text

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([r if raw_first and i == 0 else [cell_text(v) if isinstance(v, str) else v for v in r]
                      for i, r in enumerate(rows)])
    return buf.getvalue()


_POINTS_WORDS = re.compile(r"points\s*possible", re.IGNORECASE)


def canvas_name(name: str) -> str:
    """The ``Student`` cell of a student: the name, unless Canvas would read its row as the points row: Canvas's
    importer (``lib/gradebook_importer.rb`` in https://github.com/instructure/canvas-lms) takes every row whose
    first cell matches ``/Points Possible/`` for one. A name holding those words (in any case and spacing, to be
    safe) is written ``student: `` and the name with the words hyphenated. The cell is shown only; Canvas matches
    students by ID, SIS User ID, SIS Login ID."""
    if not _POINTS_WORDS.search(name):
        return name
    return "student: " + _POINTS_WORDS.sub(lambda m: m.group(0)[:6] + "-" + m.group(0)[6:].lstrip(), name.strip())


def canvas(rows: list[Row], assignment: str, maximum: float, roster: dict[str, dict[str, str]]) -> str:
    header = [*CANVAS_ID_COLUMNS, assignment]
    lines = [[CANVAS_POINTS_ROW, "", "", "", "", fmt.points(maximum)]]
    for r in sorted(rows, key=lambda r: r.student):
        ids = roster.get(r.student, {})
        lines.append([canvas_name(ids.get("Student") or r.student), ids.get("ID", ""), ids.get("SIS User ID", ""),
                      ids.get("SIS Login ID") or ("" if ids else r.student), ids.get("Section", ""),
                      fmt.points(r.total)])
    return _write(header, lines, raw_first=True)


def moodle(rows: list[Row], item: str, roster: dict[str, dict[str, str]], id_field: str = "username") -> str:
    column = MOODLE_ID_COLUMNS[id_field]
    header = [column, item, f"{item} (automatic)", f"{item} (written)"]
    lines = []
    for r in sorted(rows, key=lambda r: r.student):
        ids = roster.get(r.student, {})
        ident = ids.get(column) or ids.get(id_field) or r.student
        lines.append([ident, fmt.points(r.total), fmt.points(r.auto), fmt.points(r.manual)])
    return _write(header, lines)


def export(kind: str, rows: list[Row], *, lab: str, maximum: float, out: str | Path, csv_text: str = "",
           roster: str | Path | None = None, moodle_id: str = "username") -> Path:
    """Write ``<out>/export-<kind>.csv`` and return its path."""
    if kind not in KINDS:
        raise ValueError(f"unknown export {kind!r}; one of {', '.join(KINDS)}")
    people = read_roster(roster)
    if kind == "canvas":
        text = canvas(rows, lab, maximum, people)
    elif kind == "moodle":
        text = moodle(rows, lab, people, moodle_id)
    else:
        text = csv_text
    path = Path(out) / f"export-{kind}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", errors="backslashreplace")
    return path
