"""Moved to :mod:`xlalab.hlo.memory`; ``xlalab.hlo_memory`` is that same module, so old imports keep working."""

import sys

from xlalab.hlo import memory as _moved

sys.modules[__name__] = _moved
