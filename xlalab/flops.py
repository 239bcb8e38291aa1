"""Moved to :mod:`xlalab.hlo.flops`; ``xlalab.flops`` is that same module, so old imports keep working."""

import sys

from xlalab.hlo import flops as _moved

sys.modules[__name__] = _moved
