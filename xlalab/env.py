"""Every ``XLALAB_*`` environment variable the course reads, each named once here with its meaning.

Code reads them through these constants (``os.environ.get(env.PROFILE)``); ``tests/test_env.py`` fails on a
variable used anywhere in the repository but missing from :data:`VARIABLES`, and on a name spelled out in
``xlalab/`` instead of taken from here.
"""

from __future__ import annotations

# Hardware and sizes (xlalab.hw).
PROFILE = "XLALAB_PROFILE"
FAKE_GPU = "XLALAB_FAKE_GPU"
FAKE_GPU_CC = "XLALAB_FAKE_GPU_CC"
CACHE = "XLALAB_CACHE"
HLO_CORPUS = "XLALAB_HLO_CORPUS"

# The book.
BUILD = "XLALAB_BUILD"
RESULTS = "XLALAB_RESULTS"
REPOSITORY = "XLALAB_REPOSITORY"

# Grading (xlalab.grading).
GRADER_STATE = "XLALAB_GRADER_STATE"
GPU_ANSWERS = "XLALAB_GPU_ANSWERS"
JAIL_HOST_UID = "XLALAB_JAIL_HOST_UID"

# The test suite and its scripts only.
BOOK_OUT = "XLALAB_BOOK_OUT"
TEST_REPO = "XLALAB_TEST_REPO"
TEST_HOME = "XLALAB_TEST_HOME"
COMPAT_CHAPTERS = "XLALAB_COMPAT_CHAPTERS"

#: Each variable and what it does (read by, in parentheses).
VARIABLES: dict[str, str] = {
    PROFILE: "the problem sizes every chapter, lab and the suite use: gpu, cpu or tiny; default gpu when TensorFlow "
             "sees a GPU, else cpu (xlalab.hw.profile)",
    FAKE_GPU: "a GPU's device name, e.g. 'NVIDIA A100-SXM4-40GB': the backend, roofs and mixed-precision policy "
              "answer for that GPU while TensorFlow runs on the CPU, and optimized HLO is XLA:GPU's, compiled "
              "without a GPU (xlalab.hw.fake_gpu, xlalab.hlo.source)",
    FAKE_GPU_CC: "the compute capability of a faked GPU without a datasheet row, e.g. '8.6'; default 8.0 "
                 "(xlalab.hw.detect)",
    CACHE: "the folder of the measured ceilings' cache; default ~/.cache/xlalab (xlalab.hw.measure)",
    HLO_CORPUS: "a folder holding a copy of tests/data/hlo, the recorded XLA:GPU modules that stand in for a GPU "
                "compile (xlalab.hlo.source.fake_gpu_module)",
    BUILD: "how the book was built, in words, printed on its intro page ('built by make book'; the Makefile and "
           "tests/test_book.py set it)",
    RESULTS: "the folder of suite runs (results/*.json) the case-studies chapter reads; default ../results or "
             "results (book/case_studies.ipynb)",
    REPOSITORY: "the course's public repository URL (``_config.yml`` repository.url); each chapter's setup cell, "
                "generated from _config.yml, sets it, so that a chapter opened outside a checkout (Colab) can fetch "
                "the committed results (xlalab.compat.chapter_setup, xlalab.suite.report.course_results)",
    GRADER_STATE: "the grader's private spool of rows and hand-in text; default ~/.local/state/xlalab "
                  "(xlalab.grading.gradebook)",
    GPU_ANSWERS: "the folder where the judge keeps the GPU-compiled reference answers of prediction checks "
                 "(Lab 2 gpu-kernels, Lab 7 p5-h100-kernels); default one folder per grading process "
                 "(xlalab.grading.gpu_answer)",
    JAIL_HOST_UID: "the uid the jail runs as when the grader is root; default a fresh uid per hand-in "
                   "(xlalab.grading.sandbox)",
    BOOK_OUT: "tests only: the folder the test suite builds the book into, instead of the checkout "
              "(tests/test_book.py)",
    TEST_REPO: "tests only: the checkout the stay-home guard watches (tests/helpers/stay_home.py)",
    TEST_HOME: "tests only: the home folder the stay-home guard watches (tests/helpers/stay_home.py)",
    COMPAT_CHAPTERS: "tests only: 'all' runs the chapters' setup cells in every venv of the TensorFlow matrix "
                     "(tests/scripts/compat_matrix.py)",
}

__all__ = ["BOOK_OUT", "BUILD", "CACHE", "COMPAT_CHAPTERS", "FAKE_GPU", "FAKE_GPU_CC", "GPU_ANSWERS", "GRADER_STATE",
           "HLO_CORPUS", "JAIL_HOST_UID", "PROFILE", "REPOSITORY", "RESULTS", "TEST_HOME", "TEST_REPO", "VARIABLES"]
