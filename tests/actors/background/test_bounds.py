"""Bounds on what background work hands on: output events, monitor lines, notifications."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

import trio

from actors.background.manager import NOTIFICATION_TEXT_LIMIT, OUTPUT_EVENT_LIMIT, BackgroundManager
from actors.background.monitor import MAX_LINE, LineBatcher
from actors.background.registry import BackgroundItem
from actors.ids import CountingIds


class Harness:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.manager = BackgroundManager("sess-1", CountingIds(), publish=self.publish, wake=lambda: None,
                                         now=lambda: datetime(2026, 1, 1, tzinfo=timezone.utc))

    def publish(self, name: str, data: dict[str, Any]) -> None:
        if name == "background_task":
            self.events.append(data)

    def outputs(self, task_id: str) -> list[dict[str, Any]]:
        return [d for d in self.events if d["taskId"] == task_id and d["status"] == "output"]

    def notifications(self, task_id: str) -> list[str]:
        return [i.text for i in self.manager.queue.items if i.is_notification and i.task_id == task_id]


@asynccontextmanager
async def open_harness() -> AsyncIterator[Harness]:
    h = Harness()
    async with trio.open_nursery() as nursery:
        await nursery.start(h.manager.run)
        yield h
        nursery.cancel_scope.cancel()


async def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_output_events_of_a_shell_printing_one_huge_line_are_bounded(tmp_path):
    size = 5000
    with trio.fail_after(20):
        async with open_harness() as h:
            item = await h.manager.start_shell(f"head -c {size} /dev/zero | tr '\\0' x; echo", str(tmp_path))
            await wait_until(lambda: not item.live)
            outputs = h.outputs(item.task_id)
            full = h.manager.read_output(item.task_id)
    assert item.state == "completed"
    assert outputs and all(len(o["text"]) <= OUTPUT_EVENT_LIMIT for o in outputs)
    assert any(o.get("truncated", 0) > 0 for o in outputs)
    # What the events cut is counted, and shell_output still has every character.
    assert sum(len(o["text"]) + o.get("truncated", 0) for o in outputs) == size + 1
    assert full is not None and full[1] == "x" * size + "\n"


def test_a_line_without_newline_longer_than_the_limit_is_delivered_cut():
    batcher = LineBatcher(lambda: 0.0)
    batcher.feed("y" * (MAX_LINE + 5000))
    assert batcher.take() == "y" * MAX_LINE + " [5000 characters cut]"
    batcher.feed("tail\n")  # what came after the cut starts a fresh line
    assert batcher.take() == "tail"


async def test_a_monitor_fed_one_endless_line_delivers_it_cut_while_the_command_runs(tmp_path):
    with trio.fail_after(20):
        async with open_harness() as h:
            item = await h.manager.start_monitor(
                command="head -c 20000 /dev/zero | tr '\\0' y; sleep 30", follow=None, cwd=str(tmp_path))
            await wait_until(lambda: h.notifications(item.task_id))  # long before the command ends
            text = h.notifications(item.task_id)[0]
            outputs = h.outputs(item.task_id)
            assert item.live
    lines = text.split("\n")
    assert lines[0].startswith("y" * MAX_LINE + " [") and lines[0].endswith(" characters cut]")
    assert all(len(line) <= MAX_LINE + 40 for line in lines)
    assert all(len(o["text"]) <= OUTPUT_EVENT_LIMIT for o in outputs)


async def test_a_first_notification_longer_than_the_limit_is_cut():
    h = Harness()
    for task_id, merge in (("shell-x", False), ("monitor-x", True)):
        item = h.manager.registry.add(BackgroundItem(task_id, task_id.split("-")[0], "label"))  # type: ignore[arg-type]
        h.manager.notify(item, "z" * (NOTIFICATION_TEXT_LIMIT + 12000), merge=merge)
        assert h.notifications(task_id) == ["z" * NOTIFICATION_TEXT_LIMIT + "\n[12000 characters cut]"]
