"""@wakeups and cron jobs: timed sources of automatic turns.

Times come from the runtime's ``now()`` (an aware datetime) and are slept with
``trio.sleep``, so tests and scenario replays run them under virtual time.
Cron schedules are parsed by croniter, never by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

import attrs
import trio
from croniter import croniter

from .._actor import ActorRef, Reply, open_mailbox, serve_mailbox

log = logging.getLogger("trellis.background")


class ScheduleError(ValueError):
    """A cron schedule or wakeup time that cannot be used."""


class NeverFires(ScheduleError):
    """A well-formed cron schedule that no date matches (from a time on)."""


def parse_cron(schedule: str, after: datetime | None = None) -> str:
    """Validate a 5-field cron expression (or an @-alias such as ``@hourly``) that fires at some time after
    ``after`` (default: now)."""
    if not isinstance(schedule, str) or not schedule.strip():
        raise ScheduleError("schedule must be a non-empty cron expression")
    schedule = " ".join(schedule.split())
    if not schedule.startswith("@") and len(schedule.split(" ")) != 5:
        raise ScheduleError(f"schedule {schedule!r} must have 5 fields (minute hour day month weekday)")
    if not croniter.is_valid(schedule):
        raise ScheduleError(f"schedule {schedule!r} is not a valid cron expression")
    # is_valid checks the syntax only: a date that never comes ("0 0 31 2 *", February 31st) passes it, and
    # would fail the timer at its first next time.
    try:
        croniter(schedule, after or datetime.now(timezone.utc)).get_next(datetime)
    except (ValueError, OverflowError) as exc:  # CroniterBadDateError is a ValueError
        raise NeverFires(f"schedule {schedule!r} never fires: no date matches it ({exc})") from None
    return schedule


@attrs.frozen
class Cancel:
    reply: Reply[bool]


class Timer:
    """An actor that fires ``fire()`` at each time ``next_time`` gives, until it returns ``None``; a ``fire``
    that returns an awaitable (it writes its record durably first) is awaited before the next time is taken.

    A ``next_time`` that raises ends the timer, never its session: the error is logged, kept in ``failed``,
    and given to ``on_failure`` (awaited when it returns an awaitable)."""

    def __init__(self, task_id: str, now: Callable[[], datetime], next_time: Callable[[datetime], datetime | None],
                 fire: Callable[[], Awaitable[None] | None], *, after: datetime | None = None,
                 on_failure: Callable[[Exception], Awaitable[None] | None] | None = None) -> None:
        self.task_id = task_id
        self._after = after  # a restored timer counts from its last fire (or creation), not from now
        self._now = now
        self._next_time = next_time
        self._fire = fire
        self._on_failure = on_failure
        self._scope = trio.CancelScope()
        self.cancelled = False
        self.failed: Exception | None = None

    async def run(self, *, task_status: trio.TaskStatus[ActorRef[Cancel]] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"timer:{self.task_id}", 4)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_mailbox, inbox, self._handle)
            task_status.started(ref)
            with self._scope:
                after = self._after or self._now()
                while (when := self._next_or_none(after)) is not None:
                    await trio.sleep(max(0.0, (when - self._now()).total_seconds()))
                    fired = self._fire()
                    if fired is not None:
                        await fired
                    # From now, not from ``when``: times missed while no daemon ran (a restored timer) fire
                    # once, not once each.
                    after = max(when, self._now())
            if self.failed is not None and not self.cancelled and self._on_failure is not None:
                ended = self._on_failure(self.failed)
                if ended is not None:
                    await ended
            nursery.cancel_scope.cancel()

    def _next_or_none(self, after: datetime) -> datetime | None:
        """The next time, or ``None`` (the end) when there is none or it cannot be computed: croniter raises for
        a date that never comes (a journal written before parse_cron refused those) or one past year 9999."""
        try:
            return self._next_time(after)
        except Exception as exc:
            log.error("timer %s ended: its next time after %s cannot be computed: %s: %s", self.task_id,
                      after.isoformat(), type(exc).__name__, exc)
            self.failed = exc
            return None

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
