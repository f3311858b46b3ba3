"""Timeouts that almost never fire, kept by one task instead of a cancel scope with a deadline each.

A Trio cancel scope with a deadline costs about 40,000 instructions to enter
and leave (28,000 for the scope, the rest for registering and removing the
deadline): as much as a tenth of a request. Where many waits share one
timeout — every mid-turn drain waits at most ``DRAIN_DEADLINE``, every idle
keep-alive connection ``keep_alive_timeout`` — their deadlines come in the order
the waits began, so :class:`UniformDeadlines` keeps them in an insertion-ordered
dict and one task sleeps until the oldest: adding and removing a wait is a dict
operation, and the task wakes about once a timeout (for an entry long since
removed, it looks again and sleeps on).

:func:`sweep_for` is what :meth:`~actors._actor.PendingReply.wait` uses with
``shared=True``: a wait for an answer that a per-run sweep (a system task, one
per distinct timeout) ends with :class:`trio.TooSlowError` at the deadline a
scope would have had (on the clock; the waiter runs one scheduling batch
later, after the sweep). At most :data:`MAX_SWEEPS` distinct timeouts a run:
they are for constants, and a computed one would start a task per value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import outcome
import trio

log = logging.getLogger("trellis.timeouts")

MAX_SWEEPS = 16  # distinct shared timeouts in one run (DRAIN_DEADLINE is the one today)

K = TypeVar("K")


class UniformDeadlines(Generic[K]):
    """Keys that each expire ``timeout`` seconds after they were (last) added, and the task that expires them.

    ``expire(key)`` is called from :meth:`run` for each key whose time is up (it is removed first); an
    exception from it is logged, and the sweep goes on.
    """

    def __init__(self, timeout: float, expire: Callable[[K], object]) -> None:
        if not timeout > 0:
            raise ValueError(f"a timeout must be a positive number of seconds, not {timeout!r}")
        self.timeout = timeout
        self._expire = expire
        self._deadlines: dict[K, float] = {}  # insertion order is deadline order (each is then + timeout)
        self._lot = trio.lowlevel.ParkingLot()

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, key: object) -> bool:
        return key in self._deadlines

    def add(self, key: K) -> None:
        """Time ``key`` from now (again, if it was timed: it moves to the end)."""
        self._deadlines.pop(key, None)
        self._deadlines[key] = trio.current_time() + self.timeout
        if self._lot:
            self._lot.unpark()

    def discard(self, key: K) -> None:
        self._deadlines.pop(key, None)

    def take_all(self) -> list[K]:
        """Every key still timed, removed."""
        keys, self._deadlines = list(self._deadlines), {}
        return keys

    async def run(self) -> None:
        """Expire each key when its time is up; run until cancelled."""
        while True:
            if not self._deadlines:
                await self._lot.park()
                continue
            key, deadline = next(iter(self._deadlines.items()))
            if trio.current_time() < deadline:
                await trio.sleep_until(deadline)  # the key may be gone by then: the loop looks again
                continue
            del self._deadlines[key]
            try:
                self._expire(key)
            except Exception:  # one key's failure must not stop the sweep (nor, as a system task, the run)
                log.exception("expiring a timeout failed")


class Waiter:
    """A task parked for an answer (the slot's ``waiter``), as a timed key."""

    __slots__ = ("task", "slot")

    def __init__(self, task: trio.lowlevel.Task, slot: Any) -> None:
        self.task = task
        self.slot = slot


def _wake_too_slow(waiter: Waiter) -> None:
    slot = waiter.slot
    if slot.waiter is waiter.task:  # still parked for this answer (else the answer, or a cancel, came first)
        slot.waiter = None
        trio.lowlevel.reschedule(waiter.task, outcome.Error(trio.TooSlowError()))


_SWEEPS: trio.lowlevel.RunVar[dict[float, UniformDeadlines[Waiter]]] = trio.lowlevel.RunVar("trellis_timeouts")


def sweep_for(timeout: float) -> UniformDeadlines[Waiter]:
    """This Trio run's sweep of waits of ``timeout`` seconds, started (a system task) on first use.

    One task per distinct timeout: for constants (``DRAIN_DEADLINE``), never for computed ones.
    """
    try:
        sweeps = _SWEEPS.get()
    except LookupError:
        sweeps = {}
        _SWEEPS.set(sweeps)
    sweep = sweeps.get(timeout)
    if sweep is None:
        if len(sweeps) >= MAX_SWEEPS:
            raise RuntimeError(f"more than {MAX_SWEEPS} distinct shared timeouts in one run ({sorted(sweeps)} and "
                               f"{timeout!r}): a shared timeout must be a constant")
        sweep = sweeps[timeout] = UniformDeadlines(timeout, _wake_too_slow)
        trio.lowlevel.spawn_system_task(sweep.run, name=f"timeouts of {timeout:g} s")
    return sweep
