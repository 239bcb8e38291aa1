"""Writes results/grading/similarity-calibration.json: the similarity scores of the calibration hand-ins
(tests/data/similarity/, :mod:`helpers.similarity_data`), their false-positive and detection rates.

    .venv/bin/python tests/scripts/similarity_calibration.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: helpers and scripts import from there

from helpers.similarity_data import REPO, measure


def main() -> int:
    result = measure()
    path = REPO / "results" / "grading" / "similarity-calibration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for kind, s in result["summary"].items():
        print(f"{kind:12s} {s['flagged']:3d} of {s['pairs']:3d} flagged (before: {s['flagged_before']:3d}); "
              f"code {s['code']}; order {s['order_code']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
