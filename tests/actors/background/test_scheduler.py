"""Wakeups and cron (actors/background/scheduler.py): schedule parsing, and Timer under virtual time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import trio

from actors.background.scheduler import Cancel, ScheduleError, Timer, cron_times, once_at, parse_cron

BASE = datetime(2025, 3, 1, 0, 3, 0, tzinfo=timezone.utc)  # 00:03 UTC


def virtual_now() -> datetime:
    return BASE + timedelta(seconds=trio.current_time())


# ------------------------------------------------------------------ parse_cron


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "0 9 * * 1-5", "30 2 1 * *", "@hourly", "@daily", "@weekly"])
def test_parse_cron_accepts(schedule: str) -> None:
    assert parse_cron(schedule) == schedule


def test_parse_cron_normalizes_whitespace() -> None:
    assert parse_cron("  */5   *  * *\t* ") == "*/5 * * * *"


@pytest.mark.parametrize("schedule, message", [
    ("* * * *", "5 fields"),
    ("0 * * * * *", "5 fields"),
    ("every five minutes", "5 fields"),
    ("a b c d e", "not a valid cron expression"),
    ("61 * * * *", "not a valid cron expression"),
    ("@never", "not a valid cron expression"),
    ("", "non-empty"),
    ("   ", "non-empty"),
    (None, "non-empty"),
    (5, "non-empty"),
])
def test_parse_cron_refuses(schedule: object, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        parse_cron(schedule)  # type: ignore[arg-type]


def test_schedule_error_is_a_value_error() -> None:
    assert issubclass(ScheduleError, ValueError)


# ------------------------------------------------------------------ Timer


async def test_once_at_fires_once_at_the_right_time(autojump_clock: trio.abc.Clock) -> None:
    fires: list[float] = []
    start = trio.current_time()
    timer = Timer("wakeup-1", virtual_now, once_at(virtual_now() + timedelta(seconds=90)),
                  lambda: fires.append(trio.current_time()))
    with trio.fail_after(10_000):
        await timer.run()  # ends by itself after its one fire
    assert fires == [pytest.approx(start + 90)]
    assert not timer.cancelled


async def test_once_at_in_the_past_fires_at_once(autojump_clock: trio.abc.Clock) -> None:
    fires: list[float] = []
    start = trio.current_time()
    timer = Timer("wakeup-1", virtual_now, once_at(virtual_now() - timedelta(hours=1)),
                  lambda: fires.append(trio.current_time()))
    with trio.fail_after(10):
        await timer.run()
    assert fires == [pytest.approx(start)]


async def test_recurring_cron_fires_on_each_matching_minute(autojump_clock: trio.abc.Clock) -> None:
    fires: list[datetime] = []
    times: list[float] = []

    def fire() -> None:
        times.append(trio.current_time())
        fires.append(virtual_now())

    start = trio.current_time()  # 00:03
    timer = Timer("cron-1", virtual_now, cron_times("*/5 * * * *", recurring=True), fire)
    with trio.fail_after(10_000):
        async with trio.open_nursery() as nursery:
            ref = await nursery.start(timer.run)
            await trio.sleep(13 * 60)  # until 00:16
            assert await ref.ask(Cancel) is True
    assert times == [pytest.approx(start + s) for s in (120, 420, 720)]
    assert [(f.hour, f.minute) for f in fires] == [(0, 5), (0, 10), (0, 15)]
    assert timer.cancelled


async def test_non_recurring_cron_fires_once(autojump_clock: trio.abc.Clock) -> None:
    times: list[float] = []
    start = trio.current_time()
    timer = Timer("cron-1", virtual_now, cron_times("*/5 * * * *", recurring=False),
                  lambda: times.append(trio.current_time()))
    with trio.fail_after(10_000):
        await timer.run()  # ends by itself
        await trio.sleep(3600)
    assert times == [pytest.approx(start + 120)]


async def test_cancel_stops_a_timer_before_it_fires(autojump_clock: trio.abc.Clock) -> None:
    times: list[float] = []
    timer = Timer("cron-1", virtual_now, cron_times("* * * * *", recurring=True),
                  lambda: times.append(trio.current_time()))
    with trio.fail_after(10_000):
        async with trio.open_nursery() as nursery:
            ref = await nursery.start(timer.run)
            await trio.sleep(30)  # 00:03:30, before the first fire at 00:04
            assert await ref.ask(Cancel) is True
        # run() returned: the nursery closed without being cancelled from outside
        await trio.sleep(3600)
    assert times == []
    assert timer.cancelled


def test_cron_times_steps() -> None:
    step = cron_times("0 * * * *", recurring=True)
    assert step(BASE) == BASE.replace(hour=1, minute=0)
    assert step(BASE.replace(hour=1, minute=0)) == BASE.replace(hour=2, minute=0)
    once = cron_times("0 * * * *", recurring=False)
    assert once(BASE) == BASE.replace(hour=1, minute=0)
    assert once(BASE.replace(hour=1, minute=0)) is None
    at = once_at(BASE)
    assert at(BASE - timedelta(days=1)) == BASE
    assert at(BASE) is None
