"""The glue audit and built-page checks of the chapter ``case_studies`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from xlalab.bench import MIN_VERDICT_SAMPLES, ratio_verdict

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci

CHAPTER = 'case_studies'


def _order(a: float, b: float, larger: str, smaller: str, same: str) -> str:
    """Sizes compared exactly as printed (the book's rule for counts and sizes)."""
    return larger if a > b else smaller if a < b else same


def _swap(v: dict, a: str, b: str) -> dict:
    """Values moved to the other side of the comparison: ``a`` above ``b`` when it was not, below when it was."""
    return {**v, a: v[b] - 1 if v[a] > v[b] else v[b] + 1}


def _speed_words(v: dict) -> str:
    if v["n"] < MIN_VERDICT_SAMPLES:
        return "interval printed from too few samples" if v["lo"] is not None else "too few"
    if v["lo"] is None:
        return "no interval beside a verdict"
    return ci_word(v["lo"], v["hi"], v["n"], "faster than", "slower than", "not measurably different from")


def _speed_said(m: re.Match) -> str:
    return "too few" if m.group(4).startswith("too few") else m.group(4).removesuffix(" graph mode")


RS_STORY = {"more than": "So this spelling writes", "fewer than": "So the fusion moves fewer",
            "as many as": "Both read the table once"}

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    # The attention verdict, from its interval as printed (3 decimals) and its rounds, by bench.ratio_verdict.
    Entry("case_studies", ("cs_att_speedup_word", "cs_att_speedup_verdict"),
          NUM + r" ?x \[95% CI " + NUM + ", " + NUM
          + r"\], so it is (faster than|slower than|not distinguishable from) naive attention "
          r"\((\d+) interleaved rounds",
          lambda m: {"lo": _num(m.group(2)), "hi": _num(m.group(3)), "n": int(m.group(5))},
          lambda v: {"faster": "faster than", "slower": "slower than", "indistinguishable": "not distinguishable from"}[
              ratio_verdict((v["lo"], v["hi"]), n=v["n"], digits=3)],
          lambda m: m.group(4), flip_ci, sample={"lo": 0.9, "hi": 1.1, "n": 12}),
    # ResNet and Transformer against graph mode, from the results file: no interval and no verdict below
    # MIN_VERDICT_SAMPLES samples per variant (S5-15, R12).
    Entry("case_studies", ("cs_rn_ci_words", "cs_tr_ci_words"),
          r"x the graph-mode speed under XLA \((?:95% CI " + CI3 + r", )?(\d+) samples per variant: "
          r"(too few for an interval or a verdict|faster than graph mode|slower than graph mode|"
          r"not measurably different from graph mode)\)",
          lambda m: {"lo": _num(m.group(1)) if m.group(1) else None, "hi": _num(m.group(2)) if m.group(2) else None,
                     "n": int(m.group(3))},
          _speed_words, _speed_said,
          lambda v: ({"lo": None, "hi": None, "n": 5} if v["n"] >= MIN_VERDICT_SAMPLES else
                     {"lo": 1.5, "hi": 2.5, "n": 100}),
          wrong_before="S5-15: '95% CI [0.72, 1.15]' printed from 5 recorded samples per variant",
          sample={"lo": None, "hi": None, "n": 5}),
    # GEMV and the fusion chains against the run's ridge (sizes as printed).
    Entry("case_studies", ("cs_int_words",),
          r"sit at " + NUM + r" FLOP/byte or less, and that run's ridge \(its FP32 roof over its bandwidth\) is at "
          + NUM + r" FLOP/byte: they sit (right of it|left of it|at it)",
          _f("low", "ridge"), lambda v: _order(v["low"], v["ridge"], "right of it", "left of it", "at it"),
          lambda m: m.group(3), lambda v: _swap(v, "low", "ridge"), sample={"low": 0.5, "ridge": 8.96}),
    # R17: the single-threaded copy beat the recorded roof (the note appears only then).
    Entry("case_studies", ("cs_gemv_roof_note",),
          r"of the memory roof that run recorded, " + NUM + r" GB/s, the denominator of the tables above"
          r"(; that run's single-threaded copy, " + NUM + r" GB/s, beat its recorded roof)?",
          lambda m: {"roof": _num(m.group(1)), "one": _num(m.group(3)) if m.group(3) else None},
          lambda v: "absent" if v["one"] is None else "beat" if v["one"] > v["roof"] else "not beaten",
          lambda m: "beat" if m.group(2) else "absent",
          lambda v: {**v, "one": v["roof"] + 1 if v["one"] is None or v["one"] <= v["roof"] else v["roof"] - 1},
          sample={"roof": 23.4, "one": 25.2}),
    # S5-2: what the two GEMV spellings' kernels move at the timed shape, and the story that follows from it.
    Entry("case_studies", ("cs_rs_bytes_word", "cs_rs_story"),
          r"whose kernels move " + NUM + r" MiB; the `?reduce_sum\(items \* user\)`? spelling compiles to .*?, whose "
          r"kernels move " + NUM + r" MiB, (more than|fewer than|as many as) `?matvec`? ?'s \(" + NUM + r" times\)\. "
          r"(So this spelling writes|So the fusion moves fewer|Both read the table once)",
          lambda m: {"mv": _num(m.group(1)), "rs": _num(m.group(2))},
          lambda v: (w := _order(v["rs"], v["mv"], "more than", "fewer than", "as many as")) + " / " + RS_STORY[w],
          lambda m: f"{m.group(3)} / {m.group(5)}", lambda v: _swap(v, "rs", "mv"),
          wrong_before="S5-2: 'Both read the table once' beside a 3-kernel module that writes the product",
          sample={"mv": 49.2, "rs": 149.9}),
    # The softmax's memory time over the products' compute time on this page's device, against 1 as printed.
    Entry("case_studies", ("cs_att_sm_words",),
          r"it is " + NUM + r": (the softmax's traffic outweighs the products' arithmetic there too|the products' "
          r"arithmetic outweighs the softmax's traffic there|the softmax's traffic and the products' arithmetic take "
          r"equal time there)",
          _f("ratio"), lambda v: _order(v["ratio"], 1.0, "the softmax's traffic outweighs the products' arithmetic "
                                        "there too", "the products' arithmetic outweighs the softmax's traffic there",
                                        "the softmax's traffic and the products' arithmetic take equal time there"),
          lambda m: m.group(2), lambda v: {"ratio": 0.5 if v["ratio"] >= 1 else 2.0}, sample={"ratio": 2.31}),
    # Naive attention's compiled bytes against the count, and the blocked version's against naive (MiB as printed).
    Entry("case_studies", ("cs_att_why_more",),
          r"naive attention compiles to \d+ kernels moving " + NUM + r" MiB, " + NUM + r" times the " + NUM
          + r" MiB counted above(, because the softmax is not one pass)?",
          lambda m: {"hlo": _num(m.group(1)), "count": _num(m.group(3))},
          lambda v: "explained" if v["hlo"] > v["count"] else "none", lambda m: "explained" if m.group(4) else "none",
          lambda v: _swap(v, "hlo", "count"), sample={"hlo": 341.9, "count": 32.5}),
    Entry("case_studies", ("cs_att_hlo_words",),
          r"naive attention compiles to \d+ kernels moving " + NUM + r" MiB.*?The blocked version compiles to \d+ "
          r"kernels that move " + NUM + r" MiB, (more bytes than|fewer bytes than|as many bytes as) naive attention",
          _f("naive", "blocked"),
          lambda v: _order(v["blocked"], v["naive"], "more bytes than", "fewer bytes than", "as many bytes as"),
          lambda m: m.group(3), lambda v: _swap(v, "blocked", "naive"), sample={"naive": 326.0, "blocked": 277.0}),
    # The loop XLA kept: one trip per key block.
    Entry("case_studies", ("cs_draw_loops",),
          r"the trip count XLA found, (\d+) \(one per block of (\d+) of the (\d+) keys",
          _f("trips", "block", "t"), lambda v: "one per block" if v["trips"] * v["block"] == v["t"] else "mismatch",
          lambda m: "one per block",
          lambda v: {**v, "trips": v["trips"] + 1 if v["trips"] * v["block"] == v["t"] else v["t"] // v["block"]},
          optional="XLA may unroll the loop or keep it without a known trip count (said so in the same glue)",
          sample={"trips": 4, "block": 64, "t": 256}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    "That run compiled with": "names the backend the results file records (XLA:GPU when it lists a GPU); no "
                              "measured outcome",
    "Drawn with `xlalab.hlo.draw`": "the glued note is the XLALAB_FAKE_GPU disclaimer, chosen by the backend; no "
                                    "measured outcome",
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'cs_rn_backend': "the results file's hardware (a GPU listed or not)",
    'cs_att_fake': "XLALAB_FAKE_GPU note",
    'cs_att_where': "backend",
    'cs_gemv_roof_note': "audited (the copy against the roof, as printed)",
    'cs_att_speedup_ci_word': "bench.ratio_verdict of the interval (glue_interval); not printed in the prose",
    '{prefix}_ci_words': "audited (ResNet and Transformer entry)",
}


# ---------------------------------------------------------------------------------------------
# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.

def _s5_2(page: Page) -> list[str]:
    """S5-2: the GEMV HLO view is compiled at the shape the run timed, and 'read the table once' only where the two
    spellings' kernels move the same bytes."""
    problems = []
    m = re.search(r"At the shape the run timed, items \[([\d,]+), (\d+)\] float32", page.prose)
    timed = re.search(r"gemv / reduce_sum .{0,200}?items \[(\d+), (\d+)\] float32", page.text)
    if not m:
        problems.append("the GEMV HLO view does not say it was compiled at the shape the run timed")
    elif timed and (int(m.group(1).replace(",", "")), int(m.group(2))) != (int(timed.group(1)), int(timed.group(2))):
        problems.append(f"HLO view at [{m.group(1)}, {m.group(2)}], run timed at [{timed.group(1)}, {timed.group(2)}]")
    b = re.search(r"whose kernels move " + NUM + r" MiB; .*?whose kernels move " + NUM + r" MiB", page.prose)
    if "Both read the table once" in page.prose and (not b or b.group(1) != b.group(2)):
        problems.append("'Both read the table once' beside kernels that move different bytes (or none printed)")
    return problems


def _s5_15(page: Page) -> list[str]:
    """S5-15 / R12: every interval in the runs table carries its sample count, at least MIN_VERDICT_SAMPLES; the GEMV
    paragraph ranks no formulation from medians of separate comparisons."""
    problems = []
    row = (r"\b(?:eager|graph|xla|xla_mixed|autocluster|numpy) yes [\d.–]+ [\d,.–]+ \([\d,.–]+\) (\d+\.\d\dx\*?"
           r"(?: \[\d+\.\d\d, \d+\.\d\d\])?\*?(?: \(n = \d+(?:, no interval)?\))?)")
    cells = [m.group(1) for m in re.finditer(row, page.text)]      # the speedup cell of each timed row
    if not cells:
        problems.append("no timed row of the runs table found")
    for cell in (c for c in cells if "[" in c):
        n = re.search(r"\(n = (\d+)\)", cell)
        if not n:
            problems.append(f"interval without its sample count: {cell}")
        elif int(n.group(1)) < MIN_VERDICT_SAMPLES:
            problems.append(f"interval from {n.group(1)} samples: {cell}")
    if "the fastest TensorFlow formulation was" in page.prose:
        problems.append("ranks GEMV formulations from medians of separate comparisons")
    return problems


def _s5_29(page: Page) -> list[str]:
    """S5-29 / R28: the attention prose gives bytes in MiB, the unit of the pictures beside it."""
    problems = [f"MB beside the pictures' MiB: {m.group(0)}" for m in re.finditer(
        r"(?:from " + NUM + r" MB to a tile of|kernels (?:moving|that move) " + NUM + r" MB\b|carries " + NUM
        + r" MB\b)", page.prose)]
    if not re.search(r"MiB to a tile of " + NUM + " MiB", page.prose):
        problems.append("no tile size in MiB")
    return problems


def _s5_23(page: Page) -> list[str]:
    """S5-23: where the page quotes a results file, it says the numbers were measured when that file was made."""
    found = re.findall(r"\bIn `?[\w.-]+\.json`? \(([^()]*)\)", page.prose)
    if not found:
        return ["no paragraph names the results file its numbers come from"]
    return [f"results file quoted without saying it was not measured for this page: ({f})" for f in found
            if "not while this page was built" not in f]


REVIEWED_GEMV = Page(
    prose="What the compiler made of two of them on this page's machine (XLA:CPU, a small table of 1,000 items): the "
          "matvec spelling compiles to 1 kernel: 1 matrix product (a bare dot instruction), no fusion; the "
          "reduce_sum(items * user) spelling to 1 kernel: no matrix product and 1 kLoop fusion. Both read the table "
          "once. In the run above, the reduce_sum spelling reached 5.2 GB/s under XLA, against 8.7 GB/s for matvec.",
    text="gemv / reduce_sum tf.reduce_sum(items * user, axis=1): items [100000, 128] float32 0.497 memory "
         "gemv / reduce_sum xla yes 0.31 9.83 (0.40) 1.10x [0.95, 1.26] 5.25 0.0026 22% 3 / 3")
REVIEWED_TABLE = Page(
    prose="In cpu-vm.json (AMD EPYC, 2 cores, no GPU, mixed policy mixed_bfloat16), the fastest TensorFlow "
          "formulation was matmul_split in mode autocluster at 17.0 GB/s",
    text="vs graph [95% CI] gemv / matmul_col xla_mixed yes 1.10 2.25 (0.31) 3.19x [2.60, 3.52] 11.39 "
         "resnet / resnet18 xla yes 31.2 1,200 (80) 0.87x [0.72, 1.15] 1.15")
REVIEWED_ATTENTION = Page(
    prose="naive attention compiles to 9 kernels moving 341.9 MB, 10.2 times the 33.6 MB counted above. Blocking "
          "written in TensorFlow changes the size of the largest intermediate, from 33.6 MB to a tile of 8.4 MB")

PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-2", CHAPTER, _s5_2, REVIEWED_GEMV),
    PageCheck("S5-15", CHAPTER, _s5_15, REVIEWED_TABLE),
    PageCheck("S5-29", CHAPTER, _s5_29, REVIEWED_ATTENTION),
    PageCheck("S5-23", CHAPTER, _s5_23, REVIEWED_TABLE),
]
