"""``python -m xlalab`` is the ``xlalab`` command (:mod:`xlalab.cli`)."""

import sys

from xlalab.cli import main

sys.exit(main())
