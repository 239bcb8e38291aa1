"""Scripts the Makefile or a maintainer runs (``python tests/scripts/NAME.py``), and the support modules some tests
import from here (``from scripts import chapter_setup``, ``from scripts.slurm_local import LocalSlurm``); none is a
test. Each script puts ``tests/`` first on ``sys.path``, so that ``helpers`` and ``scripts`` import as in the tests.
"""
