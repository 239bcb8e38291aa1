"""xlalab.grading.gpu_answer: the answers of GPU prediction checks, compiled from the instructor's reference once per
grading process and cached; a refusal is that check's failure with XLA's message, a missing extra a clear fault.

The compiler itself is replaced by a counter here (tests/test_gpu_compile.py runs the real one); the lab-level
tests (tests/test_labs.py, ``test_lab02_gpu_*``) grade Lab 2 with the real compiler in the judge's jail.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest

from xlalab.grading import gpu_answer, probe
from xlalab.hlo import gpu_compile

HLO = {"dense": "HloModule dense\nENTRY e { ROOT p = f32[4] parameter(0) }\n",
       "soft": "HloModule soft\nENTRY e { ROOT p = f32[8] parameter(0) }\n"}
CASES: dict[str, Any] = {"dense": ("dense", ()), "soft": ("soft", ())}   # (fn, args): tf_hlo looks up HLO[fn]


@dataclass
class FakeCompiled:
    """What _summary reads of a GpuCompiled."""

    kernels: list
    counts: dict = field(default_factory=dict)
    compiler: str = "fake XLA:GPU"

    def backends(self) -> dict:
        return dict(self.counts)


@pytest.fixture
def fake_compiler(monkeypatch, tmp_path):
    """tf_hlo replaced by HLO[name], the compiler by one that counts its calls and refuses ``refuse`` pairs;
    the cache folder is this test's and the in-memory cache empty."""
    calls: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    refuse: set[tuple[str, str]] = set()

    def answer(hlo: str, target: str) -> FakeCompiled:
        name = next(k for k, v in HLO.items() if v == hlo)
        if (name, target) in refuse:
            raise gpu_compile.GpuCompileFailed(f"XLA:GPU could not compile for {target}: INTERNAL: no {name} here")
        n = 1 if name == "soft" else 2
        return FakeCompiled([None] * n, {f"{target} kernel": n})

    def compile_jobs(jobs, targets, **_):
        calls.append((tuple(next(k for k, v in HLO.items() if v == j["hlo"]) for j in jobs), tuple(targets)))
        return {t: [answer(j["hlo"], t) for j in jobs] for t in targets}

    def compile_hlo(hlo, target, **_):
        calls.append(((next(k for k, v in HLO.items() if v == hlo),), (target,)))
        return {target: answer(hlo, target)}

    monkeypatch.setattr(gpu_compile, "tf_hlo", lambda fn, *args: HLO[fn])
    monkeypatch.setattr(gpu_compile, "compile_jobs", compile_jobs)
    monkeypatch.setattr(gpu_compile, "compile_hlo", compile_hlo)
    monkeypatch.setattr(gpu_compile, "missing_packages", lambda: [])
    monkeypatch.setattr(gpu_answer, "_MEMORY", {})
    cache = tmp_path / "answers"
    cache.mkdir()
    monkeypatch.setenv(gpu_answer.ENV, str(cache))
    return calls, refuse, cache


def test_answers_are_compiled_once_and_read_back_from_the_cache(fake_compiler, monkeypatch):
    calls, _, cache = fake_compiler
    first = gpu_answer.reference_kernels(CASES, ["H100-SXM", "T4"])
    assert first["H100-SXM"]["dense"] == {"kernels": 2, "backends": {"H100-SXM kernel": 2},
                                          "compiler": "fake XLA:GPU"}
    assert first["T4"]["soft"]["kernels"] == 1
    assert calls == [(("dense", "soft"), ("H100-SXM", "T4"))]   # one subprocess for every case and target
    assert len(list(cache.glob("*.json"))) == 4
    # Another judge of the same grading run: a fresh kernel (empty memory) reads the folder, compiles nothing.
    monkeypatch.setattr(gpu_answer, "_MEMORY", {})
    assert gpu_answer.reference_kernels(CASES, ["H100-SXM", "T4"]) == first
    assert len(calls) == 1
    # A target not asked before compiles that target only.
    gpu_answer.reference_kernels(CASES, ["H100-SXM", "A100-SXM-40GB"])
    assert calls[1] == (("dense", "soft"), ("A100-SXM-40GB",))


def test_a_refusal_names_its_case_and_target_with_xlas_message_and_is_cached(fake_compiler, monkeypatch):
    calls, refuse, cache = fake_compiler
    refuse.add(("dense", "T4"))
    with pytest.raises(gpu_compile.GpuCompileFailed, match=r"reference dense for T4: .*INTERNAL: no dense here"):
        gpu_answer.reference_kernels(CASES, ["H100-SXM", "T4"])
    # The batch failed, then each pair alone: the refusal is attributed, the other answers kept.
    assert calls[0] == (("dense", "soft"), ("H100-SXM", "T4")) and len(calls) == 1 + 4
    entries = [json.loads(p.read_text()) for p in cache.glob("*.json")]
    assert sum("error" in e for e in entries) == 1 and sum("answer" in e for e in entries) == 3
    # The next hand-in fails the same way without compiling again.
    monkeypatch.setattr(gpu_answer, "_MEMORY", {})
    with pytest.raises(gpu_compile.GpuCompileFailed, match="INTERNAL: no dense here"):
        gpu_answer.reference_kernels(CASES, ["H100-SXM", "T4"])
    assert len(calls) == 5
    assert gpu_answer.reference_kernels({"soft": CASES["soft"]}, ["H100-SXM", "T4"])["T4"]["soft"]["kernels"] == 1


def test_missing_extra_is_a_clear_fault_in_the_judge_and_graded_later_in_a_students_kernel(fake_compiler,
                                                                                            monkeypatch):
    monkeypatch.setattr(gpu_compile, "missing_packages", lambda: ["jax-cuda12-plugin"])
    with pytest.raises(gpu_answer.GpuAnswerUnavailable, match=r"gpu compile unavailable.*'gpu-compile' extra"):
        gpu_answer.reference_kernels(CASES, ["T4"])
    assert probe.mode() == "live" and gpu_answer.graded_later()
    monkeypatch.setattr(probe._STATE, "mode", "replay")
    assert not gpu_answer.graded_later()   # the judge never skips: the check fails with the fault above
    monkeypatch.setattr(gpu_compile, "missing_packages", lambda: [])
    monkeypatch.setattr(probe._STATE, "mode", "live")
    assert not gpu_answer.graded_later()


def test_unknown_target_and_a_corrupt_entry(fake_compiler):
    calls, _, cache = fake_compiler
    with pytest.raises(gpu_compile.UnknownTarget, match="Z100"):
        gpu_answer.reference_kernels(CASES, ["Z100"])
    key = gpu_answer.answer_key(HLO["soft"], "T4")
    (cache / f"{key}.json").write_text("{not json")
    assert gpu_answer.reference_kernels({"soft": CASES["soft"]}, ["T4"])["T4"]["soft"]["kernels"] == 1
    assert calls == [(("soft",), ("T4",))]   # compiled again, and the entry replaced
    assert json.loads((cache / f"{key}.json").read_text())["answer"]["kernels"] == 1


def test_judge_cache_is_one_folder_per_process_unless_the_caller_names_one(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_answer, "_PROCESS_DIR", None)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = gpu_answer.judge_cache({})
    assert made.is_dir() and made.parent == tmp_path and gpu_answer.judge_cache(None) == made
    named = tmp_path / "named"
    assert gpu_answer.judge_cache({gpu_answer.ENV: str(named)}) == named


def test_a_keyed_reference_is_built_and_traced_only_when_its_answer_is_missing(fake_compiler, monkeypatch):
    calls, _, cache = fake_compiler
    built: list[str] = []

    def build() -> Any:
        built.append("dense")
        return "dense", ()

    first = gpu_answer.reference_kernels({"step": build}, ["H100-SXM"], key="lab07 step v1")
    assert first["H100-SXM"]["step"]["kernels"] == 2 and built == ["dense"] and len(calls) == 1
    monkeypatch.setattr(gpu_answer, "_MEMORY", {})   # the next hand-in's judge
    assert gpu_answer.reference_kernels({"step": build}, ["H100-SXM"], key="lab07 step v1") == first
    assert built == ["dense"] and len(calls) == 1
    gpu_answer.reference_kernels({"step": build}, ["H100-SXM"], key="lab07 step v2")   # another reference
    assert built == ["dense", "dense"] and len(calls) == 2


def test_two_traces_of_one_function_share_their_answer():
    a = ('HloModule a_inference_dense_relu_18__.1, entry_computation_layout={(f32[4]{0})->f32[4]{0}}\n'
         'ENTRY %a_inference_dense_relu_18__.1 (arg0.1: f32[4]) -> f32[4] {\n'
         '  ROOT %r = f32[4]{0} maximum(%arg0.1, %arg0.1), metadata={op_type="Relu" source_file="/a/x.py"}\n}\n')
    b = a.replace("_18__", "_42__").replace("/a/x.py", "/b/y.py")
    assert a != b and gpu_answer.canonical(a) == gpu_answer.canonical(b)
    def key(text: str) -> str:
        return gpu_answer.answer_key(gpu_answer.canonical(text), "T4")

    assert key(a) == key(b) and key(a.replace("f32[4]", "f32[8]")) != key(a)


def test_a_single_refused_pair_is_cached_without_a_retry(fake_compiler, monkeypatch):
    calls, refuse, cache = fake_compiler
    refuse.add(("soft", "T4"))
    for _ in range(2):
        monkeypatch.setattr(gpu_answer, "_MEMORY", {})
        with pytest.raises(gpu_compile.GpuCompileFailed, match="INTERNAL: no soft here"):
            gpu_answer.reference_kernels({"soft": CASES["soft"]}, ["T4"])
    assert calls == [(("soft",), ("T4",))]
    assert [json.loads(p.read_text()).keys() for p in cache.glob("*.json")] == [{"error": 0}.keys()]
    assert not list(cache.glob(".*.tmp"))
