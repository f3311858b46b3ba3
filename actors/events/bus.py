"""A session's event bus: ids from 1, an epoch, a raw ring, a compacted replay, bounded subscribers.

The bus is a data structure, not an actor: ``publish`` is synchronous and never
blocks the publisher. Each subscriber owns a live queue bounded in frames and
in bytes; one that falls behind is warned once either is three quarters full
and evicted (with a terminal ``client_evicted`` frame) when it overflows, so a
slow reader never slows the session or the other readers.

The ring is never rewritten: a replay from any cursor inside it is exactly the
live stream from there. Replay follows qwen-code's daemon: a cursor from
another epoch or ahead of the bus, or one whose next event has left the ring,
first gets ``state_resync_required``; then the whole ring when it still holds
every event of this bus, otherwise the compacted replay of earlier turns
(:mod:`.compaction`) followed by the running turn's raw events from the ring.
Every replay ends with ``replay_complete``. Synthetic frames carry no id.

A restored session *seeds* its bus with the compacted turns read from disk:
they take the first ids, stay out of the ring and are served like turns that
have left it (reason ``seeded_replay_not_in_ring``).
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import trio

from .. import wire
from ..wire import Event
from .compaction import DEFAULT_MAX_BYTES as DEFAULT_REPLAY_BYTES
from .compaction import TurnCompactor

log = logging.getLogger("trellis.events")

DEFAULT_RING_SIZE = 8000
# The ring's events, encoded, together: 8,000 events of background output (up to a few KB each) would be tens
# of MiB a session. Past it the oldest go, as past DEFAULT_RING_SIZE; the newest always stays.
DEFAULT_RING_BYTES = 8 * 2**20
DEFAULT_MAX_QUEUED = 256
DEFAULT_MAX_QUEUED_BYTES = 2 * 1024 * 1024  # as qwen serve
MAX_SUBSCRIBERS = 128  # limits.maxSubscribers: a team watching one session, each bounded in bytes


class TooManySubscribers(Exception):
    """The bus already has its maximum number of subscribers."""


class Subscription:
    """An async iterator of events: the replay, then live events, then a terminal frame."""

    def __init__(self, bus: EventBus, max_queued: int, replay: deque[Event],
                 max_bytes: int = DEFAULT_MAX_QUEUED_BYTES) -> None:
        self._bus = bus
        self._replay = replay  # replay frames are pushed whole, not bounded by the live queue
        self._live: deque[Event] = deque()
        self._live_bytes = 0
        self._max = max_queued
        self._max_bytes = max_bytes
        self._warn_at = max(1, (max_queued * 3) // 4)
        self._rearm_at = (max_queued * 3) // 8
        self._warn_bytes_at = (max_bytes * 3) // 4
        self._rearm_bytes_at = (max_bytes * 3) // 8
        self._warned = False
        self._closed = False
        self._nudged = False
        self._lot = trio.lowlevel.ParkingLot()
        self.evicted = False

    # -- the publisher's side (synchronous)

    def _push(self, event: Event) -> None:
        if self._closed:
            return
        live = self._live
        size = len(event.json())
        # The byte cap admits one event into an empty queue whatever its size, or a single
        # large event could never be delivered at all.
        reason = "queue_overflow" if len(live) >= self._max else \
            "queue_bytes_overflow" if live and self._live_bytes + size > self._max_bytes else None
        if reason is not None:
            # What is queued stays deliverable (contiguous ids, then the warning), so the
            # client can resume from the last id it read; the overflowing event is not queued.
            live.append(wire.client_evicted(reason, len(live), self._max, self._live_bytes, self._max_bytes,
                                            event.id or 0, size if reason == "queue_bytes_overflow" else None))
            self.evicted = True
            self._end()
            if self._bus.on_evicted is not None:
                self._bus.on_evicted(reason)  # counted (actors.telemetry)
            return
        live.append(event)
        self._live_bytes += size
        n = len(live)
        if not self._warned and (n >= self._warn_at or self._live_bytes >= self._warn_bytes_at):
            self._warned = True
            by_frames, by_bytes = n >= self._warn_at, self._live_bytes >= self._warn_bytes_at
            threshold = "frames_and_bytes" if by_frames and by_bytes else "frames" if by_frames else "bytes"
            live.append(wire.slow_client_warning(n, self._max, self._live_bytes, self._max_bytes, event.id or 0,
                                                 threshold))
        if self._lot:
            self._lot.unpark()

    def _end(self) -> None:
        self._closed = True
        bus = self._bus
        bus._needs_prune = True  # removed after the current fan-out, never during it
        if not bus._publishing:
            bus._prune()
        self._lot.unpark_all()

    # -- the reader's side

    @property
    def queued(self) -> int:
        return len(self._replay) + len(self._live)

    def get_nowait(self) -> Event | None:
        """The next event if one is ready, else ``None``."""
        if self._replay:
            return self._replay.popleft()
        if self._live:
            event = self._live.popleft()
            if event.id is not None:
                self._live_bytes -= len(event.json())
            if self._warned and len(self._live) <= self._rearm_at and self._live_bytes <= self._rearm_bytes_at:
                self._warned = False
            return event
        return None

    async def get(self) -> Event:
        """The next event; raises ``StopAsyncIteration`` once the stream has ended."""
        while True:
            event = self.get_nowait()
            if event is not None:
                return event
            if self._closed:
                raise StopAsyncIteration
            await self._lot.park()

    async def get_or_nudged(self) -> Event | None:
        """The next event, or ``None`` if :meth:`nudge` came first while nothing was queued; raises
        ``StopAsyncIteration`` once the stream has ended.

        A reader's timeout without a cancel scope of its own: one task can time every reader out
        (``transport/sse.py``'s keep-alive ticker), where a scope with a deadline around each wait
        cost about 40,000 instructions.
        """
        while True:
            event = self.get_nowait()
            if event is not None:
                self._nudged = False  # the reader is not idle: a nudge meant for idleness is void
                return event
            if self._closed:
                raise StopAsyncIteration
            if self._nudged:
                self._nudged = False
                return None
            await self._lot.park()

    def nudge(self) -> None:
        """Wake the reader waiting in :meth:`get_or_nudged` with ``None``; nothing if no reader waits (one
        busy sending is not idle, and must not get a stale ``None`` when it next asks)."""
        if self._lot:
            self._nudged = True
            self._lot.unpark()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        return await self.get()

    def close(self) -> None:
        """Stop receiving; queued events are still delivered, then the stream ends."""
        if not self._closed:
            self._end()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


_NO_EVENTS: deque[Event] = deque(maxlen=0)  # the ring of a bus that has published nothing yet (never appended to)


class EventBus:
    """Per-session events with monotonic ids, an epoch, a ring and subscribers."""

    def __init__(
        self,
        ring_size: int = DEFAULT_RING_SIZE,
        *,
        epoch: str | None = None,
        clock_ms: Callable[[], int] = wire.wall_clock_ms,
        max_subscribers: int = MAX_SUBSCRIBERS,
        replay_bytes: int = DEFAULT_REPLAY_BYTES,
        ring_bytes: int = DEFAULT_RING_BYTES,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
    ) -> None:
        if ring_size < 1:
            raise ValueError("ring_size must be at least 1")
        self.epoch = epoch or secrets.token_hex(16)
        self._ring_size = ring_size
        self._ring_bytes_max = ring_bytes
        self._ring_bytes = 0  # the ring's events, encoded, together
        self._ring: deque[Event] | None = None  # made by the first event: an idle session's bus has none
        self.compactor = TurnCompactor(replay_bytes)
        self._next_id = 1
        self._seeded_through = 0  # ids up to this one were seeded from disk, never in the ring
        self._seeded = False
        self._subscribers: list[Subscription] = []
        self._clock_ms = clock_ms
        self._max_subscribers = max_subscribers
        self._max_queued_bytes = max_queued_bytes
        self.closed = False
        self._needs_prune = False
        self._publishing = False
        self.had_subscribers = False  # someone has subscribed at some point
        self.on_last_unsubscribe: Callable[[], Any] | None = None
        self.on_turn_compacted: Callable[[list[Event]], Any] | None = None  # a turn folded: e.g. write it down
        self.observers: list[Callable[[Event], Any]] = []
        self.on_evicted: Callable[[str], Any] | None = None  # a subscriber was evicted, for this reason

    @property
    def ring(self) -> deque[Event]:
        """The latest events, oldest first (read-only: :meth:`publish` appends)."""
        return self._ring if self._ring is not None else _NO_EVENTS

    @property
    def last_event_id(self) -> int:
        return self._next_id - 1

    @property
    def earliest_available_id(self) -> int:
        return self.ring[0].id if self.ring else self._next_id  # type: ignore[return-value]

    @property
    def subscriber_count(self) -> int:
        self._prune()
        return len(self._subscribers)

    def _prune(self) -> None:
        if self._needs_prune:
            self._needs_prune = False
            had = len(self._subscribers)
            self._subscribers = [s for s in self._subscribers if not s._closed]
            if had and not self._subscribers and self.on_last_unsubscribe is not None:
                self.on_last_unsubscribe()  # every client went away

    def publish(self, type: str, data: dict[str, Any], prompt_id: str | None = None,
                originator: str | None = None) -> Event:
        """Stamp, store and fan out one event; returns it (with its id). Never blocks.

        ``originator`` is the client id that admitted the prompt, sent as the envelope's ``originatorClientId``.
        """
        event = Event(type, data, prompt_id, self._next_id, self._clock_ms(), originator)
        size = len(event.json())  # encoded once, here: every byte cap and every subscriber uses it
        self._next_id += 1
        ring = self._ring
        if ring is None:
            ring = self._ring = deque(maxlen=self._ring_size)
        elif len(ring) == self._ring_size:
            self._ring_bytes -= len(ring[0].json())  # the append evicts it
        ring.append(event)
        self._ring_bytes += size
        while self._ring_bytes > self._ring_bytes_max and len(ring) > 1:
            self._ring_bytes -= len(ring.popleft().json())
        turn_start = self.compactor.turn_start_id
        segment = self.compactor.ingest(event)
        if segment is not None and turn_start is not None:
            for kept in reversed(self._ring):  # the turn just folded: its events keep their frames only
                if kept.id < turn_start:  # type: ignore[operator]
                    break
                kept.release_data()
        if segment is not None and self.on_turn_compacted is not None:
            self.on_turn_compacted(segment)
        for observe in self.observers:
            try:
                observe(event)
            except Exception:  # a watcher's fault (a metric, a recorder) must not cost the session its event
                log.exception("an observer of session events failed on %s", type)
        self._publishing = True
        try:
            for sub in self._subscribers:
                sub._push(event)
        finally:
            self._publishing = False
        self._prune()
        return event

    def subscribe(
        self, last_event_id: int | None = None, epoch: str | None = None, max_queued: int = DEFAULT_MAX_QUEUED
    ) -> Subscription:
        """Open a subscription. Without a cursor it is live only; with one it replays first."""
        self._prune()
        if len(self._subscribers) >= self._max_subscribers:
            raise TooManySubscribers(f"at most {self._max_subscribers} subscribers per session")
        replay: deque[Event] = deque()
        if last_event_id is not None:
            replay.extend(self._replay_from(last_event_id, epoch))
        sub = Subscription(self, max_queued, replay, self._max_queued_bytes)
        if self.closed:
            if last_event_id is None:
                sub._replay.append(self.ring[-1])  # the terminal event, so the stream never ends in silence
            sub._closed = True
        else:
            self._subscribers.append(sub)
            self.had_subscribers = True
        return sub

    def seed(self, segments: Iterable[list[Event]]) -> int:
        """Start a restored bus from folded turns read from disk; returns how many events it took.

        The events get this bus's first ids (their order kept) — or, after
        :meth:`continue_after`, the ids just up to where the stream stopped — and
        go to the compacted replay only: the ring starts empty, with the first live event.
        """
        if not self.seedable:
            raise RuntimeError("a bus is seeded before its first event")
        self._seeded = True
        segments = [list(segment) for segment in segments]
        count = sum(len(segment) for segment in segments)
        floor = self._next_id - 1  # continue_after's: the seeded turns end there, where the stream was
        next_id = max(1, floor - count + 1)
        renumbered: list[list[Event]] = []
        for segment in segments:
            events = []
            for e in segment:
                events.append(Event(e.type, e.data, e.prompt_id, next_id, e.ts_ms))
                next_id += 1
            renumbered.append(events)
        self._next_id = max(next_id, self._next_id)
        self._seeded_through = self._next_id - 1
        self.compactor.seed(renumbered)
        return self._seeded_through

    @property
    def seedable(self) -> bool:
        """Nothing published or seeded yet (:meth:`continue_after` aside)."""
        return (not self._seeded or self.last_event_id == 0) and not self.ring \
            and self._next_id == self._seeded_through + 1

    def continue_after(self, last_id: int) -> None:
        """Go on from ``last_id`` (before the first event): a cluster's next owner continues the session's
        stream where the last one stopped, so a client that saw event ``last_id`` misses nothing and sees
        nothing twice. Earlier ids are treated as seeded (a cursor before them gets a resync)."""
        if not self.seedable:
            raise RuntimeError("a bus continues a stream before its first event")
        if last_id >= self._next_id:
            self._next_id = last_id + 1
            self._seeded_through = last_id

    @property
    def ring_is_whole(self) -> bool:
        """The ring still holds every event this bus has published (nothing evicted, nothing seeded)."""
        return self._seeded_through == 0 and (not self.ring or self.ring[0].id == 1)

    def _replay_from(self, cursor: int, epoch: str | None) -> list[Event]:
        frames: list[Event] = []
        earliest = self.earliest_available_id
        reason = None
        if (epoch is not None and epoch != self.epoch) or cursor > self.last_event_id:
            reason = "epoch_reset"
        elif cursor < earliest - 1:
            reason = "seeded_replay_not_in_ring" if cursor < self._seeded_through and not self.ring \
                else "ring_evicted"
        if reason is None:
            replayed = self.events_after(cursor)
        else:
            frames.append(wire.state_resync_required(reason, cursor, earliest))
            replayed = list(self.ring) if self.ring_is_whole else self.resync_replay()
        frames.extend(replayed)
        ids = [e.id for e in replayed if e.id is not None]
        last_replayed = ids[-1] if ids else (cursor if reason is None else 0)
        frames.append(wire.replay_complete(len(ids), last_replayed, self.last_event_id))
        return frames

    def events_after(self, cursor: int) -> list[Event]:
        """The ring's events after ``cursor`` (ids in the ring are contiguous, so this is a slice)."""
        if not self.ring:
            return []
        start = max(0, cursor + 1 - self.ring[0].id)  # type: ignore[operator]
        return list(itertools.islice(self.ring, start, None))

    def resync_replay(self) -> list[Event]:
        """What a client that lost its place gets: earlier turns compacted, then the running turn raw."""
        events = self.compactor.compacted()
        start = self.compactor.turn_start_id
        if start is None:  # between turns: everything is folded
            return events
        earliest = self.earliest_available_id
        if start < earliest:  # the running turn began before the ring's oldest event
            events.append(wire.history_truncated(earliest - start, len(self.ring), max_bytes=self._ring_bytes_max,
                                                 max_events=self._ring_size, scope="live_journal"))
        events.extend(self.events_after(max(start, earliest) - 1))
        return events

    def close_with(self, type: str, data: dict[str, Any]) -> None:
        """Publish a terminal event, then end every subscription."""
        if self.closed:
            return
        self.publish(type, data)
        self.closed = True
        for sub in self._subscribers:
            sub._end()
        self._prune()
