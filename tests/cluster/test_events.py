"""actors/cluster/events.py against a real Redis: appends and fencing, the publisher, the fan-out reader."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from actors.cluster.events import (
    EventPublisher,
    EventsUnavailable,
    FanOutReader,
    FollowOverflow,
    RedisEvents,
    StaleOwner,
    StreamEvent,
    events_key,
)
from actors.events.bus import EventBus
from actors.wire import Event

S = "sess-1"
TOKEN = "node-a:1"


def _entries(first: int, last: int) -> list[tuple[int, str, bytes]]:
    return [(n, "t", b'{"n":%d}' % n) for n in range(first, last + 1)]


def _ids(events: list[StreamEvent]) -> list[int]:
    return [e.id for e in events]


async def _take(follow: Any, n: int) -> list[StreamEvent]:
    got = []
    with trio.fail_after(5):
        for _ in range(n):
            got.append(await follow.__anext__())
    return got


@asynccontextmanager
async def _running(*services: Any) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        for service in services:
            await nursery.start(service.run)
        yield
        nursery.cancel_scope.cancel()


class CountingEvents(RedisEvents):
    """A real client that counts appends and XREADs and says when one failed."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.appends = 0
        self.reads: list[dict[str, str]] = []
        self.failed = trio.Event()

    async def append(self, *args: Any, **kwargs: Any) -> int:
        self.appends += 1
        try:
            return await super().append(*args, **kwargs)
        except EventsUnavailable:
            self.failed.set()
            raise

    async def read_block(self, streams: dict[str, str], *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.reads.append(dict(streams))
        try:
            return await super().read_block(streams, *args, **kwargs)
        except EventsUnavailable:
            self.failed.set()
            raise


# ----------------------------------------------------------------------------------------- RedisEvents


async def test_append_uses_event_ids_and_skips_ids_already_there(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            assert await r.append(S, TOKEN, [(1, "a", b'{"x":1}'), (2, "b", b'{"x":2}', "p-1")]) == 2
            raw = await r._client.xrange(f"trellis:events:{S}")
            assert [e.identifier for e in raw] == [b"1-0", b"2-0"]
            assert dict(raw[1].field_values) == {b"t": b"b", b"d": b'{"x":2}', b"p": b"p-1"}
            # A retry of ids already there (and one below the last) is not an error: they are skipped.
            assert await r.append(S, TOKEN, [(1, "a", b"{}"), (2, "b", b"{}"), (3, "c", b'{"x":3}')]) == 1
            got = await r.read_after(S, 0)
    assert got == [StreamEvent(1, "a", b'{"x":1}'), StreamEvent(2, "b", b'{"x":2}', "p-1"),
                   StreamEvent(3, "c", b'{"x":3}')]


async def test_a_replaced_owner_token_is_refused_and_writes_nothing(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            with pytest.raises(StaleOwner):  # no owner at all
                await r.append(S, TOKEN, _entries(1, 1))
            await r.set_owner(S, TOKEN)
            await r.append(S, TOKEN, _entries(1, 2))
            await r.set_owner(S, "node-b:2")  # node b claims the session
            with pytest.raises(StaleOwner) as refused:
                await r.append(S, TOKEN, _entries(3, 5))
            assert refused.value.owner == "node-b:2"
            assert await r.last_id(S) == 2
            assert await r.append(S, "node-b:2", _entries(3, 3)) == 1
            assert _ids(await r.read_after(S, 0)) == [1, 2, 3]


async def test_read_after_last_id_first_id_and_delete(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            assert (await r.last_id(S), await r.first_id(S), await r.read_after(S, 0)) == (0, None, [])
            await r.set_owner(S, TOKEN)
            await r.append(S, TOKEN, _entries(1, 10))
            assert (await r.last_id(S), await r.first_id(S)) == (10, 1)
            assert _ids(await r.read_after(S, 4)) == [5, 6, 7, 8, 9, 10]
            assert _ids(await r.read_after(S, 4, count=2)) == [5, 6]
            assert await r.read_after(S, 10) == []
            await r.delete(S)
            assert await r.last_id(S) == 0
            with pytest.raises(StaleOwner):  # the owner key went too
                await r.append(S, TOKEN, _entries(11, 11))


async def test_the_stream_is_trimmed_to_about_max_events(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url, max_events=100) as r:
            await r.set_owner(S, TOKEN)
            for first in range(1, 1000, 100):
                await r.append(S, TOKEN, _entries(first, first + 99))
            length = await r._client.xlen(f"trellis:events:{S}")
            first_id = await r.first_id(S)
            assert await r.last_id(S) == 1000
    assert 100 <= length < 300  # MAXLEN ~ trims whole nodes of the radix tree
    assert first_id == 1001 - length


async def test_unreachable_redis_is_events_unavailable_without_the_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with trio.fail_after(10), pytest.raises(EventsUnavailable) as failed:
        async with RedisEvents(f"redis://trellis:hunter2@127.0.0.1:{port}/0"):
            pass
    assert "connecting" in str(failed.value) and f"127.0.0.1:{port}" in str(failed.value)
    assert "hunter2" not in str(failed.value)


# ----------------------------------------------------------------------------------------- publisher


async def test_publisher_batches_a_bus_into_few_appends_in_order(redis_url: str) -> None:
    bus = EventBus()
    with trio.fail_after(10):
        async with CountingEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            publisher = EventPublisher(r, max_batch=100)
            bus.observers.append(lambda event: publisher.publish_nowait(S, TOKEN, event))
            async with _running(publisher):
                for n in range(250):
                    bus.publish("turn_delta", {"n": n}, prompt_id="p-7" if n % 2 else None)
                    if n % 50 == 0:
                        await trio.lowlevel.checkpoint()  # let a round trip start mid-burst
                await publisher.wait_flushed(S)
                got = await r.read_after(S, 0)
    assert _ids(got) == list(range(1, 251))
    assert [e.data for e in got] == [e.json() for e in bus.ring]
    assert [e.prompt_id for e in got[:2]] == [None, "p-7"]
    assert got[1].event().data == {"n": 1}
    assert 3 <= r.appends < 20  # whatever accumulated goes together, at most max_batch a time


async def test_the_appends_to_many_sessions_go_in_one_round_trip(redis_url: str) -> None:
    sessions = [f"s{n}" for n in range(40)]
    stale: list[str] = []
    with trio.fail_after(10):
        async with CountingEvents(redis_url) as r:
            for s in sessions:
                await r.set_owner(s, TOKEN)
            await r.set_owner("s7", "node-b:2")  # one of them is another node's now
            round_trips: list[int] = []
            append_many = r.append_many

            async def counting(batches: Any) -> Any:
                round_trips.append(len(batches))
                return await append_many(batches)

            r.append_many = counting  # type: ignore[method-assign]
            publisher = EventPublisher(r, on_stale=stale.append)
            for n in range(1, 4):  # not running yet: everything accumulates
                for s in sessions:
                    publisher.publish_nowait(s, TOKEN, Event("t", {"n": n}, id=n))
            async with _running(publisher):
                await publisher.wait_flushed()
            assert round_trips == [40] and r.appends == 0 and stale == ["s7"]
            for s in sessions:
                assert _ids(await r.read_after(s, 0)) == ([] if s == "s7" else [1, 2, 3])


class SlowAppends:
    """A stand-in for RedisEvents whose appends take a round trip of 0.5 ms (of a mock clock)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    async def append(self, session_id: str, token: str, entries: list[Any]) -> int:
        self.sizes.append(len(entries))
        await trio.sleep(0.0005)
        return len(entries)


async def test_a_burst_faster_than_round_trips_goes_in_rounds_of_many(autojump_clock: Any) -> None:
    redis = SlowAppends()
    publisher = EventPublisher(redis)  # type: ignore[arg-type]
    async with _running(publisher):
        for n in range(1, 201):  # an event every 0.1 ms: five a round trip
            publisher.publish_nowait(S, TOKEN, Event("t", {}, id=n))
            await trio.sleep(0.0001)
        await publisher.wait_flushed()
    assert sum(redis.sizes) == 200
    assert redis.sizes[0] == 1  # the first event of a burst goes at once
    assert len(redis.sizes) <= 15  # the rest in rounds of some fifteen (1 ms's worth and a round trip's), not of five


async def test_a_full_buffer_drops_the_oldest_events_and_counts_them(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            publisher = EventPublisher(r, max_buffered=10)
            for n in range(1, 26):  # not running yet: nothing leaves the buffer
                publisher.publish_nowait(S, TOKEN, Event("t", {"n": n}, id=n))
            assert (publisher.dropped, publisher.buffered) == (15, 10)
            async with _running(publisher):
                await publisher.wait_flushed()
            assert _ids(await r.read_after(S, 0)) == list(range(16, 26))  # readers see the gap


async def test_a_stale_owner_drops_the_buffer_and_calls_on_stale_once(redis_url: str) -> None:
    stale: list[str] = []
    with trio.fail_after(10):
        async with CountingEvents(redis_url) as r:
            await r.set_owner(S, "node-b:2")
            await r.set_owner("other", TOKEN)
            publisher = EventPublisher(r, on_stale=stale.append)
            for n in range(1, 6):
                publisher.publish_nowait(S, TOKEN, Event("t", {}, id=n))
                publisher.publish_nowait("other", TOKEN, Event("t", {}, id=n))
            async with _running(publisher):
                await publisher.wait_flushed()
                assert stale == [S] and publisher.buffered == 0
                appends = r.appends
                publisher.publish_nowait(S, TOKEN, Event("t", {}, id=6))  # late events of the old owner
                await publisher.wait_flushed(S)
            assert stale == [S] and r.appends == appends  # dropped without asking Redis again
            assert await r.last_id(S) == 0
            assert await r.last_id("other") == 5


# ----------------------------------------------------------------------------------------- reader


async def test_follows_of_one_session_share_a_cursor_and_get_the_same_entries(redis_url: str) -> None:
    with trio.fail_after(10):
        async with CountingEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            await r.set_owner("s2", TOKEN)
            reader = FanOutReader(r, "node-a", block_ms=30_000)  # every restart must be prompt
            async with _running(reader):
                one, two, other = reader.subscribe(S, 0), reader.subscribe(S, 0), reader.subscribe("s2", 0)
                await r.append(S, TOKEN, _entries(1, 3))
                await r.append("s2", TOKEN, _entries(1, 2))
                assert _ids(await _take(one, 3)) == _ids(await _take(two, 3)) == [1, 2, 3]
                assert _ids(await _take(other, 2)) == [1, 2]
                assert sorted(r.reads[-1]) == ["trellis:events:s2", f"trellis:events:{S}", "trellis:wake:node-a"]
                # A third follow from further back: the shared cursor goes back, the others get nothing twice.
                late = reader.subscribe(S, 1)
                assert _ids(await _take(late, 2)) == [2, 3]
                await r.append(S, TOKEN, _entries(4, 4))
                assert [_ids(await _take(f, 1)) for f in (one, two, late)] == [[4], [4], [4]]
                await one.aclose()
                with pytest.raises(StopAsyncIteration):
                    await one.__anext__()


async def test_receive_nowait_and_close_of_a_follow(redis_url: str) -> None:
    with trio.fail_after(10):
        async with CountingEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            reader = FanOutReader(r, "node-a", block_ms=30_000)
            async with _running(reader):
                follow, witness = reader.subscribe(S, 0), reader.subscribe(S, 0)
                assert follow.receive_nowait() is None
                await r.append(S, TOKEN, _entries(1, 2))
                await _take(witness, 2)  # delivered to both by now
                assert [follow.receive_nowait(), follow.receive_nowait()] == await r.read_after(S, 0)
                assert follow.receive_nowait() is None and follow.last_id == 2
                follow.close()
                witness.close()
                with pytest.raises(StopAsyncIteration):
                    await follow.__anext__()
                await r.wake("node-a", {})  # the next read no longer has the session
                await reader.wakes().__anext__()
                assert list(r.reads[-1]) == ["trellis:wake:node-a"]


async def test_a_follow_added_while_the_read_is_blocked_gets_entries_promptly(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            reader = FanOutReader(r, "node-a", block_ms=30_000)
            async with _running(reader):
                # A wake-up round trip: once it is delivered the reader is blocked again, without S.
                await r.wake("node-a", {"hello": 1})
                with trio.fail_after(5):
                    assert await reader.wakes().__anext__() == {"hello": 1}
                follow = reader.subscribe(S, 0)
                await r.append(S, TOKEN, _entries(1, 1))
                with trio.fail_after(5):  # not the 30 s block
                    assert (await follow.__anext__()).id == 1


async def test_wake_messages_are_delivered_and_kept_until_taken(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            await r.wake("node-a", {"before": "start"})  # from before the reader started: not for it
            reader = FanOutReader(r, "node-a")
            follow = reader.subscribe(S, 0)
            async with _running(reader):
                await r.set_owner(S, TOKEN)
                for n in range(3):
                    await r.wake("node-a", {"claim": f"s{n}", "n": n})
                await r.wake("node-b", {"not": "ours"})
                await r.append(S, TOKEN, _entries(1, 1))
                await _take(follow, 1)  # read after the wake-ups: they are in by now, nobody iterating
                wakes = reader.wakes()
                got = [await wakes.__anext__() for _ in range(3)]
    assert got == [{"claim": "s0", "n": 0}, {"claim": "s1", "n": 1}, {"claim": "s2", "n": 2}]
    assert not reader.wakes().kept


async def test_a_slow_follow_is_ended_without_stalling_another(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            reader = FanOutReader(r, "node-a", max_queued=4)
            async with _running(reader):
                slow, fast = reader.subscribe(S, 0), reader.subscribe(S, 0)
                got: list[StreamEvent] = []
                for first in range(1, 13, 3):
                    await r.append(S, TOKEN, _entries(first, first + 2))
                    got += await _take(fast, 3)
                assert _ids(got) == list(range(1, 13))
                assert _ids([e async for e in _until_overflow(slow)]) == [1, 2, 3, 4]
                assert slow.overflowed and not fast.overflowed


async def _until_overflow(follow: Any) -> AsyncIterator[StreamEvent]:
    with trio.fail_after(5), pytest.raises(FollowOverflow) as ended:
        async for entry in follow:
            yield entry
    assert ended.value.last_id == 4


async def test_a_follow_from_a_cursor_gets_entries_appended_before_it(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            await r.append(S, TOKEN, _entries(1, 5))
            reader = FanOutReader(r, "node-a")
            follow = reader.subscribe(S, 2)
            await r.append(S, TOKEN, _entries(6, 6))  # between subscribe and the first read
            async with _running(reader):
                assert _ids(await _take(follow, 4)) == [3, 4, 5, 6]
                await r.append(S, TOKEN, _entries(7, 7))
                assert _ids(await _take(follow, 1)) == [7]


# ----------------------------------------------------------------------------------------- sessions owned here


async def test_an_owned_sessions_follows_get_each_acknowledged_append_without_reading_it_back(redis_url: str) -> None:
    bus = EventBus()
    with trio.fail_after(10):
        async with CountingEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            reader = FanOutReader(r, "node-a", block_ms=30_000)
            publisher = EventPublisher(r, on_appended=reader.appended)
            bus.observers.append(lambda event: publisher.publish_nowait(S, TOKEN, event))
            reader.own(S, 0)
            async with _running(publisher, reader):
                one, two = reader.subscribe(S, 0), reader.subscribe(S, 0)
                for n in range(300):
                    bus.publish("turn_delta", {"n": n}, prompt_id="p-1")
                    if n % 20 == 0:
                        await trio.lowlevel.checkpoint()
                got = await _take(one, 300)
                assert _ids(got) == _ids(await _take(two, 300)) == list(range(1, 301))
                assert [e.data for e in got] == [e.json() for e in bus.ring]  # the frame bytes, as stored
                assert got[0].prompt_id == "p-1"
                assert _ids(await r.read_after(S, 0)) == list(range(1, 301))  # what they saw is Redis' record
            assert all(events_key(S) not in streams for streams in r.reads)


async def test_a_follow_an_owned_session_does_not_continue_reads_the_stream_until_it_has_caught_up(
        redis_url: str) -> None:
    with trio.fail_after(10):
        async with CountingEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            await r.append(S, TOKEN, _entries(1, 5))
            reader = FanOutReader(r, "node-a", block_ms=30_000)
            reader.own(S, 5)
            async with _running(reader):
                behind = reader.subscribe(S, 2)  # from further back than what this node handed over
                assert _ids(await _take(behind, 3)) == [3, 4, 5]
                reader.appended(S, _entries(6, 6))  # as the publisher hands an append over
                assert _ids(await _take(behind, 1)) == [6]
                # Redis has 7 and 8, but only 8 is handed over (the publisher dropped nothing here: say a
                # retry's lost reply): 8 does not continue 6, so the follow reads 7 and 8 from Redis, in order.
                await r.append(S, TOKEN, _entries(7, 8))
                reader.appended(S, _entries(8, 8))
                assert _ids(await _take(behind, 2)) == [7, 8]
                reader.appended(S, _entries(8, 8))  # nothing twice
                await r.append(S, TOKEN, _entries(9, 9))
                reader.appended(S, _entries(9, 9))
                assert _ids(await _take(behind, 1)) == [9]
                assert behind.receive_nowait() is None


async def test_a_session_no_longer_owned_here_is_read_from_its_next_owners_stream(redis_url: str) -> None:
    with trio.fail_after(10):
        async with CountingEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            reader = FanOutReader(r, "node-a", block_ms=30_000)
            reader.own(S, 0)
            async with _running(reader):
                follow = reader.subscribe(S, 0)
                await r.append(S, TOKEN, _entries(1, 2))
                reader.appended(S, _entries(1, 2))
                assert _ids(await _take(follow, 2)) == [1, 2]
                await r.set_owner(S, "node-b:2")  # another node took it over and writes on
                await r.append(S, "node-b:2", _entries(3, 4))
                reader.disown(S)  # the lease round (or the refused append) says so
                assert _ids(await _take(follow, 2)) == [3, 4]


# ----------------------------------------------------------------------------------------- Redis away


class Proxy:
    """A TCP proxy to Redis that can be taken down (every connection cut, none accepted) and back up."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._up = trio.Event()
        self._scope: trio.CancelScope | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._up.set()
        while True:
            await self._up.wait()
            with trio.CancelScope() as self._scope:
                listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
                self.port = listeners[0].socket.getsockname()[1]
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trio.serve_listeners, self._handle, listeners)
                    task_status.started()
                    task_status = trio.TASK_STATUS_IGNORED

    def down(self) -> None:
        self._up = trio.Event()
        assert self._scope is not None
        self._scope.cancel()

    def up(self) -> None:
        self._up.set()

    async def _handle(self, client: trio.SocketStream) -> None:
        async with client, await trio.open_tcp_stream("127.0.0.1", self.target_port) as server, \
                trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
            nursery.start_soon(self._pump, server, client, nursery.cancel_scope)

    @staticmethod
    async def _pump(source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope) -> None:
        try:
            async for chunk in source:
                await sink.send_all(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


def _via(proxy: Proxy, redis_url: str) -> str:
    db = redis_url.rsplit("/", 1)[1]
    userinfo = redis_url.partition("://")[2].rpartition("@")[0]
    return f"redis://{userinfo + '@' if userinfo else ''}127.0.0.1:{proxy.port}/{db}"


def _port(redis_url: str) -> int:
    return int(redis_url.rsplit(":", 1)[1].split("/")[0])


async def test_the_publisher_keeps_its_buffer_while_redis_is_away(redis_url: str) -> None:
    proxy = Proxy(_port(redis_url))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            async with CountingEvents(_via(proxy, redis_url), timeout=2) as r:
                await r.set_owner(S, TOKEN)
                publisher = EventPublisher(r)
                async with _running(publisher):
                    publisher.publish_nowait(S, TOKEN, Event("t", {}, id=1))
                    await publisher.wait_flushed()
                    proxy.down()
                    for n in range(2, 6):
                        publisher.publish_nowait(S, TOKEN, Event("t", {}, id=n))
                    await r.failed.wait()
                    assert publisher.buffered == 4
                    proxy.up()
                    await publisher.wait_flushed()
                    assert _ids(await r.read_after(S, 0)) == [1, 2, 3, 4, 5]
            nursery.cancel_scope.cancel()


async def test_the_reader_resumes_where_it_stopped_after_redis_was_away(redis_url: str) -> None:
    proxy = Proxy(_port(redis_url))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery, RedisEvents(redis_url) as writer:
            await nursery.start(proxy.run)
            await writer.set_owner(S, TOKEN)
            async with CountingEvents(_via(proxy, redis_url), timeout=2) as r:
                reader = FanOutReader(r, "node-a")
                follow = reader.subscribe(S, 0)
                async with _running(reader):
                    await writer.append(S, TOKEN, _entries(1, 2))
                    assert _ids(await _take(follow, 2)) == [1, 2]
                    proxy.down()
                    await r.failed.wait()
                    await writer.append(S, TOKEN, _entries(3, 4))  # appended while the reader is cut off
                    proxy.up()
                    await writer.append(S, TOKEN, _entries(5, 5))
                    assert _ids(await _take(follow, 3)) == [3, 4, 5]  # nothing lost, nothing twice
            nursery.cancel_scope.cancel()
