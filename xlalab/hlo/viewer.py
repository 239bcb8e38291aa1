"""A flipbook of XLA's passes: every frame of :func:`xlalab.hlo.passes` drawn, stepped through in one HTML block.

:func:`flipbook` writes a self-contained ``<div>``: each frame's module drawn by :func:`xlalab.hlo.draw` as inline
SVG (the instructions the pass added and the fusions it grew outlined in orange), the pipeline and the pass, what
changed, running counters (instructions, kernels, bytes moved) and, where XLA recorded them, its fusion decisions.
Previous/next buttons, a slider and the arrow keys (when the flipbook has focus) step through the frames. The
script and the style are inline and small and nothing is loaded from anywhere, so the page works offline (tested
in headless Chromium, standalone and in a Jupyter Book page; Jupyter and Colab display the same HTML output, which
runs inline scripts in a trusted notebook). Without scripts the last frame and the list of passes show.
"""

from __future__ import annotations

import html as _html
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .graph import GraphvizMissing, draw, format_bytes

# The largest page :func:`flipbook` writes by default (bytes); frames past it are listed but not drawn.
MAX_BYTES = 3 * 2**20
_ids = itertools.count()

_STYLE = """
#{id} {{font-family: system-ui, sans-serif; font-size: 14px; border: 1px solid #ccc; border-radius: 6px;
  padding: 8px; outline: none}}
#{id}:focus {{border-color: #1f77b4}}
#{id} .xlfb-controls {{display: flex; gap: 8px; align-items: center; flex-wrap: wrap; margin-bottom: 6px}}
#{id} .xlfb-controls button {{font-size: 14px; padding: 2px 10px; cursor: pointer}}
#{id} .xlfb-controls input[type=range] {{flex: 1; min-width: 120px}}
#{id} .xlfb-caption {{font-weight: 600}}
#{id} .xlfb-counters {{color: #333; margin: 2px 0}}
#{id} .xlfb-change {{color: #b35806; margin: 2px 0}}
#{id} .xlfb-decisions {{font-size: 12px; max-height: 12em; overflow: auto; margin: 4px 0; padding-left: 1.4em}}
#{id} .xlfb-decisions .no {{color: #b2182b}}
#{id} .xlfb-svg {{overflow: auto; max-height: 70vh}}
#{id} .xlfb-svg svg {{max-width: 100%; height: auto}}
#{id} .xlfb-passes ol {{font-size: 12px; columns: 2; margin: 4px 0}}
#{id} .xlfb-passes .changed {{font-weight: 600}}
"""

# Shows one frame at a time; the last one is visible (and the controls hidden) until this runs.
_SCRIPT = """
(function () {
  var root = document.getElementById("%(id)s");
  if (!root) return;
  var frames = root.querySelectorAll(".xlfb-frame");
  var slider = root.querySelector(".xlfb-slider");
  var label = root.querySelector(".xlfb-pos");
  var current = frames.length - 1;
  function show(i) {
    current = Math.max(0, Math.min(frames.length - 1, i));
    for (var k = 0; k < frames.length; k++) frames[k].hidden = (k !== current);
    slider.value = current;
    label.textContent = (current + 1) + " / " + frames.length;
  }
  root.querySelector(".xlfb-controls").hidden = false;
  root.querySelector(".xlfb-prev").addEventListener("click", function () { show(current - 1); });
  root.querySelector(".xlfb-next").addEventListener("click", function () { show(current + 1); });
  slider.addEventListener("input", function () { show(parseInt(slider.value, 10)); });
  root.addEventListener("keydown", function (e) {
    if (e.key === "ArrowLeft") { show(current - 1); e.preventDefault(); }
    if (e.key === "ArrowRight") { show(current + 1); e.preventDefault(); }
  });
  show(0);
})();
"""


@dataclass
class Flipbook:
    """The HTML of a flipbook (``html``), its size in bytes (``weight``), how many frames it has and how many of
    them are drawn (``frames``, ``drawn``). Jupyter and the book show it inline; ``save(path)`` writes a page."""

    html: str
    frames: int
    drawn: int

    @property
    def weight(self) -> int:
        return len(self.html.encode("utf-8"))

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"<Flipbook: {self.frames} frames, {self.drawn} drawn, {self.weight:,} bytes>"

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>XLA passes</title></head>"
                    f"<body>\n{self.html}\n</body></html>\n")


def _svg(text: str, highlight: Sequence[str], max_ops: int, stage: str) -> str:
    """The frame drawn as inline SVG; without a working Graphviz, the frame's HLO text (escaped) instead."""
    try:
        svg = draw(text, changed=highlight, max_ops=max_ops, stage=stage).svg
    except GraphvizMissing as err:
        return f"<p>{_html.escape(str(err))}</p><pre>{_html.escape(text)}</pre>"
    return svg[svg.index("<svg"):]


def _delta(now: int | None, before: int | None) -> str:
    if now is None or before is None or now == before:
        return ""
    return f" ({now - before:+,})"


def _counters(c: dict[str, Any], prev: dict[str, Any] | None) -> str:
    p = prev or {}
    return (f"instructions {c['instructions']:,}{_delta(c['instructions'], p.get('instructions'))} · "
            f"kernels {c['kernels']}{_delta(c['kernels'], p.get('kernels'))} · "
            f"fusions {c['fusions']}{_delta(c['fusions'], p.get('fusions'))} · "
            f"bytes moved {format_bytes(c['bytes'])}"
            + (f" ({'+' if c['bytes'] > p['bytes'] else '−'}{format_bytes(abs(c['bytes'] - p['bytes']))})"
               if p.get("bytes") is not None and c["bytes"] is not None and c["bytes"] != p["bytes"] else ""))


def _decisions(frame: Any, limit: int) -> str:
    shown = [d for d in frame.decisions if d.kind != "not fusible"]
    if not shown:
        return ""
    rows = []
    for d in shown[:limit]:
        cls = "" if d.kind == "fused" else " class='no'"
        rows.append(f"<li{cls}>{_html.escape(str(d))}</li>")
    if len(shown) > limit:
        rows.append(f"<li>… {len(shown) - limit} more</li>")
    skipped = len(frame.decisions) - len(shown)
    note = f" ({skipped} operands not fusible at all, such as parameters, not listed)" if skipped else ""
    return (f"<div>XLA's fusion decisions in this step{_html.escape(note)}:</div>"
            f"<ol class='xlfb-decisions'>{''.join(rows)}</ol>")


def _names(names: Sequence[str], limit: int = 12) -> str:
    return ", ".join(names[:limit]) + (" …" if len(names) > limit else "")


def _before_it(f: Any) -> str:
    """The line under a frame's change: the passes that ran before its own, those that changed the module in
    frames not shown (folded by ``Frames.keep``: their changes are in this frame's) apart from those that changed
    nothing."""
    marks = set(f.changed_passes())
    own_last = len(f.passes) - 1 if f.passes and f.passes[-1].name == f.pass_name else None
    earlier = [p for j, p in enumerate(f.passes) if j != own_last]
    changing = [p for j, p in enumerate(f.passes) if j in marks and j != own_last]
    unlogged = [d for d in f.folded if not d.passes]        # frames whose passes the log does not name
    idle = [p for j, p in enumerate(f.passes) if j not in marks]
    if not changing and not unlogged:
        return (f"Before it, {len(earlier)} pass(es) ran and changed nothing: {_names([p.name for p in earlier])}"
                if earlier else "")
    changed = [p.name for p in changing] + [d.pass_name for d in unlogged]
    line = (f"Before it, {len(earlier) + len(unlogged)} pass(es) ran: {len(changed)} changed the module in frames "
            f"not shown here (their changes are part of the line above): {_names(changed)}")
    if idle:
        line += f"; {len(idle)} changed nothing: {_names([p.name for p in idle])}"
    return line


def _pass_rows(f: Any, i: int) -> list[str]:
    """The rows of the pass list for one shown frame (position ``i``): its folded frames' passes, then its own;
    bold: the passes that changed the module."""
    rows = [f"<li class=changed>{_html.escape(d.pass_name)} (its frame is not shown)</li>" for d in f.folded
            if not d.passes]
    marks = set(f.changed_passes())
    last = len(f.passes) - 1
    for j, p in enumerate(f.passes):
        changed = j in marks
        note = f" → frame {i + 1}" if changed and j == last and p.name == f.pass_name else \
            " (its frame is not shown)" if changed else ""
        rows.append(f"<li{' class=changed' if changed else ''}>{_html.escape(p.pipeline)} › "
                    f"{_html.escape(p.name)}{note}</li>")
    if not f.own_passes:
        rows.append(f"<li class=changed>{_html.escape(f.pass_name)} → frame {i + 1}</li>")
    return rows


def flipbook(frames: Sequence[Any], *, max_ops: int = 6, max_bytes: int = MAX_BYTES, title: str | None = None,
             decisions: int = 40) -> Flipbook:
    """One HTML block that steps through ``frames`` (from :func:`xlalab.hlo.passes`).

    Args:
        frames: the frames, in order (a :class:`~xlalab.hlo.pipeline.Frames` or any list of them). To show some
            frames only, pass ``frames.keep(indices)``: each frame kept is then compared with the previous one
            shown, and the passes of the others are listed with it (a list with frames left out by hand raises
            ``ValueError``).
        max_ops: passed to :func:`xlalab.hlo.draw` (a fusion with more ops shows a count by opcode).
        max_bytes: the page budget; frames whose drawing would pass it are listed, with their counters, but not
            drawn (the first and last frames are always drawn).
        title: a line above the controls (default: for frames compiled for a GPU target without a GPU, one naming
            the target, the compiler's version and that autotuning did not run; else none).
        decisions: at most this many fusion decisions listed per frame.

    Returns:
        A :class:`Flipbook`; ``.weight`` is the page's size in bytes.
    """
    if not frames:
        raise ValueError("no frames to show")
    for prev_f, f in zip(frames, frames[1:]):
        gap = f.index - prev_f.index - 1
        if gap != len(f.folded):
            raise ValueError(f"frames {prev_f.index + 1} to {f.index - 1} were left out by hand, so frame {f.index}'s "
                             "change and passes would be counted from a frame not shown; select frames with "
                             "Frames.keep(indices), which folds the others into the next frame kept")
    uid = f"xlfb-{next(_ids)}-{abs(hash(frames[-1].text)) % 10**8}"
    svgs = [_svg(f.text, f.change.highlight, max_ops, f.pass_name) for f in frames]
    # Keep the page under budget: drop the drawings of the middle frames with the smallest change first.
    budget = max_bytes - 60_000 - 400 * len(frames) - sum(len(str(d)) for f in frames for d in f.decisions[:decisions])
    order = sorted(range(1, len(frames) - 1), key=lambda i: (len(frames[i].change.highlight), -len(svgs[i])))
    total = sum(len(s.encode()) for s in svgs)
    for i in order:
        if total <= budget:
            break
        total -= len(svgs[i].encode())
        svgs[i] = ""
    parts = [f"<div class='xlfb' id='{uid}' tabindex='0'>", f"<style>{_STYLE.format(id=uid)}</style>"]
    target = getattr(frames, "target", "")
    if title is None and target:
        title = (f"XLA:GPU's passes for {target}, compiled without a GPU by {getattr(frames, 'compiler', '')}; "
                 f"autotuning {getattr(frames, 'autotuning', '')}")
    if title:
        parts.append(f"<div class='xlfb-title'><b>{_html.escape(title)}</b></div>")
    n = len(frames)
    parts.append(f"<div class='xlfb-controls' hidden><button type='button' class='xlfb-prev' title='previous pass "
                 f"(←)'>◀ previous</button><button type='button' class='xlfb-next' title='next pass (→)'>next ▶"
                 f"</button><input type='range' class='xlfb-slider' min='0' max='{n - 1}' value='{n - 1}' "
                 f"aria-label='frame'><span class='xlfb-pos'>{n} / {n}</span></div>")
    prev = None
    for i, (f, svg) in enumerate(zip(frames, svgs)):
        where = f"{f.pipeline} › {f.pass_name}" if f.pipeline else f.pass_name
        hidden = "" if i == n - 1 else " hidden"
        parts.append(f"<div class='xlfb-frame' data-frame='{i}'{hidden}>")
        step = f"after {where}" if f.pipeline else where
        parts.append(f"<div class='xlfb-caption'>Frame {i + 1} of {n}: {_html.escape(step)}</div>")
        parts.append(f"<div class='xlfb-counters'>{_html.escape(_counters(f.counters, prev))}</div>")
        if i:
            folded = _names([d.pass_name for d in f.folded], 6)
            by = f" since frame {i} (by {folded}, in frames not shown, and this pass)" if f.folded else ""
            parts.append(f"<div class='xlfb-change'>Changed{_html.escape(by)}: {_html.escape(f.change.describe())}"
                         + (" (outlined in orange)" if f.change.highlight and svg else "") + "</div>")
        before = _before_it(f)
        if before:
            parts.append(f"<div class='xlfb-folded'>{_html.escape(before)}</div>")
        parts.append(_decisions(f, decisions))
        parts.append(f"<div class='xlfb-svg'>{svg}</div>" if svg else
                     "<div class='xlfb-svg'><i>not drawn: the page would pass its size budget</i></div>")
        parts.append("</div>")
        prev = f.counters
    rows = []
    for i, f in enumerate(frames):
        rows += _pass_rows(f, i)
    for p in getattr(frames, "trailing", []):
        rows.append(f"<li>{_html.escape(p.pipeline)} › {_html.escape(p.name)}</li>")
    ran = sum(len(f.passes) for f in frames) + len(getattr(frames, "trailing", []))
    parts.append(f"<details class='xlfb-passes'><summary>Every pass, in order ({ran}"
                 f" ran; bold: those that changed the module)</summary><ol>{''.join(rows)}</ol></details>")
    parts.append(f"<script>{_SCRIPT % {'id': uid}}</script></div>")
    drawn = sum(1 for s in svgs if s)
    return Flipbook("\n".join(parts), n, drawn)
