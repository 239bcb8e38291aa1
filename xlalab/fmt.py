"""Numbers as the course prints them: points, byte sizes, memory limits, durations.

Each format has one function here. The gradebook, the feedback, the class report and the book's glued text
depend on them character for character (``tests/test_fmt_files.py`` pins each one); two formats that differ stay two
functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["byte_size", "duration", "limit_size", "points"]


def points(x: float) -> str:
    """A score or a point count, as short as it goes: ``6.0`` -> ``"6"``, ``2.5`` -> ``"2.5"`` (``format(x, "g")``)."""
    return f"{x:g}"


def byte_size(n: int | None) -> str:
    """Bytes in binary units, 3 significant digits: ``4096`` -> ``"4 KiB"``, ``1536`` -> ``"1.5 KiB"``, ``512`` ->
    ``"512 B"``; ``None`` -> ``"? B"`` (unknown: a dynamic shape)."""
    if n is None:
        return "? B"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            break
        value /= 1024
    if unit == "B":
        return f"{int(value)} B"
    return f"{value:.3g} {unit}"


def limit_size(n: int) -> str:
    """A size limit in MiB, or in GiB from 1 GiB on, exact (``:g``): ``2**29`` -> ``"512 MiB"``, ``2**31`` ->
    ``"2 GiB"``."""
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def duration(s: float) -> str:
    """Seconds in s, ms or us, 3 significant digits: ``1.5`` -> ``"1.5 s"``, ``0.0123`` -> ``"12.3 ms"``."""
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


class Markdown:
    """Markdown text that a notebook renders (``IPython.display.Markdown`` without importing IPython here)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]],
             fmt: dict[int, str | Callable[[Any], str]] | None = None) -> Markdown:
    """A Markdown table: ``header`` names the columns, each row gives one value per column. ``fmt`` maps a column
    index to a format spec (``".2f"``) or a function; other values print with ``str``. A ``|`` inside a value is
    escaped. Display the result (``display(md_table(...))``) or glue it (``glue("t", md_table(...))`` with
    ``{glue:md}`` in the prose)."""
    fmt = fmt or {}

    def cell(i: int, v: Any) -> str:
        f = fmt.get(i)
        s = f(v) if callable(f) else format(v, f) if f else str(v)
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    for row in rows:
        row = list(row)
        if len(row) != len(header):
            raise ValueError(f"row {row!r} has {len(row)} values for {len(header)} columns")
        lines.append("| " + " | ".join(cell(i, v) for i, v in enumerate(row)) + " |")
    return Markdown("\n".join(lines))
