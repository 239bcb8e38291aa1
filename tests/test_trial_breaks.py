"""Breaks found by the third hostile trial (issue 25, "The other breaks found by the same trial"), each on the
grader's own code with made-up rows or files (no kernel runs here): the manual.csv template, the Canvas points
row, submission folders given as links, a hand-in named after the lab, hard links to the private source,
lone surrogates in the class report, and the grader's own work on a huge hand-in."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from xlalab.grading import answers, export
from xlalab.grading.options import GradeOptions
from xlalab.grading.score import ANSWERED, EMPTY, AnswerResult, CheckResult, Row
from xlalab.grading.submissions import HandIn, expand_submissions, read_handin
from xlalab.grading.task import Limits


def _row(student: str, total_ok: bool = True, answer: str = "because") -> Row:
    return Row(student, "lab90_sample", 6.0, [CheckResult("a", 6, False, total_ok)],
               answers=[AnswerResult("p2-why", 3, ANSWERED if answer else EMPTY, answer,
                                     None if answer else 0.0)])


FORMULAS = ["=HYPERLINK(\"http://x\",\"ann\")", "+1+1", "-2+3", "@SUM(A1)", "'=quoted"]


def test_the_manual_template_writes_no_name_as_a_formula_and_reads_every_name_back(tmp_path):
    """Break: manual.csv wrote student names raw, so a spreadsheet ran ``=HYPERLINK(...)`` as a formula."""
    path = tmp_path / "manual.csv"
    rows = [_row(name) for name in FORMULAS] + [_row("ann")]
    answers.write_manual_template(None, rows, path)  # type: ignore[arg-type]  # it reads no Lab here
    cells = [r[0] for r in csv.reader(io.StringIO(path.read_text(encoding="utf-8")))][1:]
    assert all(c[:1] not in ("=", "+", "-", "@") for c in cells), cells
    # Filled in and merged back, every student is found (the ' a spreadsheet keeps is taken off again).
    lines = answers.read_manual(path)
    assert sorted(line["student"] for line in lines) == sorted(FORMULAS + ["ann"])
    for line in lines:
        line["points"] = "1"
    # A stand-in Lab: merge_manual reads only its name and answers.
    changed, errors = answers.merge_manual(_Lab(), {r.student: r for r in rows}, lines)  # type: ignore[arg-type]
    assert errors == [] and len(changed) == len(rows)


class _Lab:
    name = "lab90_sample"
    answers = [type("A", (), {"answer": "p2-why", "points": 3})()]


@pytest.mark.parametrize("name", ["    Points Possible", "Points Possible", "points  possible", "PointsPossible"])
def test_a_student_named_points_possible_adds_no_second_points_row(name):
    """Break: a student named ``    Points Possible`` was written raw, and Canvas read a second points row."""
    text = export.canvas([_row(name), _row("ann")], "lab90_sample", 10, {})
    rows = list(csv.reader(io.StringIO(text)))
    points_rows = [r for r in rows[1:] if "pointspossible" in "".join(r[0].split()).lower().replace("-", "")
                   and not r[0].startswith("student: ")]
    assert len(points_rows) == 1 and rows[1][0] == export.CANVAS_POINTS_ROW, rows
    assert len(rows) == 4 and any(r[0].startswith("student: ") and r[-1] == "6" for r in rows[2:]), rows


def _lab_file(folder: Path, name: str = "lab90_sample.ipynb") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_folder_or_notebook_named_by_a_link_on_the_command_line_is_followed(tmp_path):
    """Break: a submission folder given as a link was one refused row; its students were never graded. A link
    the instructor names is followed; a link inside the folder is still refused (read_handin)."""
    real = tmp_path / "store" / "class-2026"
    _lab_file(real, "ann.ipynb")
    _lab_file(real / "bob")
    (real / "eve.ipynb").symlink_to(real / "ann.ipynb")
    (tmp_path / "handins").symlink_to(real)
    (tmp_path / "carl.ipynb").symlink_to(_lab_file(tmp_path / "elsewhere", "x.ipynb"))
    entries = dict(expand_submissions([tmp_path / "handins", tmp_path / "carl.ipynb"], "lab90_sample"))
    assert sorted(entries) == ["ann", "bob", "carl", "eve"], entries
    for student in ("ann", "bob", "carl"):
        assert read_handin(entries[student]).startswith(b"{"), student
    from xlalab.grading.submissions import Unreadable

    with pytest.raises(Unreadable, match="symbolic link"):
        read_handin(entries["eve"])


def test_a_hand_in_named_after_the_lab_takes_its_folder_name(tmp_path):
    """Issue 26: ``handin/<student>/lab01_timing.ipynb`` named the row after the lab file, not the student."""
    paths = [_lab_file(tmp_path / "handin" / s) for s in ("ann", "bob")]
    assert [n for n, _ in expand_submissions(paths, "lab90_sample")] == ["ann", "bob"]
    other = _lab_file(tmp_path / "handin" / "cid", "my_work.ipynb")
    assert [n for n, _ in expand_submissions([other], "lab90_sample")] == ["my_work"]


@pytest.mark.heavy   # a grading run
def test_a_hard_link_to_the_source_is_refused_and_a_byte_copy_is_flagged(tmp_path):
    """Break: a hard link to the private source (a tar unpacked with Python's defaults makes one) is a regular
    file: it earned 20/20 with the model answers filed as the student's. It is refused (same device and inode as
    a source file), its answers are not read; a hand-in whose bytes equal a source notebook's is flagged."""
    import shutil

    from xlalab.grading.cli import grade_submissions

    from helpers import MODEL_WHY, SAMPLE, make_answers_root

    (tmp_path / "repo").mkdir()
    root = make_answers_root(tmp_path / "repo")
    src = root / "solutions" / f"{SAMPLE}.ipynb"
    subs = tmp_path / "subs"
    subs.mkdir()
    os.link(src, subs / "linked.ipynb")
    shutil.copyfile(src, subs / "copied.ipynb")
    out = tmp_path / "out"
    rows = {r.student: r for r in grade_submissions(src, [subs],
                                                          GradeOptions(out=str(out), sandbox="none", cell_timeout=30,
                                                                       timeout=60, memory_gb=3), quiet=True)}
    linked, copied = rows["linked"], rows["copied"]
    assert linked.state == "not graded" and "the same file as the instructor's source" in linked.status
    assert linked.auto == 0 and all(a.state == "missing" for a in linked.answers), linked.answers
    answers = (out / "answers" / SAMPLE / "p2-why.md").read_text(encoding="utf-8")
    assert answers.count("MODEL-SECRET") == 2, "the model answer once at the top, once in the byte copy's answer"
    assert MODEL_WHY in answers
    assert [f.kind for f in copied.faults if f.kind == "copy of the source"] == ["copy of the source"]
    assert "byte for byte the instructor's source" in copied.status
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "byte for byte the instructor&#x27;s source" in report


def _surrogate_class(tmp_path):
    """The similarity class of tests/helpers/similarity_class.py, ben's copy holding a lone surrogate (``\\ud800`` in
    the JSON) in his own cell and his written answer."""
    from helpers import SAMPLE, make_answers_root, released
    from helpers.similarity_class import class_notebooks

    (tmp_path / "repo").mkdir()
    root = make_answers_root(tmp_path / "repo")
    subs = tmp_path / "subs"
    subs.mkdir()
    for name, nb in class_notebooks(released(root)).items():
        text = json.dumps(nb)
        if name == "ben":
            text = text.replace("test_scale_by_hand():", "test_scale_by_hand():  # \\ud800")
            text = text.replace("Floating-point addition", "Floating-point \\ud800 addition")
            assert text.count("\\ud800") == 2
        (subs / f"{name}.ipynb").write_text(text, encoding="utf-8")
    return root / "solutions" / f"{SAMPLE}.ipynb", subs


@pytest.mark.heavy   # a grading run
def test_a_lone_surrogate_in_a_flagged_hand_in_stops_no_class_output(tmp_path):
    """Break: one lone surrogate in a flagged hand-in stopped report.html for the whole class (the pair's cells
    side by side), and that student's working hand-in became "not graded"."""
    from xlalab.grading import classreport, similarity
    from xlalab.grading.lab import load_lab
    from xlalab.grading.submissions import parse_json, read_handin
    from xlalab.grading.task import grade_one

    src, subs = _surrogate_class(tmp_path)
    lab = load_lab(src)
    # The readers hand on no surrogate: the grading run, the answers and the similarity all read through them.
    owns = [similarity.own_of(lab, p.stem, parse_json(read_handin(p))) for p in sorted(subs.glob("*.ipynb"))]
    assert "\ufffd" in json.dumps(owns[1].to_dict(), ensure_ascii=False), owns[1]
    row = grade_one(lab, HandIn.read("ben", subs / "ben.ipynb"),
                    Limits(cell_timeout=30, timeout=60, memory_gb=3, sandbox="none"))
    assert row.state == "graded" and row.auto == lab.max_auto, row.status
    # And the report survives a surrogate that reached the spool some other way (an older grader's copy).
    owns[1].code.append(("smuggled", "x = 1  # \ud800"))
    out = tmp_path / "out"
    out.mkdir()
    similarity.save(out, owns)
    rows = [row] + [classreport.Row(o.student, lab.name, lab.maximum) for o in owns if o.student != "ben"]
    path = classreport.write_report(lab, rows, out)
    text = path.read_text(encoding="utf-8")
    assert "ana" in text and "ben" in text and "Similar hand-ins" in text and 'id="similar"' in text


@pytest.mark.heavy   # a grading run
def test_the_graders_own_work_on_a_hand_in_of_130000_cells_is_bounded(tmp_path):
    """Break: 130,000 Markdown cells (9.7 MB) cost 67 s in the grader's own process, outside --timeout and the
    jail. A hand-in of more than MAX_CELLS cells is refused at reading, before any per-cell work."""
    import time

    from xlalab.grading import answers as answers_mod, similarity
    from xlalab.grading.lab import load_lab
    from xlalab.grading.submissions import MAX_CELLS
    from xlalab.grading.task import grade_one

    from helpers import SAMPLE, make_answers_root, released

    (tmp_path / "repo").mkdir()
    root = make_answers_root(tmp_path / "repo")
    lab = load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    nb = json.loads(json.dumps(released(root)))
    nb["cells"] += [{"cell_type": "markdown", "id": f"m{i}", "metadata": {}, "source": f"cell {i} of many"}
                    for i in range(130_000)]
    path = tmp_path / "many.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert path.stat().st_size > 9 * 2**20
    start = time.monotonic()
    handin = HandIn.read("many", path)
    row = grade_one(lab, handin, Limits(cell_timeout=30, timeout=60, memory_gb=3, sandbox="none"))
    similarity.collect(lab, handin)
    answers_mod.collect(lab, handin)
    took = time.monotonic() - start
    assert row.state == "not graded" and f"more than the {MAX_CELLS}" in row.status, row.status
    assert took < 10, f"the grader's own work on one hand-in took {took:.1f} s"


FLOOD = """import threading, time
k = get_ipython().kernel
def flood():   # well-formed messages of another parent, without end, on the kernel's own socket
    while True:
        k.session.send(k.iopub_socket, "stream", {"name": "stdout", "text": "x"}, parent={"header": {"msg_id": "x"}})
threading.Thread(target=flood, daemon=True).start()
time.sleep(1000)
"""


@pytest.mark.heavy   # a kernel, up to the cell timeout
def test_a_kernel_flooding_its_own_sockets_is_stopped_at_the_cell_timeout(tmp_path):
    """Break: a kernel writing to its own ZMQ sockets wedged pytest past the cell timeout and the kernel's death,
    up to the notebook's limit (here 120 s). The watchdog fails the cell within a second of its timeout."""
    import time

    from xlalab.grading.lab import load_lab
    from xlalab.grading.task import grade_one

    from helpers import SAMPLE, answered, insert_after, make_lab_root

    (tmp_path / "repo").mkdir()
    root = make_lab_root(tmp_path / "repo")
    lab = load_lab(root / "solutions" / f"{SAMPLE}.ipynb")
    path = tmp_path / "flood.ipynb"
    path.write_text(json.dumps(insert_after(answered(root), "p1-check", FLOOD)), encoding="utf-8")
    start = time.monotonic()
    row = grade_one(lab, HandIn.read("flood", path), Limits(cell_timeout=5, timeout=120, memory_gb=3, sandbox="auto"))
    took = time.monotonic() - start
    assert not any(f.kind == "time limit" and "120" in f.detail for f in row.faults), row.status
    assert any("Timeout of 5 seconds" in e for e in row.cell_errors), row.cell_errors
    # The visible check before the flood counts; the rest did not run (hidden checks run after every student cell,
    # so p1-scale-random is lost with the flooded kernel, issue 34).
    assert row.auto == 2, "the visible check before the flood counts; the rest did not run"
    assert took < 60, f"{took:.1f} s"


def test_the_watchdog_notices_a_dead_kernel_while_messages_keep_coming(monkeypatch):
    """The wait ends within a look of the kernel's death even though every call returns a message. On a scripted
    clock: each message takes 10 ms of it, nothing waits for real."""
    from types import SimpleNamespace

    from xlalab.grading import watchdog

    clock = SimpleNamespace(t=1000.0)
    monkeypatch.setattr(watchdog, "time", SimpleNamespace(monotonic=lambda: clock.t))

    class Km:
        alive = True

        def is_alive(self):
            return self.alive

    class Kernel:
        km = Km()

    def flooding(self, stream, timeout=None):
        clock.t += 0.01
        return {"parent_header": {"msg_id": "other"}}

    watch = watchdog.Watch()
    get = watchdog.wrap(flooding, lambda km: {"code": None, "signal": None}, watch)
    kernel = Kernel()
    assert get(kernel, "iopub", timeout=5)["parent_header"]["msg_id"] == "other"
    kernel.km.alive = False
    start, calls = clock.t, 0
    with pytest.raises(watchdog.KernelDied):
        while calls < 10_000:
            calls += 1
            get(kernel, "iopub", timeout=5)
    assert clock.t - start <= watchdog.LOOK_S + 0.01 + 1e-9, clock.t - start   # within one look and one message
    watch.cell_started(0.5)
    watch.msg_id = "mine"   # while a cell runs, others' messages reset no timeout
    kernel.km.alive = True
    begun = clock.t
    with pytest.raises(watchdog.Empty):
        get(kernel, "iopub", timeout=0.5)
    assert watch.started == begun and 0.5 <= clock.t - begun <= 0.5 + 0.01 + 1e-9, clock.t - begun
