"""@wakeups and cron jobs: timed sources of automatic turns.

Times come from the runtime's ``now()`` (an aware datetime) and are slept with
``trio.sleep``, so tests and scenario replays run them under virtual time.
Cron schedules are parsed by croniter, never by hand.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

import attrs
import trio
from croniter import croniter

from .._actor import ActorRef, Reply, open_mailbox, serve_mailbox


class ScheduleError(ValueError):
    """A cron schedule or wakeup time that cannot be used."""


def parse_cron(schedule: str) -> str:
    """Validate a 5-field cron expression (or an @-alias such as ``@hourly``)."""
    if not isinstance(schedule, str) or not schedule.strip():
        raise ScheduleError("schedule must be a non-empty cron expression")
    schedule = " ".join(schedule.split())
    if not schedule.startswith("@") and len(schedule.split(" ")) != 5:
        raise ScheduleError(f"schedule {schedule!r} must have 5 fields (minute hour day month weekday)")
    if not croniter.is_valid(schedule):
        raise ScheduleError(f"schedule {schedule!r} is not a valid cron expression")
    return schedule


@attrs.frozen
class Cancel:
    reply: Reply[bool]


class Timer:
    """An actor that fires ``fire()`` at each time ``next_time`` gives, until it returns ``None``; a ``fire``
    that returns an awaitable (it writes its record durably first) is awaited before the next time is taken."""

    def __init__(self, task_id: str, now: Callable[[], datetime], next_time: Callable[[datetime], datetime | None],
                 fire: Callable[[], Awaitable[None] | None], *, after: datetime | None = None) -> None:
        self.task_id = task_id
        self._after = after  # a restored timer counts from its last fire (or creation), not from now
        self._now = now
        self._next_time = next_time
        self._fire = fire
        self._scope = trio.CancelScope()
        self.cancelled = False

    async def run(self, *, task_status: trio.TaskStatus[ActorRef[Cancel]] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"timer:{self.task_id}", 4)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_mailbox, inbox, self._handle)
            task_status.started(ref)
            with self._scope:
                after = self._after or self._now()
                while (when := self._next_time(after)) is not None:
                    await trio.sleep(max(0.0, (when - self._now()).total_seconds()))
                    fired = self._fire()
                    if fired is not None:
                        await fired
                    # From now, not from ``when``: times missed while no daemon ran (a restored timer) fire
                    # once, not once each.
                    after = max(when, self._now())
            nursery.cancel_scope.cancel()

    def _handle(self, message: Cancel) -> None:
        match message:
            case Cancel(reply):
                self.cancelled = True
                self._scope.cancel()
                reply.send(True)


def once_at(when: datetime) -> Callable[[datetime], datetime | None]:
    fired = False

    def next_time(_: datetime) -> datetime | None:
        nonlocal fired
        if fired:
            return None
        fired = True
        return when

    return next_time


def cron_times(schedule: str, recurring: bool) -> Callable[[datetime], datetime | None]:
    fired = False

    def next_time(after: datetime) -> datetime | None:
        nonlocal fired
        if fired and not recurring:
            return None
        fired = True
        return croniter(schedule, after).get_next(datetime)

    return next_time
