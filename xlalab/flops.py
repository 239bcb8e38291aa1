"""Deprecated: moved to :mod:`xlalab.hlo.flops` (``from xlalab.hlo import flops``).

This module re-exports its public names and warns when imported; it is kept for one term, for chapters and
notebooks written with the old name, and then removed.
"""

import warnings

from xlalab.hlo.flops import *  # noqa: F403

warnings.warn("xlalab.flops is now xlalab.hlo.flops (`from xlalab.hlo import flops`); the old name will be removed "
              "after this term", DeprecationWarning, stacklevel=2)
