"""The glue audit and built-page checks of the chapter ``xla_hlo`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci, forbid, require, text_rules  # noqa: F401

CHAPTER = 'xla_hlo'


def _g(m: re.Match) -> dict:
    """The named groups of a match, numbers read as numbers."""
    return {k: _num(v) if re.fullmatch(r"-?\d[\d,]*\.?\d*", v or "") else v for k, v in m.groupdict().items()}


def _ci(above: str, below: str, neither: str):
    return lambda v: ci_word(v["lo"], v["hi"], int(v["n"]), above, below, neither)


PLAIN = ("it ran faster after the switch", "it ran slower after the switch",
         "this run cannot tell its speed after the switch from its speed before")
JIT = ("it too ran faster, so the machine's load changed between the phases",
       "it ran slower, so the machine's load changed between the phases",
       "this run cannot tell a change of the machine's load between the phases")
LAY = ("slower", "faster", "not measurably different in speed")
WHY = {(True, "XLA:CPU"): "here the flag alone formed clusters on the CPU",
       (False, "XLA:CPU"): "on a CPU auto-clustering needs",
       (True, "XLA:GPU"): "the flag alone clusters ops placed on a GPU",
       (False, "XLA:GPU"): "no cluster formed"}


def _alt(words: tuple[str, ...] | list[str]) -> str:
    return "(?P<word>" + "|".join(map(re.escape, words)) + ")"


def _interval(prefix: str) -> str:
    return (prefix + r"(?P<r>-?\d[\d,]*\.?\d*) ?× its speed before(?: it)? \(95% CI (?P<lo>-?\d[\d,]*\.?\d*) to "
            r"(?P<hi>-?\d[\d,]*\.?\d*), (?P<n>\d+) rounds\): ")


def _agree_rule(v: dict) -> str:
    exact = v["tk"] == v["hk"] + v["bc"] and v["tb"] == v["hb"] + v["extra"]
    return "accounts exactly for" if exact else "does not fully account for"


def _agree_mutate(v: dict) -> dict:
    if _agree_rule(v) == "accounts exactly for":
        return {**v, "tb": v["tb"] + 1}
    return {**v, "tk": v["hk"] + v["bc"], "tb": v["hb"] + v["extra"]}


def _switch_rule(v: dict) -> str:
    return "switched auto-clustering on" if v["on"] != "none" and v["off"] == "none" else "did not change what ran"


def _fit_rule(v: dict) -> str:
    return "splits" if v["a"] > v["lanes"] else "fills" if v["a"] == v["lanes"] else "uses"


def _fit_mutate(v: dict) -> dict:
    return {**v, "a": {"uses": v["lanes"], "fills": 2 * v["lanes"], "splits": 1}[_fit_rule(v)]}


def _after_rule(v: dict) -> str:
    return "exact" if v["k"] == 1 and v["b"] == v["fused"] else "not"


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    # S5-24: the layout timing's word by bench.ratio_verdict on the printed interval of the time ratio (no 5% band)
    Entry("xla_hlo", ("lay_ratio", "lay_ratio_word", "lay_ratio_verdict", "lay_ratio_ci_word"),
          r"took (?P<r>-?\d[\d,]*\.?\d*) ?× the time of the in-order one \(95% CI (?P<lo>-?\d[\d,]*\.?\d*) to "
          r"(?P<hi>-?\d[\d,]*\.?\d*), (?P<n>\d+) rounds\).*?so the copy was " + _alt(LAY) + " for the same bytes",
          _g, _ci(*LAY), lambda m: m.group("word"), flip_ci, sample={"lo": 3.09, "hi": 5.36, "n": 17}),
    # S5-12: the plain function's own speed after the switch against before it, and the untouched control's
    Entry("xla_hlo", ("ac_plain", "ac_plain_word", "ac_plain_verdict", "ac_plain_ci_word"),
          _interval(r"the plain tf\.function ran at ") + _alt(PLAIN), _g, _ci(*PLAIN), lambda m: m.group("word"),
          flip_ci, sample={"lo": 0.7, "hi": 0.9, "n": 12}, wrong_before="S5-12"),
    Entry("xla_hlo", ("ac_jit", "ac_jit_word", "ac_jit_verdict", "ac_jit_ci_word"),
          _interval(r"whose program the switch does not touch, ran at ") + _alt(JIT), _g, _ci(*JIT),
          lambda m: m.group("word"), flip_ci, sample={"lo": 0.4, "hi": 0.6, "n": 12}),
    # counts: the hand count plus the broadcasts against the tool's count, as printed in the same paragraph
    Entry("xla_hlo", ("xh_agree",),
          r"and (?P<tk>\d+) that do work, moving (?P<tb>\d[\d,]*) bytes by xlalab\.hlo\.summary ?'s count.*?against "
          r"(?P<hk>\d+) kernels and (?P<hb>\d[\d,]*) bytes by hand\. The two counts differ by the (?P<bc>\d+) "
          r"broadcast ?s, and the table above shows that this (?P<word>accounts exactly for|does not fully account for)"
          r" the gap.*?, (?P<extra>\d[\d,]*) bytes in all",
          _g, _agree_rule, lambda m: m.group("word"), _agree_mutate,
          sample={"tk": 5, "tb": 1416, "hk": 3, "hb": 896, "bc": 2, "extra": 520}),
    Entry("xla_hlo", ("xh_draw_after_word", "xh_draw_edges_after"),
          r"kernel\(s\), with (?P<n>\d+) arrays passed between kernels: "
          r"(?P<word>only the parameters cross memory|arrays still cross memory)",
          _g, lambda v: "only the parameters cross memory" if v["n"] == 0 else "arrays still cross memory",
          lambda m: m.group("word"), lambda v: {**v, "n": 1 if v["n"] == 0 else 0}, sample={"n": 0}),
    Entry("xla_hlo", ("after_vs_hand",),
          r"counts (?P<k>\d+) kernel\(s\) and (?P<b>\d[\d,]*) bytes in the module above, against \d+ and [\d,]+ before "
          r"the passes (?:— exactly the fused count by hand, (?P<fe>\d[\d,]*) bytes in one kernel|against "
          r"(?P<fn>\d[\d,]*) bytes in one kernel for the fused count by hand)",
          lambda m: {**_g(m), "fused": _num(m.group("fe") or m.group("fn"))}, _after_rule,
          lambda m: "exact" if m.group("fe") else "not",
          lambda v: {**v, "b": v["b"] + 1} if _after_rule(v) == "exact" else {**v, "k": 1, "b": v["fused"]},
          optional="under XLALAB_FAKE_GPU the module is a recorded stand-in", sample={"k": 1, "b": 384, "fused": 384}),
    Entry("xla_hlo", ("clusters_auto_why", "clusters_auto_only"),
          r"alone produced (?P<n>\d+) clusters from a plain tf\.function on (?P<xla>XLA:[A-Z]+): "
          + _alt(list(WHY.values())),
          _g, lambda v: WHY[v["n"] > 0, v["xla"]], lambda m: m.group("word"),
          lambda v: {**v, "n": 1 if v["n"] == 0 else 0}, sample={"n": 0, "xla": "XLA:CPU"}),
    Entry("xla_hlo", ("ac_switch_verdict", "ac_ops_off", "ac_ops_on"),
          r"set_jit\(\"autoclustering\"\) (?P<word>switched auto-clustering on|did not change what ran): before it, "
          r"the XLA ops that ran in the plain tf\.function were (?P<off>[^;]+); after it, the same function object ran "
          r"(?P<on>.+?), because",
          _g, _switch_rule, lambda m: m.group("word"),
          lambda v: {**v, "off": "none", "on": "none" if _switch_rule(v) == "switched auto-clustering on"
                     else "_XlaCompile, _XlaRun"},
          sample={"off": "none", "on": "_XlaCompile, _XlaRun"}),
]

AUDIT.append(
    # R1's sentence: the printed arithmetic's width against the host's register (test_book checks the width itself)
    Entry("xla_hlo", ("vector_sentence", "hw_lanes", "llvm_vector_width"),
          r"hold (?P<lanes>\d+) float32 lanes \([^)]*\), so for the widest of the printed instructions the code "
          r"generator (?:splits each (?P<a1>\d+)-lane|fills one whole register with each (?P<a2>\d+)-lane|"
          r"uses (?P<a3>\d+) of a register's)",
          lambda m: {"lanes": int(m.group("lanes")), "a": int(m.group("a1") or m.group("a2") or m.group("a3"))},
          _fit_rule, lambda m: "splits" if m.group("a1") else "fills" if m.group("a2") else "uses", _fit_mutate,
          optional="a GPU dump holds no vectorized CPU kernel", sample={"lanes": 8, "a": 4}))

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'llvm_vector_width': "IR",
    'vector_sentence': "IR (test_book R1 checks it against the printed lines)",
}


_s5_8 = text_rules(
    forbid("fallback, used when neither is available",
           "says the driver's JIT compiler is a fallback used whenever ptxas and nvPTXCompiler are missing",
           regex=False),
    require("xla_gpu_unsafe_fallback_to_driver_on_ptxas_not_found",
            "does not name the flag that lets the driver compile PTX", regex=False),
    doc="S5-8: the CUDA driver compiles PTX only when a flag (off by default) allows it, not whenever the others "
        "fail.")

_s5_12 = text_rules(
    forbid(r"a ratio that moves toward 1 says|slows both sides alike",
           "argues from the plain/jit ratio moving toward 1 across two non-interleaved phases"),
    require(_interval(r"the plain tf\.function ran at "),
            "no interval of the plain function's own speed after the switch against before it"),
    doc="S5-12: no argument from a ratio whose reference moved; the plain function's own before/after interval.")


def _s5_21(page: Page) -> list[str]:
    """S5-21: copy-insertion's clause says what it did in this program."""
    m = re.search(r"copy-insertion adds copies where buffers would otherwise be overwritten while still "
                  r"needed(.{0,30})", page.prose)
    if m is None:
        return ["no copy-insertion clause"]
    return [] if re.match(r": here it added \d+ copies", m.group(1)) else ["copy-insertion's effect not counted here"]


def _s5_24(page: Page) -> list[str]:
    """S5-24: the layout timing's word beside an interval with its rounds (the one rule, no 5% band)."""
    ok = re.search(r"took \S+ ?× the time of the in-order one \(95% CI \S+ to \S+, \d+ rounds\)", page.prose)
    return [] if ok and "about as fast" not in page.prose else ["the layout timing's verdict has no printed rounds, "
                                                                "or uses the 5% band's 'about as fast'"]


def _s5_25(page: Page) -> list[str]:
    """S5-25: the flipbook and its explanation sit in Stage 3, before the Stage 4 heading."""
    at = page.prose.find("draws the frames above")
    if at < 0:
        return ["no flipbook explanation"]
    start = page.prose.rfind("Stage 3: the pass pipeline, dumped", 0, at)
    if start < 0:
        return ["the flipbook explanation comes before the Stage 3 heading"]
    return ["the flipbook is explained under the Stage 4 heading"] if "Stage 4: optimized HLO" in page.prose[start:at] \
        else []


_s5_27 = text_rules(
    forbid("{{node", "an error message keeps TensorFlow's {{node ...}} tag", regex=False),
    doc="S5-27: error messages without TensorFlow's {{node ...}} tags.")


# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-8", CHAPTER, _s5_8, Page(prose=(
        "XLA compiles that PTX to the GPU's machine code (a cubin) itself, with NVIDIA's ptxas assembler or its "
        "nvPTXCompiler library; the CUDA driver's JIT compiler is a fallback, used when neither is available"))),
    PageCheck("S5-12", CHAPTER, _s5_12, Page(prose=(
        "before the switch the plain tf.function took 2.04 times as long as the jit_compile=True version, after it "
        "1.21 times; a ratio that moves toward 1 says that the plain function now runs compiled code (both ratios "
        "come from interleaved runs, so a busy machine slows both sides alike)"))),
    PageCheck("S5-21", CHAPTER, _s5_21, Page(prose=(
        "after it, copy-insertion adds copies where buffers would otherwise be overwritten while still needed. "
        "Stage 4: optimized HLO"))),
    PageCheck("S5-24", CHAPTER, _s5_24, Page(prose=(
        "At [2048, 2048] (34 MB read and written), the transposed write took 4.13× the time of the in-order one "
        "(95% CI 3.09 to 5.36) on XLA:CPU: 9.1 GB/s against 2.2 GB/s, so the copy was slower for the same bytes."))),
    PageCheck("S5-25", CHAPTER, _s5_25, Page(prose=(
        "Stage 3: the pass pipeline, dumped XLA reads XLA_FLAGS once per process ... Stage 4: optimized HLO Every "
        "pass, stepped through. xlalab.hlo.flipbook(frames) draws the frames above: press next"))),
    PageCheck("S5-27", CHAPTER, _s5_27, Page(prose=(
        "tf.py_function: InvalidArgumentError: Detected unsupported operations when trying to compile graph ... "
        "EagerPyFunc (No registered 'EagerPyFunc' OpKernel for XLA_CPU_JIT devices compatible with node "
        "{{node EagerPyFunc}}){{node EagerPyFunc}}"))),
]
