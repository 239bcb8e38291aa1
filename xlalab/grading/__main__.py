"""``python -m xlalab.grading`` is ``python -m xlalab.grade``."""

import sys

from xlalab.grading.cli import main

print("note: `python -m xlalab.grading` is now `xlalab grade` (and `xlalab report`, `merge-manual`, `export`); "
      "this form keeps working", file=sys.stderr)
sys.exit(main())
