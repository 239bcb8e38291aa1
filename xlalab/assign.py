"""``python -m xlalab.assign``, now ``xlalab assign``: write labs/ from solutions/. The code is
:mod:`xlalab.grading.assign`."""

import sys
from typing import TYPE_CHECKING

from xlalab.grading import assign as _impl

if __name__ == "__main__":
    print("note: `python -m xlalab.assign` is now `xlalab assign`; this form keeps working", file=sys.stderr)
    sys.exit(_impl.main())
else:  # ``from xlalab import assign`` is the implementation module itself
    sys.modules[__name__] = _impl

if TYPE_CHECKING:  # type checkers cannot follow the sys.modules swap: show them the module's names
    from xlalab.grading.assign import *  # noqa: F403
