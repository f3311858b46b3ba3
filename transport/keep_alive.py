"""Closing idle keep-alive connections: one sweep task for a whole server, not a timer task per request.

Hypercorn gives each connection a keep-alive timer (``TrioSingleTask``): it is
stopped when a request arrives and started again, as a new task waiting in a
cancel scope with a deadline, when the connection is idle again. That is a task
started and cancelled, and a deadline registered and removed, for every
request on a kept-alive connection.

Here every connection of one server shares an :class:`IdleSweep`. A
connection's :class:`IdleTimer` (what hypercorn's ``TCPServer`` calls
``idle_task``) only records that it is idle, or busy again; the sweep's one
task (:class:`actors.timeouts.UniformDeadlines`) sleeps until the oldest idle
connection's deadline. Every connection waits the same ``keep_alive_timeout``,
so the order they became idle in is the order their deadlines come in. A
connection idle for the whole timeout is closed as hypercorn closes it
(``_initiate_server_close``, shielded), at the same moment hypercorn would
have. When the server shuts down, every idle connection is closed at once, as
hypercorn's timers do when its worker context is terminated. The timeout must
be positive (``limits.keepAliveSeconds`` is; hypercorn's 0, "close at once",
is refused by :class:`~actors.timeouts.UniformDeadlines`).

States of one connection's timer::

    busy    --restart-->  idle (in the sweep, deadline = now + timeout)
    idle    --stop------> busy (out of the sweep)
    idle    --deadline--> expired (out of the sweep; its close is started)
    expired --stop------> busy (a request came before the close ran: the close does nothing)
    any     --close-----> closed (the connection ended: out of the sweep; restart and stop do nothing)

A connection that has ended stays out: after a client's reset, a request task
still finishing can report the connection idle again (hypercorn's
``_maybe_recycle``), and its task group is gone by then. Whatever one
connection's timer does, the sweep logs it and goes on: it serves the whole
server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from actors.timeouts import UniformDeadlines

log = logging.getLogger("trellis.connections")


class IdleTimer:
    """One connection's keep-alive timer, as hypercorn's ``TCPServer`` uses it (``restart``/``stop``)."""

    __slots__ = ("_sweep", "_close", "_task_group", "expired", "closed")

    def __init__(self, sweep: IdleSweep, close: Callable[[], Awaitable[None]]) -> None:
        self._sweep = sweep
        self._close = close  # the server's _initiate_server_close
        self._task_group: Any = None
        self.expired = False
        self.closed = False

    async def restart(self, task_group: Any, action: object = None) -> None:
        """The connection is idle from now (``action``, hypercorn's own timeout task, is not needed)."""
        if self.closed:
            return
        self._task_group = task_group
        self.expired = False
        self._sweep.idle(self)

    async def stop(self) -> None:
        """The connection is busy: it is not timed."""
        self.expired = False
        self._sweep.busy(self)

    def close(self) -> None:
        """The connection has ended: never timed again."""
        self.closed = True
        self.expired = False
        self._sweep.busy(self)

    def expire(self) -> None:
        """Idle for the whole timeout: close the connection from its own task group."""
        nursery = getattr(self._task_group, "_nursery", None)  # hypercorn's TaskGroup drops it when it ends
        if self.closed or nursery is None:
            return
        self.expired = True
        try:
            nursery.start_soon(self._close_if_still_idle)
        except RuntimeError:  # the nursery is closing: so is the connection
            self.expired = False

    async def _close_if_still_idle(self) -> None:
        if self.expired:  # else a request came between the expiry and this task's start
            with trio.CancelScope(shield=True):
                await self._close()


class IdleSweep:
    """The idle connections of one server, and the task that closes those idle for ``timeout`` seconds."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._idle: UniformDeadlines[IdleTimer] = UniformDeadlines(timeout, _expire)
        self._closed = False

    def __len__(self) -> int:
        return len(self._idle)

    def idle(self, timer: IdleTimer) -> None:
        if self._closed:  # the server is shutting down: an idle connection is closed at once
            _expire(timer)
            return
        self._idle.add(timer)  # to the end: its deadline is now the latest

    def busy(self, timer: IdleTimer) -> None:
        self._idle.discard(timer)

    async def run(self) -> None:
        """Close each connection once it has been idle for the timeout; run until cancelled."""
        await self._idle.run()

    def close_all(self) -> None:
        """The server is shutting down: close every idle connection now, and any that becomes idle later."""
        self._closed = True
        for timer in self._idle.take_all():
            _expire(timer)


def _expire(timer: IdleTimer) -> None:
    try:
        timer.expire()
    except Exception:  # one connection's failure must not stop the sweep, nor the server it runs in
        log.exception("closing an idle keep-alive connection failed")
