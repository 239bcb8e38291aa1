"""The glue audit and built-page checks of the chapter ``mixed_precision`` (see ``tests/book_checks/core.py``)."""

from __future__ import annotations

import re

from xlalab import hw

from book_checks.core import CI3, NUM, Entry, Page, PageCheck, _f, _num, ci_word, flip_ci, forbid, require, text_rules

CHAPTER = 'mixed_precision'

_INTERVAL = ("", "_lo", "_hi", "_n", "_verdict", "_ci_word", "_word")
_RATIOS = tuple(f"mp_{key}_{mode}{s}" for key in ("bf16", "fp16", "{key}") for mode in ("graph", "XLA", "{mode}")
                for s in _INTERVAL)

# Audited sentences: each states an outcome that its printed values decide (core.Entry).
AUDIT: list[Entry] = [
    # Each policy's step time over float32's in the same mode, its interval printed beside the word (S5-18). The
    # interval is of median(policy) / median(float32): above 1, the 16-bit step took longer ("slower than").
    Entry("mixed_precision", _RATIOS,
          CI3 + r": (faster than|slower than|not measurably different from) float32",
          lambda m: {"lo": _num(m.group(1)), "hi": _num(m.group(2))},
          lambda v: ci_word(v["lo"], v["hi"], None, "slower than", "faster than", "not measurably different from"),
          lambda m: m.group(3), flip_ci,
          wrong_before="S5-18 (I): 'took 1.72x as long ... (slower than float32)' with no interval printed",
          sample={"lo": 1.4, "hi": 2.0}),
    # The sequential float16 sum against the predicted stall point (exact: the float16 values as printed).
    Entry("mixed_precision", ("mp_acc_seq16", "mp_acc_pred", "mp_acc_seq16_word"),
          r"The sequential float16 sum stopped at " + NUM + r" against a predicted " + NUM
          + r", (exactly as predicted|not at the prediction)",
          _f("seq", "pred"), lambda v: "exactly as predicted" if v["seq"] == v["pred"] else "not at the prediction",
          lambda m: m.group(3),
          lambda v: {**v, "pred": v["seq"] * 2} if v["seq"] == v["pred"] else {**v, "pred": v["seq"]},
          sample={"seq": 32.0, "pred": 32.0}),
    # The cast-only kernels named convert_convert_fusion: a count stated beside the count of cast-only kernels.
    Entry("mixed_precision", ("mp_draw_convert_alone", "mp_draw_round_trips", "mp_draw_convert_kernels",
                              "mp_draw_kernels"),
          r"Of its (\d+) kernels, (\d+) contain casts and (\d+) are nothing but a cast\. (None of the cast-only kernels"
          r"|(\d+) of the cast-only kernels are named convert_convert_fusion)",
          lambda m: {"kernels": int(m.group(1)), "casts": int(m.group(2)), "alone": int(m.group(3)),
                     "named": int(m.group(5)) if m.group(5) else 0},
          lambda v: ("consistent" if v["alone"] <= v["casts"] <= v["kernels"] and v["named"] <= v["alone"]
                     else "inconsistent"),
          lambda m: "consistent",
          lambda v: {**v, "named": v["alone"] + 1} if v["named"] <= v["alone"] else {**v, "named": 0},
          sample={"kernels": 20, "casts": 8, "alone": 4, "named": 2}),
    # xla_allow_excess_precision: how many of the printed results are bfloat16 values, against how many there are.
    Entry("mixed_precision", ("mp_ex_bf16_default", "mp_ex_n", "mp_ex_word"),
          r"and (\d+) of the (\d+) results are bfloat16 values: XLA:[A-Z]+ (skipped roundings the program asked for|"
          r"rounded every result to bfloat16 as the program asked)",
          lambda m: {"bf16": int(m.group(1)), "n": int(m.group(2))},
          lambda v: ("skipped roundings the program asked for" if v["bf16"] < v["n"]
                     else "rounded every result to bfloat16 as the program asked"),
          lambda m: m.group(3),
          lambda v: {**v, "bf16": v["n"]} if v["bf16"] < v["n"] else {**v, "bf16": v["n"] - 1},
          sample={"bf16": 12, "n": 4096}),
    # ... and its largest error against float64, default against strict, as printed.
    Entry("mixed_precision", ("mp_ex_err_default", "mp_ex_err_false", "mp_ex_err_word"),
          r"the default's largest error was (\d\.\de[+-]\d+) and the strict run's (\d\.\de[+-]\d+): the default came "
          r"out (closer to|farther from|as close to) the float64 result",
          lambda m: {"default": float(m.group(1)), "strict": float(m.group(2))},
          lambda v: ("closer to" if v["default"] < v["strict"] else "farther from" if v["default"] > v["strict"]
                     else "as close to"),
          lambda m: m.group(3),
          lambda v: ({**v, "default": v["strict"] * 2} if v["default"] <= v["strict"]
                     else {**v, "default": v["strict"] / 2}),
          sample={"default": 1e-3, "strict": 4e-3}),
    # Op determinism and Keras's XLA check: the consequence follows the printed value after determinism.
    Entry("mixed_precision", ("mp_det_before", "mp_det_after", "mp_det_word"),
          r"Keras's check said (True|False) for a plain Dense model, (True|False) once op determinism was on, (so fit "
          r"would leave XLA off under determinism even on a GPU|so this Keras keeps XLA under determinism)",
          lambda m: {"after": m.group(2) == "True"},
          lambda v: ("so this Keras keeps XLA under determinism" if v["after"]
                     else "so fit would leave XLA off under determinism even on a GPU"),
          lambda m: m.group(3), lambda v: {"after": not v["after"]}, sample={"after": False}),
]

# Sentences with a glued value and a comparison word that state no measured outcome: opening words -> why.
DEFINITIONS: dict[str, str] = {
    '## Loss scaling': "'smaller than about' defines the float16 threshold that is glued",
    'TF32 is {glue:}`mp_tf32_default` by default': "a TensorFlow setting read from tf.config, no comparison",
    '## What happens on the machine that built this page': "mp_device_story is chosen by the backend and the CPU's "
                                                           "flags; no measured outcome",
    'On the machine that built this page (the cell above, on a CPU only)': "names the kernels oneDNN's log printed "
                                                                           "and where they come from (a TensorFlow "
                                                                           "setting); no comparison",
    'Under `mixed_bfloat16` the step\'s matrix products on': "mp_bf16_xla_story states the operand types the module "
                                                            "holds, printed beside it (mp_bf16_dot_types); chosen "
                                                            "from counts of those types, no measurement of time",
    'The picture is the optimized module of the `mixed_bfloat16` step': "describes the picture; mp_draw_note is the "
                                                                        "XLALAB_FAKE_GPU note",
    'TensorFlow sees these physical device types': "mp_auto_jit_story restates what Keras resolved, printed beside "
                                                   "it (mp_auto_jit)",
}

# Glues chosen by a condition in code that state no measured outcome: name -> what decides them.
COMPUTED_NOT_MEASURED: dict[str, str] = {
    'mp_tf32_default': "TensorFlow setting",
    'mp_device_story': "backend",
    'mp_bf16_xla_story': "structure of the module",
    'mp_draw_note': "fake GPU",
    'mp_auto_jit_story': "backend",
    'mp_acc_xla': "float16 arithmetic (deterministic): the same value, or its own distance from the exact sum",
    'mp_onednn_source': "TensorFlow setting",
}


# --- built-page checks of the review's findings ------------------------------------------------------------------

def _names(keys: list[str]) -> str:
    return ", ".join(hw.GPU_PEAKS[k].name for k in keys)


def s5_5_problems(page: Page) -> list[str]:
    """S5-5: the sentence's GPU lists come from the table (no TF32: tensor-core GPUs apart from those without tensor
    cores, the P100s), and each table row's policy is ``hw.mixed_policy_for`` of its compute capability."""
    problems = []
    no_tf32 = [k for k, p in hw.GPU_PEAKS.items() if "tf32" not in p.tflops]
    tc = [k for k in no_tf32 if hw.GPU_COMPUTE_CAPABILITY[k] >= (7, 0)]
    no_tc = [k for k in no_tf32 if hw.GPU_COMPUTE_CAPABILITY[k] < (7, 0)]
    if f"GPUs without TF32, {_names(tc)} multiply float32 on their ordinary cores" not in page.prose:
        problems.append(f"the sentence does not name the tensor-core GPUs without TF32 of the table ({_names(tc)})")
    if no_tc and not re.search(re.escape(_names(no_tc)) + r" \(compute capability [\d., ]+\) have no tensor cores",
                               page.prose):
        problems.append(f"the sentence does not say that {_names(no_tc)} have no tensor cores")
    for key, p in hw.GPU_PEAKS.items():
        cc = hw.GPU_COMPUTE_CAPABILITY[key]
        m = re.search(re.escape(p.name) + r" " + re.escape(f"{cc[0]}.{cc[1]}")
                      + r" .*?\b(None|mixed_float16|mixed_bfloat16)\b", page.text)
        if not m:
            problems.append(f"no table row for {p.name} with its compute capability")
        elif m.group(1) != str(hw.mixed_policy_for(cc)):
            problems.append(f"{p.name}: policy {m.group(1)}, mixed_policy's rule gives {hw.mixed_policy_for(cc)}")
    return problems


def s5_18_problems(page: Page) -> list[str]:
    """S5-18: each of the four ratios of a step to float32's is printed with its interval beside its word."""
    m = re.search(r"Relative to float32 in the same mode.*?(?=On a CPU where)", page.prose)
    found = len(re.findall(CI3 + r": (?:faster than|slower than|not measurably different from) float32",
                           m.group(0) if m else ""))
    return [] if found == 4 else [f"{found} of the 4 ratios to float32 have their interval printed beside the word"]


s5_19_problems = text_rules(
    forbid("expect about twice TensorFlow's default float32", "'about twice' a step, where twice is the peak rate only",
           regex=False),
    require(r"in peak matrix-product rate", "the summary does not say the factor is the peak matrix-product rate"),
    require(r"NVIDIA's own ResNet-50 figures.*?images/s.*?\d\.\d times",
            "the summary does not give NVIDIA's measured steps (claims chapter)"),
    doc="S5-19: the summary speaks of the peak matrix-product rate, and cites measured steps apart from it.")


# Built-page checks of review findings (core.PageCheck): each fails on the reviewed text.
PAGE_CHECKS: list[PageCheck] = [
    PageCheck("S5-5", CHAPTER, s5_5_problems, Page(
        prose=("Only T4 and V100, which have no TF32, multiply float32 on their ordinary cores, 2 to 8 times below "
               "their float16 tensor-core rate; the policy column follows xlalab.hw.mixed_policy()'s rule"),
        text=("Tesla P100 PCIe 16GB 9.3 – 18.7 – 2.0x – 25 mixed_float16 Tesla T4 8.1 – 65 – 8.0x – 203 "
              "mixed_float16"))),
    PageCheck("S5-18", CHAPTER, s5_18_problems, Page(prose=(
        "Relative to float32 in the same mode, a step took 1.72x as long under mixed_bfloat16 in graph mode (slower "
        "than float32) and 0.87x under XLA (not measurably different from float32); mixed_float16 took 1.65x (slower "
        "than float32) and 1.07x (not measurably different from float32). Each verdict comes from the 95% confidence "
        "interval of the ratio. On a CPU where TensorFlow turns oneDNN on"))),
    PageCheck("S5-19", CHAPTER, s5_19_problems, Page(prose=(
        "The honest summary: on GPUs with tensor cores use the policy xlalab.hw.mixed_policy() names, and expect "
        "about twice TensorFlow's default float32 on the A100 and later, more on a T4 or V100"))),
]
