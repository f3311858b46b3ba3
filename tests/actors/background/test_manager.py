"""The per-session BackgroundManager (actors/background/manager.py) with real shells and virtual-time timers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.background import registry as reg_module
from actors.background.automatic import AutomaticItem
from actors.background.manager import BackgroundManager
from actors.ids import CountingIds
from tests.processes import alive

BASE = datetime(2025, 3, 1, 0, 0, 30, tzinfo=timezone.utc)


def virtual_now() -> datetime:
    return BASE + timedelta(seconds=trio.current_time())


class Harness:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.wakes: list[float] = []
        self.manager = BackgroundManager("sess-1", CountingIds(), publish=self.publish, wake=self.wake,
                                         now=virtual_now)

    def publish(self, name: str, data: dict[str, Any]) -> None:
        self.events.append((name, data))

    def wake(self) -> None:
        self.wakes.append(trio.current_time())

    def task_events(self, task_id: str) -> list[dict[str, Any]]:
        return [d for n, d in self.events if n == "background_task" and d.get("taskId") == task_id]

    def notifications(self, task_id: str) -> list[AutomaticItem]:
        return [i for i in self.manager.queue.items if i.is_notification and i.task_id == task_id]


@asynccontextmanager
async def open_harness() -> AsyncIterator[Harness]:
    h = Harness()
    async with trio.open_nursery() as nursery:
        await nursery.start(h.manager.run)
        yield h
        nursery.cancel_scope.cancel()


async def wait_until(predicate: Callable[[], bool], step: float = 0.01) -> None:
    while not predicate():
        await trio.sleep(step)


# ------------------------------------------------------------------ shells


async def test_shell_events_started_output_finished(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_harness() as h:
            item = await h.manager.start_shell("echo hello; echo world; exit 2", str(tmp_path))
            assert item.kind == "shell" and item.task_id.startswith("shell-")
            await wait_until(lambda: not item.live)
    events = h.task_events(item.task_id)
    statuses = [e["status"] for e in events]
    assert statuses[0] == "started"
    assert statuses[-1] == "finished"
    assert set(statuses[1:-1]) == {"output"}
    assert "".join(e["text"] for e in events if e["status"] == "output") == "hello\nworld\n"
    finished = events[-1]
    assert finished["exitCode"] == 2 and finished["state"] == "failed"
    assert finished["kind"] == "shell" and finished["sessionId"] == "sess-1"
    assert item.exit_code == 2 and item.state == "failed"


async def test_shell_runs_in_the_working_directory(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_harness() as h:
            item = await h.manager.start_shell("pwd", str(tmp_path))
            await wait_until(lambda: not item.live)
            read = h.manager.read_output(item.task_id)
    assert read is not None
    assert read[1].strip() == str(tmp_path)
    assert item.state == "completed" and item.exit_code == 0


async def test_finished_shell_posts_exactly_one_notification(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_harness() as h:
            item = await h.manager.start_shell("exit 3", str(tmp_path))
            await wait_until(lambda: not item.live)
            await trio.sleep(0.1)
            notes = h.notifications(item.task_id)
            assert len(notes) == 1
            assert len(h.manager.queue) == 1
            assert len(h.wakes) == 1
    text = notes[0].prompt_text()
    assert item.task_id in text and "exit code 3" in text
    assert notes[0].kind == "shell" and notes[0].source == "notification"


async def test_killed_shell_posts_was_killed_and_leaves_no_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    command = f"sleep 30 & echo $! > {pidfile}; echo $$ >> {pidfile}; wait"
    with trio.fail_after(5):
        async with open_harness() as h:
            item = await h.manager.start_shell(command, str(tmp_path))
            await wait_until(lambda: pidfile.exists() and len(pidfile.read_text().split()) == 2)
            pids = [int(p) for p in pidfile.read_text().split()]
            assert all(alive(p) for p in pids)
            assert await h.manager.kill(item.task_id)
            await wait_until(lambda: not item.live)
            await wait_until(lambda: not any(alive(p) for p in pids))
            assert not await h.manager.kill(item.task_id)  # already gone
    assert item.state == "killed"
    notes = h.notifications(item.task_id)
    assert len(notes) == 1 and "was killed" in notes[0].text and item.task_id in notes[0].text
    assert h.task_events(item.task_id)[-1]["state"] == "killed"


async def test_closing_the_manager_kills_its_shells(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with trio.fail_after(5):
        async with open_harness() as h:
            await h.manager.start_shell(f"echo $$ > {pidfile}; exec sleep 30", str(tmp_path))
            await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
            pid = int(pidfile.read_text())
            assert alive(pid)
        await wait_until(lambda: not alive(pid))


async def test_finished_shells_are_not_kept_without_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry forgets finished shells beyond its bound; their output buffers must go too."""
    monkeypatch.setattr(reg_module, "FINISHED_KEPT", 2)
    with trio.fail_after(5):
        async with open_harness() as h:
            items = []
            for _ in range(6):
                item = await h.manager.start_shell("true", str(tmp_path))
                items.append(item)
                await wait_until(lambda: not item.live)
            remembered = [i for i in items if h.manager.registry.get(i.task_id) is not None]
            assert len(remembered) <= 3
            assert h.manager.read_output(items[0].task_id) is None
            # what the manager holds per shell (each with up to 4 MiB of output) follows the registry's bound
            assert len(h.manager._shells) <= len(remembered)


# ------------------------------------------------------------------ monitors


async def test_monitor_following_a_shell_receives_its_lines(tmp_path: Path) -> None:
    gate = tmp_path / "go"
    command = f"while [ ! -e {gate} ]; do sleep 0.01; done; echo one; echo two; sleep 0.3; echo three"
    with trio.fail_after(5):
        async with open_harness() as h:
            shell = await h.manager.start_shell(command, str(tmp_path))
            mon = await h.manager.start_monitor(command=None, follow=shell.task_id, cwd=str(tmp_path))
            assert mon.kind == "monitor" and mon.live
            gate.touch()
            await wait_until(lambda: not mon.live)
    assert mon.state == "completed"
    notes = h.notifications(mon.task_id)
    assert len(notes) == 1  # the monitor's batches merge into its queued notification
    lines = notes[0].text.split("\n")
    assert lines[:3] == ["one", "two", "three"]
    assert lines[-1] == f"[monitor {mon.task_id}] stream ended (the command exited)."
    outputs = [e["text"] for e in h.task_events(mon.task_id) if e["status"] == "output"]
    assert outputs[0] == "one\ntwo"  # a burst is one delivery
    assert sum(1 for e in h.task_events(mon.task_id) if e["status"] == "finished") == 1


async def test_monitor_refuses_to_follow_what_is_not_a_running_shell(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_harness() as h:
            with pytest.raises(LookupError):
                await h.manager.start_monitor(command=None, follow="shell-404", cwd=str(tmp_path))
            done = await h.manager.start_shell("true", str(tmp_path))
            await wait_until(lambda: not done.live)
            with pytest.raises(LookupError):
                await h.manager.start_monitor(command=None, follow=done.task_id, cwd=str(tmp_path))
            assert h.manager.registry.live("monitor") == []


async def test_monitor_of_a_command_delivers_its_output(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_harness() as h:
            mon = await h.manager.start_monitor(command="echo alpha; echo beta", follow=None, cwd=str(tmp_path))
            await wait_until(lambda: not mon.live)
    text = h.notifications(mon.task_id)[0].text
    assert text.startswith("alpha\nbeta\n")
    assert text.endswith("stream ended (the command exited).")


async def test_stopping_a_command_monitor_ends_its_command(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with trio.fail_after(5):
        async with open_harness() as h:
            mon = await h.manager.start_monitor(command=f"echo $$ > {pidfile}; exec sleep 30", follow=None,
                                                cwd=str(tmp_path))
            await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
            pid = int(pidfile.read_text())
            assert await h.manager.kill(mon.task_id)
            await wait_until(lambda: not mon.live)
            assert "stream ended (stopped)" in h.notifications(mon.task_id)[0].text
            with trio.move_on_after(1.5):
                await wait_until(lambda: not alive(pid))
            still_running = alive(pid)
    assert not still_running, "the monitored command outlived its stopped monitor"


# ------------------------------------------------------------------ wakeups and cron


async def test_wakeup_fires_at_the_right_virtual_time(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(10_000):
        async with open_harness() as h:
            start = trio.current_time()
            item = await h.manager.schedule_wakeup(delay=90, at=None, note="check the deploy")
            assert item.kind == "wakeup" and item.state == "scheduled"
            assert item.task_id in h.manager.snapshot()
            await trio.sleep(89)
            assert len(h.manager.queue) == 0
            await trio.sleep(2)
            queued = h.manager.queue.items
            assert h.wakes == [pytest.approx(start + 90)]
            assert item.state == "fired"
            at_event = h.task_events(item.task_id)[0]
    assert len(queued) == 1
    assert queued[0].source == "wakeup" and queued[0].task_id == item.task_id
    assert "check the deploy" in queued[0].prompt_text()
    assert at_event["status"] == "started"
    assert datetime.fromisoformat(at_event["at"]) == BASE + timedelta(seconds=start + 90)


async def test_wakeup_at_an_absolute_time(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(10_000):
        async with open_harness() as h:
            start = trio.current_time()
            when = virtual_now() + timedelta(minutes=10)
            await h.manager.schedule_wakeup(delay=None, at=when, note="ten minutes")
            await trio.sleep(3600)
    assert h.wakes == [pytest.approx(start + 600)]


async def test_recurring_cron_fires_coalesce_into_one_queued_item(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(100_000):
        async with open_harness() as h:
            start = trio.current_time()  # 00:00:30
            item = await h.manager.create_cron("* * * * *", "poll the queue", recurring=True)
            await trio.sleep(25 * 60)  # 00:25:30: fires at 00:01 ... 00:25
            queued = h.manager.queue.items
            fires = [e for e in h.task_events(item.task_id) if e["status"] == "output"]
            assert item.live
    assert len(fires) == 25
    assert len(queued) == 1
    assert queued[0].source == "cron" and queued[0].task_id == item.task_id
    assert queued[0].coalesced == 24
    assert "fired 25 times" in queued[0].prompt_text()
    assert h.wakes[0] == pytest.approx(start + 30)


async def test_kill_cron_removes_its_queued_items(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(100_000):
        async with open_harness() as h:
            item = await h.manager.create_cron("*/2 * * * *", "tick", recurring=True)
            await trio.sleep(300)
            assert h.manager.queue.queued_task_ids() == {item.task_id}
            assert await h.manager.kill(item.task_id)
            assert item.state == "cancelled"
            assert len(h.manager.queue) == 0
            await trio.sleep(3600)
            assert len(h.manager.queue) == 0
            assert h.task_events(item.task_id)[-1]["status"] == "finished"


async def test_snapshot_has_live_shells_and_queued_notifications(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_harness() as h:
            running = await h.manager.start_shell("sleep 30", str(tmp_path))
            done = await h.manager.start_shell("true", str(tmp_path))
            await wait_until(lambda: not done.live and bool(h.notifications(done.task_id)))
            wakeup = await h.manager.schedule_wakeup(delay=3600, at=None, note="later")
            base = h.manager.snapshot()
            status = {s["taskId"]: s for s in h.manager.status()}
            # a notification taken for a turn is no longer queued
            h.manager.queue.take(h.notifications(done.task_id)[0])
            after = h.manager.snapshot()
    assert base.ids == {running.task_id, done.task_id, wakeup.task_id}
    assert after.ids == {running.task_id, wakeup.task_id}
    assert status[running.task_id]["status"] == "running"
    started, ended = status[done.task_id].pop("startedAt"), status[done.task_id].pop("endedAt")
    assert status[done.task_id] == {"taskId": done.task_id, "kind": "shell", "status": "completed",
                                    "label": "true", "exitCode": 0}
    assert status[running.task_id]["startedAt"] <= started <= ended and "endedAt" not in status[running.task_id]
    assert status[wakeup.task_id]["status"] == "scheduled" and "startedAt" not in status[wakeup.task_id]
