"""``python -m xlalab.grading`` is ``python -m xlalab.grade``."""

import sys

from xlalab.grading.cli import main

sys.exit(main())
