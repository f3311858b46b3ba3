"""The event bus in actors/events/bus.py: ids, epoch, ring, replay, slow subscribers, closing."""

from __future__ import annotations

import orjson
import pytest
import trio
import trio.testing

from actors.events import EventBus, Subscription, TooManySubscribers
from actors.wire import Event

TS = 1_719_000_000_000


def drain(sub: Subscription) -> list[Event]:
    """Everything a subscription has ready right now."""
    out = []
    while (event := sub.get_nowait()) is not None:
        out.append(event)
    return out


async def collect(sub: Subscription) -> list[Event]:
    """Iterate a subscription to its end."""
    with trio.fail_after(2):
        return [event async for event in sub]


def publish_n(bus: EventBus, n: int) -> list[Event]:
    return [bus.publish("session_update", {"n": i}, "P") for i in range(n)]


# ----------------------------------------------------------------- ids, epoch, ring


def test_ids_start_at_one_and_rise() -> None:
    bus = EventBus()
    assert bus.last_event_id == 0
    events = publish_n(bus, 5)
    assert [e.id for e in events] == [1, 2, 3, 4, 5]
    assert bus.last_event_id == 5
    assert [e.id for e in bus.ring] == [1, 2, 3, 4, 5]


def test_epoch_differs_between_buses() -> None:
    a, b = EventBus(), EventBus()
    assert isinstance(a.epoch, str) and a.epoch
    assert a.epoch != b.epoch
    assert EventBus(epoch="fixed").epoch == "fixed"


def test_ring_keeps_the_newest_n() -> None:
    bus = EventBus(ring_size=3)
    publish_n(bus, 7)
    assert [e.id for e in bus.ring] == [5, 6, 7]
    assert bus.earliest_available_id == 5
    assert bus.last_event_id == 7


def test_ring_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        EventBus(ring_size=0)


def test_publish_stamps_server_timestamp_and_prompt_id() -> None:
    bus = EventBus(clock_ms=lambda: TS)
    event = bus.publish("turn_complete", {"stopReason": "end_turn"}, "prompt-1")
    assert (event.type, event.prompt_id, event.ts_ms, event.data) == (
        "turn_complete", "prompt-1", TS, {"stopReason": "end_turn"})


def test_observers_see_every_published_event() -> None:
    bus = EventBus()
    seen: list[int | None] = []
    bus.observers.append(lambda e: seen.append(e.id))
    publish_n(bus, 3)
    assert seen == [1, 2, 3]


# ----------------------------------------------------------------- subscribe and replay


async def test_subscribe_without_cursor_is_live_only() -> None:
    bus = EventBus()
    publish_n(bus, 3)
    sub = bus.subscribe()
    assert drain(sub) == []  # no replay, no replay_complete
    live = bus.publish("session_update", {"live": True})
    with trio.fail_after(1):
        assert await sub.get() is live
    assert drain(sub) == []


async def test_live_subscriber_wakes_on_publish() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    got: list[Event] = []

    async def reader() -> None:
        async for event in sub:
            got.append(event)

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            publish_n(bus, 2)
            await trio.testing.wait_all_tasks_blocked()
            assert [e.id for e in got] == [1, 2]
            sub.close()
    assert bus.subscriber_count == 0


async def test_cursor_replays_exactly_newer_events_then_replay_complete_then_live() -> None:
    bus = EventBus()
    publish_n(bus, 5)
    sub = bus.subscribe(last_event_id=2, epoch=bus.epoch)
    frames = drain(sub)
    assert [e.id for e in frames[:-1]] == [3, 4, 5]
    done = frames[-1]
    assert done.type == "replay_complete" and done.id is None
    assert done.data == {"replayedCount": 3, "lastReplayedEventId": 5, "lastEventId": 5}
    live = bus.publish("session_update", {"live": True})
    assert drain(sub) == [live]


def test_cursor_zero_replays_the_whole_ring() -> None:
    bus = EventBus()
    publish_n(bus, 3)
    frames = drain(bus.subscribe(last_event_id=0))
    assert [e.id for e in frames] == [1, 2, 3, None]
    assert frames[-1].data == {"replayedCount": 3, "lastReplayedEventId": 3, "lastEventId": 3}


def test_cursor_at_the_head_replays_nothing() -> None:
    bus = EventBus()
    publish_n(bus, 4)
    frames = drain(bus.subscribe(last_event_id=4))
    assert [e.type for e in frames] == ["replay_complete"]
    assert frames[0].data == {"replayedCount": 0, "lastReplayedEventId": 4, "lastEventId": 4}


def test_cursor_zero_on_an_empty_bus() -> None:
    frames = drain(EventBus().subscribe(last_event_id=0))
    assert [e.type for e in frames] == ["replay_complete"]
    assert frames[0].data == {"replayedCount": 0, "lastReplayedEventId": 0, "lastEventId": 0}


@pytest.mark.parametrize(
    ("cursor", "epoch", "reason"),
    [
        (3, "some-other-epoch", "epoch_reset"),  # cursor from another epoch
        (99, None, "epoch_reset"),  # cursor ahead of the bus
        (6, "SAME", "epoch_reset"),  # ahead by one, same epoch
        (1, None, "ring_evicted"),  # its next event (2) has left the ring
        (1, "SAME", "ring_evicted"),
        (0, None, "ring_evicted"),
    ],
)
def test_resync_then_what_is_left_of_the_running_turn_then_replay_complete(
        cursor: int, epoch: str | None, reason: str) -> None:
    bus = EventBus(ring_size=3)
    publish_n(bus, 5)  # ring holds 3, 4, 5 of a turn that has not ended
    if epoch == "SAME":
        epoch = bus.epoch
    frames = drain(bus.subscribe(last_event_id=cursor, epoch=epoch))
    resync, truncated, *ring, done = frames
    assert resync.type == "state_resync_required" and resync.id is None
    assert resync.data == {"reason": reason, "lastDeliveredId": cursor, "earliestAvailableId": 3}
    assert truncated.type == "history_truncated" and truncated.id is None
    assert truncated.data["scope"] == "live_journal" and truncated.data["truncatedEvents"] == 2
    assert [e.id for e in ring] == [3, 4, 5]
    assert done.type == "replay_complete" and done.id is None
    assert done.data == {"replayedCount": 3, "lastReplayedEventId": 5, "lastEventId": 5}


def test_the_ring_is_bounded_in_bytes_too_the_oldest_leaving_first_and_the_newest_always_kept() -> None:
    bus = EventBus(ring_bytes=10_000)
    for _ in range(40):  # about 1 KB each: some 10 fit
        bus.publish("session_update", {"output": "x" * 1000})
    assert 8 <= len(bus.ring) <= 10 and bus.ring[-1].id == 40
    assert sum(len(e.json()) for e in bus.ring) <= 10_000
    frames = drain(bus.subscribe(last_event_id=1, epoch=bus.epoch))
    assert frames[0].type == "state_resync_required" and frames[0].data["reason"] == "ring_evicted"
    huge = bus.publish("session_update", {"output": "y" * 50_000})  # past the budget alone: kept, alone
    assert list(bus.ring) == [huge]
    for _ in range(3):
        bus.publish("session_update", {"output": "z"})
    assert [e.id for e in bus.ring] == [42, 43, 44]  # the big one left; the count goes on from there


def test_the_count_bound_and_the_byte_bound_agree_on_what_the_ring_holds() -> None:
    bus = EventBus(ring_size=3, ring_bytes=10_000)
    for _ in range(10):
        bus.publish("session_update", {"output": "x" * 1000})
    assert [e.id for e in bus.ring] == [8, 9, 10]
    for _ in range(3):  # what the count bound evicted was taken off the byte count too
        bus.publish("session_update", {"output": "x" * 3000})
    assert [e.id for e in bus.ring] == [11, 12, 13]


def test_cursor_just_before_the_ring_needs_no_resync() -> None:
    bus = EventBus(ring_size=3)
    publish_n(bus, 5)  # ring holds 3, 4, 5: cursor 2's next event is still there
    frames = drain(bus.subscribe(last_event_id=2, epoch=bus.epoch))
    assert [e.type for e in frames] == ["session_update"] * 3 + ["replay_complete"]
    assert [e.id for e in frames] == [3, 4, 5, None]
    assert frames[-1].data == {"replayedCount": 3, "lastReplayedEventId": 5, "lastEventId": 5}


def test_synthetic_frames_have_no_id_line_in_sse() -> None:
    bus = EventBus(ring_size=2)
    publish_n(bus, 4)
    frames = drain(bus.subscribe(last_event_id=0, epoch="other"))
    synthetic = [f for f in frames if f.type != "session_update"]
    assert [f.type for f in synthetic] == ["state_resync_required", "history_truncated", "replay_complete"]
    for frame in synthetic:
        assert frame.id is None
        assert "id" not in orjson.loads(frame.json())


# ----------------------------------------------------------------- slow and fast subscribers


def test_slow_subscriber_is_warned_once_at_three_quarters() -> None:
    bus = EventBus()
    sub = bus.subscribe(max_queued=8)
    publish_n(bus, 5)
    assert [e.type for e in drain(sub)] == ["session_update"] * 5  # below 75 %: no warning
    publish_n(bus, 6)  # 6 of 8 queued: the warning is due
    frames = drain(sub)
    assert [e.type for e in frames] == ["session_update"] * 6 + ["slow_client_warning"]
    warning = frames[-1]
    assert warning.id is None
    assert warning.data["limit"] == 8
    assert not sub.evicted


def test_slow_subscriber_is_evicted_on_overflow_and_its_stream_ends() -> None:
    bus = EventBus()
    slow = bus.subscribe(max_queued=8)
    assert bus.subscriber_count == 1
    publish_n(bus, 20)  # never blocks, even though nobody reads
    assert slow.evicted
    assert bus.subscriber_count == 0  # dropped from the bus
    frames = drain(slow)
    assert frames[-1].type == "client_evicted"
    assert frames[-1].id is None
    assert frames[-1].data["reason"] == "queue_overflow"
    assert frames[-1].data["limit"] == 8
    assert len(frames) <= 9
    publish_n(bus, 3)
    assert drain(slow) == []  # nothing after the terminal frame


async def test_evicted_subscriber_iteration_ends_after_client_evicted() -> None:
    bus = EventBus()
    slow = bus.subscribe(max_queued=4)
    publish_n(bus, 10)
    frames = await collect(slow)
    assert frames[-1].type == "client_evicted"
    assert [f.type for f in frames].count("client_evicted") == 1


async def test_evicted_subscriber_still_gets_its_one_warning_before_client_evicted() -> None:
    """The warning issued at 75 % must reach the reader: it precedes the terminal frame."""
    bus = EventBus()
    slow = bus.subscribe(max_queued=8)
    publish_n(bus, 20)  # the reader never keeps up
    frames = await collect(slow)
    types = [f.type for f in frames]
    assert types.count("slow_client_warning") == 1, types
    assert types[-1] == "client_evicted"
    assert types.index("slow_client_warning") < types.index("client_evicted")


async def test_fast_subscriber_gets_everything_while_a_slow_one_is_evicted() -> None:
    bus = EventBus()
    slow = bus.subscribe(max_queued=16)
    fast = bus.subscribe(max_queued=16)
    received: list[Event] = []
    published: list[Event] = []

    async def fast_reader() -> None:
        async for event in fast:
            received.append(event)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fast_reader)
            for _ in range(50):
                with trio.CancelScope() as scope:
                    scope.cancel()  # any checkpoint in publish would raise Cancelled here
                    for _ in range(4):
                        published.append(bus.publish("session_update", {"i": len(published)}))
                assert not scope.cancelled_caught  # the publisher never waited
                await trio.testing.wait_all_tasks_blocked()  # let the fast reader catch up
            await trio.testing.wait_all_tasks_blocked()
            fast.close()
    assert [e.id for e in received] == [e.id for e in published]
    assert not fast.evicted
    assert slow.evicted
    assert drain(slow)[-1].type == "client_evicted"


def test_warning_rearms_after_the_reader_catches_up() -> None:
    bus = EventBus()
    sub = bus.subscribe(max_queued=8)
    publish_n(bus, 6)
    assert [e.type for e in drain(sub)].count("slow_client_warning") == 1
    publish_n(bus, 6)  # falls behind again after catching up: warned again
    assert [e.type for e in drain(sub)].count("slow_client_warning") == 1
    assert not sub.evicted


def publish_big(bus: EventBus, n: int, size: int) -> list[Event]:
    return [bus.publish("session_update", {"blob": "b" * size}, "P") for _ in range(n)]


def test_a_subscriber_is_bounded_in_bytes_too() -> None:
    """60 readers that never read must not cost 95 MB: 2 MiB each, whatever the frame count."""
    bus = EventBus()
    slow = bus.subscribe(max_queued=256)
    publish_big(bus, 100, 64 * 1024)  # 100 frames (under 256) of 64 KiB: 6.4 MiB
    assert slow.evicted
    frames = drain(slow)
    warning = next(f for f in frames if f.type == "slow_client_warning")
    assert warning.data["threshold"] == "bytes" and warning.data["maxQueuedBytes"] == 2 * 1024 * 1024
    evicted = frames[-1]
    assert evicted.type == "client_evicted" and evicted.data["reason"] == "queue_bytes_overflow"
    assert evicted.data["queuedBytes"] <= 2 * 1024 * 1024 < evicted.data["queuedBytes"] + evicted.data["eventBytes"]
    delivered = [f for f in frames if f.id is not None]
    assert sum(len(f.json()) for f in delivered) <= 2 * 1024 * 1024
    assert [f.id for f in delivered] == list(range(1, len(delivered) + 1))  # contiguous: it can resume
    assert evicted.data["droppedAfter"] == len(delivered) + 1


def test_a_reader_that_keeps_up_is_never_evicted_by_bytes() -> None:
    bus = EventBus(max_queued_bytes=100_000)
    sub = bus.subscribe()
    for _ in range(50):
        publish_big(bus, 3, 20_000)
        assert len([f for f in drain(sub) if f.id is not None]) == 3
    assert not sub.evicted


def test_one_event_larger_than_the_byte_bound_still_reaches_an_empty_queue() -> None:
    bus = EventBus(max_queued_bytes=10_000)
    sub = bus.subscribe()
    [big] = publish_big(bus, 1, 50_000)
    assert not sub.evicted
    assert [f.id for f in drain(sub) if f.id is not None] == [big.id]


def test_the_byte_warning_rearms_once_the_reader_has_drained() -> None:
    bus = EventBus(max_queued_bytes=100_000)
    sub = bus.subscribe()
    publish_big(bus, 4, 20_000)  # 80 % of the bytes
    assert [f.type for f in drain(sub)].count("slow_client_warning") == 1
    publish_big(bus, 4, 20_000)
    assert [f.type for f in drain(sub)].count("slow_client_warning") == 1
    assert not sub.evicted


# ----------------------------------------------------------------- closing and limits


async def test_close_with_ends_every_subscription_after_the_terminal_event() -> None:
    bus = EventBus()
    subs = [bus.subscribe(), bus.subscribe(last_event_id=0)]
    publish_n(bus, 2)
    bus.close_with("session_closed", {"sessionId": "s", "reason": "deleted"})
    assert bus.closed
    assert bus.subscriber_count == 0
    for sub in subs:
        frames = await collect(sub)
        assert frames[-1].type == "session_closed"
        assert frames[-1].id == 3
        assert [f.type for f in frames].count("session_closed") == 1
    bus.close_with("session_closed", {"sessionId": "s", "reason": "again"})  # idempotent
    assert bus.last_event_id == 3


async def test_close_with_wakes_a_parked_reader() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    got: list[Event] = []

    async def reader() -> None:
        async for event in sub:
            got.append(event)

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            bus.close_with("session_closed", {"sessionId": "s", "reason": "deleted"})
    assert [e.type for e in got] == ["session_closed"]


async def test_subscribing_to_a_closed_bus_ends_after_the_terminal_event() -> None:
    bus = EventBus()
    publish_n(bus, 2)
    bus.close_with("session_closed", {"sessionId": "s", "reason": "deleted"})
    frames = await collect(bus.subscribe())
    assert [(f.type, f.id) for f in frames] == [("session_closed", 3)]
    assert bus.subscriber_count == 0


async def test_subscribing_to_a_closed_bus_with_a_cursor_replays_up_to_the_terminal_event() -> None:
    bus = EventBus()
    publish_n(bus, 2)
    bus.close_with("session_closed", {"sessionId": "s", "reason": "deleted"})
    frames = await collect(bus.subscribe(last_event_id=1))
    assert [(f.type, f.id) for f in frames] == [
        ("session_update", 2), ("session_closed", 3), ("replay_complete", None)]


async def test_reader_close_delivers_what_is_queued_then_ends() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    publish_n(bus, 2)
    async with sub:
        pass  # __aexit__ closes it
    assert bus.subscriber_count == 0
    publish_n(bus, 1)
    assert [e.id for e in await collect(sub)] == [1, 2]


def test_too_many_subscribers() -> None:
    bus = EventBus(max_subscribers=2)
    first = bus.subscribe()
    bus.subscribe(last_event_id=0)
    with pytest.raises(TooManySubscribers):
        bus.subscribe()
    first.close()
    bus.subscribe()  # room again
    assert bus.subscriber_count == 2


# ----------------------------------------------------------------- wire shape of a frame


def test_event_json_shape_matches_protocol() -> None:
    bus = EventBus(clock_ms=lambda: TS)
    publish_n(bus, 56)
    event = bus.publish("session_update", {"sessionId": "S", "update": {"sessionUpdate": "plan"}}, "P")
    assert event.id == 57
    body = event.json()
    assert orjson.loads(body) == {
        "id": 57, "v": 1, "type": "session_update", "promptId": "P",
        "data": {"sessionId": "S", "update": {"sessionUpdate": "plan"}},
        "_meta": {"serverTimestamp": TS},
    }
    assert list(orjson.loads(body)) == ["id", "v", "type", "promptId", "data", "_meta"]
    assert event.json() is body  # encoded once, shared by every subscriber


def test_event_without_prompt_id_omits_it() -> None:
    event = EventBus(clock_ms=lambda: TS).publish("session_closed", {"sessionId": "S", "reason": "x"})
    assert orjson.loads(event.json()) == {
        "id": 1, "v": 1, "type": "session_closed", "data": {"sessionId": "S", "reason": "x"},
        "_meta": {"serverTimestamp": TS},
    }


async def test_a_nudge_wakes_a_waiting_reader_with_none_and_is_used_once() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    got: list[object] = []

    async def read() -> None:
        got.append(await sub.get_or_nudged())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            sub.nudge()
        assert got == [None]
        event = bus.publish("session_update", {"i": 1})
        assert await sub.get_or_nudged() is event  # the nudge was used: the next call waits for an event


async def test_a_nudge_while_events_are_queued_is_void_and_an_ended_stream_still_ends() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    event = bus.publish("session_update", {"i": 1})
    sub.nudge()
    got: list[object] = []

    async def read() -> None:
        got.append(await sub.get_or_nudged())

    with trio.fail_after(5):
        assert await sub.get_or_nudged() is event
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []  # the reader was not idle when nudged: the nudge went with the event
            later = bus.publish("session_update", {"i": 2})
        assert got == [later]
        sub.close()
        sub.nudge()
        with pytest.raises(StopAsyncIteration):
            await sub.get_or_nudged()
