"""Bounds on what background work hands on: output events, monitor lines, notifications."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

import trio

from actors.background.manager import NOTIFICATION_TEXT_LIMIT, OUTPUT_EVENT_LIMIT, BackgroundManager
from actors.background.monitor import MAX_LINE, LineBatcher
from actors.background.registry import BackgroundItem
from actors.background.shell import OUTPUT_LIMIT, SESSION_OUTPUT_LIMIT, OutputBudget, OutputBuffer
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


async def test_output_events_are_bounded_in_bytes_too_and_count_what_they_cut_in_characters(tmp_path):
    # The ring keeps thousands of events: 1,024 4-byte characters each held four times what ASCII does.
    size = 5000
    with trio.fail_after(20):
        async with open_harness() as h:
            item = await h.manager.start_shell(f"yes \U0001F600 | tr -d '\\n' | head -c {4 * size}; echo",
                                               str(tmp_path))
            await wait_until(lambda: not item.live)
            outputs = h.outputs(item.task_id)
    assert item.state == "completed"
    assert outputs and all(len(o["text"].encode()) <= OUTPUT_EVENT_LIMIT for o in outputs)
    assert any(o.get("truncated", 0) > 0 for o in outputs)
    assert sum(len(o["text"]) + o.get("truncated", 0) for o in outputs) == size + 1
    assert "\ufffd" not in "".join(o["text"] for o in outputs)  # cut between characters


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


# ----------------------------------------------------------------- shell output: bytes, per shell and per session

EMOJI = "\U0001F600"  # 4 bytes of UTF-8, and 4 bytes a character in a Python str


def test_a_shells_output_is_bounded_in_bytes_and_what_was_dropped_is_counted():
    # Bounded in characters, 4-byte characters cost four times the bound (one model response: ~4 GiB).
    buffer = OutputBuffer()
    written = 0
    for _ in range(8):
        chunk = "ab" + EMOJI * 100_000  # odd offsets: the front is cut inside a character
        buffer.append(chunk)
        written += len(chunk.encode())
    text, lost = buffer.read_new()
    kept = len(text.encode())
    assert kept <= OUTPUT_LIMIT and kept > OUTPUT_LIMIT - 8
    assert lost + kept == written == buffer.total
    assert "\ufffd" not in text and text.endswith(EMOJI)  # cut at a character boundary, the newest kept
    buffer.append("tail")
    assert buffer.read_new() == ("tail", 0)


def test_a_shell_printing_a_few_bytes_at_a_time_holds_its_bytes_not_an_object_per_chunk():
    buffer = OutputBuffer(16 * 1024)
    tracemalloc.start()
    try:
        for _ in range(30_000):
            buffer.append(b"ab".decode())  # a pipe read of two bytes: a new str each time
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 128 * 1024  # a str per chunk: about 500 KiB for 16 KiB of output
    text, lost = buffer.read_new()
    assert (len(text), lost) == (16 * 1024, 60_000 - 16 * 1024)


def test_a_sessions_shells_share_one_budget_the_largest_giving_up_their_oldest_output_first():
    budget = OutputBudget(1000)
    quiet, loud, louder = (OutputBuffer(800, budget) for _ in range(3))
    quiet.append("q" * 100)
    loud.append("l" * 400)
    louder.append("L" * 400)
    assert budget.used == 900
    louder.append("M" * 300)  # 1,200 kept: trimmed to 7/8 of the budget, the two largest to one level
    assert budget.used <= 875 and quiet.read_new() == ("q" * 100, 0)
    loud_text, loud_lost = loud.read_new()
    louder_text, louder_lost = louder.read_new()
    assert len(loud_text) == len(louder_text) and louder_text.endswith("M" * 300)
    assert loud_lost + len(loud_text) == 400 and louder_lost + len(louder_text) == 700
    del loud
    gc.collect()
    assert budget.used == 100 + len(louder_text)  # a freed buffer leaves the budget


async def test_one_sessions_background_shells_keep_at_most_the_session_budget_of_output(tmp_path):
    # The finding: 250 shells in one model response, each printing 4-byte characters, grew the daemon 1.6 GiB.
    shells, each = 24, 3 * 1024 * 1024 - 3  # a whole number of "😀\n" lines
    command = f"yes {EMOJI} | head -c {each}"
    with trio.fail_after(120):
        async with open_harness() as h:
            items = [await h.manager.start_shell(command, str(tmp_path)) for _ in range(shells)]
            await wait_until(lambda: not any(item.live for item in items), timeout=110)
            reads = [h.manager.read_output(item.task_id) for item in items]
            used = h.manager.output_budget.used
    kept = [len(read[1].encode()) for read in reads]
    assert all(item.state == "completed" for item in items)
    assert sum(kept) <= SESSION_OUTPUT_LIMIT and used <= SESSION_OUTPUT_LIMIT
    assert all(0 < k <= OUTPUT_LIMIT for k in kept)
    assert all(read[2] + k == each for read, k in zip(reads, kept))  # what was dropped is counted, to the byte
