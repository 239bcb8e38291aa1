"""``xlalab``: the course's one command, with a subcommand per task (as ``otter grade``, ``otter assign``).

``xlalab grade LAB SUBMISSIONS...``    grade a class's hand-ins (:mod:`xlalab.grading.cli`)
``xlalab report LAB``                  remake the class report from the grader's rows
``xlalab merge-manual LAB CSV``        fold the instructor's scores of the written answers in
``xlalab export LAB KIND...``          write the gradebook for Canvas, Moodle or as a plain CSV
``xlalab assign [--check]``            write labs/ from solutions/ (:mod:`xlalab.grading.assign`)
``xlalab suite``                       run the workload suite (:mod:`xlalab.suite`)
``xlalab gpu-check``                   suite, grading and book on this machine's GPU (:mod:`xlalab.gpu_check`)
``xlalab gpu-compile PROGRAM``         XLA:GPU's kernels per target, without a GPU (:mod:`xlalab.hlo.gpu_compile`)

Each subcommand's options are one dataclass (:mod:`xlalab.options`; the grading commands' in
:mod:`xlalab.grading.options`); a term's repeated settings go in
``[tool.xlalab.<subcommand>]`` of ``pyproject.toml`` or in ``xlalab.toml`` (flags override them). ``-v`` logs
debugging detail, ``-q`` only warnings and errors. ``python -m xlalab`` is the same command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlalab import log as log_setup
from xlalab.grading.options import ExportOptions, GradeOptions, MergeManualOptions, ReportOptions
from xlalab.options import (
    AssignOptions,
    ConfigError,
    GpuCheckOptions,
    GpuCompileOptions,
    HloCensusOptions,
    HwOptions,
    Sections,
    SuiteOptions,
    add_options,
    config_defaults,
    find_config,
    from_args,
    read_config,
)


def _grade(opts: Any) -> int:
    from xlalab.grading import cli

    return cli.run_grade(opts)


def _report(opts: Any) -> int:
    from xlalab.grading import cli

    return cli.run_report(opts)


def _merge_manual(opts: Any) -> int:
    from xlalab.grading import cli

    return cli.run_merge_manual(opts)


def _export(opts: Any) -> int:
    from xlalab.grading import cli

    return cli.run_export(opts)


def _assign(opts: Any) -> int:
    from xlalab.grading import assign

    return assign.run(opts)


def _suite(opts: Any) -> int:
    from xlalab import suite

    return suite.cli(opts)


def _gpu_check(opts: Any) -> int:
    from xlalab import gpu_check

    return gpu_check.run(opts)


def _gpu_compile(opts: Any) -> int:
    from xlalab.hlo import gpu_compile

    return gpu_compile.run(opts)


def _hw(opts: Any) -> int:
    from xlalab import hw

    return hw.run(opts)


def _hlo_census(opts: Any) -> int:
    from xlalab.hlo import census

    return census.run(opts)


@dataclass(frozen=True)
class Command:
    """One subcommand: its options and the function that runs them (returns the exit status)."""

    options: type
    run: Callable[[Any], int]
    help: str


COMMANDS: dict[str, Command] = {
    "grade": Command(GradeOptions, _grade, "grade a class's hand-ins of one lab"),
    "report": Command(ReportOptions, _report, "remake <out>/report.html, the class report"),
    "merge-manual": Command(MergeManualOptions, _merge_manual,
                            "fold the instructor's scores of the written answers into the gradebook"),
    "export": Command(ExportOptions, _export, "write <out>/export-KIND.csv for Canvas, Moodle or as a plain CSV"),
    "assign": Command(AssignOptions, _assign, "write labs/ from solutions/ (--check: is labs/ up to date?)"),
    "suite": Command(SuiteOptions, _suite, "run the workload suite: every workload in every mode, timed"),
    "gpu-check": Command(GpuCheckOptions, _gpu_check, "suite, grading and book on this machine's GPU"),
    "gpu-compile": Command(GpuCompileOptions, _gpu_compile,
                           "XLA:GPU's kernels for a T4, A100, H100... compiled without a GPU (no autotuning)"),
    "hw": Command(HwOptions, _hw, "this machine's backend, profile and measured ceilings"),
    "hlo-census": Command(HloCensusOptions, _hlo_census,
                          "kernels and fusions of the course's HLO probes under this TensorFlow (JSON)"),
}


# The config sections and the options they may set (``[grade]`` also serves report, merge-manual and export).
SECTIONS: Sections = {
    "grade": (GradeOptions, ExportOptions, MergeManualOptions),
    "report": (ReportOptions,),
    "merge-manual": (MergeManualOptions,),
    "export": (ExportOptions,),
    "assign": (AssignOptions,),
    "suite": (SuiteOptions,),
    "gpu-check": (GpuCheckOptions,),
}


def _verbosity() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log debugging detail")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="log only warnings and errors")
    return p


def parser(defaults: dict[str, dict[str, Any]] | None = None) -> argparse.ArgumentParser:
    """The ``xlalab`` parser; ``defaults`` (a subcommand's name -> its config values) replace built-in defaults."""
    defaults = defaults or {}
    common = _verbosity()
    p = argparse.ArgumentParser(prog="xlalab", description="The compiled-TensorFlow course's command: one subcommand "
                                "per task. Flags override [tool.xlalab.COMMAND] of pyproject.toml or xlalab.toml.",
                                parents=[common])
    p.add_argument("--config", metavar="FILE", default=None,
                   help="the config file (default: xlalab.toml or pyproject.toml here or in the nearest folder above)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in COMMANDS.items():
        doc = (cmd.options.__doc__ or "").strip().replace("``", "")
        sp = sub.add_parser(name, help=cmd.help, description=doc, parents=[common])
        add_options(sp, cmd.options, defaults=defaults.get(name))
    return p


def _config_arg(argv: list[str]) -> str | None:
    """The value of ``--config`` among the arguments before the subcommand."""
    for i, arg in enumerate(argv):
        if arg in COMMANDS:
            return None
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def load_defaults(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Each subcommand's config values from ``path`` (default: :func:`xlalab.options.find_config`)."""
    found = Path(path) if path else find_config()
    if found is None:
        return {}
    if path and not found.is_file():
        raise ConfigError(f"{found}: no such config file")
    config = read_config(found, SECTIONS)
    return {name: config_defaults(name, cmd.options, config, found, SECTIONS) for name, cmd in COMMANDS.items()}


def main(argv: list[str] | None = None) -> int:
    """Run ``xlalab COMMAND [options]``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        defaults = load_defaults(_config_arg(argv))
    except ConfigError as err:
        print(f"xlalab: error: {err}", file=sys.stderr)
        return 2
    args = parser(defaults).parse_args(argv)
    log_setup.configure(getattr(args, "verbose", 0), getattr(args, "quiet", False))
    cmd = COMMANDS[args.command]
    return cmd.run(from_args(cmd.options, args, defaults.get(args.command)))


__all__ = ["COMMANDS", "Command", "load_defaults", "main", "parser"]
