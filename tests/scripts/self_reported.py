"""Measure what forged probe records earn in each lab, and write README's table of self-reported points.

    .venv/bin/python tests/scripts/self_reported.py [LAB ...] [--kinds generic,hollow]   # grade, save, write the table
    .venv/bin/python tests/scripts/self_reported.py --readme-only                       # the table from the file

For each lab (default: all seven, one after the other) it grades the solution once (the records of that run,
another seed, are what the generic forgery writes), then each forgery at ``XLALAB_PROFILE=tiny``
(:func:`helpers.forgery.measure_lab`); it merges the result into ``results/grading/self-reported.json`` and
rewrites README's table between its markers (:func:`helpers.forgery.readme_table`).
``tests/test_forgery.py::test_readme_table_is_the_measurement`` compares the two.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: helpers and scripts import from there

from xlalab.grading.lab import load_lab

from helpers import forgery


def write_readme(data: dict, readme: Path = forgery.REPO / "README.md") -> bool:
    """Replace README's generated table with the one of ``data``; False when README has no markers."""
    text = readme.read_text(encoding="utf-8")
    old = forgery.readme_section(text)
    if old is None:
        return False
    readme.write_text(text.replace(old, forgery.readme_table(data)), encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labs", nargs="*", help="lab names (default: every solution)")
    ap.add_argument("--kinds", default=",".join(("generic", *forgery.EMPTY_FORGERIES)),
                    help="forgeries to grade, comma-separated (default: all)")
    ap.add_argument("--readme-only", action="store_true", help="only write README's table from the file")
    args = ap.parse_args(argv)
    if not args.readme_only:
        names = args.labs or [p.stem for p in forgery.SOLUTIONS]
        for name in names:
            lab = load_lab(forgery.REPO / "solutions" / f"{name}.ipynb")
            folder = forgery.scratch()
            t0 = time.monotonic()
            try:
                m = forgery.measure_lab(lab, folder, tuple(args.kinds.split(",")))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            print(f"{name}: {json.dumps({k: (v['earned'], v['status']) for k, v in m.forgeries.items()})} "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)
            forgery.save_measurement([m])
    data = json.loads(forgery.MEASUREMENT.read_text(encoding="utf-8"))
    if not write_readme(data):
        print("README.md has no self-reported table markers", file=sys.stderr)
        return 1
    print(forgery.readme_table(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
