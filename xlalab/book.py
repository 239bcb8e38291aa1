"""The book's bookkeeping in one place, so that a chapter's visible code shows TensorFlow, HLO and measurements.

A chapter measures something, then glues what its prose says about it. The gluing is plumbing: it goes into a
collapsed cell (``hide-input``) that calls these helpers, and the words a sentence uses for an outcome come from one
rule per kind of comparison:

- ratios of times (speedups): :func:`glue_interval` / :func:`choose`, from :func:`xlalab.bench.ratio_verdict` on the
  interval as printed, with at least :data:`xlalab.bench.MIN_VERDICT_SAMPLES` samples;
- counts and sizes: :func:`choose_order`, an exact comparison of the values as printed.

No chapter keeps a threshold of its own. Outside the book build (Colab, a plain Jupyter) ``myst_nb`` may be absent;
:func:`glue` then does nothing, so every chapter still runs.
"""

from __future__ import annotations

import math
from typing import Any

from xlalab.bench import MIN_VERDICT_SAMPLES, ratio_verdict
from xlalab.fmt import Markdown, md_table
from xlalab.threads import side_by_side

__all__ = ["GLUE_HELPERS", "INTERVAL_SUFFIXES", "CI_WORDS", "Text", "glue", "glue_values", "glue_interval",
           "choose", "choose_order", "md_table", "Markdown", "side_by_side"]

#: The functions of this module that glue names given as their first string argument or as keywords (the glue audit
#: in ``tests/`` finds glued names through them).
GLUE_HELPERS = ("glue", "glue_values", "glue_interval")

#: The names :func:`glue_interval` glues for a ``name``: the ratio, both ends of its interval, the sample count, the
#: verdict (``faster``/``slower``/``indistinguishable``), the fixed words about the interval and the caller's words.
INTERVAL_SUFFIXES = ("", "_lo", "_hi", "_n", "_verdict", "_ci_word", "_word")

#: What the course says about an interval of a ratio, by verdict of :func:`xlalab.bench.ratio_verdict`.
CI_WORDS = {"faster": "it lies wholly above 1", "slower": "it lies wholly below 1",
            "indistinguishable": "it contains 1: this run cannot tell"}
#: What it says when the interval rests on fewer than MIN_VERDICT_SAMPLES samples.
FEW_SAMPLES_WORDS = f"too few samples for a verdict (fewer than {MIN_VERDICT_SAMPLES})"


class Text:
    """A string that glues without quotes (``glue("x", "a")`` would print ``'a'``; ``glue("x", Text("a"))`` prints
    ``a``)."""

    def __init__(self, s: object) -> None:
        self.s = str(s)

    def __repr__(self) -> str:
        return self.s

    def __str__(self) -> str:
        return self.s

    def __eq__(self, other: object) -> bool:
        return str(other) == self.s if isinstance(other, (Text, str)) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.s)


def _as_glueable(value: Any) -> Any:
    # ``{glue:text}`` prints a value as it is: a Markdown code span's backticks would show on the page, so text
    # drops them (a value meant as Markdown is glued as ``fmt.Markdown`` and used with ``{glue:md}``).
    return Text(str(value).replace("`", "")) if isinstance(value, (str, Text)) else value


def glue(name: str, value: Any) -> None:
    """Glue ``value`` under ``name`` for the prose (``{glue:text}`name```), showing nothing in the cell.

    A ``str`` or :class:`Text` is glued as :class:`Text` (no quotes), without Markdown's backticks, which
    ``{glue:text}`` would print. Without ``myst_nb`` (outside the book build) it does nothing.
    """
    try:
        from myst_nb import glue as _glue  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return
    _glue(name, _as_glueable(value), display=False)


def glue_values(**named: Any) -> None:
    """Glue each keyword argument under its name: ``glue_values(ad_ratio=1.8, ad_word="faster")``."""
    for name, value in named.items():
        glue(name, value)


def choose(verdict: str, *, faster: str, slower: str, cannot_tell: str) -> Text:
    """The phrase for a verdict of :func:`xlalab.bench.ratio_verdict`: ``faster``, ``slower`` or ``cannot_tell``
    (for ``"indistinguishable"``). Example: ``choose("slower", faster="won", slower="lost", cannot_tell="tied")``
    is ``lost``."""
    table = {"faster": faster, "slower": slower, "indistinguishable": cannot_tell}
    if verdict not in table:
        raise ValueError(f"verdict={verdict!r}; expected one of {sorted(table)}")
    return Text(table[verdict])


def glue_interval(name: str, ratio: float, ci: tuple[float, float], n: int | None, *,
                  words: dict[str, str] | None = None, digits: int = 2) -> str:
    """Glue a ratio with its interval and the verdict the interval allows; return the verdict.

    ``ratio`` is ``median(baseline) / median(variant)`` (above 1: the variant is faster), ``ci`` its 95% interval
    ``(lo, hi)``, ``n`` the samples of the smaller side (``Comparison.n(name)``; ``None`` when unknown). Glues
    ``name`` (the ratio), ``name_lo``, ``name_hi``, ``name_n``, ``name_verdict`` (``faster``, ``slower`` or
    ``indistinguishable``, from :func:`xlalab.bench.ratio_verdict` with ``digits`` decimals, as printed),
    ``name_ci_word`` (:data:`CI_WORDS`, or :data:`FEW_SAMPLES_WORDS`) and, given ``words`` (keys ``faster``,
    ``slower``, ``cannot_tell``), ``name_word``.
    """
    verdict = ratio_verdict(ci, n=n, digits=digits)
    few = n is not None and n < MIN_VERDICT_SAMPLES
    glue_values(**{name: float(ratio), f"{name}_lo": float(ci[0]), f"{name}_hi": float(ci[1]),
                   f"{name}_n": -1 if n is None else int(n), f"{name}_verdict": Text(verdict),
                   f"{name}_ci_word": Text(FEW_SAMPLES_WORDS if few else CI_WORDS[verdict])})
    if words is not None:
        glue(f"{name}_word", choose(verdict, **words))
    return verdict


def _printed(value: float, fmt: str | None) -> float:
    return float(format(value, fmt)) if fmt else float(value)


def choose_order(a: float, b: float, *, larger: str, smaller: str, same: str, fmt: str | None = None) -> Text:
    """The phrase for how ``a`` compares with ``b`` as printed: ``larger`` when ``a > b``, ``smaller`` when
    ``a < b``, ``same`` when equal. ``fmt`` (e.g. ``".1f"``) compares the values as the page prints them, so that
    ``2.04`` and ``2.01`` printed as ``2.0`` read as the same. For counts and sizes; ratios of times take
    :func:`choose` on an interval instead."""
    x, y = _printed(a, fmt), _printed(b, fmt)
    if math.isnan(x) or math.isnan(y):
        raise ValueError(f"cannot order {a!r} and {b!r}")
    return Text(larger if x > y else smaller if x < y else same)
