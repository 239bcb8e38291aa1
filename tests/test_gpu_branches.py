"""Every chapter runs its GPU branch: executed with XLALAB_FAKE_GPU naming an A100 at the tiny profile, no cell errors.

With ``XLALAB_FAKE_GPU="NVIDIA A100-SXM4-40GB"``, ``xlalab.hw.backend()`` reports that GPU (its datasheet peaks,
its mixed-precision policy) and ``xlalab.hlo.hlo_text(..., stage="optimized_hlo")`` returns recorded XLA:GPU
modules, while TensorFlow still runs on the CPU. A chapter whose GPU branch assumes a CPU-only opcode, divides
by a count that is zero on a GPU, or reads the wrong device fails here. One case per chapter in ``_toc.yml``
(``book/*.ipynb``; the labs have their own tests).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FAKE_GPU = "NVIDIA A100-SXM4-40GB"


def _chapters() -> list[Path]:
    toc = (REPO / "_toc.yml").read_text(encoding="utf-8")
    files = re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(book/[\w-]+)\s*$", toc, re.MULTILINE)
    return [REPO / f"{f}.ipynb" for f in files if (REPO / f"{f}.ipynb").exists()]


CHAPTERS = _chapters()


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_its_gpu_branch(path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("XLALAB_FAKE_GPU", FAKE_GPU)
    monkeypatch.setenv("XLALAB_PROFILE", "tiny")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{path.name} under XLALAB_FAKE_GPU={FAKE_GPU!r}, XLALAB_PROFILE=tiny:\n{str(err)[-3000:]}")


def test_every_chapter_is_a_case():
    assert {p.stem for p in CHAPTERS} >= {"measuring", "fusion", "appendix_hardware"}
    assert all(p.parent.name == "book" for p in CHAPTERS)
