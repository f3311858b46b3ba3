"""@wakeups and cron jobs written to the session's journal, and brought back by a restart (or a takeover)."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import trio

from actors.background.manager import BackgroundManager
from actors.ids import CountingIds
from actors.storage import replay
from actors.storage.local import LocalStore
from actors.storage.writer import JournalWriter

BASE = datetime(2025, 3, 1, 0, 0, 30, tzinfo=timezone.utc)


class Clock:
    """Wall-clock time under virtual time, which a test can move on (the daemon was down meanwhile)."""

    def __init__(self) -> None:
        self.skipped = timedelta()

    def now(self) -> datetime:
        return BASE + self.skipped + timedelta(seconds=trio.current_time())


class Harness:
    def __init__(self, clock: Clock, records: list[dict[str, Any]], *, fail: bool = False) -> None:
        self.records = records
        self.fail = fail
        self.manager = BackgroundManager("sess-1", CountingIds(), publish=lambda *_: None, wake=lambda: None,
                                         now=clock.now, journal=self.append)

    def append(self, record: dict[str, Any]) -> None:
        if self.fail:
            raise OSError("session sess-1: node a no longer holds its lease")
        self.records.append(record)

    def fires(self, task_id: str) -> int:
        return sum(1 for r in self.records if r["op"] == "timer_fired" and r["taskId"] == task_id)


@asynccontextmanager
async def running(h: Harness) -> AsyncIterator[Harness]:
    async with trio.open_nursery() as nursery:
        await nursery.start(h.manager.run)
        yield h
        nursery.cancel_scope.cancel()


async def test_a_cron_job_is_written_down_and_each_fire_before_it_is_queued(autojump_clock: trio.abc.Clock) -> None:
    records: list[dict[str, Any]] = []
    with trio.fail_after(10_000):
        async with running(Harness(Clock(), records)) as h:
            item = await h.manager.create_cron("* * * * *", "poll", recurring=True)
            assert records[0] | {"createdAt": None} == {
                "op": "timer", "taskId": item.task_id, "kind": "cron", "text": "poll", "schedule": "* * * * *",
                "recurring": True, "createdAt": None}
            await trio.sleep(140)  # 00:02:50: fired at 00:01 and 00:02
            assert h.fires(item.task_id) == 2
            assert len(h.manager.queue) == 1  # queued after it was written
    left = replay(records).timers
    assert [(t["taskId"], t["lastFired"]) for t in left] == [(item.task_id, "2025-03-01T00:02:00+00:00")]


async def test_a_restart_brings_a_cron_job_back_and_a_missed_time_fires_once(autojump_clock: trio.abc.Clock) -> None:
    records: list[dict[str, Any]] = []
    clock = Clock()
    with trio.fail_after(100_000):
        async with running(Harness(clock, records)) as h:
            item = await h.manager.create_cron("*/5 * * * *", "report", recurring=True)
            await trio.sleep(5 * 60)  # fired at 00:05
        assert h.fires(item.task_id) == 1
        clock.skipped = timedelta(minutes=22)  # down from about 00:05:30 to 00:27:30: four times missed
        timers = replay(records).timers
        async with running(Harness(clock, records)) as again:
            assert await again.manager.restore_timers(timers) == 1
            restored = again.manager.registry.get(item.task_id)
            assert restored is not None and restored.live
            await trio.sleep(1)
            assert again.fires(item.task_id) == 2  # the missed ones: once, at once
            assert len(again.manager.queue) == 1
            await trio.sleep(3 * 60)  # 00:30 is the next one
            assert again.fires(item.task_id) == 3


async def test_a_fired_or_killed_timer_does_not_come_back(autojump_clock: trio.abc.Clock) -> None:
    records: list[dict[str, Any]] = []
    with trio.fail_after(10_000):
        async with running(Harness(Clock(), records)) as h:
            fired = await h.manager.schedule_wakeup(delay=10, at=None, note="soon")
            killed = await h.manager.create_cron("* * * * *", "tick", recurring=True)
            kept = await h.manager.schedule_wakeup(delay=3600, at=None, note="later")
            await trio.sleep(20)
            assert await h.manager.kill(killed.task_id)
    assert h.fires(fired.task_id) == 1
    assert [t["taskId"] for t in replay(records).timers] == [kept.task_id]
    assert [r["taskId"] for r in records if r["op"] == "timer_ended"] == [killed.task_id]


async def test_a_wakeup_whose_time_passed_while_down_fires_at_once(autojump_clock: trio.abc.Clock) -> None:
    records: list[dict[str, Any]] = []
    clock = Clock()
    with trio.fail_after(10_000):
        async with running(Harness(clock, records)) as h:
            item = await h.manager.schedule_wakeup(delay=600, at=None, note="check")
        clock.skipped = timedelta(hours=1)
        async with running(Harness(clock, records)) as again:
            await again.manager.restore_timers(replay(records).timers)
            await trio.sleep(0.5)
            assert again.fires(item.task_id) == 1
            assert [i.source for i in again.manager.queue.items] == ["wakeup"]
    assert replay(records).timers == []


async def test_a_node_that_cannot_write_the_fire_does_not_fire(autojump_clock: trio.abc.Clock) -> None:
    records: list[dict[str, Any]] = []
    with trio.fail_after(10_000):
        async with running(Harness(Clock(), records)) as h:
            item = await h.manager.create_cron("* * * * *", "tick", recurring=True)
            h.fail = True  # its lease is gone: the next owner fires it
            await trio.sleep(120)
            assert len(h.manager.queue) == 0 and h.fires(item.task_id) == 0


async def test_a_timer_that_cannot_be_written_is_refused(autojump_clock: trio.abc.Clock) -> None:
    import pytest

    from actors.background.scheduler import ScheduleError

    h = Harness(Clock(), [], fail=True)
    async with running(h):
        with pytest.raises(ScheduleError, match="cannot be kept: session sess-1"):
            await h.manager.create_cron("* * * * *", "tick", recurring=True)
        assert list(h.manager.registry) == []  # nothing scheduled that a restart would not know of


class ThreadSyncs:
    """``os.fsync`` noting whether the main thread ran each journal sync; holding the first one a worker thread
    runs while ``hold`` is set, until released."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.on_main: list[bool] = []
        self.hold = False
        self.held = threading.Event()
        self.released = threading.Event()
        self.failing = False  # a worker thread's journal syncs fail

    def __call__(self, fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".journal.jsonl"):
            on_main = threading.current_thread() is threading.main_thread()
            self.on_main.append(on_main)
            if self.hold and not on_main and not self.held.is_set():
                self.held.set()
                assert self.released.wait(10), "never released"
            if self.failing and not on_main:
                raise OSError(5, "Input/output error")
        self.real(fd)


@asynccontextmanager
async def daemon_style(tmp_path, monkeypatch) -> AsyncIterator[tuple[BackgroundManager, ThreadSyncs, LocalStore]]:
    """A manager journalling to a store that syncs in threads (the daemon's), on the real clock."""
    syncs = ThreadSyncs()
    monkeypatch.setattr(os, "fsync", syncs)
    store = LocalStore(tmp_path, sync_in_thread=True)
    journal = JournalWriter(store, "sess-1")
    manager = BackgroundManager("sess-1", CountingIds(), publish=lambda *_: None, wake=lambda: None,
                                now=lambda: datetime.now(timezone.utc), journal=journal.append_then_sync)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            yield manager, syncs, store
            nursery.cancel_scope.cancel()


async def wait_for(condition) -> None:
    while not condition():
        await trio.sleep(0.001)


async def test_in_the_daemon_a_timers_records_sync_off_the_loop_and_count_in_a_snapshot_taken_meanwhile(
        tmp_path, monkeypatch) -> None:
    async with daemon_style(tmp_path, monkeypatch) as (manager, syncs, store):
        syncs.hold = True
        scheduled: list[Any] = []

        async def schedule() -> None:
            scheduled.append(await manager.schedule_wakeup(delay=0.05, at=None, note="soon"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(schedule)
            await wait_for(syncs.held.is_set)  # the loop runs on while the worker thread syncs
            assert scheduled == []  # not announced before it is durable ...
            assert [r["op"] for r in manager.timer_records()] == ["timer"]  # ... but a snapshot now keeps it
            syncs.released.set()
        await wait_for(lambda: manager.queue.items)  # it fires: its record synced before it is queued
    assert scheduled and syncs.on_main == [False, False]  # the timer's record and its fire, both in threads
    assert [r["op"] for r in store.journal_read("sess-1")] == ["timer", "timer_fired"]
    assert manager.timer_records() == []  # fired: gone


async def test_a_wakeup_killed_while_its_fire_is_synced_is_not_queued_and_stays_ended(tmp_path, monkeypatch):
    async with daemon_style(tmp_path, monkeypatch) as (manager, syncs, store):
        item = await manager.schedule_wakeup(delay=0.05, at=None, note="soon")
        syncs.hold = True  # the fire's sync
        await wait_for(syncs.held.is_set)
        assert await manager.kill(item.task_id)
        syncs.released.set()
        await trio.sleep(0.05)
        assert item.state == "cancelled" and not manager.queue.items
    ops = [r["op"] for r in store.journal_read("sess-1")]
    assert ops == ["timer", "timer_fired", "timer_ended"] and replay(store.journal_read("sess-1")).timers == []


async def test_a_fire_whose_record_cannot_be_synced_is_not_queued_and_stays_due(tmp_path, monkeypatch, caplog):
    async with daemon_style(tmp_path, monkeypatch) as (manager, syncs, store):
        item = await manager.schedule_wakeup(delay=0.05, at=None, note="soon")
        [record] = manager.timer_records()
        syncs.failing = True
        await wait_for(lambda: "not fired" in caplog.text)
        await trio.sleep(0.01)
        assert not manager.queue.items and manager.timer_records() == [record]
    # Whatever of it reached the disk, the journal says it is still due, as it was.
    assert [t["taskId"] for t in replay(store.journal_read("sess-1")).timers] == [item.task_id]


async def test_a_timer_whose_record_cannot_be_synced_is_refused_and_ended(tmp_path, monkeypatch):
    from actors.background.scheduler import ScheduleError

    async with daemon_style(tmp_path, monkeypatch) as (manager, syncs, store):
        syncs.failing = True
        with pytest.raises(ScheduleError, match="cannot be kept"):
            await manager.schedule_wakeup(delay=60, at=None, note="later")
        assert manager.timer_records() == []
    assert replay(store.journal_read("sess-1")).timers == []
