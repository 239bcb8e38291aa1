"""The glue audit and built-page checks of the chapter ``fusion`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from xlalab.bench import MIN_VERDICT_SAMPLES
from xlalab.book import CI_WORDS, FEW_SAMPLES_WORDS

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci, require, text_rules  # noqa: F401

CHAPTER = 'fusion'
N = r"-?\d[\d,]*\.?\d*"


def _g(m: re.Match) -> dict:
    """The named groups of a match, numbers read as numbers."""
    return {k: _num(v) if re.fullmatch(N, v or "") else v for k, v in m.groupdict().items()}


def _alt(words: tuple[str, ...] | list[str], name: str = "word") -> str:
    return f"(?P<{name}>" + "|".join(map(re.escape, words)) + ")"


def _interval(prefix: str) -> str:
    return (prefix + rf"(?P<r>{N}) of (?:its|their) [A-Za-z ]+? \(95% CI (?P<lo>{N}) to (?P<hi>{N}), "
            r"(?P<n>\d+) rounds\): ")


# The phrases of the chapter's WORDS (its setup cell), cut to their distinctive openings.
COPY = ("the chain ran faster than the copy", "the chain's arithmetic costs time of its own",
        "this run cannot tell the chain from the copy")
SIDE = ("graph mode is the further from its bound", "XLA is the further from its bound",
        "this run cannot tell which side is further from its bound")
BOUND = ("faster than DRAM allows for its unfused bytes", "within what DRAM allows for its unfused bytes",
         "this run cannot tell it from its bound")
VS = ("above", "below", "not distinguishable from")


def _ci(words: tuple[str, str, str]):
    return lambda v: ci_word(v["lo"], v["hi"], int(v["n"]), *words)


def _side_rule(v: dict) -> str:
    """The speedup's printed interval divided by the printed ratio of bytes, by the one rule: the word about the
    ratio, and the word about which side is further from its bound."""
    lo, hi = v["lo"] / v["r"], v["hi"] / v["r"]
    return ci_word(lo, hi, int(v["n"]), *VS) + " | " + ci_word(lo, hi, int(v["n"]), *SIDE)


def _side_mutate(v: dict) -> dict:
    above = _side_rule(v).startswith("above ")
    return {**v, "lo": (0.4 if above else 1.5) * v["r"], "hi": (0.8 if above else 2.5) * v["r"], "n": 100}


def _hits(m: re.Match) -> dict:
    pairs = [(int(a), int(b)) for a, b in re.findall(r"[a-z][a-z -]*? (\d+) (\d+)", m.group("rows"))]
    return {"pairs": pairs, "h": int(m.group("h")), "t": int(m.group("t"))}


def _hits_mutate(v: dict) -> dict:
    (p, c), rest = v["pairs"][0], v["pairs"][1:]
    return {**v, "pairs": [(p, c + 1 if p == c else p), *rest]}


FORMS = {"a": "one kCustom fusion (a library call)", "b": "a reduce-window and a final reduce",
         "c": "a reduce-window and a final reduce", "d": "one reduce inside a loop fusion"}
RULE_WORDS = ("These are the forms XLA's source predicts", "These differ from what XLA's source predicts")


def _forms_rule(v: dict) -> str:
    return RULE_WORDS[0] if all(v[k] == w for k, w in FORMS.items()) else RULE_WORDS[1]


# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    # S5-14: the decomposition is an identity; the side comes from the speedup's interval over the ratio of bytes
    Entry("fusion", ("fusion_side", "fusion_side_word", "fusion_side_verdict", "fusion_side_ci_word", "vs_prediction",
                     "meas_ratio_large", "meas_ratio_large_verdict", "meas_ratio_large_ci_word",
                     "meas_ratio_large_word", "graph_bytes_ratio", "xla_fraction", "graph_of_bound", "decomp_product"),
          rf"XLA ran the chain (?P<s>{N}) ?× as fast as graph mode \(95% CI (?P<lo>{N}) to (?P<hi>{N}), (?P<n>\d+) "
          rf"rounds\).*?here (?P<r>{N}) × (?P<fx>{N}) / (?P<fg>{N}) = (?P<p>{N})\..*?so the measured speedup is "
          + _alt(VS, "vs") + " the ratio of bytes, and " + _alt(SIDE),
          _g, _side_rule, lambda m: m.group("vs") + " | " + m.group("word"), _side_mutate,
          sample={"lo": 1.5, "hi": 2.2, "n": 12, "r": 8.5}, wrong_before="S5-14"),
    Entry("fusion", ("chain_vs_copy", "chain_vs_copy_word", "chain_vs_copy_verdict", "chain_vs_copy_ci_word",
                     "copy_fraction"),
          _interval(r"The eight-op chain ran at ") + _alt(COPY), _g, _ci(COPY), lambda m: m.group("word"), flip_ci,
          sample={"lo": 0.5, "hi": 0.9, "n": 12}),
    Entry("fusion", ("graph_bound", "graph_bound_word", "graph_bound_verdict", "graph_bound_ci_word"),
          _interval(r"Graph mode on its own ran at ") + _alt(BOUND), _g, _ci(BOUND), lambda m: m.group("word"),
          flip_ci, sample={"lo": 0.9, "hi": 1.2, "n": 12}),
    Entry("fusion", ("meas_ratio_small", "meas_ratio_small_ci_word", "meas_ratio_small_verdict",
                     "meas_ratio_small_word"),
          rf"a ratio of (?P<r>{N}) \(95% CI (?P<lo>{N}) to (?P<hi>{N}), (?P<n>\d+) rounds\): "
          + _alt(list(CI_WORDS.values()) + [FEW_SAMPLES_WORDS]),
          _g, lambda v: FEW_SAMPLES_WORDS if v["n"] < MIN_VERDICT_SAMPLES else ci_word(
              v["lo"], v["hi"], int(v["n"]), CI_WORDS["faster"], CI_WORDS["slower"], CI_WORDS["indistinguishable"]),
          lambda m: m.group("word"), flip_ci, sample={"lo": 1.5, "hi": 3.0, "n": 12}),
    Entry("fusion", ("exp_verdict", "exp_copies"),
          r"and `?exp`? is (computed once and stored|duplicated into \d+ kernels) \((\d+) `?exponential`? instruction",
          lambda m: {"copies": int(m.group(2))},
          lambda v: "computed once and stored" if v["copies"] <= 1 else "duplicated",
          lambda m: m.group(1).split(" into")[0], lambda v: {"copies": 1 if v["copies"] > 1 else 2},
          sample={"copies": 1}),
    Entry("fusion", ("shared_word", "shared_mul", "shared_kernels"),
          r"(?P<k>\d+) kernel\(s\) and (?P<m>\d+) multiply instruction\(s\) in the module: (?P<word>the producer is "
          r"duplicated into the kernels|the producer is computed once|no multiply is left)",
          _g, lambda v: ("the producer is duplicated into the kernels" if v["m"] > 1 else
                         "the producer is computed once" if v["m"] == 1 else "no multiply is left"),
          lambda m: m.group("word"), lambda v: {**v, "m": 1 if v["m"] != 1 else 2}, sample={"k": 2, "m": 2}),
    Entry("fusion", ("stop_word", "stop_edges", "stop_kernels"),
          r"(?P<k>\d+) kernel\(s\), with (?P<e>\d+) arrays leaving a kernel that holds the reduction: "
          r"(?P<word>no partial result crosses memory|the reduction ends its kernel)",
          _g, lambda v: "no partial result crosses memory" if v["e"] == 0 else "the reduction ends its kernel",
          lambda m: m.group("word"), lambda v: {**v, "e": 1 if v["e"] == 0 else 0}, sample={"k": 3, "e": 1}),
    Entry("fusion", ("draw_chain_after_word", "draw_chain_edges_after", "draw_chain_kernels_after"),
          r"with (?P<e>\d+) solid edges between kernels: "
          r"(?P<word>the only solid edges are x coming in|arrays that this backend writes and reads back)",
          _g, lambda v: "the only solid edges are x coming in" if v["e"] == 0 else
          "arrays that this backend writes and reads back",
          lambda m: m.group("word"), lambda v: {**v, "e": 1 if v["e"] == 0 else 0}, sample={"e": 0}),
    Entry("fusion", ("fm_hits", "fm_counts", "fm_check"),
          r"count predicted compiled (?:-+ )*(?P<rows>(?:[a-z][a-z -]*? \d+ \d+ )+).*?(?P<h>\d+) of (?P<t>\d+) "
          r"predicted counts matched the compiled module",
          _hits, lambda v: f"{sum(p == c for p, c in v['pairs'])} of {len(v['pairs'])}",
          lambda m: f"{m.group('h')} of {m.group('t')}", _hits_mutate, whole_page=True,
          sample={"pairs": [(3, 3), (1, 1)], "h": 2, "t": 2}),
    Entry("fusion", ("rform_rule",),
          r"a row sum of a float32 \[512, 512\] array became (?P<a>.+?), the sum of its squares at the same shape "
          r"(?P<b>.+?), a row sum of \[16, 512\] (?P<c>.+?) and one of \[512, 32\] (?P<d>.+?)\. " + _alt(RULE_WORDS),
          lambda m: m.groupdict(), _forms_rule, lambda m: m.group("word"),
          lambda v: {**v, "a": "x"} if _forms_rule(v) == RULE_WORDS[0] else {**v, **FORMS}, sample=dict(FORMS)),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    'The priority is the predicted time saved': "exercise answer on fixed numbers (its sign is glued)",
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'fm_check': "XLALAB_FAKE_GPU (whether the module above is this program's)",
}


def _s5_10(page: Page) -> list[str]:
    """S5-10: a filtered flipbook lists every pass that ran and attributes changes to the frames it shows."""
    books = re.findall(r"(\d+) frames, (\d+) shown, (\d+) passes ran", page.text)
    if not books:
        return ["no flipbook prints how many passes ran in the unfiltered compile"]
    out = []
    for frames, shown, ran in books:
        if f"Every pass, in order ({ran} ran" not in page.text:
            out.append(f"a flipbook of {shown} of {frames} frames does not list the {ran} passes that ran")
        if int(shown) < int(frames) and "in frames not shown" not in page.text:
            out.append("a filtered flipbook's changes are not attributed to the frames left out")
    return out


_s5_14 = text_rules(
    require("That is an identity, not a check", "the byte ratio × fractions product is not presented as an identity",
            regex=False),
    require(r"interval of XLA's fraction over graph mode's: \S+ \(95% CI \S+ to \S+, \d+ rounds\)",
            "which side is further from its bound is said without an interval"),
    doc="S5-14: the decomposition is called an identity, and the side verdict comes with an interval.")


def _s5_16(page: Page) -> list[str]:
    """S5-16: which backend weighs duplication (XLA:GPU's priority fusion) and which refuses by rule (XLA:CPU)."""
    out = []
    if "XLA's fusion passes weigh exactly this duplication" in page.prose:
        out.append("credits both backends with weighing duplication")
    if not re.search(r"XLA:GPU's priority fusion weighs", page.prose) or "refuses by rule" not in page.prose:
        out.append("does not say that XLA:GPU weighs the cost and XLA:CPU refuses by rule")
    return out


_s5_17 = text_rules(
    require(r"\d+ \(\d+ = \d+ k[A-Z]\w+", "the census cells show no fusion kinds", field="text"),
    require("what changed", "the census changes are not explained", field="text", regex=False),
    doc="S5-17: the census cells show the fusions by kind, and each change has a row saying what changed.")


# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-10", CHAPTER, _s5_10, Page(prose="", text=(
        "the elementwise chain: 6 frames, 3 shown, page 60 KiB Every pass, in order (63 ran; bold: those that changed "
        "the module) Frame 2 of 3: after fusion instructions 21 (-2) Changed: added 1 fusion; removed 1 abs, 3 add, "
        "5 broadcast, 5 constant, 1 maximum, 3 multiply"))),
    PageCheck("S5-14", CHAPTER, _s5_14, Page(prose=(
        "The measured speedup is the byte ratio times XLA's fraction of its roof over graph mode's fraction of its "
        "bound: 8.5 × 0.18 / 0.96 = 1.61. Here graph mode ran at 0.96 of its own unfused DRAM bound, so the cache did "
        "not spare it many bytes; XLA reached only 0.18 of its roof"))),
    PageCheck("S5-16", CHAPTER, _s5_16, Page(prose=(
        "XLA's fusion passes weigh exactly this duplication when they decide whether to fuse, and a reduction usually "
        "ends a kernel"))),
    PageCheck("S5-17", CHAPTER, _s5_17, Page(prose="", text=(
        "function TF 2.20.0, XLA:CPU TF 2.21.0, XLA:CPU softmax 6 (2) 4 (4) ResNet basic block 8 (4) 8 (6) Between "
        "the recorded versions: softmax, 6 kernels (2 fusions) with TensorFlow 2.20.0, 4 (4) with 2.21.0 on XLA:CPU"))),
]
