"""What a student sees once, and answers that match their questions (issue 26, item 5).

- Every lab's report is printed once: the last cell ends with ``;``, so Jupyter does not echo the returned table.
- Lab 1 lets TensorFlow's retracing warning through once, where retracing is the lesson, and hides its repeats.
- Lab 6's written answers are graded under the ids of their question numbers (Q1 is ``q1``), and the prediction
  that Q4 asks about has its own box.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from xlalab.grading import assign

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((REPO / "solutions").glob("lab*.ipynb"))


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_the_report_is_shown_once(path):
    last = [c for c in assign.read(path).cells if c.cell_type == "code"][-1]
    code = [line.split("#")[0].rstrip() for line in last.source.splitlines() if line.split("#")[0].strip()]
    assert code and code[-1].endswith(";"), (
        f"{path.name}: the report cell's last statement must end with ';' so that Jupyter does not print the "
        f"returned table a second time: {last.source!r}")


def test_lab01_shows_the_retracing_warning_once():
    import numpy as np
    import tensorflow as tf

    cells = {c.get("id"): c for c in assign.read(REPO / "solutions" / "lab01_timing.ipynb").cells}
    logger = tf.get_logger()
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler, filters = Keep(), list(logger.filters)
    logger.addHandler(handler)
    try:
        ns = {"tf": tf, "np": np}
        exec(cells["p2-given"].source, ns)
        for _ in range(3):   # the student's experiment, then two more functions that retrace (checks, timings)
            fn, _traces = ns["make_scaled_sum"]()
            for s in ns["SCALES"]:
                fn(ns["x_small"], s)
        exec(cells["p2-given"].source, ns)   # running the cell again adds no second filter
        assert sum(type(f).__name__ == "FirstRetracingWarningOnly" for f in logger.filters) == 1
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = filters
    retracing = [m for m in seen if "triggered tf.function retracing" in m]
    assert len(retracing) == 1, f"{len(retracing)} retracing warnings shown: {retracing}"


def test_lab06_answer_ids_are_the_question_numbers():
    cells = assign.read(REPO / "solutions" / "lab06_resnet.ipynb").cells
    numbered = []
    for i, c in enumerate(cells):
        m = re.match(r"(?:## Questions\s+)?\*\*Q(\d)\.\*\*", c.source.strip()) if c.cell_type == "markdown" else None
        if m:
            box = cells[i + 1]
            numbered.append((m.group(1), assign.xmeta(box).get("answer")))
    assert [n for n, _ in numbered] == ["1", "2", "3", "4"], numbered
    assert all(answer == f"q{n}" for n, answer in numbered), f"questions and the ids they are graded under: {numbered}"


def test_lab06_q4_has_its_prediction_box():
    cells = assign.read(REPO / "solutions" / "lab06_resnet.ipynb").cells
    ids = [c.get("id") for c in cells]
    q4 = next(c for c in cells if c.cell_type == "markdown" and c.source.lstrip().startswith("**Q4.**"))
    assert "predict" in q4.source.lower()
    boxes = [c for c in cells[:ids.index("p6-answer")] if assign.xmeta(c).get("answer") == "p6-predict"]
    assert boxes and "Predict first" in cells[ids.index(boxes[0].get("id")) - 1].source
