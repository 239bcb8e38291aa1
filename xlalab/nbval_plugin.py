"""Kept for ``-p xlalab.nbval_plugin``; the plugin is :mod:`xlalab.grading.nbval_plugin`."""

import sys
from typing import TYPE_CHECKING

from xlalab.grading import nbval_plugin as _impl

sys.modules[__name__] = _impl

if TYPE_CHECKING:  # type checkers cannot follow the sys.modules swap: show them the module's names
    from xlalab.grading.nbval_plugin import *  # noqa: F403
