"""Monitors (actors/background/monitor.py): line batching, flood control, and the actor under virtual time."""

from __future__ import annotations

import pytest
import trio

from actors.background.monitor import FLOOD_LINES, FLOOD_STOP, MERGE_WINDOW, LineBatcher, Monitor, Stop


class FakeNow:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# ------------------------------------------------------------------ LineBatcher


def test_lines_split_across_chunk_boundaries() -> None:
    b = LineBatcher(FakeNow())
    b.feed("al")
    assert b.take() is None
    b.feed("pha\nbe")
    b.feed("ta\ngamma\n\ndel")
    assert b.take() == "alpha\nbeta\ngamma\n"  # the empty line is a line
    assert b.pending == []
    b.feed("ta")
    assert b.take() is None  # a partial line waits
    b.finish()
    assert b.take() == "delta"
    b.finish()
    assert b.take() is None  # nothing left over, nothing repeated


def test_flood_suppression_and_its_start() -> None:
    now = FakeNow()
    now.t = 5.0
    b = LineBatcher(now)
    b.feed("".join(f"{n}\n" for n in range(FLOOD_LINES)))
    assert b.flood_since is None
    now.t = 5.5
    b.feed("".join(f"x{n}\n" for n in range(30)))
    assert b.flood_since == 5.0  # the window the flood started in
    batch = b.take()
    assert batch is not None
    lines = batch.split("\n")
    assert lines[:FLOOD_LINES] == [str(n) for n in range(FLOOD_LINES)]
    assert lines[-1] == "[30 line(s) suppressed: output flood]"
    assert len(lines) == FLOOD_LINES + 1
    assert b.take() is None  # the suppressed count was reported once

    # the next one-second window lets lines through again; the flood is still remembered
    now.t = 6.1
    b.feed("after\n")
    assert b.take() == "after"
    assert b.flood_since == 5.0
    # a window without a flood ends it
    now.t = 7.2
    b.feed("calm\n")
    assert b.flood_since is None
    assert b.take() == "calm"


def test_only_suppressed_lines_still_report() -> None:
    now = FakeNow()
    b = LineBatcher(now)
    b.feed("a\n" * FLOOD_LINES)
    b.take()
    b.feed("b\n" * 7)
    assert b.take() == "[7 line(s) suppressed: output flood]"


def test_flood_after_a_quiet_gap_is_a_new_flood() -> None:
    """Two one-second floods forty seconds apart are not continuous flooding."""
    now = FakeNow()
    b = LineBatcher(now)
    b.feed("a\n" * (FLOOD_LINES + 50))
    assert b.flood_since == 0.0
    b.take()
    now.t = 40.0  # nothing at all for forty seconds
    b.feed("b\n" * (FLOOD_LINES + 50))
    assert b.flood_since == 40.0


# ------------------------------------------------------------------ the Monitor actor

Delivery = tuple[float, str, bool]


def make_monitor(timeout: float = 1000.0) -> tuple[Monitor, list[Delivery]]:
    deliveries: list[Delivery] = []
    monitor = Monitor("monitor-1", timeout=timeout,
                      deliver=lambda text, final: deliveries.append((trio.current_time(), text, final)))
    return monitor, deliveries


async def test_burst_merges_and_source_end_is_said_once(autojump_clock: trio.abc.Clock) -> None:
    monitor, deliveries = make_monitor()
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(monitor.run)
            t0 = trio.current_time()
            monitor.feed("a\n")
            await trio.sleep(MERGE_WINDOW / 4)
            monitor.feed("b\nc")
            await trio.sleep(MERGE_WINDOW / 4)
            monitor.feed("\n")
            await trio.sleep(1)
            assert deliveries == [(pytest.approx(t0 + MERGE_WINDOW), "a\nb\nc", False)]
            monitor.feed("d\npartial")
            await trio.sleep(1)
            assert [d[1] for d in deliveries] == ["a\nb\nc", "d"]
            monitor.source_ended()
        # the actor ended by itself once the source ended
    texts = [d[1] for d in deliveries]
    assert texts == ["a\nb\nc", "d", "partial", "[monitor monitor-1] stream ended (the command exited)."]
    assert [d[2] for d in deliveries] == [False, False, False, True]
    assert monitor.end_reason == "the command exited"


async def test_stop_message_ends_it_with_one_notice(autojump_clock: trio.abc.Clock) -> None:
    monitor, deliveries = make_monitor()
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            ref = await nursery.start(monitor.run)
            await trio.sleep(5)
            monitor.feed("last words\n")
            assert await ref.ask(Stop) is True
    assert [d[1:] for d in deliveries] == [("last words", False),
                                          ("[monitor monitor-1] stream ended (stopped).", True)]
    assert monitor.end_reason == "stopped"
    monitor.source_ended()  # a late end of the source says nothing more
    assert sum(1 for d in deliveries if d[2]) == 1


async def test_timeout_ends_it(autojump_clock: trio.abc.Clock) -> None:
    monitor, deliveries = make_monitor(timeout=7)
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            await nursery.start(monitor.run)
            await trio.sleep(2)
            monitor.feed("x\n")
    assert deliveries[0][1:] == ("x", False)
    end_at, text, final = deliveries[-1]
    assert final and text == "[monitor monitor-1] stream ended (timed out after 7 s)."
    assert end_at == pytest.approx(start + 7)
    assert len(deliveries) == 2


async def test_continuous_flood_stops_it(autojump_clock: trio.abc.Clock) -> None:
    monitor, deliveries = make_monitor()

    async def flood() -> None:
        n = 0
        while True:
            monitor.feed("".join(f"line {n + k}\n" for k in range(50)))
            n += 50
            await trio.sleep(0.1)  # 500 lines a second

    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            nursery.start_soon(flood)
            await monitor.run()
            nursery.cancel_scope.cancel()
    end_at, text, final = deliveries[-1]
    assert final and "output flood" in text and monitor.end_reason is not None
    assert "output flood" in monitor.end_reason
    assert start + FLOOD_STOP <= end_at <= start + FLOOD_STOP + 1.5
    assert any("line(s) suppressed: output flood" in d[1] for d in deliveries[:-1])
    assert sum(1 for d in deliveries if d[2]) == 1


async def test_short_floods_far_apart_do_not_stop_it(autojump_clock: trio.abc.Clock) -> None:
    monitor, deliveries = make_monitor()
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            await nursery.start(monitor.run)
            monitor.feed("a\n" * (FLOOD_LINES + 20))
            await trio.sleep(FLOOD_STOP + 10)  # quiet for longer than FLOOD_STOP
            monitor.feed("b\n" * (FLOOD_LINES + 20))  # one burst, not thirty seconds of flooding
            await trio.sleep(2)
            reason_after_second_burst = monitor.end_reason
            monitor.source_ended()
    assert reason_after_second_burst is None, deliveries[-1]
    assert monitor.end_reason == "the command exited"
    assert sum(1 for d in deliveries if d[2]) == 1
