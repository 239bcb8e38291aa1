"""Grading, from the instructor's solution to the gradebook: one package whose file names are the pipeline.

Kernel side (imported by every lab's setup cell, so this module imports nothing heavy):
:func:`track_checks` and :func:`report` (in :mod:`.notebook`).

Instructor side, in pipeline order (``xlalab grade``, ``report``, ``merge-manual`` and ``export`` are :mod:`.cli`):

- :mod:`.options`     the grading commands' options (flags, config keys, the API's defaults :data:`.options.GRADE`)
- :mod:`.labformat`   the lab format read as data: check cells, written answers, metadata, digests
- :mod:`.assign`      solutions/ -> labs/ (answers stripped, hidden checks removed); ``xlalab assign``
- :mod:`.lab`         the instructor source of one lab and its released version, its checks and points
- :mod:`.submissions` read and name hand-ins (an unreadable one becomes a row with the reason)
- :mod:`.probe`       kernel side: ``probe(name, fn)`` records plain data (student) or replays it (judge)
- :mod:`.build`       the student's notebook that is run: released checks' probing parts, hidden ones put back
- :mod:`.judge`       the judge notebook (no student code: setup, given cells, whole checks) and the static rule
- :mod:`.launcher`    the first process of a run: limits, pytest, the records sent back
- :mod:`.sandbox`     the bubblewrap jail around one run (``--sandbox auto|bwrap|none``)
- :mod:`.run`         one notebook under nbval (:mod:`.nbval_plugin`), limits, a dead kernel noticed at once
- :mod:`.gpu_answer`  GPU prediction checks: the reference compiled by XLA:GPU in the judge, cached per run
- :mod:`.score`       per-check results (the judge's verdicts) and the runs' typed faults
- :mod:`.model`       the records: ``CheckResult``, ``AnswerResult``, ``Row`` (its status made by
                      :func:`.faults.status_text` from its typed faults, :mod:`.faults`)
- :mod:`.task`        one submission end to end (what an engine runs), returning its row
- :mod:`.feedback`    the Markdown feedback of one student and the summary table
- :mod:`.gradebook`   rows kept in a grader-private spool, ``gradebook.csv`` built from it, tampering detected
- :mod:`.answers`     written answers: collected per question, ``manual.csv`` template and merge
- :mod:`.export`      ``xlalab export LAB canvas|moodle|csv``: the gradebook in the form a platform imports
- :mod:`.similarity`  similar hand-ins: winnowed fingerprints of the students' own cells (copydetect), flagged
- :mod:`.classreport` ``<out>/report.html``: failures, score distribution, checks, questions, time, faults, pairs
- :mod:`.engine`      where submissions run: in process, a local Dask cluster, a scheduler, Slurm/PBS/SGE/LSF
- :mod:`.cli`         what ``xlalab grade``, ``report``, ``merge-manual`` and ``export`` run
                      (``tests/scripts/bench_grading.py`` measures its throughput); the ``xlalab`` command itself is
                      :mod:`xlalab.cli`, the one way in
- :mod:`.api`         the instructors' Python API (grade a class, build a lab, read a gradebook)
"""

from xlalab.grading import gpu_answer
from xlalab.grading.notebook import CHECK_HEADER, CheckState, parse_header, report, states, track_checks

__all__ = ["CHECK_HEADER", "gpu_answer", "CheckState", "parse_header", "report", "states", "track_checks"]
