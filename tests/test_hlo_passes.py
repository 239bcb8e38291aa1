"""xlalab.hlo.passes and xlalab.hlo.flipbook: XLA's passes over one function as frames, and the offline flipbook.

The frame logic is tested on a small dump written here (no TensorFlow); one test compiles a real function in a child
process and compares its first and last frames with what TensorFlow returns in this process; the flipbook is loaded
in headless Chromium, where its next button must change the frame and the caption (and, with its script broken,
must not: the check can fail).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from xlalab import hlo
from xlalab.hlo import pipeline

MODULE = "module_0000.a_inference_f_1__.1"

BEFORE = """HloModule a_inference_f_1__.1, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %c = f32[] constant(2)
  %b = f32[4]{0} broadcast(%c), dimensions={}
  %m = f32[4]{0} multiply(%p, %b), metadata={op_type="Mul" op_name="mul"}
  ROOT %e = f32[4]{0} exponential(%m)
}
"""
# The same module with other metadata: the pipeline-start snapshot that repeats it is folded, not a frame.
SAME = BEFORE.replace('op_name="mul"', 'op_name="outer/mul"')
FUSED = """HloModule a_inference_f_1__.1, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_computation (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  %c.1 = f32[] constant(2)
  %b.1 = f32[4]{0} broadcast(%c.1), dimensions={}
  %m.1 = f32[4]{0} multiply(%param_0, %b.1)
  ROOT %e.1 = f32[4]{0} exponential(%m.1)
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_computation
}
"""
COPIED = FUSED.replace("  ROOT %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_computation",
                       "  %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_computation\n"
                       "  ROOT %copy = f32[4]{0} copy(%fusion)")
P = "I0000 00:00:1.0    7 "
LOG = "\n".join([
    P + "hlo_pass_pipeline.cc:1] Running HLO pass pipeline on module a_inference_f_1__.1: simplification",
    P + "hlo_pass_pipeline.cc:2]   HLO pass algsimp",
    P + "hlo_pass_pipeline.cc:3]   Module hash 1",
    P + "hlo_pass_pipeline.cc:2]   HLO pass dce",
    P + "hlo_pass_pipeline.cc:3]   Module hash 1",
    P + "hlo_pass_pipeline.cc:1] Running HLO pass pipeline on module a_inference_f_1__.1: fusion-pipeline",
    P + "hlo_pass_pipeline.cc:2]   HLO pass fusion",
    P + "hlo_pass_pipeline.cc:3]   Module hash 1",
    P + "instruction_fusion.cc:634] Considering fusion of: %e = f32[4]{0} exponential(%m) with operand m",
    P + "cpu_instruction_fusion.cc:482] Fusing: consumer is elementwise or fusible.",
    P + "instruction_fusion.cc:828] Fusing %m = f32[4]{0} multiply(%p, %b) into %e = f32[4]{0} exponential(%m)",
    P + "instruction_fusion.cc:835]        created new fusion: %fusion = f32[4]{0} fusion(%p), kind=kLoop",
    P + "instruction_fusion.cc:634] Considering fusion of: %fusion = f32[4]{0} fusion(%p) with operand p",
    P + "instruction_fusion.cc:638] Operand (%p = f32[4]{0} parameter(0)) is not fusible",
    P + "instruction_fusion.cc:672] not fusing operand %r = f32[] reduce(%p, %c) because Fusion is not profitable.",
    P + "hlo_pass_pipeline.cc:2]   HLO pass copy-insertion",
    P + "hlo_pass_pipeline.cc:3]   Module hash 2",
    P + "hlo_pass_pipeline.cc:2]   HLO pass dce",
    P + "hlo_pass_pipeline.cc:3]   Module hash 3",
    P + "hlo_pass_pipeline.cc:1] Running HLO pass pipeline on module other_module: simplification",
    P + "hlo_pass_pipeline.cc:2]   HLO pass algsimp",
])


def _write_files(directory: Path, files: dict[str, str]) -> None:
    """A dump folder holding ``files`` (name -> text), as XLA's ``--xla_dump_to`` writes them."""
    for name, text in files.items():
        (directory / name).write_text(text)


def _write_dump(directory: Path) -> None:
    _write_files(directory, {
        f"{MODULE}.before_optimizations.txt": BEFORE,
        f"{MODULE}.0000.simplification.after_pipeline-start.before_algsimp.txt": SAME,
        f"{MODULE}.0001.fusion-pipeline.after_pipeline-start.before_fusion.txt": BEFORE,
        f"{MODULE}.0002.fusion-pipeline.after_fusion.before_copy-insertion.txt": FUSED,
        f"{MODULE}.0003.fusion-pipeline.after_copy-insertion.before_dce.txt": COPIED,
        f"{MODULE}.cpu_after_optimizations.txt": COPIED,
    })


def test_frames_from_a_dump_fold_unchanged_snapshots_and_carry_the_decisions(tmp_path):
    _write_dump(tmp_path)
    frames = hlo.frames_from_dump(tmp_path, LOG)
    assert [f.pass_name for f in frames] == ["before optimizations", "fusion", "copy-insertion"]
    assert [f.index for f in frames] == [0, 1, 2]
    assert frames.backend == "cpu"
    # The passes that ran before the fusion and changed nothing are folded into its frame, in order.
    assert [p.name for p in frames[1].passes] == ["algsimp", "dce", "fusion"]
    assert [p.changed for p in frames[1].passes] == [False, False, True]
    assert [p.name for p in frames.trailing] == ["dce"]
    fusion = frames[1]
    assert fusion.change.fusions_created == ["fusion"]
    assert fusion.change.added == {"fusion": 1}
    assert fusion.change.removed == {"broadcast": 1, "constant": 1, "exponential": 1, "multiply": 1}
    assert fusion.counters["kernels"] == 1 and frames[0].counters["kernels"] == 3
    kinds = [(d.kind, d.producer, d.consumer) for d in fusion.decisions]
    assert kinds == [("fused", "m", "e"), ("not fusible", "p", "fusion"), ("not fused", "r", "fusion")]
    assert fusion.decisions[0].fusion == "fusion" and fusion.decisions[0].reason == "consumer is elementwise or fusible"
    assert fusion.decisions[2].reason == "Fusion is not profitable."
    copy = frames[2]
    assert copy.change.copies_inserted == ["copy"] and copy.change.highlight == ["copy"]
    assert frames.first_creating("fusion") is fusion and frames.find("copy-insertion") is copy
    assert "other_module" not in {p.pipeline for p in frames.passes_run}


def test_frames_without_a_log_still_come_from_the_snapshots(tmp_path):
    _write_dump(tmp_path)
    frames = hlo.frames_from_dump(tmp_path)
    assert [f.pass_name for f in frames] == ["before optimizations", "fusion", "copy-insertion"]
    assert all(not f.decisions for f in frames) and frames.decision_source == ""


def test_fusions_grown_are_named(tmp_path):
    grown = FUSED.replace("%m.1 = f32[4]{0} multiply(%param_0, %b.1)",
                          "%m.1 = f32[4]{0} multiply(%param_0, %b.1)\n  %n.1 = f32[4]{0} negate(%m.1)")
    grown = grown.replace("exponential(%m.1)", "exponential(%n.1)")
    change = pipeline.diff(FUSED, grown)
    assert change.fusions_grown == ["fusion"] and change.fusions_created == [] and "fusion" in change.highlight


def test_priority_fusion_dump_is_read():
    text = '''fusion_steps {
  fusion {
    fusion_name: "loop_multiply_fusion"
    producer_name: "broadcast.1"
    consumer_names: "multiply.2"
  }
}
fusion_steps {
  producer_ineligible {
    producer_name: "reduce.3"
    reason: "not fusing reduce into its consumer: would duplicate work"
  }
}
'''
    got = pipeline.read_priority_fusion_dump(text)
    assert [(d.kind, d.producer, d.consumer, d.fusion) for d in got] == [
        ("fused", "broadcast.1", "multiply.2", "loop_multiply_fusion"), ("not fused", "reduce.3", "", "")]
    assert "would duplicate work" in str(got[1])


# ---------------------------------------------------------------------------------------------
# The flipbook.

def _book(tmp_path) -> hlo.Flipbook:
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    _write_dump(tmp_path)
    return hlo.flipbook(hlo.frames_from_dump(tmp_path, LOG), title="test")


def test_flipbook_loads_nothing_and_degrades_to_the_last_frame(tmp_path):
    book = _book(tmp_path)
    html = book.html
    # No attribute that makes a browser fetch anything: src, href, url(...), @import.
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:|//|data:)""", html, re.I)
    assert not re.search(r"url\(|@import|<link|<iframe", html, re.I)
    assert re.findall(r"\bsrc\s*=", html, re.I) == []
    # Without scripts: the controls are hidden and only the last frame shows; the pass list is plain HTML.
    shown = re.findall(r"<div class='xlfb-frame' data-frame='(\d+)'(?! hidden)>", html)
    assert shown == [str(book.frames - 1)]
    assert "<div class='xlfb-controls' hidden>" in html and "<details class='xlfb-passes'>" in html
    assert "Fusion is not profitable" in html and "fused m into e" in html
    assert book.weight < 3 * 2**20 and book.drawn == book.frames == 3
    # The frame after the fusion pass outlines what it changed (the orange of xlalab.hlo.graph).
    frame1 = html.split("data-frame='1'")[1].split("data-frame='2'")[0]
    assert "#ff7f0e" in frame1


def test_flipbook_over_budget_keeps_first_and_last_drawn(tmp_path):
    _write_dump(tmp_path)
    frames = hlo.frames_from_dump(tmp_path, LOG)
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    book = hlo.flipbook(frames, max_bytes=1)
    assert book.drawn == 2 and "not drawn: the page would pass its size budget" in book.html


# A pipeline whose first pass rewrites x * 2 as x + x (algsimp), then fuses (fusion), then copies (copy-insertion).
# Keeping only the fusion frame (as the fusion chapter does) drops the algsimp frame: its rewrite must be counted
# against the frame shown before, never against the add that only the dropped frame holds (book-review-s5, S5-10).
REWRITTEN = BEFORE.replace("""  %c = f32[] constant(2)
  %b = f32[4]{0} broadcast(%c), dimensions={}
  %m = f32[4]{0} multiply(%p, %b), metadata={op_type="Mul" op_name="mul"}
  ROOT %e = f32[4]{0} exponential(%m)""", """  %a = f32[4]{0} add(%p, %p), metadata={op_type="Mul" op_name="mul"}
  ROOT %e = f32[4]{0} exponential(%a)""")
FUSED_ADD = """HloModule a_inference_f_1__.1, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_computation (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  %a.1 = f32[4]{0} add(%param_0, %param_0)
  ROOT %e.1 = f32[4]{0} exponential(%a.1)
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_computation
}
"""
COPIED_ADD = FUSED_ADD.replace("  ROOT %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_computation",
                               "  %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_computation\n"
                               "  ROOT %copy = f32[4]{0} copy(%fusion)")
LOG_REWRITE = "\n".join([
    P + "hlo_pass_pipeline.cc:1] Running HLO pass pipeline on module a_inference_f_1__.1: simplification",
    P + "hlo_pass_pipeline.cc:2]   HLO pass algsimp",
    P + "hlo_pass_pipeline.cc:3]   Module hash 1",
    P + "hlo_pass_pipeline.cc:2]   HLO pass dce",
    P + "hlo_pass_pipeline.cc:3]   Module hash 2",
    P + "hlo_pass_pipeline.cc:1] Running HLO pass pipeline on module a_inference_f_1__.1: fusion-pipeline",
    P + "hlo_pass_pipeline.cc:2]   HLO pass fusion",
    P + "hlo_pass_pipeline.cc:3]   Module hash 2",
    P + "instruction_fusion.cc:828] Fusing %a = f32[4]{0} add(%p, %p) into %e = f32[4]{0} exponential(%a)",
    P + "hlo_pass_pipeline.cc:2]   HLO pass copy-insertion",
    P + "hlo_pass_pipeline.cc:3]   Module hash 3",
    P + "hlo_pass_pipeline.cc:2]   HLO pass dce",
    P + "hlo_pass_pipeline.cc:3]   Module hash 4",
])


def _write_rewrite_dump(directory: Path) -> None:
    _write_files(directory, {
        f"{MODULE}.before_optimizations.txt": BEFORE,
        f"{MODULE}.0000.simplification.after_pipeline-start.before_algsimp.txt": BEFORE,
        f"{MODULE}.0001.simplification.after_algsimp.before_dce.txt": REWRITTEN,
        f"{MODULE}.0002.fusion-pipeline.after_pipeline-start.before_fusion.txt": REWRITTEN,
        f"{MODULE}.0003.fusion-pipeline.after_fusion.before_copy-insertion.txt": FUSED_ADD,
        f"{MODULE}.0004.fusion-pipeline.after_copy-insertion.before_dce.txt": COPIED_ADD,
        f"{MODULE}.cpu_after_optimizations.txt": COPIED_ADD,
    })


def test_keeping_some_frames_measures_each_against_the_previous_one_kept(tmp_path):
    _write_rewrite_dump(tmp_path)
    frames = hlo.frames_from_dump(tmp_path, LOG_REWRITE)
    assert [f.pass_name for f in frames] == ["before optimizations", "algsimp", "fusion", "copy-insertion"]
    # Unfiltered, the fusion frame removes the add that algsimp made.
    assert frames[2].change.removed == {"add": 1, "exponential": 1}
    kept = frames.keep(f.index for f in frames if f.change.fusions_created)
    assert [f.index for f in kept] == [0, 2, 3] and kept.passes_run == frames.passes_run
    fusion = kept[1]
    # Against frame 0, the frame shown before it: the multiply, broadcast and constant go, no add ever appears.
    assert fusion.change.removed == {"broadcast": 1, "constant": 1, "exponential": 1, "multiply": 1}
    assert fusion.change.added == {"fusion": 1} and fusion.change.fusions_created == ["fusion"]
    assert [d.pass_name for d in fusion.folded] == ["algsimp"]
    assert [p.name for p in fusion.passes] == ["algsimp", "dce", "fusion"]
    assert fusion.changed_passes() == [0, 2] and [p.name for p in fusion.own_passes] == ["dce", "fusion"]
    assert [d.kind for d in fusion.decisions] == ["fused"]
    # Every pass is still somewhere: the kept frames' passes and the trailing ones.
    assert sum(len(f.passes) for f in kept) + len(kept.trailing) == len(frames.passes_run) == 5
    # Keeping again from the kept frames gives the same frames (folded frames stay flat).
    again = frames.keep([1, 2]).keep([2])
    assert [(f.index, f.change.removed, [p.name for p in f.passes], [d.index for d in f.folded]) for f in again] == \
        [(f.index, f.change.removed, [p.name for p in f.passes], [d.index for d in f.folded]) for f in kept]


def test_flipbook_of_kept_frames_counts_every_pass_and_names_the_folded_ones(tmp_path):
    _write_rewrite_dump(tmp_path)
    frames = hlo.frames_from_dump(tmp_path, LOG_REWRITE)
    html = hlo.flipbook(frames.keep([2])).html
    frame1 = html.split("data-frame='1'")[1].split("data-frame='2'")[0]
    assert "Changed since frame 1 (by algsimp, in frames not shown, and this pass): added 1 fusion; removed 1 " \
           "broadcast, 1 constant, 1 exponential, 1 multiply" in frame1
    assert "1 add" not in frame1
    assert ("Before it, 2 pass(es) ran: 1 changed the module in frames not shown here (their changes are part of "
            "the line above): algsimp; 1 changed nothing: dce") in frame1
    assert "Every pass, in order (5 ran;" in html
    assert "<li class=changed>simplification › algsimp (its frame is not shown)</li>" in html
    assert "<li class=changed>fusion-pipeline › fusion → frame 2</li>" in html
    # The flipbook of all the frames says the same of each pass.
    full = hlo.flipbook(frames).html
    assert "Every pass, in order (5 ran;" in full and "simplification › algsimp → frame 2" in full
    assert "Before it, 1 pass(es) ran and changed nothing: dce" in full


def test_flipbook_refuses_frames_left_out_by_hand(tmp_path):
    _write_rewrite_dump(tmp_path)
    frames = hlo.frames_from_dump(tmp_path, LOG_REWRITE)
    with pytest.raises(ValueError, match="Frames.keep"):
        hlo.flipbook([f for f in frames if f.index != 1])


def test_kept_frames_without_a_log_name_the_folded_pass(tmp_path):
    _write_rewrite_dump(tmp_path)
    frames = hlo.frames_from_dump(tmp_path)
    html = hlo.flipbook(frames.keep([2])).html
    assert "<li class=changed>algsimp (its frame is not shown)</li>" in html
    assert "1 changed the module in frames not shown here (their changes are part of the line above): algsimp" in html


_HARNESS = """
<script>
window.addEventListener("load", function () {
  var root = document.querySelector(".xlfb");
  function state() {
    var f = root.querySelector(".xlfb-frame:not([hidden])");
    return f ? f.getAttribute("data-frame") + "|" + f.querySelector(".xlfb-caption").textContent : "none";
  }
  var out = [state()];
  root.querySelector(".xlfb-next").click();
  out.push(state());
  root.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight", bubbles: true}));
  out.push(state());
  var pre = document.createElement("pre");
  pre.id = "harness";
  pre.textContent = out.join("\\n");
  document.body.appendChild(pre);
});
</script>
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    pytest.skip("no headless Chromium installed (Debian: apt-get install chromium)")


def _click_next(page: Path) -> list[tuple[str, str]]:
    """Load the page in headless Chromium, offline, press next then the right arrow; (frame, caption) each time."""
    out = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                          "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="harness">(.*?)</pre>', out.stdout, re.S)
    assert m, f"the harness did not run: {out.stderr[-800:]}"
    return [tuple(line.split("|", 1)) for line in m.group(1).strip().splitlines()]


@pytest.mark.heavy   # headless Chromium
def test_flipbook_next_button_and_arrow_key_change_frame_and_caption_in_chromium(tmp_path):
    book = _book(tmp_path)
    page = tmp_path / "book.html"
    page.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{book.html}{_HARNESS}"
                    "</body></html>")
    states = _click_next(page)
    assert [s[0] for s in states] == ["0", "1", "2"]
    assert states[0][1] != states[1][1] != states[2][1]
    assert "fusion" in states[1][1] and "copy-insertion" in states[2][1]
    # The same check on a flipbook whose script does nothing: it fails (no frame change), so it can fail.
    broken = book.html.replace('root.querySelector(".xlfb-next").addEventListener', 'void')
    page.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{broken}{_HARNESS}"
                    "</body></html>")
    states = _click_next(page)
    assert [s[0] for s in states][:2] == ["0", "0"]


# ---------------------------------------------------------------------------------------------
# A real compile.

@pytest.mark.heavy   # XLA dumps every pass: 20 s
def test_passes_of_a_real_function_start_unoptimized_and_end_optimized(tmp_path):
    tf = pytest.importorskip("tensorflow")

    def f(x, y):
        return tf.nn.relu(x * y + 1.0)

    x, y = tf.ones([4, 8]), tf.ones([4, 8])
    frames = hlo.passes(f, x, y, keep=tmp_path)

    def same(a: str, b: str) -> tuple[str, str]:
        return re.sub(r"ENTRY %\S+", "ENTRY %e", pipeline.normalized(a)), re.sub(r"ENTRY %\S+", "ENTRY %e",
                                                                                 pipeline.normalized(b))

    first, want_first = same(frames[0].text, hlo.hlo_text(f, x, y, stage="hlo"))
    assert [i.opcode for i in hlo.parse(first).entry] == [i.opcode for i in hlo.parse(want_first).entry]
    last, want_last = same(frames[-1].text, hlo.hlo_text(f, x, y, stage="optimized_hlo"))
    assert last == want_last
    # Pipeline order: the frames follow the dump's snapshot order, and their passes are a subsequence of the log's.
    ran = iter([(p.pipeline, p.name) for p in frames.passes_run])
    for fr in frames[1:]:
        if fr.passes:
            assert (fr.passes[-1].pipeline, fr.passes[-1].name) in ran
    assert frames.first_creating("fusion").pass_name == hlo.first_pass_creating(tmp_path, "fusion").after
    assert any(d.kind == "fused" for d in frames.first_creating("fusion").decisions)


@pytest.mark.heavy   # two compiles with every pass dumped, side by side
def test_passes_side_by_side_match_passes_one_at_a_time(tmp_path, monkeypatch):
    tf = pytest.importorskip("tensorflow")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))    # every work folder under this test's own

    def chain(x):
        return tf.abs(x * 1.5 + 0.5) * 0.25

    def centre_rows(a):
        return a - tf.reduce_mean(a, axis=1, keepdims=True)

    x, a = tf.ones([64]), tf.ones([8, 16])
    both = hlo.passes_side_by_side((chain, x), (centre_rows, a))
    alone = [hlo.passes(chain, x), hlo.passes(centre_rows, a)]
    assert len(both) == 2
    for got, want in zip(both, alone):     # in the order given, each the same frames as compiled alone
        assert [f.pass_name for f in got] == [f.pass_name for f in want]
        assert pipeline.normalized(got[-1].text) == pipeline.normalized(want[-1].text)
        assert got.tensorflow == want.tensorflow == tf.__version__
    assert pipeline.normalized(both[0][-1].text) != pipeline.normalized(both[1][-1].text)   # not one twice
    assert not list(tmp_path.glob("xlalab_passes_*"))          # the work folders are removed


# ---------------------------------------------------------------------------------------------
# Fusion across versions: the fusion chapter's table is made from the census file, never typed.

def test_census_table_comes_from_the_file_and_marks_changes(tmp_path):
    from xlalab.hlo import census

    def run(version, kernels):
        return {"tensorflow": version, "backend": "XLA:CPU", "machine": {"host": "h", "cpu": "x", "cores": 2},
                "functions": {name: {"kernels": kernels.get(name, 1), "fusions": 1, "fusions_by_kind": {},
                                     "bytes": 0} for name in census.FUNCTIONS}}

    path = tmp_path / "fusion.json"
    path.write_text(__import__("json").dumps({"runs": {"2.10.0 XLA:CPU": run("2.10.0", {"softmax": 6}),
                                                       "2.9.1 XLA:CPU": run("2.9.1", {})}}))
    table = census.table(path)
    assert table.splitlines()[0] == "| function | TF 2.9.1, XLA:CPU | TF 2.10.0, XLA:CPU |"   # version order
    assert "| softmax | 1 (1) | **6 (1)** |" in table and "| fusion chain | 1 (1) | 1 (1) |" in table
    assert census.changes(path) == [("softmax", "2.9.1 XLA:CPU", "2.10.0 XLA:CPU")]
    assert census.table(tmp_path / "missing.json") == ""
    # S5-17: a cell shows the fusions' kinds, and a change of kinds alone is a change.
    kinds = run("2.11.0", {"softmax": 6})
    kinds["functions"]["softmax"].update(fusions=4, fusions_by_kind={"kCustom": 2, "kLoop": 2})
    path.write_text(__import__("json").dumps({"runs": {"2.10.0 XLA:CPU": run("2.10.0", {"softmax": 6}),
                                                       "2.11.0 XLA:CPU": kinds}}))
    assert "| softmax | 6 (1) | **6 (4 = 2 kCustom + 2 kLoop)** |" in census.table(path)
    assert census.changes(path) == [("softmax", "2.10.0 XLA:CPU", "2.11.0 XLA:CPU")]
    assert census.kind_changes({"fusions_by_kind": {}}, {"fusions_by_kind": {"kCustom": 2}}) == "kCustom 0 → 2"


def test_the_fusion_chapter_table_is_generated_from_the_recorded_census():
    import json

    repo = Path(__file__).resolve().parent.parent
    nb = json.loads((repo / "book" / "fusion.ipynb").read_text())
    cells = {c.get("id"): "".join(c["source"]) for c in nb["cells"]}
    assert '"results" / "compat" / "fusion.json"' in cells["fusion-versions"]
    assert "census.table(census_file)" in cells["fusion-versions-glue"]
    assert "census.changes(census_file)" in cells["fusion-versions-glue"]
    # No count of the census typed into the chapter's prose: the explanation only glues.
    assert not re.search(r"\|\s*softmax\s*\|", cells["fusion-versions-explain"])
    runs = json.loads((repo / "results" / "compat" / "fusion.json").read_text())["runs"]
    assert runs and all(set(r["functions"]) == set(__import__("xlalab.hlo.census").hlo.census.FUNCTIONS)
                        for r in runs.values())
    # make test-compat records every version it runs.
    assert "hlo-census" in (repo / "tests" / "scripts" / "compat_matrix.py").read_text()


def test_the_log_layout_of_tensorflow_2_19_is_read_too(tmp_path):
    """TensorFlow 2.19 and earlier print "date time: I external/.../file.cc:N] msg"; 2.20 and later absl's layout."""
    old = "\n".join("2026-12-03 20:30:12.292079: I external/local_xla/xla/service/" + line[len(P):]
                    for line in LOG.splitlines())
    _write_dump(tmp_path)
    frames = hlo.frames_from_dump(tmp_path, old)
    assert [p.name for p in frames[1].passes] == ["algsimp", "dce", "fusion"]
    assert [d.kind for d in frames[1].decisions] == ["fused", "not fusible", "not fused"]


def test_a_bypassed_operand_is_a_change():
    rewired = BEFORE.replace("exponential(%m)", "exponential(%p)")
    change = pipeline.diff(BEFORE, rewired)
    assert change.rewired == ["e"] and change.highlight == ["e"] and "rewired the operands of e" in change.describe()
    assert pipeline.diff(BEFORE, SAME).describe().startswith("attributes, layouts or order only")


def test_a_nested_pipeline_hands_back_to_its_parent():
    log = "\n".join([
        P + "hlo_pass_pipeline.cc:1] Running HLO pass pipeline on module m: outer",
        P + "hlo_pass_pipeline.cc:2]   HLO pass inner pipe",
        P + "hlo_pass_pipeline.cc:1] Running HLO pass pipeline on module m: inner pipe",
        P + "hlo_pass_pipeline.cc:2]   HLO pass algsimp",
        P + "hlo_pass_pipeline.cc:9] HLO pass: algsimp time: 5 us (5 us)",
        P + "hlo_pass_pipeline.cc:9] HLO pass: inner pipe time: 9 us (9 us)",
        P + "hlo_pass_pipeline.cc:2]   HLO pass fusion",
    ])
    runs = [(e.pipeline, e.name) for e in pipeline.read_log(log, "m") if e.kind == "pass"]
    assert runs == [("outer", "inner pipe"), ("inner pipe", "algsimp"), ("outer", "fusion")]
