"""Builders shared by the tests, imported as ``from helpers import ...`` (pytest puts ``tests/`` on ``sys.path``,
as a script in ``tests/`` has it too); the fixtures are in ``tests/conftest.py``.

- :mod:`.labs`: the sample lab (NumPy only) and the repositories and hand-ins made from it;
- :mod:`.grading`: the limits, hand-in folders and outputs of whole grading runs;
- :mod:`.similarity_class`: a made-up class of hand-ins for the similarity tests (imported by its own name).
"""

from helpers.grading import LIMIT_ARGS, LIMITS, outputs, write_handins
from helpers.labs import (
                          MODEL_WHY,
                          RUBRIC_SCALE,
                          RUBRIC_WHY,
                          SAMPLE,
                          SAMPLE_URL,
                          answered,
                          cell,
                          check,
                          code,
                          handin_copy,
                          insert_after,
                          make_answers_root,
                          make_lab_root,
                          md,
                          released,
                          sample_solution,
                          sample_solution_with_answers,
)

__all__ = ["LIMITS", "LIMIT_ARGS", "MODEL_WHY", "RUBRIC_SCALE", "RUBRIC_WHY", "SAMPLE", "SAMPLE_URL", "answered",
           "cell", "check", "code", "handin_copy", "insert_after", "make_answers_root", "make_lab_root", "md",
           "outputs", "released", "sample_solution", "sample_solution_with_answers", "write_handins"]
