"""The grader's watch over nbval's wait for the kernel (in the pytest process, loaded by
:mod:`xlalab.grading.nbval_plugin`): a cell's time limit and the kernel's death are noticed within a second,
however many messages the kernel sends.

nbval 0.11 waits for a cell with ``get_message(stream, timeout)`` calls in loops that skip messages of other
cells (``await_reply``, ``await_idle``, the output loop of ``runtest``); each call's timeout starts anew, so a kernel
that floods its own sockets with messages (well-formed, of another parent) never lets a call time out: the run
waited past the cell timeout and past the kernel's death, up to the notebook's limit. :func:`wrap` makes every call

- raise :class:`KernelDied` once the kernel process has exited (looked at every :data:`LOOK_S` seconds, whether
  or not messages arrive);
- drop, while a cell runs, the messages whose parent is not that cell's request (nbval skips them anyway), so
  that they cannot restart the call's timeout: a flood of them ends in nbval's own timeout;
- raise ``queue.Empty`` (nbval's timeout) once the running cell is :data:`DRAIN_S` seconds past its timeout (a
  flood that forges the cell's own parent: nbval then fails the cell as timed out and stops the kernel; an
  honest cell's output of 100 MB is read within that);
- otherwise wait in slices of at most one second.

The kernel's shutdown is bounded too (:data:`SHUTDOWN_MARGIN_S`, :data:`STOP_CHANNELS_S`): see
:func:`xlalab.grading.nbval_plugin.bounded_stop` and :func:`xlalab.grading.launcher.wait_bounded`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from queue import Empty
from typing import Any

LOOK_S = 0.25     # how often the kernel's liveness is looked at while messages arrive
DRAIN_S = 30.0    # after a cell's timeout, before every wait of that cell fails at once
# After a cell's last wait (its reply, or its timeout and drain): the time left for nbval to stop the kernel and
# for pytest to end. pytest arms it as the launcher's deadline (:mod:`xlalab.grading.nbval_plugin`); past it the
# launcher kills pytest and the jail, so a run ends within its cell timeout (plus DRAIN_S for a flood that forges
# the cell's own messages) plus this margin, never at the notebook's limit.
SHUTDOWN_MARGIN_S = 20.0
# Of that margin, what nbval's ``stop_channels`` gets (it joins the heartbeat thread, which a kernel writing junk
# on its sockets leaves blocked for ever in a send) before the kernel is killed without it.
STOP_CHANNELS_S = 5.0


def died_text(died: dict[str, Any]) -> str:
    """How a dead kernel is worded from the data :func:`xlalab.grading.nbval_plugin.exit_status` gives:
    ``{"code": exit code or None, "signal": signal name or None}``."""
    if died.get("signal"):
        return f"the kernel died ({died['signal']})"
    if died.get("code") is not None:
        return f"the kernel died (exit code {died['code']})"
    return "the kernel died"


class KernelDied(RuntimeError):
    """The kernel process exited while nbval waited for it; ``died`` says how (see :func:`died_text`)."""

    def __init__(self, died: dict[str, Any]) -> None:
        super().__init__(died_text(died) + " while this cell ran")
        self.died = dict(died)


class Watch:
    """The running cell's start and timeout (set by the plugin's hooks) and the last look at the kernel."""

    def __init__(self) -> None:
        self.cell_timeout: float | None = None
        self.started: float | None = None
        self.msg_id: str | None = None     # the running cell's execute request
        self.looked = 0.0

    def cell_started(self, cell_timeout: float | None) -> None:
        self.started, self.cell_timeout = time.monotonic(), cell_timeout

    def cell_ended(self) -> None:
        self.started, self.msg_id = None, None

    def past_deadline(self, now: float) -> bool:
        return self.started is not None and self.cell_timeout is not None and \
            now > self.started + self.cell_timeout + DRAIN_S


WATCH = Watch()


def _dead(kernel: Any) -> bool:
    km = getattr(kernel, "km", None)
    return km is not None and not km.is_alive()


def wrap(original: Callable[..., Any], exit_status: Callable[[Any], dict[str, Any]],
         watch: Watch = WATCH) -> Callable[..., Any]:
    """nbval's ``RunningKernel.get_message`` watched as the module docstring says; ``exit_status(km)`` says how
    the kernel died, as data (:func:`died_text`)."""

    def get_message(self, stream, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if now - watch.looked >= LOOK_S:
                watch.looked = now
                if _dead(self):
                    raise KernelDied(exit_status(self.km))
            if watch.past_deadline(now):
                raise Empty
            step = 1.0 if deadline is None else max(0.0, min(1.0, deadline - now))
            try:
                msg = original(self, stream, timeout=step)
            except Empty:
                if _dead(self):
                    raise KernelDied(exit_status(self.km)) from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            if watch.msg_id is None or _parent(msg) == watch.msg_id:
                return msg
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty   # only messages of other parents came: nbval's timeout

    get_message._xlalab_patched = True  # type: ignore[attr-defined]
    return get_message


def _parent(msg: Any) -> Any:
    header = msg.get("parent_header") if isinstance(msg, dict) else None
    return header.get("msg_id") if isinstance(header, dict) else None


def wrap_execute(original: Callable[..., Any], watch: Watch = WATCH) -> Callable[..., Any]:
    """nbval's ``RunningKernel.execute_cell_input``, noting the request's id as the running cell's."""

    def execute_cell_input(self, *args, **kwargs):
        msg_id = original(self, *args, **kwargs)
        watch.msg_id = msg_id
        return msg_id

    return execute_cell_input
