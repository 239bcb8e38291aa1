"""Moved to :mod:`xlalab.hlo.graph`; ``xlalab.hlo_draw`` is that same module, so old imports keep working."""

import sys

from xlalab.hlo import graph as _moved

sys.modules[__name__] = _moved
