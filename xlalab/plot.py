"""One matplotlib style for the whole course: speedup bars, rooflines and scaling curves.

Every function draws into an ``ax`` you pass (or a new figure) and returns the Axes, so that a
notebook can add to it, save it or glue it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

COLORS = ["#1f5f9e", "#d1495b", "#2e8b57", "#edae49", "#6a4c93", "#00798c", "#8d6a9f", "#66a182"]

STYLE = {
    "figure.figsize": (6.4, 3.8),
    "figure.dpi": 110,
    "savefig.dpi": 130,
    "savefig.bbox": "tight",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": None,  # filled in use_style
    "font.size": 10,
    "legend.frameon": False,
}


def use_style() -> None:
    """Apply the course's matplotlib style (idempotent)."""
    import matplotlib as mpl
    from cycler import cycler

    style: dict[str, Any] = dict(STYLE)
    style["axes.prop_cycle"] = cycler(color=COLORS)
    mpl.rcParams.update(style)  # type: ignore[arg-type]  # its stubs take only the Literal names of rc keys


def _axes(ax: Any) -> Any:
    import matplotlib.pyplot as plt

    use_style()
    if ax is None:
        _, ax = plt.subplots()
    return ax


def speedup_bars(speedups: Mapping[str, float], cis: Mapping[str, Sequence[float]] | None = None,
                 baseline: str = "graph", ax: Any = None, title: str | None = None) -> Any:
    """Bars of speedup against ``baseline`` (1.0 drawn as a line), with confidence intervals as error bars;
    each bar's value is written above its error bar."""
    ax = _axes(ax)
    names = list(speedups)
    values = np.array([speedups[n] for n in names], dtype=float)
    if cis:
        lo = np.array([values[i] - cis[n][0] for i, n in enumerate(names)])
        hi = np.array([cis[n][1] - values[i] for i, n in enumerate(names)])
        err = np.vstack([np.clip(lo, 0, None), np.clip(hi, 0, None)])
    else:
        err = None
    colors = [COLORS[1] if v < 1 else COLORS[0] for v in values]
    ax.bar(names, values, yerr=err, capsize=4, color=colors)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylabel(f"speedup vs {baseline} (higher is faster)")
    # Each value label sits above the top of its error bar (not on it), and the axis leaves room for it.
    tops = values + (err[1] if err is not None else 0)
    for i, v in enumerate(values):
        ax.annotate(f"{v:.2f}x", (i, tops[i]), ha="center", va="bottom", fontsize=8, xytext=(0, 4),
                    textcoords="offset points")
    if len(values) and np.all(np.isfinite(tops)):
        low, high = ax.get_ylim()
        ax.set_ylim(low, max(high, float(np.max(tops)) * 1.15))
    if title:
        ax.set_title(title)
    return ax


def roofline(points: Sequence[Any], peak_flops: float, bandwidth: float, ax: Any = None, title: str | None = None,
             device: str = "") -> Any:
    """Log-log roofline: the memory slope, the compute roof, and each point at (intensity, achieved FLOP/s).

    ``points`` are :class:`xlalab.roofline.RooflinePoint` (anything with ``label``, ``intensity`` and
    ``achieved_flops``). Axes are in FLOP/byte and GFLOP/s.
    """
    ax = _axes(ax)
    intensities = [p.intensity for p in points] or [1.0]
    ridge = peak_flops / bandwidth
    lo = min(min(intensities), ridge) / 8
    hi = max(max(intensities), ridge) * 8
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.loglog(x, np.minimum(peak_flops, x * bandwidth) / 1e9, color="black", lw=1.5,
              label=f"roof{': ' + device if device else ''}")
    ax.axvline(ridge, color="gray", ls=":", lw=0.8)
    ax.annotate(f"ridge {ridge:.1f} FLOP/B", (ridge, peak_flops / 1e9), fontsize=8, xytext=(4, -12),
                textcoords="offset points")
    for i, p in enumerate(points):
        ax.loglog([p.intensity], [p.achieved_flops / 1e9], "o", color=COLORS[i % len(COLORS)], label=p.label)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.legend(fontsize=8, loc="lower right")
    if title:
        ax.set_title(title)
    return ax


def scaling(x: Sequence[float], series: Mapping[str, Sequence[float]], xlabel: str, ylabel: str,
            loglog: bool = True, ax: Any = None, title: str | None = None, slopes: Sequence[int] = ()) -> Any:
    """Curves of ``series[name]`` against ``x`` (log-log by default); ``slopes`` adds reference lines x**k."""
    ax = _axes(ax)
    xs = np.asarray(x, dtype=float)
    for name, ys in series.items():
        ax.plot(xs, ys, "o-", label=name)
    for k in slopes:
        first = next(iter(series.values()))
        ref = first[0] * (xs / xs[0]) ** k
        ax.plot(xs, ref, ls="--", color="gray", lw=0.8, label=f"∝ n^{k}")
    if loglog:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return ax


def timeline(tl: Mapping[str, Any], category: Any = None, ax: Any = None, title: str | None = None,
             label_top: int = 0, legend: bool = True) -> Any:
    """One traced step's ops as bars on one time axis (ms from the step's start), a row per lane (thread or stream).

    ``tl`` is :func:`xlalab.profile.step_timeline`'s result; ``category(op_row) -> str`` colours the bars (one
    legend entry per category, outside the axes; default: all one colour); the ``label_top`` longest ops are named
    above their bars. Zoom with ``ax.set_xlim``.
    """
    import re

    ax = _axes(ax)
    lanes = list(tl["lanes"]) or ["(no ops)"]
    cats: dict[str, str] = {}
    for o in tl["ops"]:
        c = category(o) if category is not None else "HLO op"
        color = cats.setdefault(c, COLORS[len(cats) % len(COLORS)])
        y = lanes.index(o["lane"])
        ax.broken_barh([(o["start_us"] / 1e3, max(o["dur_us"], 0.0) / 1e3)], (y - 0.38, 0.76), facecolors=color,
                       edgecolor="white", linewidth=0.3)
    for o in sorted(tl["ops"], key=lambda o: -o["dur_us"])[:label_top]:
        ax.annotate(o["op"][:28], ((o["start_us"] + o["dur_us"] / 2) / 1e3, lanes.index(o["lane"]) - 0.42),
                    ha="center", va="bottom", fontsize=7)
    ax.axvline(0, color="black", lw=0.6)
    ax.axvline(tl["step_us"] / 1e3, color="black", lw=0.6, ls="--")
    ax.set_yticks(range(len(lanes)))
    # Thread names end in long numeric ids ("tf_numa_-1_Eigen/-6313246323084292490"): drop them.
    names = [re.sub(r"/-?\d{6,}$", "", lane) for lane in lanes]
    names = [f"{n} ({names[:i].count(n) + 1})" if names.count(n) > 1 else n for i, n in enumerate(names)]
    ax.set_yticklabels([n if len(n) <= 34 else "…" + n[-33:] for n in names], fontsize=7)
    ax.set_ylim(len(lanes) - 0.4, -0.6 - (0.4 if label_top else 0))
    ax.set_xlabel("ms from the start of the step (dashed: its end)")
    ax.grid(axis="y", visible=False)
    if cats and legend:
        from matplotlib.patches import Patch

        # Above the axes, right-aligned (the title goes left), so that it neither hides bars nor widens the figure.
        ax.legend(handles=[Patch(color=c, label=k) for k, c in cats.items()], fontsize=8, loc="lower right",
                  bbox_to_anchor=(1.0, 1.0), ncol=len(cats), borderaxespad=0.2)
    if title:
        ax.set_title(title, loc="left" if cats and legend else "center", fontsize=10)
    return ax


class InlineSVG:
    """A figure as SVG with real text (not outlines), shown inline in HTML inside ``<div class=css_class>``:
    crisp at any zoom, searchable, and checkable by a browser test. ``svg`` is the markup."""

    def __init__(self, svg: str, css_class: str) -> None:
        self.svg = svg
        self.css_class = css_class

    def _repr_html_(self) -> str:
        return f'<div class="{self.css_class}" style="overflow-x:auto;max-width:100%">\n{self.svg}</div>'


def inline_svg(fig: Any, css_class: str = "xlalab-figure") -> InlineSVG:
    """``fig`` (a matplotlib Figure) as an :class:`InlineSVG` for ``display``; the figure is closed.

    Example:
        >>> fig, ax = plt.subplots(); plot.timeline(t, ax=ax); display(plot.inline_svg(fig, "xlalab-timeline"))
    """
    import io

    import matplotlib as mpl
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": "xlalab"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return InlineSVG(text[text.index("<svg"):], css_class)
