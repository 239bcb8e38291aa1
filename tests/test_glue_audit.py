"""The glued-value audit (book review s4, item 1): every value the book glues, and every sentence whose truth depends
on one, checked against the value.

Three layers:

1. The inventory (static, fast): every ``{glue}`` role in ``book/*.ipynb`` with its chapter, its name and the
   sentence it sits in; every role has a ``glue()`` call in the same chapter (:func:`test_every_role_is_glued`).
2. No typed outcomes (static, fast): a sentence that holds a glued value may not type a comparison word (faster,
   slower, above/below a bound, larger/smaller than ...) itself: the word must be glued, computed from the value
   (:func:`test_no_typed_outcome_beside_a_glued_value`). The few sentences that use such a word for something else
   (a rule, a hypothesis) are listed in ``TYPED_OK`` with the reason. Every glue whose value is chosen by a condition
   in code (an outcome word or story) is either an audited entry below or listed in ``COMPUTED_NOT_MEASURED`` with
   what it depends on (:func:`test_every_outcome_glue_is_audited`).
3. The audited sentences (``AUDIT``, built pages): each entry names its chapter, the glues it reads, a pattern that
   finds the sentence on the built page and a rule that computes the outcome word from the numbers printed there,
   the same rule as the chapter's code. :func:`check_built_pages` (run by ``tests/test_book.py``) checks every entry
   on the built book; :func:`test_each_rule_flips_when_its_value_crosses` forces each entry's value to the other side
   and checks that the expected sentence changes, so every check can fail.

The built-page part runs in ``tests/test_book.py`` (``test_s4_glue_audit_on_built_pages``), which owns the build.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
ROLE = re.compile(r"\{glue(?::\w*)?\}`([^`]+)`|```\{glue(?::\w*)?\}\s+([\w-]+)")
GLUE_CALL = re.compile(r"glue\(\s*(f?)\"([^\"]+)\"")
NUM = r"(-?\d[\d,]*\.?\d*)"


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def glued_names(path: Path) -> list[re.Pattern]:
    """Every name a chapter's code glues, as a pattern (an f-string's ``{...}`` parts match any text)."""
    out = []
    for c in _cells(path):
        if c["cell_type"] == "code":
            src = "".join(c["source"])
            for is_f, name in GLUE_CALL.findall(src):
                parts = re.split(r"\{[^}]*\}", name) if is_f else [name]
                out.append(re.compile("^" + ".+".join(map(re.escape, parts)) + "$"))
            if re.search(r"glue\(\s*[a-z_]+\s*,", src):      # glue(k, v) over a dict of quoted names
                out += [re.compile("^" + re.escape(n) + "$") for n in re.findall(r"\"([a-z][a-z0-9_]*)\"\s*:", src)]
                out += [re.compile("^" + re.escape(n) + "$") for n in re.findall(r"\"([a-z][a-z0-9_]*)\"", src)]
    return out


def _sentences(markdown: str) -> list[str]:
    text = re.sub(r"\s+", " ", markdown)
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*#\-])", text)


@dataclass
class Use:
    """One glued value where the prose uses it."""

    chapter: str
    name: str
    sentence: str


def inventory() -> list[Use]:
    """Every glue role of the book's chapters: chapter, glue name, the sentence that uses it."""
    uses = []
    for path in sorted(BOOK.glob("*.ipynb")):
        for c in _cells(path):
            if c["cell_type"] != "markdown":
                continue
            for sentence in _sentences("".join(c["source"])):
                for a, b in ROLE.findall(sentence):
                    uses.append(Use(path.stem, (a or b).split(":")[0], sentence))
    return uses


def test_every_role_is_glued() -> None:
    """Every role names a value its own chapter glues (a missing one would render as an error or stale text)."""
    missing = []
    for path in sorted(BOOK.glob("*.ipynb")):
        names = glued_names(path)
        for use in (u for u in inventory() if u.chapter == path.stem):
            if not any(p.match(use.name) for p in names):
                missing.append(f"{use.chapter}: {use.name}")
    assert not missing, f"roles without a glue() call in their chapter: {missing}"
    uses = inventory()
    print(f"{len(uses)} glue roles of {len({(u.chapter, u.name) for u in uses})} distinct values in "
          f"{len({u.chapter for u in uses})} chapters")


# --- 2. No typed outcomes --------------------------------------------------------------------------------------------

# A comparison typed in a sentence that also holds a glued value. 'above'/'below' count only next to a bound, a roof,
# a ratio, a peak or 1 (elsewhere they point at a cell: "the table above"); 'larger', 'smaller', 'higher', 'lower'
# only with 'than'.
TYPED = re.compile(r"\b(faster|slower|exceeds?|beats?|(?:larger|smaller|higher|lower|wider|narrower|more|less) than"
                   r"|(?:above|below) (?:that |its |the |their )?(?:bound|roof|ratio|peak|range|target|1\b))")

TYPED_OK = {
    # (chapter, words of the sentence): why the typed word is no outcome of the glued value
    ("fusion", "Which side the gap comes from"): "a hypothetical ('would mean'), the outcome is the glued gap_story",
    ("measuring", "This book therefore draws no verdict"): "states the rule (no verdict below N rounds)",
    ("graphs", "For the 8-op chain"): "'wins once ... exceeds' states the general rule; the outcome is small_verdict",
    ("autodiff", "its count can exceed what was requested"): "describes the BFC allocator, no measured outcome",
    ("claims", "40 ms is about"): "exercise answer on fixed published numbers (40 ms against a 0.57 ms roof)",
    ("fusion", "The priority is the predicted time saved"): "exercise answer on fixed numbers (its sign is glued)",
    ("claims", "Here the graph step was"): "'fewer, larger operations' compares op granularity, not a measurement",
    ("mixed_precision", "## Loss scaling"): "'smaller than about' defines the float16 threshold that is glued",
}


def _typed_outcomes() -> list[str]:
    found = []
    for use in inventory():
        stripped = ROLE.sub(" GLUE ", use.sentence)
        if TYPED.search(stripped) and not any(use.chapter == ch and start in use.sentence for ch, start in TYPED_OK):
            found.append(f"{use.chapter}: {stripped[:160]}")
    return sorted(set(found))


def test_no_typed_outcome_beside_a_glued_value() -> None:
    found = _typed_outcomes()
    assert not found, "sentences that type an outcome word next to a glued value:\n" + "\n".join(found)


def test_typed_outcome_check_can_fail() -> None:
    """The reviewed false sentence of main (graphs, R5) is caught by the check."""
    stripped = ROLE.sub(" GLUE ", "For the 8-op chain the ratio is {glue:text}`small_ratio:.2f`, so here the graph "
                                  "was faster than eager.")
    assert TYPED.search(stripped)
    assert not TYPED.search(ROLE.sub(" GLUE ", "the table above shows {glue:text}`n` rows"))


# --- 3. The audited sentences -----------------------------------------------------------------------------------------

def ci_word(lo: float, hi: float, n: int | None, above: str, below: str, neither: str, min_n: int = 10) -> str:
    """The outcome an interval of a ratio allows: ``above`` when it lies above 1, ``below`` under 1, else
    ``neither``; no verdict from fewer than ``min_n`` samples (``xlalab.bench.MIN_VERDICT_SAMPLES``)."""
    if n is not None and n < min_n:
        return neither
    return above if lo > 1 else below if hi < 1 else neither


@dataclass
class Entry:
    """An audited sentence: ``pattern`` finds it on the built chapter (prose only, or the whole page with
    ``whole_page``); ``values(m)`` reads its numbers; ``rule(values)`` is the outcome they give;
    ``said(m)`` is the outcome the page states; ``mutate(values)`` forces the values to the other side."""

    chapter: str
    glues: tuple[str, ...]
    pattern: str
    values: Callable[[re.Match], dict]
    rule: Callable[[dict], str]
    said: Callable[[re.Match], str]
    mutate: Callable[[dict], dict]
    whole_page: bool = False
    optional: str = ""          # why the sentence may be absent (another branch of the chapter), else required
    wrong_before: str = ""      # the review finding, where the built book at e7dfeca stated the wrong outcome
    sample: dict = field(default_factory=dict)   # values for the fast rule-flip test


def flip_ci(v: dict) -> dict:
    """The interval moved to the other side of 1 (above 1 when it was not, below 1 when it was), with enough samples."""
    lo, hi = (0.4, 0.8) if v["lo"] > 1 else (1.5, 2.5)
    return {**v, "lo": lo, "hi": hi, **({"n": 100} if "n" in v else {})}


def _f(*names):
    return lambda m: {k: _num(m.group(i + 1)) for i, k in enumerate(names)}


CI3 = r"\[" + NUM + ", " + NUM + r"\]"

AUDIT: list[Entry] = [
    Entry("measuring", ("speedup_xla_lo", "speedup_xla_hi", "cmp_rounds", "xla_chain_verdict"),
          r"XLA ran the chain " + NUM + r" ?× as fast \(95% CI " + NUM + " to " + NUM + r"\) and eager " + NUM
          + r" ?× \(CI " + NUM + " to " + NUM + r"\), over (\d+) rounds: by the rule above, XLA was "
          r"(faster than graph mode|slower than graph mode|not measurably different from graph mode \(cannot tell\))",
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3)), "n": int(m.group(7))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], "faster than graph mode", "slower than graph mode",
                            "not measurably different from graph mode (cannot tell)"),
          lambda m: m.group(8), flip_ci,
          sample={"lo": 1.2, "hi": 1.5, "n": 40}),
    Entry("measuring", ("chain_identity", "chain_graph_of_bound", "graph_gap_verdict"),
          r"over graph mode's fraction of its bound: " + NUM + " × " + NUM + " / " + NUM + r" = " + NUM
          + r", the speedup measured above\. (Graph mode ran faster than its unfused bytes allow|XLA is the further "
          r"from its bound|Graph mode is the further from its bound|The two are about equally far from their bounds)",
          _f("ratio", "f_xla", "f_graph", "product"),
          lambda v: ("Graph mode ran faster than its unfused bytes allow" if v["f_graph"] > 1.1 else
                     "XLA is the further from its bound" if v["f_xla"] < 0.8 * v["f_graph"] else
                     "Graph mode is the further from its bound" if v["f_graph"] < 0.8 * v["f_xla"] else
                     "The two are about equally far from their bounds"),
          lambda m: m.group(5),
          lambda v: ({**v, "f_xla": v["f_graph"] * 2.5, "f_graph": min(v["f_graph"], 1.0)}
                     if not v["f_graph"] < 0.8 * v["f_xla"] else
                     {**v, "f_xla": 0.3 * min(v["f_graph"], 1.0), "f_graph": min(v["f_graph"], 1.0)}),
          wrong_before="R4 (F): 'bytes explain only part of the gap' while XLA had the larger shortfall",
          sample={"ratio": 8.5, "f_xla": 0.14, "f_graph": 0.64, "product": 1.86}),
    Entry("measuring", ("bug_copy_verdict", "bug_copy_factor"),
          r"Copying the " + NUM + r" MB result (inflated the XLA time by a factor of|"
          r"changed the XLA time by no more than the noise here: a factor of) " + NUM,
          lambda m: {"factor": _num(m.group(3))},
          lambda v: ("inflated the XLA time by a factor of" if v["factor"] >= 1.1 else
                     "changed the XLA time by no more than the noise here: a factor of"),
          lambda m: m.group(2), lambda v: {"factor": 1.0 if v["factor"] >= 1.1 else 2.0}, sample={"factor": 1.6}),
    Entry("measuring", ("roof_words",),
          r"measured: " + NUM + r" GB/s, the faster of a copy with \d+ threads \(" + NUM + r" GB/s\) and with one \("
          + NUM + r" GB/s\)",
          _f("roof", "threads", "one"),
          lambda v: f"{max(v['threads'], v['one']):.1f}", lambda m: f"{_num(m.group(1)):.1f}",
          lambda v: {**v, "one": max(v["threads"], v["one"]) + 5.0},
          optional="on a GPU the roof is the datasheet's", sample={"roof": 8.8, "threads": 3.8, "one": 8.8}),
    Entry("graphs", ("small_ratio", "small_ratio_lo", "small_ratio_hi", "small_rounds", "small_verdict"),
          r"the eager time over the graph time is " + NUM + r" \(95% CI " + NUM + " to " + NUM
          + r", (\d+) rounds\), so here the graph was "
          r"(faster|slower|neither faster nor slower by this measurement \(cannot tell\))",
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3)), "n": int(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], "faster", "slower",
                            "neither faster nor slower by this measurement (cannot tell)"),
          lambda m: m.group(5), flip_ci,
          wrong_before="R5 (F): 'graph faster (1.34)' beside a table where the graph was 2.3x slower",
          sample={"lo": 0.4, "hi": 0.5, "n": 40}),
    Entry("graphs", ("graph_verdict",),
          r"graph \(µs per call\) 2 " + NUM + " " + NUM + " 8 " + NUM + " " + NUM + " 32 " + NUM + " " + NUM
          + r".*?The graph's time (stayed about the same for 2 and for 32 ops|grew with the number of ops)",
          lambda m: {"g2": _num(m.group(2)), "g32": _num(m.group(6))},
          lambda v: ("stayed about the same for 2 and for 32 ops" if v["g32"] < 1.5 * v["g2"]
                     else "grew with the number of ops"),
          lambda m: m.group(7),
          lambda v: {**v, "g32": 3 * v["g2"]} if v["g32"] < 1.5 * v["g2"] else {**v, "g32": v["g2"]}, whole_page=True,
          sample={"g2": 700.0, "g32": 800.0}),
    Entry("graphs", ("graph8_q1", "graph8_q3", "sweep_agreement"),
          r"IQR " + NUM + r" ?– ?" + NUM + r" µs\) the eager time over.*?The sweep above timed the same 8-op graph "
          r"at the same n at " + NUM + r" µs \(IQR " + NUM + r" ?– ?" + NUM
          + r"(?: µs)?\), (consistent with this table|outside this table's range)",
          lambda m: {"q1": _num(m.group(1)), "q3": _num(m.group(2)), "s1": _num(m.group(4)), "s3": _num(m.group(5))},
          lambda v: ("consistent with this table" if v["s1"] <= v["q3"] + 1 and v["q1"] <= v["s3"] + 1
                     else "outside this table's range"),
          lambda m: m.group(6),
          lambda v: ({**v, "s1": v["q3"] + 100, "s3": v["q3"] + 200}
                     if v["s1"] <= v["q3"] + 1 and v["q1"] <= v["s3"] + 1 else {**v, "s1": v["q1"], "s3": v["q3"]}),
          wrong_before="R5 (F): two estimates of one program 3.9x apart, the page picked one",
          sample={"q1": 600.0, "q3": 900.0, "s1": 620.0, "s3": 700.0}),
    Entry("appendix_hardware", ("hwa_roof", "hwa_roof_kind"),
          r"host copy bandwidth, 1 thread " + NUM + r" GB/s host copy bandwidth, (\d+) threads " + NUM
          + r" GB/s.*?The memory roof of .+? is " + NUM + r" GB/s \(from the (single-threaded NumPy copy|NumPy copy "
          r"split over)",
          lambda m: {"one": _num(m.group(1)), "many": _num(m.group(3))},
          lambda v: "single-threaded NumPy copy" if v["one"] >= v["many"] else "NumPy copy split over",
          lambda m: m.group(5),
          lambda v: {**v, "many": v["one"] + 1.0} if v["one"] >= v["many"] else {**v, "many": v["one"] / 2},
          whole_page=True,
          optional="on a GPU the roof is the datasheet's",
          wrong_before="R2 (F): 'a measured multi-threaded copy' for a roof that was the single-threaded copy",
          sample={"one": 8.8, "many": 3.8}),
    Entry("xla_hlo", ("lay_ratio_ci", "lay_verdict"),
          r"took " + NUM + r" ?× the time of the in-order one \(95% CI " + NUM + " to " + NUM + r"\).*?so the copy was "
          r"(slower|faster|about as fast) for the same bytes",
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3))},
          lambda v: "slower" if v["lo"] > 1.05 else "faster" if v["hi"] < 0.95 else "about as fast",
          lambda m: m.group(4), flip_ci, sample={"lo": 1.2, "hi": 1.4}),
    Entry("fusion", ("meas_ratio_large", "graph_bytes_ratio", "vs_prediction"),
          r"XLA ran the chain " + NUM + r" ?× as fast as graph mode.*?The measured speedup over graph mode is "
          r"(below|above|close to) the ratio of bytes graph mode moves to bytes XLA moves \(" + NUM + r"\)",
          lambda m: {"s": _num(m.group(1)), "r": _num(m.group(3))},
          lambda v: "below" if v["s"] < 0.9 * v["r"] else "above" if v["s"] > 1.1 * v["r"] else "close to",
          lambda m: m.group(2),
          lambda v: {**v, "s": 0.5 * v["r"]} if v["s"] > 1.1 * v["r"] else {**v, "s": 2 * v["r"]},
          sample={"s": 1.8, "r": 8.5}),
    Entry("fusion", ("xla_fraction", "graph_of_bound", "gap_story"),
          r"over graph mode's fraction of its bound: " + NUM + " × " + NUM + " / " + NUM + " = " + NUM
          + r".*?(times the speed its unfused bytes allow from DRAM|so the cache did not spare it many bytes|"
          r"graph mode is the further from its bound|XLA is the further from its bound|"
          r"about equally far from their bounds)",
          _f("ratio", "f_xla", "f_graph", "product"),
          lambda v: ("times the speed its unfused bytes allow from DRAM" if v["f_graph"] > 1.1 else
                     "so the cache did not spare it many bytes"
                     if v["f_graph"] >= 0.8 and v["f_xla"] < 0.8 * v["f_graph"]
                     else "graph mode is the further from its bound" if v["f_graph"] < 0.8 * v["f_xla"] else
                     "XLA is the further from its bound" if v["f_xla"] < 0.8 * v["f_graph"] else
                     "about equally far from their bounds"),
          lambda m: m.group(5),
          # the mutation crosses to another word whichever way the build went (graph mode above its DRAM bound or not)
          lambda v: {**v, "f_graph": 2.0} if v["f_graph"] <= 1.1 else {**v, "f_graph": 0.5, "f_xla": 1.0},
          optional="under XLALAB_FAKE_GPU the gap is not split", sample={"ratio": 8.5, "f_xla": 0.18, "f_graph": 0.86,
                                                                          "product": 1.8}),
    Entry("fusion", ("exp_verdict", "exp_copies"),
          r"and `?exp`? is (computed once and stored|duplicated into \d+ kernels) \((\d+) `?exponential`? instruction",
          lambda m: {"copies": int(m.group(2))},
          lambda v: "computed once and stored" if v["copies"] <= 1 else "duplicated",
          lambda m: m.group(1).split(" into")[0], lambda v: {"copies": 1 if v["copies"] > 1 else 2},
          sample={"copies": 1}),
    Entry("profiler", ("graph_step_ms", "xla_step_ms", "xla_vs_graph"),
          r"a median of " + NUM + r" ms in graph mode and " + NUM + r" ms under XLA over \d+ steps: "
          r"the XLA step (took|ran) " + NUM + r"× as (long|fast) as",
          _f("graph", "xla"),
          lambda v: "took long" if v["xla"] >= v["graph"] else "ran fast",
          lambda m: f"{m.group(3)} {m.group(5)}",
          # the other side: XLA faster than graph if it was slower, slower if it was faster (a swap alone may tie)
          lambda v: ({"graph": v["xla"] * 2 + 1, "xla": v["graph"]} if v["xla"] >= v["graph"]
                     else {"graph": v["xla"], "xla": v["graph"] * 1.5 + 1}),
          sample={"graph": 100.0, "xla": 80.0}),
    Entry("profiler", ("time_split_verdict",),
          r"By these numbers XLA changed the (products more than the rest|rest more than the products): " + NUM
          + " ms less in the products against " + NUM + " ms less in the rest",
          lambda m: {"mm": _num(m.group(2)), "other": _num(m.group(3))},
          lambda v: "products more than the rest" if v["mm"] > v["other"] else "rest more than the products",
          lambda m: m.group(1), lambda v: {"mm": v["other"], "other": v["mm"] + 1},
          sample={"mm": 800.0, "other": 400.0}),
    Entry("profiler", ("prediction_check",),
          r"took " + NUM + r" ms per step for " + NUM + r" GFLOP, " + NUM + r" GFLOP/s, (above|below) the " + NUM
          + " GFLOP/s peak",
          lambda m: {"rate": _num(m.group(3)), "peak": _num(m.group(5))},
          lambda v: "above" if v["rate"] > v["peak"] else "below", lambda m: m.group(4),
          lambda v: {**v, "rate": v["peak"] * (0.5 if v["rate"] > v["peak"] else 2)},
          optional="only when a head product misses the top three",
          wrong_before="R15 (I): three guesses where the numbers decide", sample={"rate": 108.0, "peak": 32.0}),
    Entry("autodiff", ("ad_hvp_speed", "ad_hvp_ci", "ad_hvp_word"),
          r"Forward over reverse was (faster than|slower than|not measurably different from) reverse over reverse \("
          + NUM + r" ?x its speed, 95% CI " + CI3 + r"\)",
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], None, "faster than", "slower than", "not measurably different from"),
          lambda m: m.group(1), flip_ci, sample={"lo": 0.8, "hi": 1.3}),
    Entry("autodiff", ("ad_hvp_fwd_cost_ci", "ad_hvp_fwd_cost_word", "ad_hvp_rev_cost_ci", "ad_hvp_rev_cost_word"),
          r"\(forward over reverse, 95% CI " + CI3 + r": (more than a gradient|less than a gradient|cannot tell from a "
          r"gradient)\)",
          lambda m: {"lo": _num(m.group(1)), "hi": _num(m.group(2))},
          lambda v: ci_word(v["lo"], v["hi"], None, "more than a gradient", "less than a gradient",
                            "cannot tell from a gradient"),
          lambda m: m.group(3), flip_ci,
          wrong_before="R16 (I): 'an HVP cost 2.5 times' a gradient with an interval that held 1",
          sample={"lo": 0.6, "hi": 3.6}),
    Entry("autodiff", ("ad_fm_tall_ci", "ad_fm_tall_word"),
          r"(faster than|slower than|not measurably different from) reverse mode \(" + NUM + r" ?x[^)]*?95% CI " + CI3,
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4))},
          lambda v: ci_word(v["lo"], v["hi"], None, "faster than", "slower than", "not measurably different from"),
          lambda m: m.group(1), flip_ci, sample={"lo": 1.2, "hi": 1.5}),
    Entry("autodiff", ("ad_draw_grad_tensors", "ad_draw_grad_kib", "ad_draw_grad_kernels", "ad_draw_rc_tensors",
                       "ad_draw_rc_kib", "ad_draw_rc_kernels", "ad_draw_verdict"),
          r"Without recomputation, (\d+) forward results \(" + NUM + r" KiB read by backward kernels\) cross over, in "
          r"(\d+) kernels; with the stack as one tf\.recompute_grad block, (\d+) \(" + NUM + r" KiB\), in (\d+) "
          r"kernels: (the same kernels|fewer forward results|more forward results|as many forward results)",
          lambda m: {"grad": int(m.group(1)), "grad_kib": _num(m.group(2)), "grad_k": int(m.group(3)),
                     "rc": int(m.group(4)), "rc_kib": _num(m.group(5)), "rc_k": int(m.group(6))},
          lambda v: ("fewer forward results" if v["rc"] < v["grad"] else "more forward results" if v["rc"] > v["grad"]
                     else "the same kernels" if (v["rc_kib"], v["rc_k"]) == (v["grad_kib"], v["grad_k"])
                     else "as many forward results"),
          lambda m: m.group(7),
          lambda v: {**v, "rc": v["grad"] + 1} if v["rc"] < v["grad"] else {**v, "grad": v["rc"] + 1},
          wrong_before="S5-1 (F): recomputed forward kernels counted as saved activations, 3 -> 5 'instead of being "
                       "read from memory'",
          sample={"grad": 3, "grad_kib": 40.0, "grad_k": 17, "rc": 1, "rc_kib": 16.0, "rc_k": 23}),
    Entry("case_studies", ("cs_att_verdict",),
          NUM + r" ?x \[95% CI " + NUM + ", " + NUM
          + r"\], so it is (faster than|slower than|not distinguishable from) naive attention",
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3))},
          lambda v: ci_word(v["lo"], v["hi"], None, "faster than", "slower than", "not distinguishable from"),
          lambda m: m.group(4), flip_ci, sample={"lo": 0.9, "hi": 1.1}),
    Entry("case_studies", ("rn_ci_words", "tr_ci_words"),
          r"x the graph-mode speed under XLA \(95% CI " + CI3 + r", (\d+) samples per variant: ([a-z ]+?) graph mode\)",
          lambda m: {"lo": _num(m.group(1)), "hi": _num(m.group(2)), "n": int(m.group(3))},
          lambda v: ("too few samples to tell it from" if v["n"] < 10 else
                     ci_word(v["lo"], v["hi"], None, "faster than", "slower than", "not measurably different from")),
          lambda m: m.group(4), flip_ci,
          wrong_before="item 2: verdicts from 5 recorded samples per variant (results/cpu-vm.json)",
          sample={"lo": 0.9, "hi": 1.2, "n": 5}),
    Entry("claims", ("cl_rn_xla_words", "cl3_latency_words", "cl4_xla_words", "cl16_words"),
          NUM + r" ?x \((faster|slower); 95% interval " + CI3 + r", (\d+) rounds\)",
          lambda m: {"lo": _num(m.group(3)), "hi": _num(m.group(4)), "n": int(m.group(5))},
          lambda v: ci_word(v["lo"], v["hi"], v["n"], "faster", "slower", "no verdict"),
          lambda m: m.group(2), flip_ci,
          optional="every measured claim may have come out 'no measurable difference' or too few rounds",
          wrong_before="item 2: ResNet-50 'faster' from 3 samples", sample={"lo": 1.04, "hi": 1.61, "n": 10}),
    Entry("claims", ("cl1_amp_words",),
          r"\+?" + NUM + r"% \(AMP\), (below|inside|above) the quoted 10–30%",
          lambda m: {"gain": _num(m.group(1)) / 100},
          lambda v: "below" if v["gain"] < 0.10 else "above" if v["gain"] > 0.30 else "inside",
          lambda m: m.group(2), lambda v: {"gain": 0.2 if v["gain"] < 0.1 else 0.05}, sample={"gain": 0.08}),
]


def test_each_rule_flips_when_its_value_crosses() -> None:
    """Every audited sentence's expected outcome changes when its value is forced to the other side, so a page that
    kept its word while the value moved would fail the built-page check."""
    stuck = [f"{e.chapter}: {e.glues}" for e in AUDIT if e.rule(e.mutate(e.sample)) == e.rule(e.sample)]
    assert not stuck, f"rules that do not flip: {stuck}"
    # Whichever side the build's values fell on, the mutation crosses: mutating the mutated sample moves the word
    # again (a mutation that only pushes one way could not fail on a build that already went that way).
    one_way = [f"{e.chapter}: {e.glues}" for e in AUDIT
               if e.rule(e.mutate(e.mutate(e.sample))) == e.rule(e.mutate(e.sample))]
    assert not one_way, f"mutations that cross one way only: {one_way}"
    print(f"{len(AUDIT)} audited sentence patterns; {sum(bool(e.wrong_before) for e in AUDIT)} of them were wrong in "
          "the reviewed build (book-review-s4)")


# Glues whose value is chosen by a condition in the chapter's code but that state no measured outcome: they depend on
# the backend, on the compiled module's structure (deterministic for a given TensorFlow), or on what the machine
# offers. Each is computed in code, so none is typed; they are not timing or roof verdicts that move between builds.
COMPUTED_NOT_MEASURED = {
    "ad_mem_stats": "whether the allocator keeps statistics (machine)", "ad_keep_story": "allocator figures (machine)",
    "ad_dots_verdict": "count of dots in the compiled module", "ad_runtime_story": "backend",
    "ad_rc_extra_frac": "FLOP count of the compiled module", "ad_rc_dots_word": "count of dots in the compiled module",
    "ad_rc_peak_word": "allocator availability", "ad_graph_count_word": "allocator figure vs count (test_book N1)",
    "ad_graph_count_story": "allocator figure vs count (test_book N1)", "ad_xla_alloc_story": "allocator figures",
    "ad_xla_probe_story": "allocator figures", "ad_xla_gap_story": "allocator figures", "ad_xla_end": "punctuation",
    "ad_xla_conclusion": "allocator figures",
    "ad_draw_fake": "XLALAB_FAKE_GPU note", "ad_live_step": "buffer assignment text",
    "ad_live_count_word": "buffer assignment vs count", "ad_live_temp_word": "buffer assignment vs count",
    "ad_est_rc_word": "liveness estimate of two modules",
    "ad_lc_word": "live-bytes peaks of two compiled modules (test_hlo_memory: the curve's peak is hlo_memory's)",
    "ad_zbar_found": "names found in the module",
    "ad_xla_vs_graph_ci_word": "audited by test_book.test_s3_n18_autodiff_interval_sentence",
    "ad_xla_vs_graph_word": "the same interval as ad_xla_vs_graph_ci_word (test_book N18)",
    "ad_rc_verdict_{mode}": "interval verdict from bench.ratio_verdict, its interval printed inside the glued text",
    "ad_pfor_word": "interval verdict of jcmp (interval not printed beside it)",
    "ad_bj_word": "interval verdict of jcmp (interval not printed beside it)",
    "ad_fm_{case}_word": "audited (tall case pattern covers both cases)", "ad_hvp_word": "audited",
    "cs_gemv_numpy_gbps": "nan when absent", "cs_reduce_gbps": "nan when absent",
    "cs_matvec_xla_gbps": "nan when absent",
    "{prefix}_ci_words": "audited (case_studies rn/tr pattern)", "{prefix}_case": "results file",
    "cs_rn_backend": "results file", "cs_att_sm_words": "arithmetic of shapes", "cs_att_hlo_words": "bytes of modules",
    "cs_att_why_more": "structure of the module", "cs_att_fake": "XLALAB_FAKE_GPU note",
    "cs_draw_naive_edge_mb": "structure", "cs_draw_blocked_edge_mb": "structure", "cs_draw_loops": "structure",
    "cs_att_verdict": "audited", "cs_att_where": "backend", "cs_gemv_roof_note": "results file's two copies",
    "cl_rn_xla_words": "audited (claims speed_words)", "cl1_amp_words": "audited",
    "cl1_tf32_words": "published figures (test_book claims arithmetic)", "cl1_flag_words": "backend",
    "cl2_gain_words": "published figures", "cl2_idle_words": "published figures",
    "cl3_latency_words": "audited (claims speed_words)", "cl3_mem_words": "memory figures of the machine",
    "cl4_xla_words": "audited (claims speed_words)", "cl7_hlo_ok": "whether XLA compiled",
    "cl8_auto_jit_help": "TensorFlow's help text", "cl8_same": "error messages compared",
    "cl11_impl": "structure of the module", "cl12_stages": "dump file names", "cl13_words": "structure of the module",
    "cl16_words": "audited (claims speed_words)", "cl18_words": "error message", "cl5_graph_word": "interval verdict "
    "of rn (ratio printed beside it; same rule as speed_words)",
    "draw_chain_after_story": "structure", "draw_chain_note": "XLALAB_FAKE_GPU note", "gap_story": "audited",
    "vs_prediction": "audited", "roof_verdict": "fraction of roof vs 0.7 and vs the x+1 copy (printed beside it)",
    "shared_story": "structure", "exp_verdict": "audited", "stop_story": "structure", "dot_decl": "structure",
    "tr_bmm_story": "backend", "fm_check": "prediction vs compiled counts", "gpu_generation_here": "compute capability",
    "small_verdict": "audited", "graph_verdict": "audited", "graph_opening_word": "same rule as graph_verdict",
    "sweep_agreement": "audited", "bf16_native": "machine", "colab_sentence": "notebook sources (test_book R3)",
    "build_load_word": "load average (test_book item 3)", "{key}_hidden": "points of hidden checks",
    "eager_tail": "skew of the samples printed beside it", "bug_copy_verdict": "audited", "roof_words": "audited",
    "graph_gap_verdict": "audited", "xla_chain_verdict": "audited", "mp_tf32_default": "TensorFlow setting",
    "mp_device_story": "backend", "mp_{key}_word_{mode}": "interval verdict (interval in the table above it)",
    "mp_bf16_xla_story": "structure of the module", "mp_draw_convert_alone": "structure",
    "mp_draw_round_trips": "structure of the module", "mp_draw_note": "fake GPU",
    "mp_auto_jit_story": "backend", "mp_acc_seq16_word": "float16 arithmetic (deterministic)",
    "mp_acc_xla": "float16 arithmetic (deterministic)", "mp_onednn_source": "TensorFlow setting",
    "trace_device": "backend", "xla_vs_graph": "audited", "graph_onednn_note": "backend",
    "prediction_check": "audited", "top_is_matmul": "structure", "tl_longest": "trace", "tl_busy_pct": "trace",
    "tl_lane_word": "backend", "xla_other_ms": "sum", "time_split_verdict": "audited",
    "mm_bound": "intensity vs ridge, both printed beside it", "xh_broadcast_bytes": "structure",
    "xh_agree": "count by hand vs summary (structure)", "fusion_name": "structure", "fusion_kind_attr": "structure",
    "fusion_called_attr": "structure", "xh_draw_after_edges": "structure", "xh_draw_note": "fake GPU",
    "llvm_vector_width": "IR", "vector_sentence": "IR (test_book R1 checks it against the printed lines)",
    "clusters_auto_why": "backend", "ac_switch_verdict": "which ops ran", "lay_copy_sentence": "structure",
    "lay_reshape_sentence": "structure", "lay_verdict": "audited", "hwa_roof_kind": "audited",
    "ad_hvp_{key}_cost_word": "audited", "min_verdict_samples": "a constant of xlalab.bench",
}


def outcome_glues() -> set[str]:
    """Names glued from a condition in code (an ``if`` in the glue call) or named as a verdict, word or story."""
    names = set()
    for path in sorted(BOOK.glob("*.ipynb")):
        for c in _cells(path):
            if c["cell_type"] != "code":
                continue
            src = "".join(c["source"])
            for m in GLUE_CALL.finditer(src):
                depth, j = 0, m.start()
                while j < len(src):
                    depth += src[j] == "("
                    depth -= src[j] == ")"
                    j += 1
                    if depth == 0:
                        break
                call = src[m.start():j]
                if re.search(r"\bif\b", call) or re.search(r"verdict|word|story", m.group(2)):
                    names.add(m.group(2))
    return names


def test_every_outcome_glue_is_audited() -> None:
    """A new outcome glue must be audited (an AUDIT entry) or listed with what it depends on."""
    covered = {g for e in AUDIT for g in e.glues} | set(COMPUTED_NOT_MEASURED)
    missing = sorted(outcome_glues() - covered)
    assert not missing, f"outcome glues neither audited nor listed: {missing}"


def check_built_pages(page_text: Callable[[str], str], page_all_text: Callable[[str], str]) -> tuple[int, list[str]]:
    """Check every audited sentence on the built book (called by tests/test_book.py, which owns the build):
    returns (sentences checked, problems)."""
    problems, checked = [], 0
    for e in AUDIT:
        text = page_all_text(e.chapter) if e.whole_page else page_text(e.chapter)
        matches = list(re.finditer(e.pattern, text))
        if not matches:
            if not e.optional:
                problems.append(f"{e.chapter} {e.glues}: sentence not found")
            continue
        for m in matches:
            values, said = e.values(m), e.said(m)
            checked += 1
            if e.rule(values) != said:
                problems.append(f"{e.chapter} {e.glues}: says {said!r}, its values {values} give {e.rule(values)!r}")
            if e.rule(e.mutate(values)) == said:
                problems.append(f"{e.chapter} {e.glues}: the check cannot fail (mutated values give the same word)")
    return checked, problems
