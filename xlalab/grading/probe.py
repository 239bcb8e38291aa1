"""Probes: the only way a check reads what the student's code does (kernel side; imports only NumPy at use).

A check cell has two parts, split by a line ``# JUDGE``:

- the *probing* part calls the student's code only through :func:`probe`, e.g.
  ``got = probe("scale-123", lambda: scale([1, 2, 3], 2.0))``;
- the *judging* part (after ``# JUDGE``) asserts on what the probes returned, never on a name the student defines.

:func:`probe` returns the callable's result as **plain data** (:func:`to_plain`): None, bool, int, float, str,
lists (tuples become lists) and dicts with string keys of those, and NumPy arrays of a bool, integer or float
dtype (a tensor becomes an array; bfloat16 becomes float32). Anything else is refused with :class:`ProbeError`.

The mode decides what :func:`probe` does (:func:`configure`, set by the grader's first cell):

- ``live`` (a student working; the default): call, convert, return. The whole check runs in the student's kernel,
  as immediate feedback.
- ``record`` (the student's kernel when grading): the same, and each result (or the error it raised) is appended
  to a records file as a JSON line; the grader receives only the probing part of each check, which
  :func:`run_check` runs in a namespace of its own with the check's secret seed (given in that cell only).
- ``replay`` (the judge kernel, which never runs student code): return the value the student's kernel recorded for
  that id (the n-th call of an id gets its n-th record); raise :class:`ProbeError` for an error it recorded or a
  probe that never ran. The judging part then runs on data only.

Random inputs of a check come from :func:`check_rng` (check id): when grading, from a seed derived from the grading
run's master seed and the check id (:func:`derive`). The student's kernel never gets the master seed: each graded
check cell holds its own derived seed only, and :func:`check_rng` refuses another check's id there; the judge
(replay) gets the master seed and derives the same seeds.

Records are data, never code: JSON with every value tagged (``{"l": [...]}`` a list, ``{"d": [[k, v], ...]}`` a
dict, ``{"a": base64}`` an array in ``.npy`` format, read with ``allow_pickle=False``), parsed with caps on
bytes, key length, depth, nodes and array size (:func:`parse_records`; depth and value counts are bounded on the
raw bytes before any Python object is built); anything else is the student's fault.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JUDGE_MARKER = "# JUDGE"

MAX_RECORDS_BYTES = 32 * 2**20     # the records file the grader accepts
MAX_DEPTH = 16                     # nesting of lists and dicts
MAX_NODES = 200_000                # values in all records together
MAX_ARRAY_BYTES = 16 * 2**20       # one array
MAX_STRING = 8 * 2**20             # characters of one string (an optimized HLO module with its metadata is
                                   # 1.0 MiB for Lab 6's small CPU ResNet; the grader's paths make it longer)
MAX_CALLS = 10_000                 # probe calls recorded
MAX_KEY = 200                      # characters of one dict key
# Caps on the raw JSON of the records, checked before parsing: tagged data nests at most 3 JSON levels per level
# of plain data ({"d": [[k, v]]}) under the record's own object; a plain value costs at most 4 JSON values
# ({"l": [...]}: object, key, list, the value), a record line a few more.
MAX_JSON_DEPTH = 3 * (MAX_DEPTH + 2) + 2
MAX_JSON_VALUES = 4 * MAX_NODES + 8 * MAX_CALLS


class ProbeError(AssertionError):
    """A probe failed: its callable raised, returned something that is not plain data, or never ran.

    An AssertionError, so that the check fails with this message as its reason. ``kind`` says which, as data:
    ``"missing"`` (the judge has no record of this call: it did not run in the student's notebook),
    ``"raised"`` (the student's callable raised, or in the judge: the record is that error), ``"refused"`` (not
    plain data), ``"misuse"`` (``check_rng`` called outside its own check).
    """

    def __init__(self, message: str, kind: str = "refused") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class ProbeRecord:
    """One probe call as the student's kernel recorded it: ``value`` (plain data) or ``error`` (a message)."""

    probe: str
    value: Any = None
    error: str | None = None


@dataclass
class _State:
    mode: str = "live"                     # live | record | replay
    path: str | None = None                # record: the file appended to
    seed: int | None = None                # replay: the grading run's master seed (check_rng derives from it)
    check: str | None = None               # record: the check run_check is running ...
    check_seed: int | None = None          # ... and its derived seed
    records: dict[str, list[ProbeRecord]] = field(default_factory=dict)   # replay
    used: dict[str, int] = field(default_factory=dict)
    sources: list[str] | None = None       # replay: the hand-in's code cells
    verdicts: str | None = None            # replay: the file of verdict records (:func:`passed`, :func:`judging`)
    judging: str | None = None             # replay: the check the judge is running
    calls: int = 0


_STATE = _State()


def configure(mode: str, path: str | None = None, seed: int | None = None, sources: str | None = None,
              verdicts: str | None = None) -> None:
    """Set the mode (``live``, ``record`` or ``replay``); ``path``: the records file (written in record mode,
    read in replay mode); ``seed``: the master seed of :func:`check_rng` (replay mode; record mode gets each
    check's derived seed from :func:`run_check`, never the master); ``sources``: replay mode, a JSON file
    of the hand-in's code cell sources (a list of strings), what :func:`student_source` reads; ``verdicts``: replay
    mode, the file :func:`passed` appends to."""
    if mode not in ("live", "record", "replay"):
        raise ValueError(f"unknown probe mode {mode!r}")
    _STATE.mode, _STATE.path, _STATE.seed = mode, path, seed
    _STATE.check, _STATE.check_seed = None, None
    _STATE.records, _STATE.used, _STATE.calls, _STATE.sources = {}, {}, 0, None
    _STATE.verdicts = verdicts if mode == "replay" else None
    _STATE.judging = None
    if mode == "replay":
        with open(path, "rb") as f:   # type: ignore[arg-type]
            _STATE.records = parse_records(f.read(MAX_RECORDS_BYTES + 1))
        if sources:
            with open(sources, encoding="utf-8") as f:
                data = json.load(f)
            _STATE.sources = [s for s in data if isinstance(s, str)] if isinstance(data, list) else []


def _verdict(record: dict[str, Any]) -> None:
    """Append one verdict record (a JSON line) to the judge's verdicts file."""
    if _STATE.mode == "replay" and _STATE.verdicts:
        with open(_STATE.verdicts, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def judging(check: str) -> None:
    """The first line of every check in the judge notebook (after its header): which check runs, so that a probe
    the student's notebook never ran is recorded against it (``{"check": id, "missing": probe name}``)."""
    if _STATE.mode == "replay":
        _STATE.judging = check


def passed(check: str) -> None:
    """The last line of every check in the judge notebook: the check ran to its end without an error
    (``{"check": id, "passed": true}``). The grader scores a check only if nbval passed its cell *and* this line
    ran (so an error the kernel failed to report does not read as a pass)."""
    _verdict({"check": check, "passed": True})
    if _STATE.mode == "replay":
        _STATE.judging = None


def mode() -> str:
    """The current mode: ``live``, ``record`` or ``replay``."""
    return _STATE.mode


def derive(master: int, check: str) -> int:
    """The seed of one check's random inputs in a grading run: SHA-256 of the master seed and the check id, as a
    63-bit int. One check's seed tells nothing of another's or of the master."""
    digest = hashlib.sha256(f"xlalab-check-seed:{int(master)}:{check}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def check_rng(check: str):
    """A NumPy Generator for a check's random inputs (``rng = check_rng("my-check-id")`` in that check's cell).

    Grading, the student's kernel (record mode): seeded with the running check's own seed (:func:`run_check`);
    another check's id, or a call outside a check, is an error. The judge (replay mode): seeded with
    :func:`derive` of the master seed, the same seed, so both compute the same inputs. While a student works
    (live mode): fresh entropy.
    """
    import numpy as np

    if _STATE.mode == "record":
        if _STATE.check is None or _STATE.check_seed is None:
            raise ProbeError(f"check_rng({check!r}) was called outside a check: while grading, a check's random "
                             "inputs exist only in that check's cell", "misuse")
        if check != _STATE.check:
            raise ProbeError(f"check_rng({check!r}) was called in the check {_STATE.check!r}: a check draws only "
                             "its own inputs", "misuse")
        return np.random.default_rng(_STATE.check_seed)
    if _STATE.seed is None:
        return np.random.default_rng()
    return np.random.default_rng(derive(_STATE.seed, check))


# The names a check's probing part gets from the grader, overriding the student's globals of the same name: what
# the labs' setup cells import from this module, and its other functions a check calls. (Not ``mode``: labs use
# that name for their own variables.)
GRADER_NAMES = ("probe", "written", "check_rng", "student_source", "calls_in")
CHECK_FILENAME = "<xlalab check>"   # never in linecache: a traceback shows no line of a check


def grader_names() -> dict[str, Any]:
    """What :func:`run_check` adds to a check's namespace: this module's functions that checks call, and the
    ``xlalab`` package itself."""
    import xlalab

    mod = sys.modules[__name__]
    return {"xlalab": xlalab, **{name: getattr(mod, name) for name in GRADER_NAMES}}


def _transform(source: str) -> str:
    """``source`` with IPython's syntax (magics) made Python, where IPython is installed."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)


def run_check(check: str, seed: int, source: str) -> None:
    """Run a graded check's probing part (``source``) in its own namespace, with ``seed`` for :func:`check_rng`.

    The namespace is a shallow copy of the caller's globals (the kernel's, where the student's names are) with
    :func:`grader_names` over them: a student's global named ``probe``, ``written`` or ``check_rng`` neither
    breaks the check, nor is a name the check binds (``got``, ``x``, ``model`` ...) left in the kernel. The code
    is compiled under a file name that is in no line cache; its namespace is cleared when it ends.
    """
    caller = sys._getframe(1).f_globals
    ns = dict(caller)
    ns.update(grader_names())
    ns["__name__"] = "__xlalab_check__"
    code = compile(_transform(source), CHECK_FILENAME, "exec")
    previous = (_STATE.check, _STATE.check_seed)
    _STATE.check, _STATE.check_seed = check, int(seed)
    try:
        exec(code, ns)   # the lab's own check, built by the grader
    finally:
        _STATE.check, _STATE.check_seed = previous
        ns.clear()


def probe(name: str, fn: Callable[[], Any]) -> Any:
    """``fn()`` as plain data (see the module); in the judge, what the student's kernel recorded for ``name``.

    ``name`` identifies the probe within its lab (e.g. ``"scale-123"``); calling it again records again, and the
    judge replays the calls of one name in order.
    """
    if _STATE.mode == "replay":
        n = _STATE.used.get(name, 0)
        _STATE.used[name] = n + 1
        got = _STATE.records.get(name, [])
        if n >= len(got):
            _verdict({"check": _STATE.judging, "missing": name})
            raise ProbeError(f"probe {name!r} did not run in your notebook (was the function it calls deleted or "
                             "renamed, or did an earlier cell stop the run?)", "missing")
        rec = got[n]
        if rec.error is not None:
            _verdict({"check": _STATE.judging, "raised": name})
            raise ProbeError(f"probe {name!r}: {rec.error}", "raised")
        return rec.value
    try:
        value = to_plain(fn(), name)
    except ProbeError as err:
        _record(ProbeRecord(name, error=str(err).removeprefix(f"probe {name!r}: ")))
        raise
    except BaseException as err:
        _record(ProbeRecord(name, error=_one_line(err)))
        raise
    _record(ProbeRecord(name, value=value))
    return value


def _one_line(err: BaseException) -> str:
    try:
        text = f"{type(err).__name__}: {err}".strip()
    except Exception:  # noqa: BLE001  (str() of a student's exception may raise)
        text = type(err).__name__
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__)[:500]


def _record(rec: ProbeRecord) -> None:
    if _STATE.mode != "record" or not _STATE.path:
        return
    _STATE.calls += 1
    if _STATE.calls > MAX_CALLS:
        return
    try:
        line = json.dumps({"probe": rec.probe, "error": rec.error} if rec.error is not None
                          else {"probe": rec.probe, "value": encode(rec.value)})
    except ValueError as err:
        line = json.dumps({"probe": rec.probe, "error": f"could not be recorded ({err})"})
    with open(_STATE.path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


# ---------------------------------------------------------------------------------------------- plain data
def to_plain(value: Any, name: str = "?", depth: int = 0) -> Any:
    """``value`` as plain data, or :class:`ProbeError` naming the probe and what it got.

    Exact types only (a subclass of int, float, str, list, dict or ndarray may override comparison): bool, int,
    float, str, None; list and tuple -> list; dict with str keys -> dict; NumPy scalars -> Python numbers;
    ``np.ndarray`` of kind b/i/u/f -> a copy; a TensorFlow tensor or variable -> its array (bfloat16 -> float32);
    a ``TensorShape`` -> a list of ints (None for unknown).
    """
    import numpy as np

    if depth > MAX_DEPTH:
        raise ProbeError(f"probe {name!r}: the result is nested deeper than {MAX_DEPTH} levels")
    t = type(value)
    if value is None or t in (bool, int, float, str):
        if t is str and len(value) > MAX_STRING:
            raise ProbeError(f"probe {name!r}: a string of {len(value):,} characters is too long")
        return value
    if t in (list, tuple):
        return [to_plain(v, name, depth + 1) for v in value]
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise ProbeError(f"probe {name!r}: a dict key of type {type(k).__name__} (only str keys are "
                                 "recorded)")
            if len(k) > MAX_KEY:
                raise ProbeError(f"probe {name!r}: a dict key of {len(k):,} characters (at most {MAX_KEY})")
            out[k] = to_plain(v, name, depth + 1)
        return out
    if isinstance(value, np.generic) and t.__module__ == "numpy" and value.dtype.kind in "biuf":
        return value.item()
    if t is np.ndarray:
        return _array(value, name)
    mod = getattr(t, "__module__", "") or ""
    if mod.startswith("tensorflow") or mod.startswith("keras"):
        import tensorflow as tf

        if isinstance(value, tf.TensorShape):
            return [None if d is None else int(d) for d in value.as_list()] if value.rank is not None else None
        if isinstance(value, (tf.Tensor, tf.Variable)):
            if value.dtype == tf.bfloat16:
                value = tf.cast(value, tf.float32)
            arr = value.numpy()
            return arr.item() if isinstance(arr, np.generic) else _array(np.asarray(arr), name)
    raise ProbeError(f"probe {name!r} returned a {t.__module__}.{t.__qualname__}: only plain data is recorded "
                     "(numbers, strings, booleans, None, lists, dicts with str keys, arrays of numbers or "
                     "booleans; not a subclass of these)")


def _array(arr: Any, name: str) -> Any:
    import numpy as np

    if type(arr) is not np.ndarray or arr.dtype.kind not in "biuf" or arr.dtype.fields is not None:
        raise ProbeError(f"probe {name!r} returned an array of dtype {arr.dtype}: only bool, integer and float "
                         "arrays are recorded")
    if arr.nbytes > MAX_ARRAY_BYTES:
        raise ProbeError(f"probe {name!r} returned an array of {arr.nbytes:,} bytes (at most "
                         f"{MAX_ARRAY_BYTES:,})")
    return np.array(arr, dtype=arr.dtype.newbyteorder("="), copy=True)


def encode(value: Any) -> Any:
    """Plain data as tagged JSON (see the module)."""
    import numpy as np

    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else {"f": repr(value)}
    if type(value) is list:
        return {"l": [encode(v) for v in value]}
    if type(value) is dict:
        return {"d": [[k, encode(v)] for k, v in value.items()]}
    if type(value) is np.ndarray:
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        return {"a": base64.b64encode(buf.getvalue()).decode("ascii")}
    raise ValueError(f"not plain data: {type(value).__name__}")


def _text(value: str) -> str:
    """A string from a record with lone surrogates replaced by U+FFFD: the judge's kernel could not send an error
    message that quotes one, and nbval would see that check's cell pass."""
    import re

    return re.sub("[\ud800-\udfff]", "\ufffd", value)


class RecordsError(ValueError):
    """A records file the grader refuses (malformed, too large, too deep): the student's fault."""


def decode(node: Any, budget: list[int], depth: int = 0) -> Any:
    """Tagged JSON back to plain data, within ``budget[0]`` nodes and :data:`MAX_DEPTH`."""
    import numpy as np

    budget[0] -= 1
    if budget[0] < 0:
        raise RecordsError(f"more than {MAX_NODES:,} values")
    if depth > MAX_DEPTH:
        raise RecordsError(f"nested deeper than {MAX_DEPTH} levels")
    if node is None or type(node) in (bool, int, float):
        return node
    if type(node) is str:
        if len(node) > MAX_STRING:
            raise RecordsError("a string is too long")
        return _text(node)
    if type(node) is not dict or len(node) != 1:
        raise RecordsError("a value that is not tagged data")
    (tag, body), = node.items()
    if tag == "l" and type(body) is list:
        return [decode(v, budget, depth + 1) for v in body]
    if tag == "d" and type(body) is list:
        out = {}
        for item in body:
            if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
                raise RecordsError("a malformed dict entry")
            if len(item[0]) > MAX_KEY:
                raise RecordsError(f"a dict key longer than {MAX_KEY} characters")
            out[_text(item[0])] = decode(item[1], budget, depth + 1)
        return out
    if tag == "f" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "a" and type(body) is str:
        if len(body) > MAX_ARRAY_BYTES * 4 // 3 + 1024:
            raise RecordsError("an array is too large")
        try:
            raw = base64.b64decode(body, validate=True)
            arr = np.load(io.BytesIO(raw), allow_pickle=False)
        except Exception as err:  # noqa: BLE001  (any malformed .npy is the student's fault)
            raise RecordsError(f"an array that is not a valid .npy ({type(err).__name__})") from None
        if type(arr) is not np.ndarray or arr.dtype.kind not in "biuf" or arr.dtype.fields is not None:
            raise RecordsError(f"an array of dtype {arr.dtype}")
        return arr
    raise RecordsError(f"an unknown tag {str(tag)[:20]!r}")


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_RECORD_KEYS = {"probe", "value", "error"}


def _json_depth(text: bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` in JSON text without its strings (in chunks: bounded memory)."""
    import numpy as np

    step = np.zeros(256, dtype=np.int8)
    step[[ord("["), ord("{")]] = 1
    step[[ord("]"), ord("}")]] = -1
    deepest, level = 0, 0
    chunk = 1 << 20
    for start in range(0, len(text), chunk):
        depth = np.cumsum(step[np.frombuffer(text, np.uint8, min(chunk, len(text) - start), start)],
                          dtype=np.int64) + level
        if len(depth):
            deepest, level = max(deepest, int(depth.max())), int(depth[-1])
    return deepest


def prescan(raw: bytes, line: int, values: int) -> int:
    """Refuse a records line nested deeper than :data:`MAX_JSON_DEPTH` or holding, with ``values`` JSON values of
    the lines before it, more than :data:`MAX_JSON_VALUES`, from its bytes alone (strings skipped), before
    ``json.loads`` builds anything; the running count of values."""
    bare = _JSON_STRING.sub(b'""', raw)
    opens = bare.count(b"[") + bare.count(b"{")
    # A value is the first element of a container, or follows a comma or a colon (a dict key is one too).
    values += 1 + opens + bare.count(b",") + bare.count(b":")
    if values > MAX_JSON_VALUES:
        raise RecordsError(f"the probe records hold more than {MAX_JSON_VALUES:,} JSON values (line {line})")
    if opens > MAX_JSON_DEPTH and _json_depth(bare) > MAX_JSON_DEPTH:
        raise RecordsError(f"line {line} of the probe records is nested deeper than {MAX_JSON_DEPTH} levels")
    return values


def parse_records(data: bytes) -> dict[str, list[ProbeRecord]]:
    """The records of a records file (JSON lines, see the module), per probe name in call order.

    Raises :class:`RecordsError` on more than :data:`MAX_RECORDS_BYTES`, a malformed line or a value beyond the
    caps; depth and value counts are checked on each line's bytes before it is parsed (:func:`prescan`). Never
    evaluates anything: JSON, and ``.npy`` read without pickle.
    """
    if len(data) > MAX_RECORDS_BYTES:
        raise RecordsError(f"the probe records are larger than {MAX_RECORDS_BYTES // 2**20} MiB")
    out: dict[str, list[ProbeRecord]] = {}
    budget = [MAX_NODES]
    lines = data.split(b"\n")
    if len(lines) > MAX_CALLS + 1:
        raise RecordsError(f"more than {MAX_CALLS:,} probe records")
    values = 0
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        values = prescan(raw, i, values)
        try:
            line = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError, UnicodeDecodeError):
            raise RecordsError(f"line {i} of the probe records is not JSON") from None
        if type(line) is not dict or type(line.get("probe")) is not str or len(line["probe"]) > 200 \
                or not set(line) <= _RECORD_KEYS:
            raise RecordsError(f"line {i} of the probe records is not a probe record")
        if "error" in line and line["error"] is not None:
            err = line["error"]
            rec = ProbeRecord(_text(line["probe"]), error=_text(err if type(err) is str else "failed")[:500])
        else:
            rec = ProbeRecord(_text(line["probe"]), value=decode(line.get("value"), budget))
        out.setdefault(rec.probe, []).append(rec)
    return out


def dump_records(records: dict[str, list[ProbeRecord]]) -> bytes:
    """Records as a records file (what the grader writes for the judge, re-encoded from parsed data)."""
    lines = []
    for recs in records.values():
        for rec in recs:
            lines.append(json.dumps({"probe": rec.probe, "error": rec.error} if rec.error is not None
                                    else {"probe": rec.probe, "value": encode(rec.value)}))
    return ("\n".join(lines) + "\n").encode("utf-8")


# ---------------------------------------------------------------------------------------- student source
def student_sources() -> list[str]:
    """The code cells the student wrote, in order: in the judge, read from the hand-in by the grader; while a
    student works, this kernel's input history."""
    if _STATE.mode == "replay":
        return list(_STATE.sources or [])
    try:
        ip = get_ipython()  # type: ignore[name-defined]
    except NameError:
        return []
    return [s for s in ip.user_ns.get("In", []) if isinstance(s, str)]


def _targets(node) -> set[str]:
    import ast

    out = set()
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                out.add(n.id)
    return out


def _segment(lines: list[str], node) -> str | None:
    """The source text of ``node`` from the lines of its cell (``ast.get_source_segment``, without its per-call scan
    of the whole cell, which takes minutes on a cell with one line of megabytes)."""
    end_lineno, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if end_lineno is None or end_col is None or node.lineno > len(lines) or end_lineno > len(lines):
        return None
    first = lines[node.lineno - 1].encode("utf-8")
    if node.lineno == end_lineno:
        return first[node.col_offset:end_col].decode("utf-8", errors="replace")
    last = lines[end_lineno - 1].encode("utf-8")[:end_col].decode("utf-8", errors="replace")
    return "".join([first[node.col_offset:].decode("utf-8", errors="replace"), *lines[node.lineno:end_lineno - 1],
                    last])


_LINE = None


def _definitions(src: str) -> dict[str, str]:
    """``{name: source}`` of the top-level defs, classes and assignments of one cell (the last one of a name)."""
    import ast
    import re

    global _LINE
    if _LINE is None:
        _LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")   # lines as Python's tokenizer counts them
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    lines = _LINE.findall(src)
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = {node.name}
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            names = _targets(node)
        else:
            continue
        text = _segment(lines, node)
        if text is not None:
            for name in names:
                out[name] = text
    return out


_DEFINITIONS: dict[int, tuple[str, dict[str, str]]] = {}


def student_source(name: str) -> str | None:
    """The source of the student's last top-level ``def name``, ``class name`` or assignment to ``name`` (None
    if there is none), read from :func:`student_sources`. Each cell is parsed once per kernel (cached by its text)."""
    found = None
    for src in student_sources():
        if name not in src:
            continue
        key = hash(src)
        cached = _DEFINITIONS.get(key)
        if cached is None or cached[0] != src:
            cached = (src, _definitions(src))
            if len(_DEFINITIONS) < 4096:
                _DEFINITIONS[key] = cached
        found = cached[1].get(name, found)
    return found


def written(*names: str) -> dict[str, str]:
    """``{name: source}`` of what the student wrote for each name; AssertionError if one is missing or still the
    lab's stub (``raise NotImplementedError``). Judge side: no probe value counts for code that is not there."""
    import re

    if _STATE.mode != "replay" and not any(s.strip() for s in student_sources()):
        # A kernel with no input history (nbval and nbconvert execute without storing it) has nothing to read; this
        # side's verdict counts for nothing anyway: the judge reads the hand-in's own cells.
        return {name: "" for name in names}
    out = {}
    for name in names:
        src = student_source(name)
        assert src is not None, f"`{name}` is not defined in your notebook"
        assert not re.search(r"\braise\s+NotImplementedError\b", src), \
            f"`{name}` is not written yet (it still raises NotImplementedError)"
        out[name] = src
    return out


def calls_in(source: str | None) -> set[str]:
    """Names of what ``source`` calls (``f(...)`` gives ``f``, ``a.b.c(...)`` gives ``c`` and ``a.b.c``)."""
    import ast

    if not source:
        return set()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
            if parts:
                out.add(parts[0])
                out.add(".".join(reversed(parts)))
    return out
