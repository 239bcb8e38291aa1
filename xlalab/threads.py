"""Waiting on several fresh processes at once, from one Python process."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["side_by_side"]

_T = TypeVar("_T")
_R = TypeVar("_R")


def side_by_side(fn: Callable[[_T], _R], items: Iterable[_T], workers: int | None = None) -> list[_R]:
    """``[fn(item) for item in items]``, run in threads, up to ``workers`` (default: the machine's cores) at once;
    results in the order of ``items``, the first exception raised again.

    For probes that each run in a fresh process (a different ``XLA_FLAGS`` or ``TF_XLA_FLAGS`` needs one): the
    kernel only waits, so the processes can use the machine's other cores. Never for timing: processes side by side
    share the cores and would time each other."""
    todo = list(items)
    if not todo:
        return []
    n = max(1, min(len(todo), workers or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(fn, todo))
