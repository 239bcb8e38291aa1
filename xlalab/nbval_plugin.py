"""Kept for ``-p xlalab.nbval_plugin``; the plugin is :mod:`xlalab.grading.nbval_plugin`."""

import sys

from xlalab.grading import nbval_plugin as _impl

sys.modules[__name__] = _impl
