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

:func:`wait_readable_within` is what the model client's socket reads use
(:mod:`actors.model.http`: every read waits at most the provider's
``readTimeout``): at the deadline the sweep notifies the socket as closing,
which wakes the reader, and the read fails with a timeout.

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
from typing import Any, Generic, Protocol, TypeVar

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


V = TypeVar("V", bound="Runs")


class Runs(Protocol):
    async def run(self) -> None: ...


class PerRun(Generic[K, V]):
    """One ``V`` per key and Trio run, made on first use with its ``run`` started as a system task (it lives
    as long as the run; it must not raise, or the run ends). ``make`` may refuse a key (raise) before any
    task starts; past ``limit`` keys in one run, a key is refused with ``RuntimeError(too_many)``."""

    def __init__(self, name: str, make: Callable[[K], V], *, task_name: Callable[[K], str], limit: int,
                 too_many: str) -> None:
        self._var: trio.lowlevel.RunVar[dict[K, V]] = trio.lowlevel.RunVar(name)
        self._make = make
        self._task_name = task_name
        self._limit = limit
        self._too_many = too_many

    def get(self, key: K) -> V:
        try:
            items = self._var.get()
        except LookupError:
            items = {}
            self._var.set(items)
        item = items.get(key)
        if item is None:
            if len(items) >= self._limit:
                known = sorted(items)  # type: ignore[type-var]
                raise RuntimeError(f"more than {self._limit} in one run ({known} and {key!r}): {self._too_many}")
            item = items[key] = self._make(key)
            trio.lowlevel.spawn_system_task(item.run, name=self._task_name(key))
        return item


_SWEEPS: PerRun[float, UniformDeadlines[Waiter]] = PerRun(
    "trellis shared timeouts", lambda timeout: UniformDeadlines(timeout, _wake_too_slow),
    task_name=lambda timeout: f"timeouts of {timeout:g} s", limit=MAX_SWEEPS,
    too_many="distinct shared timeouts; a shared timeout must be a constant")


def sweep_for(timeout: float) -> UniformDeadlines[Waiter]:
    """This Trio run's sweep of waits of ``timeout`` seconds, started (a system task) on first use.

    One task per distinct timeout: for constants (``DRAIN_DEADLINE``), never for computed ones.
    """
    return _SWEEPS.get(timeout)


class ReadWait:
    """A task waiting for a socket to become readable, as a timed key: at its deadline the socket is
    notified as closing (:func:`trio.lowlevel.notify_closing`), which wakes the waiter with
    :class:`trio.ClosedResourceError`, and ``expired`` tells it that this was the timeout. The socket is
    then done with: its owner closes it (a read timeout ends the connection anyway)."""

    __slots__ = ("socket", "expired")

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.expired = False


def _notify_read_timeout(wait: ReadWait) -> None:
    wait.expired = True
    if wait.socket.fileno() != -1:  # closed meanwhile: whoever closed it woke any waiter already
        trio.lowlevel.notify_closing(wait.socket)


_READ_SWEEPS: PerRun[float, UniformDeadlines[ReadWait]] = PerRun(
    "trellis shared read timeouts", lambda timeout: UniformDeadlines(timeout, _notify_read_timeout),
    task_name=lambda timeout: f"read timeouts of {timeout:g} s", limit=MAX_SWEEPS,
    too_many="distinct read timeouts; a shared read timeout must be a setting, not computed per read")


async def wait_readable_within(sock: Any, timeout: float) -> bool:
    """Wait for ``sock`` to be readable, at most ``timeout`` seconds (one sweep per distinct timeout keeps the
    deadline: no cancel scope); ``False`` when the time ran out, and the socket must then be closed."""
    sweep = _READ_SWEEPS.get(timeout)
    wait = ReadWait(sock)
    sweep.add(wait)
    try:
        await trio.lowlevel.wait_readable(sock)
    except trio.ClosedResourceError:
        if wait.expired:
            return False
        raise
    finally:
        sweep.discard(wait)
    return True
