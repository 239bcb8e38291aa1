"""The workload suite: every workload in every execution mode, checked, timed, placed on the roofline.

``xlalab suite [--profile cpu|gpu|tiny] [--only gemv,fusion,resnet,transformer] [--out results/NAME.json]``

Two modules, each re-exported here: :mod:`~xlalab.suite.runner` runs the matrix (:func:`run`, :func:`run_case`,
the auto-clustering child process, :func:`cli` for ``xlalab suite``); :mod:`~xlalab.suite.report` reads, checks
(``schema.json``, a JSON Schema), writes, tabulates and plots what it produced (:func:`load_results` is the
book's entry point).
"""

from xlalab import workloads as W
from xlalab.suite import report, runner
from xlalab.suite.report import (
    RESULT_KEYS,
    SCHEMA,
    SCHEMA_VERSION,
    TOP_KEYS,
    course_results,
    load_results,
    plot,
    schema,
    schema_errors,
    table,
    write,
)
from xlalab.suite.runner import AUTOCLUSTER_FLAGS, FUSED_IMPLS, XLA_MODES, cli, default_out, run, run_case

__all__ = ["AUTOCLUSTER_FLAGS", "FUSED_IMPLS", "RESULT_KEYS", "SCHEMA", "SCHEMA_VERSION", "TOP_KEYS", "W", "XLA_MODES",
           "cli", "course_results", "default_out", "load_results", "plot", "report", "run", "run_case", "runner",
           "schema", "schema_errors", "table", "write"]
