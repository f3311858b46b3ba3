"""SSE framing and cursors."""

from __future__ import annotations

import trio

from actors import EventBus
from actors import wire
from transport.sse import BATCH_BYTES, encode, frames, parse_cursor


def test_an_event_frame_has_its_id_type_and_json() -> None:
    bus = EventBus(clock_ms=lambda: 1)
    for _ in range(56):
        bus.publish("session_update", {"x": 0})
    event = bus.publish("session_update", {"x": 1}, "P")
    assert encode(event) == b"id: 57\nevent: session_update\ndata: " + event.json() + b"\n\n"


def test_a_synthetic_frame_has_no_id_line() -> None:
    frame = encode(wire.replay_complete(0, 0, 0))
    assert frame.startswith(b"event: replay_complete\ndata: ") and b"id:" not in frame.split(b"data:")[0]


def test_cursors_are_plain_decimals_up_to_2_to_the_53() -> None:
    assert parse_cursor("42") == 42
    assert [parse_cursor(v) for v in (None, "", "-1", "4.2", "١٢", " 3", str(2**53))] == [None] * 7


async def test_frames_ready_together_are_sent_together_in_order() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    events = [bus.publish("session_update", {"i": i}) for i in range(5)]
    stream = frames(sub)
    with trio.fail_after(5):
        assert await stream.__anext__() == b"retry: 3000\n\n"
        assert await stream.__anext__() == b"".join(encode(e) for e in events)  # one chunk, ids in order
        later = bus.publish("session_update", {"i": 5})
        assert await stream.__anext__() == encode(later)
        await stream.aclose()


async def test_a_batch_stops_near_its_byte_bound_and_loses_nothing() -> None:
    bus = EventBus(max_queued_bytes=10 * BATCH_BYTES)
    sub = bus.subscribe(max_queued=2048)
    events = [bus.publish("session_update", {"blob": "x" * 1000}) for _ in range(200)]
    bus.close_with("session_closed", {"sessionId": "s", "reason": "deleted"})
    chunks = []
    with trio.fail_after(5):
        async for chunk in frames(sub):
            chunks.append(chunk)
    body = b"".join(chunks[1:])
    assert body == b"".join(encode(e) for e in events) + encode(bus.ring[-1])
    assert len(chunks) > 3 and all(len(c) < BATCH_BYTES + 2000 for c in chunks)


async def test_an_overflowing_subscriber_gets_what_was_queued_then_its_eviction_in_one_batch_and_the_end() -> None:
    bus = EventBus()
    sub = bus.subscribe(max_queued=10)
    for i in range(30):  # published faster than anything reads: the queue overflows at the tenth
        bus.publish("session_update", {"i": i})
    with trio.fail_after(5):
        chunks = [chunk async for chunk in frames(sub)]
    assert chunks[0] == b"retry: 3000\n\n"
    body = b"".join(chunks[1:]).decode()
    ids = [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")]
    assert ids == list(range(1, 10))  # in order, none repeated, none after the eviction point
    kinds = [line[7:] for line in body.splitlines() if line.startswith("event: ")]
    assert kinds.count("slow_client_warning") == 1
    assert kinds[-1] == "client_evicted" and body.endswith("\n\n")  # the stream ends after it
    assert '"reason":"queue_overflow"' in body


async def _next_chunk(stream, *, at_most: float) -> tuple[bytes, float]:
    """The stream's next chunk and the virtual time it came at."""
    with trio.fail_after(at_most):
        chunk = await stream.__anext__()
    return chunk, trio.current_time()


async def test_an_idle_stream_writes_a_comment_before_it_has_been_silent_for_keepalive_seconds(
        autojump_clock: trio.testing.MockClock) -> None:
    bus = EventBus()
    stream = frames(bus.subscribe(), keepalive=10.0)
    start = trio.current_time()
    assert (await _next_chunk(stream, at_most=1))[0] == b"retry: 3000\n\n"
    comments = []
    for _ in range(3):
        chunk, at = await _next_chunk(stream, at_most=20)
        assert chunk == b": keepalive\n\n"
        comments.append(at - start)
    # silent at most 10 s at first (a whole 5 s tick with nothing written: 5-10 s), then a comment every 10 s
    assert 5 <= comments[0] <= 10 and [round(b - a, 6) for a, b in zip(comments, comments[1:])] == [10.0, 10.0]
    event = bus.publish("session_update", {"i": 1})
    assert (await _next_chunk(stream, at_most=1))[0] == encode(event)
    await stream.aclose()


async def test_a_stream_that_sends_every_few_seconds_writes_no_comment(autojump_clock: trio.testing.MockClock) -> None:
    bus = EventBus()
    stream = frames(bus.subscribe(), keepalive=10.0)
    assert await stream.__anext__() == b"retry: 3000\n\n"
    for i in range(20):  # 80 s in all, never 5 s without an event
        await trio.sleep(4)
        event = bus.publish("session_update", {"i": i})
        assert (await _next_chunk(stream, at_most=1))[0] == encode(event)
    await stream.aclose()


async def test_one_ticker_serves_every_stream_and_forgets_a_closed_one(autojump_clock: trio.testing.MockClock) -> None:
    from transport.sse import _ticker

    bus = EventBus()
    streams = [frames(bus.subscribe(), keepalive=8.0) for _ in range(3)]
    for stream in streams:
        assert await stream.__anext__() == b"retry: 3000\n\n"
    ticker = _ticker(8.0)
    assert len(ticker.streams) == 3
    for stream in streams:  # each idle stream gets its comment from the same tick
        assert (await _next_chunk(stream, at_most=9))[0] == b": keepalive\n\n"
    await streams[0].aclose()
    assert len(ticker.streams) == 2
    for stream in streams[1:]:
        await stream.aclose()
    assert not ticker.streams
