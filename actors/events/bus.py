"""A session's event bus: ids from 1, an epoch, a bounded ring, bounded subscribers.

The bus is a data structure, not an actor: ``publish`` is synchronous and never
blocks the publisher. Each subscriber owns a bounded live queue; one that falls
behind is warned once it is three quarters full and evicted (with a terminal
``client_evicted`` frame) when it overflows, so a slow reader never slows the
session or the other readers.

Replay follows qwen-code's daemon: a cursor from another epoch or ahead of the
bus, or one whose next event has left the ring, first gets
``state_resync_required`` and the whole ring; every replay ends with
``replay_complete``. Synthetic frames carry no id.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from .. import wire
from . import compaction
from ..wire import Event

DEFAULT_RING_SIZE = 8000
DEFAULT_MAX_QUEUED = 256
MAX_SUBSCRIBERS = 64


class TooManySubscribers(Exception):
    """The bus already has its maximum number of subscribers."""


class Subscription:
    """An async iterator of events: the replay, then live events, then a terminal frame."""

    def __init__(self, bus: EventBus, max_queued: int, replay: deque[Event]) -> None:
        self._bus = bus
        self._replay = replay  # replay frames are pushed whole, not bounded by the live queue
        self._live: deque[Event] = deque()
        self._max = max_queued
        self._warn_at = max(1, (max_queued * 3) // 4)
        self._rearm_at = (max_queued * 3) // 8
        self._warned = False
        self._closed = False
        self._lot = trio.lowlevel.ParkingLot()
        self.evicted = False

    # -- the publisher's side (synchronous)

    def _push(self, event: Event) -> None:
        if self._closed:
            return
        live = self._live
        if len(live) >= self._max:
            # What is queued stays deliverable (contiguous ids, then the warning), so the
            # client can resume from the last id it read; the overflowing event is not queued.
            live.append(wire.client_evicted(len(live), self._max))
            self.evicted = True
            self._end()
            return
        live.append(event)
        n = len(live)
        if n >= self._warn_at and not self._warned:
            self._warned = True
            live.append(wire.slow_client_warning(n, self._max))
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
            if self._warned and len(self._live) <= self._rearm_at:
                self._warned = False
            return self._live.popleft()
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


class EventBus:
    """Per-session events with monotonic ids, an epoch, a ring and subscribers."""

    def __init__(
        self,
        ring_size: int = DEFAULT_RING_SIZE,
        *,
        epoch: str | None = None,
        clock_ms: Callable[[], int] = wire.wall_clock_ms,
        max_subscribers: int = MAX_SUBSCRIBERS,
    ) -> None:
        if ring_size < 1:
            raise ValueError("ring_size must be at least 1")
        self.epoch = epoch or secrets.token_hex(16)
        self.ring: deque[Event] = deque(maxlen=ring_size)
        self._next_id = 1
        self._subscribers: list[Subscription] = []
        self._clock_ms = clock_ms
        self._max_subscribers = max_subscribers
        self.closed = False
        self._needs_prune = False
        self._publishing = False
        self.had_subscribers = False  # someone has subscribed at some point
        self.on_last_unsubscribe: Callable[[], Any] | None = None
        self.observers: list[Callable[[Event], Any]] = []

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

    def publish(self, type: str, data: dict[str, Any], prompt_id: str | None = None) -> Event:
        """Stamp, store and fan out one event; returns it (with its id). Never blocks."""
        event = Event(type, data, prompt_id, self._next_id, self._clock_ms())
        self._next_id += 1
        self.ring.append(event)
        for observe in self.observers:
            observe(event)
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
        sub = Subscription(self, max_queued, replay)
        if self.closed:
            if last_event_id is None:
                sub._replay.append(self.ring[-1])  # the terminal event, so the stream never ends in silence
            sub._closed = True
        else:
            self._subscribers.append(sub)
            self.had_subscribers = True
        return sub

    def _replay_from(self, cursor: int, epoch: str | None) -> list[Event]:
        frames: list[Event] = []
        earliest = self.earliest_available_id
        reason = None
        if (epoch is not None and epoch != self.epoch) or cursor > self.last_event_id:
            reason = "epoch_reset"
        elif cursor < earliest - 1:
            reason = "ring_evicted"
        if reason is not None:
            frames.append(wire.state_resync_required(reason, cursor, earliest))
            cursor = 0
        replayed = [e for e in self.ring if e.id > cursor]  # type: ignore[operator]
        frames.extend(replayed)
        last_replayed = replayed[-1].id if replayed else cursor
        frames.append(wire.replay_complete(len(replayed), last_replayed, self.last_event_id))  # type: ignore[arg-type]
        return frames

    def compact_turn(self, prompt_id: str) -> None:
        """Fold one finished turn's events in the ring (see :mod:`.compaction`)."""
        self.ring = deque(compaction.compact(self.ring, prompt_id), maxlen=self.ring.maxlen)

    def close_with(self, type: str, data: dict[str, Any]) -> None:
        """Publish a terminal event, then end every subscription."""
        if self.closed:
            return
        self.publish(type, data)
        self.closed = True
        for sub in self._subscribers:
            sub._end()
        self._prune()
