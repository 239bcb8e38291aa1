"""Logging of the ``xlalab`` commands: one handler on the ``xlalab`` logger, writing plain lines to stderr.

Modules log to ``logging.getLogger(__name__)``. Importing :mod:`xlalab` installs the handler at INFO
(:func:`install_default`), so that library use prints what the ``print(..., file=sys.stderr)`` calls it replaced
printed, unless a program has set up the ``xlalab`` logger itself. A command calls :func:`configure` once:
INFO by default, ``-v`` DEBUG (with level and logger name), ``-q`` WARNING. The logger does not propagate to the
root logger, whose handlers (absl's, once TensorFlow is imported) would print each line twice.
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


def install_default() -> None:
    """Library use: the ``xlalab`` loggers' INFO and above reach stderr as plain lines; a program that gave the
    ``xlalab`` logger a handler or a level of its own is left alone."""
    root = logging.getLogger("xlalab")
    if root.handlers or root.level != logging.NOTSET:
        return
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False


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
