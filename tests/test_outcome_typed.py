"""A row's outcome is typed once (issue 37, review s5 section 3): its status is made from its typed faults by one
function, and kernel death, a probe that did not run, a timeout and the judge's verdicts travel as data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from xlalab.grading.faults import GRADED, NOT_GRADED, Fault, FaultKind, not_graded, status_text
from xlalab.grading.model import CheckResult, Row
from xlalab.grading.run import CellResult, RunOutcome
from xlalab.grading.score import Verdicts, run_faults

GRADING = Path(__file__).resolve().parent.parent / "xlalab" / "grading"

# Reading prose to decide a row's fate: a status or message searched, split or compared, words of a death or a
# timeout looked for. Each was one rewording away from misfiling a row.
PROSE = re.compile(
    r"""in\s+(?:row|r|rec|c|mine|self)\.(?:status|message)\b"""
    r"""|\.status\s*\.\s*(?:startswith|endswith|removeprefix|split|find)\b"""
    r"""|\bstatus\s*\+="""
    r"""|["'][^"'\n]*(?:died|did not run|Timeout|timed out|time limit|dead on test start)[^"'\n]*["']\s+in\b"""
    r"""|\bmessage\s*==|\bin\s+(?:message|why|detail)\b|\.message\.(?:startswith|find|split)\b"""
    r"""|split\(["']; ["']\)|\bfrom_status\b""")
# The one place allowed, and why: the nbval plugin words a failed cell's message from nbval's own exception text
# (which of its lines to show); nothing decides anything from it (the plugin's timed_out field does).
ALLOWED = {("nbval_plugin.py", 'if "Timeout" in str(exc):')}


def test_no_grading_module_parses_status_or_message_text():
    found = []
    for path in sorted(GRADING.glob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0] if not line.lstrip().startswith(("'", '"')) else ""
            if PROSE.search(code) and (path.name, line.strip()) not in ALLOWED:
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert not found, "status or message text read to decide something:\n" + "\n".join(found)


@pytest.mark.parametrize("line", ['if "the kernel died" in r.message:', "row.status += '; tampered'",
                                  'return "did not run in your notebook" in message',
                                  'if row.status.startswith("not graded"):', 'x = "Timeout" in why'])
def test_the_scan_finds_prose_parsing(line):
    assert PROSE.search(line), line


def test_the_status_is_made_from_the_faults_in_their_order():
    faults = [Fault(FaultKind.KERNEL_DIED, "the kernel died (exit code 3)", "the kernel died (exit code 3)"),
              Fault(FaultKind.TIME_LIMIT, "check p1"),                       # the status does not name it
              Fault(FaultKind.TAMPERING, "check `p1` was changed", "tampered")]
    assert status_text(GRADED, faults) == "graded; the kernel died (exit code 3); tampered"
    assert status_text(GRADED, faults, ["q1", "q2"]) == ("graded; the kernel died (exit code 3); tampered; "
                                                         "written answers not scored yet: q1, q2")
    assert status_text(GRADED, []) == "graded"
    assert status_text(NOT_GRADED, [not_graded("empty file")]) == "not graded: empty file"
    row = Row("s", "lab", 2, [CheckResult("c", 2, False, False)], state=NOT_GRADED, faults=[not_graded("empty")])
    assert row.status == "not graded: empty" and row.reason == "empty"


def test_a_fault_kind_is_typed_and_kept_as_its_word():
    assert Fault("kernel died").kind is FaultKind.KERNEL_DIED   # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault("guard restored")   # type: ignore[arg-type]
    kept = json.loads(json.dumps(Row("s", "lab", 1, faults=[Fault(FaultKind.TAMPERING, "x", "tampered")]).to_dict()))
    assert kept["faults"] == [{"kind": "tampering", "detail": "x", "status": "tampered"}]
    assert "status" not in kept and "restored" not in kept
    again = Row.from_dict({**kept, "status": "graded; old words", "restored": ["numpy.sum"]})
    assert again.faults == [Fault(FaultKind.TAMPERING, "x", "tampered")] and again.status == "graded; tampered"


def test_a_row_an_older_grader_kept_shows_its_words_as_they_were():
    """Before issue 37 the spool kept a row's status as words and its faults without them: regrading nobody, the
    gradebook rebuilt from such a row (merge-manual) says what it said."""
    old = {"student": "s", "lab": "lab", "maximum": 2, "checks": [], "status": "graded; the kernel died (SIGKILL)",
           "restored": [], "state": "graded", "faults": [{"kind": "kernel died", "detail": "the kernel died"}],
           "answers": [{"answer": "q1", "points": 1, "state": "answered", "text": "t", "earned": None}]}
    row = Row.from_dict(old)
    assert row.status == "graded; the kernel died (SIGKILL)" and row.faults[0].kind is FaultKind.KERNEL_DIED
    assert row.status_line() == "graded; the kernel died (SIGKILL); written answers not scored yet: q1"
    assert Row.from_dict(json.loads(json.dumps(row.to_dict()))).status_line() == row.status_line()


def _outcome(results: list[CellResult]) -> RunOutcome:
    return RunOutcome(results, timed_out=False, returncode=0, log_tail="", ran=True)


def test_kernel_death_is_read_from_the_plugins_data_not_its_words(tmp_path):
    from xlalab.grading.lab import load_lab

    from helpers import make_lab_root

    (tmp_path / "repo").mkdir()
    lab = load_lab(make_lab_root(tmp_path / "repo") / "solutions" / "lab90_sample.ipynb")
    said = CellResult(3, "x", None, "call", "failed", "Exception: the kernel died (exit code 1) while this cell ran")
    assert not [f for f in run_faults(lab, _outcome([said]), None, 60) if f.kind is FaultKind.KERNEL_DIED]
    died = CellResult(3, "x", None, "call", "failed", "whatever the words", died={"code": None, "signal": "SIGKILL"})
    (fault,) = [f for f in run_faults(lab, _outcome([died]), None, 60) if f.kind is FaultKind.KERNEL_DIED]
    assert fault.detail == fault.status == "the kernel died (SIGKILL: killed, e.g. for using too much memory)"


def test_the_plugins_result_record_carries_death_and_timeout_as_fields():
    rec = {"event": "result", "cell": 2, "id": "c", "check": None, "phase": "call", "outcome": "failed",
           "message": "m", "died": {"code": 3, "signal": None}, "dead_at_start": False, "timed_out": True}
    r = CellResult.from_record(rec)
    assert r is not None and r.died == {"code": 3, "signal": None} and r.timed_out and not r.dead_at_start
    bad = CellResult.from_record({**rec, "died": "yes", "timed_out": "yes", "dead_at_start": 1})
    assert bad is not None and bad.died is None and not bad.timed_out and not bad.dead_at_start


def test_the_judges_verdicts_are_json_records():
    data = (b'{"check": "a", "passed": true}\n{"check": "b", "missing": "probe-1"}\nnot json\n'
            b'{"check": null, "missing": "x"}\n{"check": "c", "raised": "probe-2"}\n["c"]\nb\n')
    v = Verdicts.parse(data)
    assert (v.ended, v.missing, v.raised) == ({"a"}, {"b"}, {"c"})
    assert Verdicts.parse(b"a b c\n").ended == set(), "the old whitespace-separated ids are not verdicts"
