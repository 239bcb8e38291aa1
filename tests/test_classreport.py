"""The class report (issue 20): ``report.html`` for a made-up class whose numbers are known, checked number by
number on the page itself; similar hand-ins flagged (a copy with renamed variables and reordered cells) and
honest ones not; the page written after a grading run and by ``--report``, opened in headless Chromium without
errors (the DevTools client of tests/test_book.py), with a screenshot kept.
"""

from __future__ import annotations

import html.parser
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from xlalab import cli as xlalab_cli
from xlalab.cli import main as command
from xlalab.grading import classreport, similarity
from xlalab.grading.faults import GRADED, NOT_GRADED, Fault, FaultKind, row_faults
from xlalab.grading.lab import load_lab
from xlalab.grading.score import ANSWERED, EMPTY, MISSING, UNCHANGED, AnswerResult, CheckResult, Row, zero_row

from helpers import SAMPLE, make_answers_root, released
from helpers.similarity_class import STUDENTS, class_notebooks

MSG_P1 = "AssertionError: scale([1, 2, 3], 2.0)\nshould be [2, 4, 6]"
MSG_P1R = "AssertionError: scale is wrong on random inputs"
DIED = "did not run: the kernel had died in an earlier cell"
LIMIT = "did not run: the notebook reached the time limit (90 s)"
A_ = ANSWERED


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return load_lab(make_answers_root(tmp_path_factory.mktemp("repo")) / "solutions" / f"{SAMPLE}.ipynb")


def _row(lab, student, fails: dict[str, str], seconds: float, answers: dict[str, tuple],
         sandbox="bwrap", faults=(), **extra) -> Row:
    """A made-up row; its typed faults are ``faults`` and what its fields show (as the grader sets them)."""
    checks = [CheckResult(c.check, c.points, c.hidden, c.check not in fails, fails.get(c.check, ""))
              for c in lab.checks]
    res = [AnswerResult(a.answer, a.points, answers[a.answer][0], "text", answers[a.answer][1]) for a in lab.answers]
    row = Row(student, lab.name, lab.maximum, checks, seconds=seconds, sandbox=sandbox, answers=res, **extra)
    row.faults = list(faults) + row_faults(row)
    return row


def made_up_class(lab) -> list[Row]:
    """Eight students; every number of the report is worked out by hand in test_report_numbers."""
    A, E, U, M = ANSWERED, EMPTY, UNCHANGED, MISSING
    blank = {"p1-scale": "NotImplementedError", "p1-scale-random": "NotImplementedError",
             "p2-total": "NameError: name 'total' is not defined",
             "p2-total-random": "NameError: name 'total' is not defined"}
    s8 = zero_row(lab, "s8", "empty file")
    s8.answers = [AnswerResult(a.answer, a.points, M, "", 0.0) for a in lab.answers]
    return [
        _row(lab, "s1", {}, 3.0, {"p1-explain": (A, 1.0), "p2-why": (A, 3.0)}),
        _row(lab, "s2", {}, 4.0, {"p1-explain": (E, 0.0), "p2-why": (A, None)}),
        _row(lab, "s3", {"p1-scale": MSG_P1, "p1-scale-random": MSG_P1R}, 5.0,
             {"p1-explain": (U, 0.0), "p2-why": (A, 1.0)}),
        _row(lab, "s4", {"p1-scale": MSG_P1, "p1-scale-random": MSG_P1R,
                         "p2-total": "AssertionError: total must return a Python float"}, 6.0,
             {"p1-explain": (M, 0.0), "p2-why": (M, 0.0)}, tampering=["check `p1-scale` was changed"]),
        _row(lab, "s5", blank, 2.0, {"p1-explain": (U, 0.0), "p2-why": (U, 0.0)}, sandbox="none"),
        _row(lab, "s6", {"p2-total": DIED, "p2-total-random": DIED}, 7.0,
             {"p1-explain": (A, None), "p2-why": (A, 2.0)},
             blocked=["to open a network connection (the notebook runs without a network)"],
             faults=[Fault(FaultKind.KERNEL_DIED, "the kernel died (exit code 1)")]),
        _row(lab, "s7", {c.check: LIMIT for c in lab.checks}, 90.0, {"p1-explain": (A, 0.0), "p2-why": (E, 0.0)},
             faults=[Fault(FaultKind.TIME_LIMIT, "time limit 90 s reached")]),
        s8,
    ]


class Tables(html.parser.HTMLParser):
    """The text of every cell of every ``<table id=...>`` of a page, and the ``src`` of its images."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: dict[str | None, list[list[str]]] = {}
        self.images: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "img":
            self.images.append(a.get("src", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_report_numbers_of_a_made_up_class(lab, tmp_path):
    rows = made_up_class(lab)
    s = classreport.summarize(lab, rows)
    assert (s.students, s.ran) == (8, 7)
    # Failure messages: counted over the 7 rows that ran, most frequent first, then in the lab's check order.
    top = [(m["check"], m["message"], m["students"]) for m in s.messages]
    assert top[:3] == [("p1-scale", MSG_P1.replace("\n", " "), 2), ("p1-scale-random", MSG_P1R, 2),
                       ("p1-scale", "NotImplementedError", 1)]   # ties: in the order of the message text
    assert sum(m["students"] for m in s.messages) == 2 + 2 + 1 + 4 + 2 + 4   # s3, s4, s5, s6, s7
    assert len(s.messages) == 2 + 1 + 4 + 2 + 4   # the two shared by s3 and s4 count once each
    assert s.messages[0]["share"] == pytest.approx(2 / 7)
    checks = {c["check"]: (c["passed"], c["rows"], c["mean"]) for c in s.checks}
    assert checks == {"p1-scale": (3, 8, 0.75), "p1-scale-random": (3, 8, 0.75), "p2-total": (3, 8, 0.375),
                      "p2-total-random": (4, 8, 0.5)}
    assert s.auto == [0, 0, 0, 1, 2, 4, 6, 6]
    assert s.quartiles["auto"] == [0.0, 1.5, 4.5]           # numpy.percentile, linear
    assert s.totals == [0, 0, 0, 1, 3, 6, 6, 10]            # pending answers count 0
    assert s.quartiles["total"] == [0.0, 2.0, 6.0]
    q = {x["question"]: (x["answered"], x["blank"], x["scored"], x["pending"]) for x in s.questions}
    assert q == {"p1-explain": (3, 5, 2, 1), "p2-why": (4, 4, 3, 1)}
    means = {x["question"]: x["mean"] for x in s.questions}
    assert means["p1-explain"] == pytest.approx(1 / 7) and means["p2-why"] == pytest.approx(6 / 7)
    assert s.seconds_median == 5.0
    assert s.slowest == [("s7", 90.0), ("s6", 7.0), ("s4", 6.0), ("s3", 5.0), ("s2", 4.0)]
    faults = {k: [n for n, _ in v] for k, v in s.faults.items()}
    assert faults == {"not graded": ["s8"], "time limit": ["s7"], "kernel died": ["s6"], "setup failed": [],
                      "tampering": ["s4"], "sandbox blocked": ["s6"],
                      "unsandboxed": ["s5"], "memory per process": [], "copy of the source": [],
                      "records refused": [], "judge failed": []}

    # The page shows the same numbers, failures first.
    path = tmp_path / "report.html"
    path.write_text(classreport.page(s, rows), encoding="utf-8")
    text = path.read_text()
    page = Tables(text)
    assert list(page.tables)[0] == "failures", "the table of failures must come first"
    assert page.tables["failures"][1] == ["2", "29%", "p1-scale", MSG_P1.replace("\n", " ")]
    assert page.tables["failures"][2] == ["2", "29%", "p1-scale-random (hidden)", MSG_P1R]
    assert len(page.tables["failures"]) == 1 + 13
    assert page.tables["quartiles"][1:] == [["automatic", "0", "1.5", "4.5"],
                                            ["total (written merged)", "0", "2", "6"]]
    assert [r[:5] for r in page.tables["checks"][1:]] == [
        ["p1-scale", "2", "3 / 8", "38%", "0.75"], ["p1-scale-random (hidden)", "2", "3 / 8", "38%", "0.75"],
        ["p2-total", "1", "3 / 8", "38%", "0.375"], ["p2-total-random (hidden)", "1", "4 / 8", "50%", "0.5"]]
    assert page.tables["questions"][1:] == [["p1-explain", "1", "3", "5", "2", "1", "0.143"],
                                            ["p2-why", "3", "4", "4", "3", "1", "0.857"]]
    assert page.tables["slowest"][1:] == [["s7", "90.0"], ["s6", "7.0"], ["s4", "6.0"], ["s3", "5.0"],
                                          ["s2", "4.0"]]
    assert "Median 5.0 s per submission." in text
    assert {r[0]: r[1] for r in page.tables["faults"][1:]} == {v: str(len(faults[k]))
                                                               for k, v in classreport.FAULTS.items()}
    assert len(page.images) == 3 and all(src.startswith("data:image/png;base64,") for src in page.images)
    assert "http://" not in text and "https://" not in text and "<script" not in text


def test_rewording_a_status_or_fault_message_keeps_the_report_columns(lab):
    """Issue 25, item 7: the report found faults by searching status text, so rewording a message zeroed a column.
    It counts typed faults: rows whose words say nothing the old search looked for still count."""
    rows = [_row(lab, "k", {}, 1.0, {"p1-explain": (A_, 0.0), "p2-why": (A_, 0.0)},
                 faults=[Fault(FaultKind.KERNEL_DIED, "went away")]),
            _row(lab, "t", {}, 1.0, {"p1-explain": (A_, 0.0), "p2-why": (A_, 0.0)},
                 faults=[Fault(FaultKind.TIME_LIMIT, "out of minutes")]),
            _row(lab, "s", {}, 1.0, {"p1-explain": (A_, 0.0), "p2-why": (A_, 0.0)},
                 faults=[Fault(FaultKind.SETUP_FAILED, "first cell broke")]),
            _row(lab, "n", {}, 1.0, {"p1-explain": (A_, 0.0), "p2-why": (A_, 0.0)})]
    rows[-1].state, rows[-1].faults = NOT_GRADED, [Fault(FaultKind.NOT_GRADED, "empty")]
    s = classreport.summarize(lab, rows)
    assert {k: [n for n, _ in v] for k, v in s.faults.items() if v} == {
        "not graded": ["n"], "time limit": ["t"], "kernel died": ["k"], "setup failed": ["s"]}
    assert s.ran == 3
    # The kept row reads back with its typed faults (the spool's JSON).
    again = Row.from_dict(json.loads(json.dumps(rows[0].to_dict())))
    assert again.faults == [Fault(FaultKind.KERNEL_DIED, "went away")] and again.state == GRADED


def test_hidden_checks_show_their_message_never_their_source(lab):
    rows = made_up_class(lab)
    text = classreport.page(classreport.summarize(lab, rows), rows)
    for c in lab.checks:
        if c.hidden:
            body = c.source.split("\n", 1)[1]
            assert body.strip() and body.strip() not in text
            assert "default_rng().normal(size=37)" not in text and "rng.integers(5, 50)" not in text


def test_a_hostile_name_or_message_cannot_script_the_page(lab):
    rows = [_row(lab, "<script>alert(1)</script>", {"p1-scale": '<img src=x onerror="alert(2)">'}, 1.0,
                 {"p1-explain": (ANSWERED, None), "p2-why": (ANSWERED, None)})]
    text = classreport.page(classreport.summarize(lab, rows), rows)
    assert "<script>alert" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text


# -- similarity --------------------------------------------------------------------------------------------------

def test_own_text_leaves_out_the_released_lab(lab):
    assert similarity.own_of(lab, "blank", lab.released) == similarity.Own("blank")
    good = similarity.own_of(lab, "good", answered_like(lab))
    assert [label for label, _ in good.code] == ["p1-answer", "p2-answer"]
    text = "\n".join(t for _, t in good.code)
    assert "return np.asarray(x, dtype=float) * k" in text
    assert "def scale(x, k):" not in text and "NotImplementedError" not in text and "CHECK" not in text


def answered_like(lab):
    import copy

    nb = copy.deepcopy(lab.released)
    sol = {c.get("id"): c.source for c in lab.source.cells}
    for c in nb.cells:
        if c.get("id") in ("p1-answer", "p2-answer"):
            c.source = sol[c.get("id")]
    return nb


def class_owns(lab):
    return [similarity.own_of(lab, s, json.loads(json.dumps(nb))) for s, nb in class_notebooks(lab.released).items()]


def test_a_renamed_and_reordered_copy_is_flagged_and_honest_work_is_not(lab):
    pairs = similarity.pairs(lab, class_owns(lab))
    flagged = [(p.a, p.b) for p in pairs if p.flagged]
    assert flagged == [("ana", "ben")], [(p.a, p.b, p.code, p.answers, p.flagged) for p in pairs]
    copy = pairs[0]
    assert copy.code >= 0.9 and copy.answers >= similarity.DEFAULT_THRESHOLD, copy
    honest = {(p.a, p.b): p.score for p in pairs if not p.flagged}
    assert all(v < similarity.DEFAULT_THRESHOLD for v in honest.values()), honest
    cells = {(c.label_a, c.label_b) for c in copy.cells}
    assert ("student-extra", "student-extra") in cells and ("p2-why", "p2-why") in cells
    extra = next(c for c in copy.cells if c.label_a == "student-extra")
    assert "<mark>" in extra.html_a and "<mark>" in extra.html_b and "check_my_scale" in extra.html_a
    assert "test_scale_by_hand" in extra.html_b


def test_a_mechanical_rewrite_of_a_copy_is_still_flagged(lab):
    """Break (issue 25): a copy read through an identity function, a no-op statement after each statement and
    filler words in its answers scored code 0.18 and answers 0.0 (not flagged) while the plain copy scored 1.00.
    Code is normalised before fingerprinting; a second, ordered signal ignores whatever was inserted."""
    from helpers.similarity_class import ANA, handin, rewrite

    zed = rewrite(ANA)
    assert "ident(" in zed["p1-answer"] and "None" in zed["p2-answer"] and "basically" in zed["p2-why"]
    owns = class_owns(lab) + [similarity.own_of(lab, "zed", json.loads(json.dumps(handin(lab.released, zed))))]
    pairs = {(p.a, p.b): p for p in similarity.pairs(lab, owns)}
    copy = pairs[("ana", "zed")]
    assert copy.flagged and copy.code >= 0.9 and copy.answers >= 0.9, copy
    assert copy.order_code >= 0.9 and copy.order_answers >= 0.9, copy
    honest = [p for p in pairs.values() if {p.a, p.b} & {"cleo", "dan"}]
    assert not [p for p in honest if p.flagged], [(p.a, p.b, p.score) for p in honest]
    # Each signal alone finds this rewrite: the ordered one with fingerprints that see only the raw text.
    assert similarity.ordered_overlap(similarity.skeleton(ANA["p1-answer"]),
                                      similarity.skeleton(zed["p1-answer"] + "\ndef ident(v):\n    return v"))[0] == 1.0
    assert similarity.ordered_overlap(similarity.content_words(ANA["p2-why"]),
                                      similarity.content_words(zed["p2-why"]))[0] == 1.0


def test_the_released_lab_alone_is_never_similar(lab):
    owns = [similarity.own_of(lab, f"blank{i}", json.loads(json.dumps(lab.released))) for i in range(3)]
    owns += [similarity.own_of(lab, f"good{i}", json.loads(json.dumps(answered_like(lab)))) for i in range(2)]
    pairs = similarity.pairs(lab, owns)
    assert not [p for p in pairs if p.flagged], "the released lab or a one-line answer made a pair"


def test_the_threshold_is_checked(lab, capsys):
    with pytest.raises(ValueError):
        similarity.pairs(lab, [], threshold=0)
    with pytest.raises(SystemExit):
        command(["report", SAMPLE, "--similarity-threshold", "1.5"])
    assert "--similarity-threshold" in capsys.readouterr().err


# -- end to end: a grading run writes the report; --report remakes it; Chromium opens it ------------------------

@pytest.mark.slow
def test_grading_writes_the_report_and_chromium_opens_it(tmp_path):
    (tmp_path / "repo").mkdir()
    root = make_answers_root(tmp_path / "repo")
    subs = tmp_path / "handins"
    subs.mkdir()
    for name, nb in class_notebooks(released(root)).items():
        (subs / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (subs / "blank.ipynb").write_text(json.dumps(released(root)), encoding="utf-8")
    out = tmp_path / "grades"
    lab_path = str(root / "solutions" / f"{SAMPLE}.ipynb")
    assert xlalab_cli.main(["grade", lab_path, str(subs), "--out", str(out), "--cell-timeout", "30", "--timeout", "90",
                       "--memory-gb", "3"]) == 0
    page = Tables((out / "report.html").read_text())
    assert [r[:2] for r in page.tables["similar"][1:]] == [["ana", "ben"]]
    assert page.tables["failures"][1][0] == "1" and page.tables["checks"][1][2] == f"{len(STUDENTS)} / 5"
    # The page's numbers are the gradebook's: passes per check, and the quartiles of the automatic points.
    import csv

    import numpy as np

    book = list(csv.DictReader((out / "gradebook.csv").open()))
    for row, check in zip(page.tables["checks"][1:], load_lab(lab_path).checks):
        passed = sum(float(r[check.check]) == check.points for r in book)
        assert row[2] == f"{passed} / {len(book)}", (row, check.check)
    q = np.percentile([float(r["auto"]) for r in book], [25, 50, 75])
    assert page.tables["quartiles"][1][1:] == [f"{v:.4g}" for v in q]
    # Merging the instructor's points remakes the report: p2-why now has one answer scored.
    manual = tmp_path / "manual.csv"
    manual.write_text("student,question,points,comment\nana,p2-why,2,names associativity\n", encoding="utf-8")
    assert xlalab_cli.main(["merge-manual", lab_path, str(manual), "--out", str(out)]) == 0
    questions = {r[0]: r for r in Tables((out / "report.html").read_text()).tables["questions"][1:]}
    assert questions["p2-why"][4:6] == ["1", "3"], questions   # scored 1, not scored yet 3
    # `xlalab report` alone remakes it from the grader's rows and the own text kept in the spool (no hand-ins given).
    (out / "report.html").unlink()
    assert xlalab_cli.main(["report", lab_path, "--out", str(out), "--similarity-threshold", "1"]) == 0
    text = (out / "report.html").read_text()
    assert "Pairs at or above 1 on any of the four are listed" in text
    assert [r[:3] for r in Tables(text).tables["similar"][1:]] == [["ana", "ben", "1.00"]]   # code: 1.00
    assert xlalab_cli.main(["report", lab_path, "--out", str(out)]) == 0
    shot = open_in_chromium(out / "report.html", tmp_path / "report.png")
    print(f"screenshot: {shot}")


def open_in_chromium(page: Path, shot: Path) -> Path:
    """Load ``page`` from file:// in headless Chromium: no exception, no failed resource, every image decodes;
    save a screenshot of the whole page to ``shot`` and to ``_build/screenshots/report.png``."""
    import test_book

    binary = test_book._chromium_binary()
    if binary is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get); browser check skipped")
    with tempfile.TemporaryDirectory(prefix="xlalab-chromium-") as profile:
        chrome = test_book.Chromium(binary, profile)
        try:
            chrome.send("Browser.getVersion", session=False, timeout=60)
            chrome.open_page()
            events = chrome.navigate(page.resolve().as_uri())
            errors, notes = test_book._js_errors(events, "file://")
            assert not errors and not notes, (errors, notes)
            images = chrome.evaluate(test_book.IMAGES_JS, await_promise=True) or []
            assert len(images) >= 3 and all(i["decoded"] and i["width"] > 0 for i in images), images
            height = int(chrome.evaluate("document.documentElement.scrollHeight"))
            chrome.send("Emulation.setDeviceMetricsOverride",
                        {"width": 1280, "height": min(height, 8000), "deviceScaleFactor": 1, "mobile": False})
            chrome.screenshot(shot)
        finally:
            chrome.close()
    assert shot.stat().st_size > 20_000, "the screenshot looks empty"
    test_book.SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, test_book.SCREENSHOTS / "report.png")
    return shot
