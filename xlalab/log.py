"""Logging of the ``xlalab`` commands: one handler on the ``xlalab`` logger, set up once by a command.

Modules log to ``logging.getLogger(__name__)``; :func:`configure` makes INFO and above (``-v``: DEBUG, ``-q``:
WARNING) reach stderr as plain lines. Library use that never calls it gets Python's default: warnings only.
"""

from __future__ import annotations

import logging
import sys


class _Stderr(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (pytest's capture, a redirected stream), not the one at setup."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001  (logging never raises into the caller)
            self.handleError(record)


def level(verbose: int = 0, quiet: bool = False) -> int:
    """INFO by default, DEBUG with ``-v``, WARNING with ``-q``."""
    if quiet:
        return logging.WARNING
    return logging.DEBUG if verbose > 0 else logging.INFO


def configure(verbose: int = 0, quiet: bool = False) -> None:
    """Send the ``xlalab`` loggers' records at :func:`level` or above to stderr (idempotent)."""
    root = logging.getLogger("xlalab")
    for h in [h for h in root.handlers if isinstance(h, _Stderr)]:
        root.removeHandler(h)
    handler = _Stderr()
    fmt = "%(levelname)s %(name)s: %(message)s" if verbose > 0 and not quiet else "%(message)s"
    handler.setFormatter(logging.Formatter(fmt))
    root.addHandler(handler)
    root.setLevel(level(verbose, quiet))
    root.propagate = False
