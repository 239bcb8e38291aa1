"""Moved to :mod:`xlalab.hlo.graph`; ``xlalab.hlo_draw`` is that same module, so old imports keep working."""

import sys
from typing import TYPE_CHECKING

from xlalab.hlo import graph as _moved

sys.modules[__name__] = _moved

if TYPE_CHECKING:  # type checkers cannot follow the sys.modules swap: show them the module's names
    from xlalab.hlo.graph import *  # noqa: F403
