# The two commands of the course: `make book` and `make test`.
# Both create .venv on first use and reinstall only when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
JOBS   ?= 2

.PHONY: book test test-fast lint slurm-test labs check-labs suite gpu-check clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Build the HTML book into _build/html; chapters execute (cached), warnings are errors.
# The published book is executed alone, with caches of its own: its execution cache (_build/.jupyter_cache) and the
# measured CPU roofs (XLALAB_CACHE) are never filled by the test suite's build, which runs beside other tests and
# keeps both under _build/test-book/ (tests/test_book.py). The intro page prints the load the build ran under.
BOOK_CACHE := $(CURDIR)/_build/.xlalab-cache
book: $(STAMP)
	XLALAB_BUILD="built by make book" XLALAB_CACHE=$(BOOK_CACHE) $(VENV)/bin/jupyter-book build . -W -n --keep-going

# Every test: unit tests, labs (graded with nbval), red-team grading, suite, book build, browser.
# --dist loadfile keeps each test file on one worker: the book is built once, by one process.
# The grading tests run each notebook in a bubblewrap jail: install Debian's `bubblewrap` (.ci/run does).
# It runs the static checks, then the fast tier, then the rest (`slow or heavy`): a finding or a broken unit stops it
# within minutes.
test: $(STAMP) lint test-fast
	$(PY) -m pytest -n $(JOBS) --dist loadfile -m "slow or heavy" tests

# The fast tier, part of `make test`: the unit tests, without the `slow` (notebooks, book) and `heavy` ones (a
# kernel, a grading run, a Dask cluster, a browser, a TensorFlow subprocess, a model trained): a minute or two, 2 cores.
test-fast: $(STAMP)
	$(PY) -m pytest -n $(JOBS) -m "not slow and not heavy" tests

# Static checks (configured in pyproject.toml): ruff's lint rules and mypy over xlalab/ and tests/; seconds, not
# minutes. `make test` runs them first, so a finding fails it (and CI) before any test starts.
lint: $(STAMP)
	$(PY) -m ruff check xlalab tests
	$(PY) -m mypy

# Grading on a real Slurm cluster: tests/test_slurm.py starts a one-node Slurm of its own (Debian's slurm-wlm and
# munge, as root; .ci/run installs them) and grades a class with --cluster slurm; skipped, with the reason, elsewhere.
slurm-test: $(STAMP)
	$(PY) -m pytest -rs -p no:randomly tests/test_slurm.py

# Regenerate labs/ from solutions/ (never edit labs/ by hand).
labs: $(STAMP)
	$(PY) -m xlalab assign --record-built-with

check-labs: $(STAMP)
	$(PY) -m xlalab assign --check

# The workload suite on this machine's profile; writes results/<host>.json and PNGs.
suite: $(STAMP)
	$(PY) -m xlalab suite

# On a machine where TensorFlow sees a GPU: suite (gpu profile), every solution and student lab graded, the book
# built; writes results/<gpu-model>.json, its plots and results/<gpu-model>-report.md. Fails clearly without a GPU.
gpu-check: $(STAMP)
	$(PY) -m xlalab gpu-check

clean:
	rm -rf _build .pytest_cache .mypy_cache .ruff_cache

# --- TensorFlow version matrix (issues 18, 26) ----------------------------------------------------------------------
# Each TensorFlow that a Colab runtime version shipped, in its own Colab-like venv, .venv-compat/tf<version>
# (gitignored). .ci/colab-tf<version>.txt is that runtime's pip freeze (its source is in its header), used as pip
# constraints: Keras, NumPy, Matplotlib, ipykernel and every other package Colab had get Colab's version, not pip's
# newest; .ci/colab-like.txt names what besides TensorFlow the venv holds before the course is installed. The venv's
# Python is the runtime's (the `# python:` line of the pin file) where this machine has that python3.X, else
# $(PYTHON); the table records which. A changed pin file makes a new venv. In each venv: the Colab install path (setup
# cell -> Lab 6 Part 6, the profiler chapter's first capture), every chapter's setup cell and first imports with the
# course not installed, the version-sensitive unit tests and every solution notebook at XLALAB_PROFILE=tiny. Writes
# results/compat/compat.json and results/compat/compat.md. The newest TensorFlow of the range is the default venv's.
COMPAT_TF  ?= 2.18.0 2.19.0 2.20.0
COMPAT_DIR := .venv-compat

$(COMPAT_DIR)/tf%/.installed-stamp: .ci/colab-like.txt .ci/colab-tf%.txt
	rm -rf $(COMPAT_DIR)/tf$*
	@want=python$$(sed -n 's/^# python: *//p' .ci/colab-tf$*.txt); \
	  if $$want -c '' 2>/dev/null; then py=$$want; else py=$(PYTHON); \
	  echo "note: $$want (Colab's) is not on this machine; the venv for TensorFlow $* uses $(PYTHON)"; fi; \
	  echo "$$py -m venv $(COMPAT_DIR)/tf$*"; $$py -m venv $(COMPAT_DIR)/tf$*
	$(COMPAT_DIR)/tf$*/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT_DIR)/tf$*/bin/python -m pip install --quiet 'tensorflow==$*' -r .ci/colab-like.txt -c .ci/colab-tf$*.txt
	@touch $@

.PHONY: test-compat
test-compat: $(STAMP) $(foreach v,$(COMPAT_TF),$(COMPAT_DIR)/tf$(v)/.installed-stamp)
	$(PY) tests/scripts/compat_matrix.py $(foreach v,$(COMPAT_TF),$(COMPAT_DIR)/tf$(v))
