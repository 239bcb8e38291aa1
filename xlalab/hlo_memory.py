"""Deprecated: moved to :mod:`xlalab.hlo.memory` (``from xlalab.hlo import memory``).

This module re-exports its public names and warns when imported; it is kept for one term, for Lab 7 hand-ins and
notebooks written with the old name, and then removed.
"""

import warnings

from xlalab.hlo.memory import *  # noqa: F403

warnings.warn("xlalab.hlo_memory is now xlalab.hlo.memory (`from xlalab.hlo import memory`); the old name will be "
              "removed after this term", DeprecationWarning, stacklevel=2)
