"""xlalab.gpu_check: refuses clearly without a GPU; names files after the exact model; writes a readable report."""

import os
import subprocess
import sys

import pytest

from xlalab import gpu_check, hw


@pytest.mark.heavy   # a subprocess imports TensorFlow
@pytest.mark.skipif(bool(hw.gpus()), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_non_zero(tmp_path):
    env = dict(os.environ, XLALAB_FAKE_GPU="NVIDIA A100-SXM4-40GB", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-m", "xlalab", "gpu-check", "--out-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == gpu_check.NO_GPU_EXIT
    assert "TensorFlow sees no GPU" in out.stderr
    assert not list(tmp_path.iterdir()), "nothing is written without a GPU"


def test_model_slug_is_the_exact_model():
    assert gpu_check.model_slug("NVIDIA A100-SXM4-40GB") == "a100-sxm-40gb"
    assert gpu_check.model_slug("Tesla T4") == "t4"
    assert gpu_check.model_slug("NVIDIA H100 PCIe") == "h100-pcie"
    assert gpu_check.model_slug("NVIDIA GeForce RTX 4090") == "rtx-4090"  # a datasheet row since issue 26
    assert gpu_check.model_slug("NVIDIA GeForce RTX 4090 Laptop GPU") == "nvidia-geforce-rtx-4090-laptop-gpu"


def test_report_names_failures():
    doc = {"hardware": {"bandwidth_gbps": 320, "peak_tflops": {"fp32": 8.1}, "peaks_source": "datasheet"},
           "profile": "gpu", "wall_s": 10, "results": [], "targets": {},
           "gpu_check": {"gpu": "Tesla T4", "model": "t4", "ok": False, "created_utc": "now", "machine": "m",
                         "versions": {"tensorflow": "2.21"}, "suite": "ran", "table": "",
                         "grading": [{"lab": "lab01_timing", "kind": "solution", "ok": False, "score": 17,
                                      "maximum": 20, "status": "ok", "failed": ["timing_ratio"]}],
                         "book": {"ok": True, "returncode": 0, "seconds": 1.0, "tail": ""}}}
    text = gpu_check.report(doc)
    assert "FAIL" in text and "timing_ratio" in text and "| lab01_timing | solution | 17 / 20 |" in text


def test_colab_notebook_clones_the_configured_repository():
    import json
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    found = re.search(r"^\s*url:\s*(\S+)", (repo / "_config.yml").read_text(), re.MULTILINE)
    assert found, "_config.yml names no repository url"
    url = found.group(1)
    nb = json.loads((repo / "gpu_check.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    assert f'REPO_URL = "{url}"' in text, "gpu_check.ipynb must clone repository.url from _config.yml"
    assert "python -m xlalab gpu-check" in text
    assert "gpu_check" not in (repo / "_toc.yml").read_text()
    colab = (url.replace("https://github.com/", "https://colab.research.google.com/github/")
             + "/blob/main/gpu_check.ipynb")
    for page in ("README.md", "book/running_locally.md"):
        assert colab in (repo / page).read_text(), f"{page} must link the Colab GPU check at {colab}"
