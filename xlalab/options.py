"""The options of every ``xlalab`` subcommand, each defined once, and the term's config file.

Each subcommand has one dataclass (:class:`AssignOptions`, :class:`SuiteOptions`, ...; the grading commands' are in
:mod:`xlalab.grading.options`). Its fields and defaults are the single source of the command-line flags
(:func:`add_options`), the Python API's defaults (e.g. :func:`xlalab.grading.cli.grade_submissions` reads
:data:`xlalab.grading.options.GRADE`) and the keys a config file may set. This module imports no command: the
command layer (:mod:`xlalab.cli`) names each config section's dataclasses (``sections`` below).

A config file holds a term's repeated settings: ``[tool.xlalab.<section>]`` in a ``pyproject.toml``, or
``[<section>]`` in an ``xlalab.toml`` (found in the current folder or the nearest one above holding either
file; ``xlalab --config FILE`` names one). The sections are the subcommands' names; ``[grade]`` also serves
``report``, ``merge-manual`` and ``export``, which read the keys they have. For example::

    [tool.xlalab.grade]
    source = "~/private/solutions"
    cluster = "slurm"
    queue = "short"
    memory_gb = 4
    jobs = 4

Flags override the config; the config overrides the built-in defaults. An unknown section or key, or a value of
the wrong type, is a :class:`ConfigError` naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover  (Python 3.10: the tomli backport, a dependency there)
    import tomli as tomllib

from xlalab.workloads import WORKLOADS

REPO = Path(__file__).resolve().parent.parent
CONFIG_NAME = "xlalab.toml"

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file that cannot be used: unknown section or key, wrong type or value."""


def opt(default: Any = None, *flags: str, help: str | None = None, factory: Callable[[], Any] | None = None,
        **meta: Any) -> Any:
    """A dataclass field that is also a flag: ``flags`` (default ``--field-name``), ``help`` and the rest of
    ``meta`` go to ``add_argument`` (``choices`` may be a callable, called when the parser is built).

    Extra ``meta``: ``positional=True`` (an argument, never a config key), ``config=False`` (not a config key),
    ``path=True`` (a config value has ``~`` expanded and is relative to the config file), ``group`` (a title)."""
    meta = {"flags": flags, "help": help, **meta}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def threshold(text: str | float) -> float:
    """``--similarity-threshold``: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], not {text}")
    return value


# ---------------------------------------------------------------------------------------------
# The other commands.

@dataclass
class AssignOptions:
    """``xlalab assign``: write labs/ from solutions/ (or, with ``--check``, say whether labs/ is up to date)."""

    solutions: list[str] = opt(factory=list, positional=True, nargs="*",
                               help="solution notebooks (default: solutions/lab*.ipynb)")
    check: bool = opt(False, action="store_true", config=False,
                      help="exit 1 if labs/ is out of date; write nothing")
    root: str = opt(".", path=True, help="repository root holding _config.yml, solutions/, labs/")
    record_built_with: bool = opt(False, action="store_true", config=False,
                                  help="first write this environment's TensorFlow version and XLA backend to "
                                       "xlalab/built_with.json (what @BUILT_WITH@ and the setup cell's note "
                                       "compare with); after writing labs/, record the digests of every released "
                                       "version of each check (git history of labs/) in "
                                       "xlalab/grading/released_checks.json")


@dataclass
class SuiteOptions:
    """``xlalab suite``: every workload in every execution mode, timed and placed on the roofline."""

    profile: str | None = opt(None, choices=("cpu", "gpu", "tiny"),
                              help="problem sizes (default: gpu when TensorFlow sees one, else cpu)")
    only: str = opt(",".join(WORKLOADS), help="comma-separated workloads")
    out: str | None = opt(None, path=True, help="JSON path (default results/<hostname>.json)")
    min_time: float | None = opt(None, type=float, help="seconds of interleaved timing per case")
    no_autocluster: bool = opt(False, action="store_true", help="skip the auto-clustering child process")
    no_plots: bool = opt(False, action="store_true")
    worker: str | None = opt(None, help=argparse.SUPPRESS, config=False)


@dataclass
class GpuCheckOptions:
    """``xlalab gpu-check``: suite, grading and book on this machine's GPU."""

    out_dir: str = opt(str(REPO / "results"), path=True, help="where the JSON, plots and report go")
    skip_suite: bool = opt(False, action="store_true")
    skip_grading: bool = opt(False, action="store_true")
    skip_book: bool = opt(False, action="store_true")
    only: str | None = opt(None, help="suite workloads, comma-separated (default: all)")


@dataclass
class HwOptions:
    """``xlalab hw``: this machine's backend, profile and measured ceilings (cached; ``--refresh`` measures again)."""

    refresh: bool = opt(False, action="store_true", help="measure again instead of using the cache")
    json: bool = opt(False, action="store_true", help="print JSON instead of text")


@dataclass
class HloCensusOptions:
    """``xlalab hlo-census``: kernels and fusions of the course's HLO probes under this TensorFlow (JSON)."""

    record: str | None = opt(None, path=True, help="add this TensorFlow's census to this JSON file")


@dataclass
class GpuCompileOptions:
    """``xlalab gpu-compile``: what XLA:GPU makes of a program for each target, compiled without a GPU (no
    autotuning; the times are datasheet lower bounds, never measurements)."""

    program: str = opt("", positional=True, help="an HLO text file, or module:function naming a TensorFlow function "
                       "(its input_signature, or --arg, gives the shapes)")
    target: list[str] = opt(factory=lambda: ["T4", "A100-SXM-40GB", "H100-SXM"], action="append", metavar="NAME",
                            help="a GPU target (an xlalab.hw.GPU_PEAKS key with a configuration; repeatable; "
                            "default: T4, A100-SXM-40GB, H100-SXM)")
    arg: list[str] = opt(factory=list, action="append", metavar="SHAPE[:DTYPE]",
                         help="one argument of module:function, e.g. 256,512 or 8,128:bfloat16 (repeatable)")
    xla_flag: list[str] = opt(factory=list, action="append", metavar="FLAG",
                              help="an XLA flag for the compile, e.g. --xla_gpu_enable_triton_gemm=false")
    timeout: float = opt(600.0, type=float, help="seconds before the compiler's subprocess is killed")
    json: bool = opt(False, action="store_true", help="print JSON instead of tables")
    hlo: bool = opt(False, action="store_true", help="print (or put in the JSON) the optimized HLO too")


# ---------------------------------------------------------------------------------------------
# Options <-> argparse.

def _flags(f: dataclasses.Field) -> tuple[str, ...]:
    return f.metadata.get("flags") or ("--" + f.name.replace("_", "-"),)


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def add_options(parser: argparse.ArgumentParser, cls: type, *, exclude: tuple[str, ...] = (),
                defaults: dict[str, Any] | None = None) -> None:
    """Add one argument per field of ``cls`` to ``parser``; ``defaults`` (from a config) replace the built-in ones.

    A repeatable (``append``) flag's parser default is None: :func:`from_args` then takes the config's list or
    the built-in one, so that flags replace, never extend, the config's list.
    """
    defaults = defaults or {}
    groups: dict[str, Any] = {g.title: g for g in parser._action_groups if g.title}
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        meta = dict(f.metadata)
        flags, positional, title = _flags(f), meta.pop("positional", False), meta.pop("group", None)
        for key in ("flags", "config", "path"):
            meta.pop(key, None)
        if callable(meta.get("choices")):
            meta["choices"] = meta["choices"]()
        target = parser
        if title:
            if title not in groups:
                groups[title] = parser.add_argument_group(title)
            target = groups[title]
        if positional:
            target.add_argument(f.name, **meta)
            continue
        default = defaults.get(f.name, _default(f))
        if meta.get("action") == "append":
            default = None
        target.add_argument(*flags, dest=f.name, default=default, **meta)


def from_args(cls: type[T], args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> T:
    """The options object of ``cls`` from parsed arguments (a field the namespace lacks keeps its default)."""
    defaults = defaults or {}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):   # type: ignore[arg-type]
        if not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if value is None and f.metadata.get("action") == "append":
            value = list(defaults.get(f.name, _default(f)))
        values[f.name] = value
    return cls(**values)


# ---------------------------------------------------------------------------------------------
# The config file.

GRADING = ("grade", "report", "merge-manual", "export")


def find_config(start: str | Path | None = None) -> Path | None:
    """The config file for a command run in ``start`` (default: the current folder): ``xlalab.toml`` or a
    ``pyproject.toml`` with ``[tool.xlalab]`` in it or in the nearest folder above holding one of the two."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_NAME).is_file():
            return folder / CONFIG_NAME
        if (folder / "pyproject.toml").is_file():
            return folder / "pyproject.toml"
    return None


Sections = Mapping[str, tuple[type, ...]]   # a config section's name -> the options dataclasses it may set


def read_config(path: str | Path, sections: Sections) -> dict[str, dict[str, Any]]:
    """The sections of a config file: ``{section: {key: value}}`` (``[tool.xlalab]`` of a pyproject.toml); a
    section not in ``sections`` is a :class:`ConfigError`."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: {err}") from None
    if path.name == "pyproject.toml" or "tool" in doc:
        doc = doc.get("tool", {}).get("xlalab", {})
    where = "[tool.xlalab]" if path.name == "pyproject.toml" else path.name
    for name, table in doc.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: unknown key {name!r} in {where}; settings go in a section, e.g. "
                              f"[tool.xlalab.grade] (sections: {', '.join(sections)})")
        if name not in sections:
            raise ConfigError(f"{path}: unknown section {name!r} in {where} (sections: {', '.join(sections)})")
    return doc


def _convert(f: dataclasses.Field, value: Any, base: Path) -> Any:
    kind = str(f.type).split("|")[0].strip()
    if f.metadata.get("action") in ("store_true", "store_false") or kind == "bool":
        ok = isinstance(value, bool)
    elif kind.startswith("list"):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"expects {'a list of strings' if kind.startswith('list') else kind}, not {value!r}")
    if f.metadata.get("type") is threshold:
        try:
            value = threshold(value)
        except argparse.ArgumentTypeError as err:
            raise ConfigError(str(err)) from None
    elif kind == "float":
        value = float(value)
    choices = f.metadata.get("choices")
    choices = choices() if callable(choices) else choices
    if choices and value not in choices:
        raise ConfigError(f"must be one of {', '.join(choices)}, not {value!r}")
    if f.metadata.get("path") and isinstance(value, str):
        value = str(base / Path(value).expanduser())
    return value


def config_defaults(command: str, cls: type, config: dict[str, dict[str, Any]], path: str | Path,
                    sections: Sections) -> dict[str, Any]:
    """The defaults that ``config`` (read from ``path``) sets for ``command``, whose options are ``cls``; a key is
    allowed in a section if one of the section's dataclasses (``sections``) has it.

    ``[grade]`` serves every grading command (each takes the keys it has), then the command's own section.
    Raises :class:`ConfigError` on a key no command of the section has, or a value of the wrong type."""
    names = (["grade"] if command in GRADING else []) + [command]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    base = Path(path).resolve().parent
    out: dict[str, Any] = {}
    for section in dict.fromkeys(names):
        for key, value in config.get(section, {}).items():
            name = key.replace("-", "_")
            allowed = {n for c in sections[section] for n, f in _configurable(c).items()}
            if name not in allowed:
                raise ConfigError(f"{path}: unknown key {key!r} in section [{section}] (known: "
                                  f"{', '.join(sorted(allowed))})")
            if name not in fields:
                continue
            try:
                out[name] = _convert(fields[name], value, base)
            except ConfigError as err:
                raise ConfigError(f"{path}: [{section}] {key} {err}") from None
    return out


def _configurable(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)
            if not f.metadata.get("positional") and f.metadata.get("config", True)}

