"""A session's events on a node that does not own it: replayed from Redis after a cursor, then tailed live.

The same rules as the owner's bus (:meth:`actors.events.bus.EventBus.subscribe`)
over the session's Redis stream (:mod:`.events`), whose ids are the session's
event ids:

    the client sends                          it gets
    ----------------------------------------  ---------------------------------------------------------
    no cursor                                 live events only
    cursor k, its epoch, the stream has k+1   events k+1 … last, ``replay_complete``, then live
    another epoch, or k beyond the last id    ``state_resync_required`` (epoch_reset), the whole stream,
                                              ``replay_complete``, then live
    k older than the stream's first entry     ``state_resync_required`` (ring_evicted), the whole stream,
                                              ``replay_complete``, then live

While tailing, an id that skips (the owner's publisher dropped events when
Redis could not keep up) is announced with ``state_resync_required`` before the
event, and the stream ends after ``session_closed``, as on the owner (the
session closed, or its node handed it over: the client reconnects anywhere
with its cursor). A follower that falls too far behind is ended; it reconnects
with its cursor like any SSE client, told so by ``client_evicted`` as on the
owner (``?maxQueued=`` sets how far behind, 16 to 2,048 entries; 1,024 by default).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import trio

from .. import wire
from ..wire import Event
from .events import FollowOverflow, StreamEvent

if TYPE_CHECKING:
    from .events import Follow
    from .node import ClusterNode


def _event(entry: StreamEvent) -> Event:
    return Event.encoded(entry.type, entry.id, entry.data, entry.prompt_id)


class RemoteSubscription:
    """The subscription interface :func:`transport.sse.frames` reads (``get_nowait``, ``get``,
    ``get_or_nudged``, ``nudge``, ``close``)."""

    def __init__(self, replay: list[Event], follow: Follow, last_id: int, queued_limit: int = 0) -> None:
        self._queued_limit = queued_limit
        self._replay = deque(replay)
        self._follow = follow
        self._last = last_id
        self._ended = False
        self._pending: Event | None = None
        self._nudged = False
        self._waiting: trio.CancelScope | None = None  # get_or_nudged's wait, which a nudge ends

    def _take(self, entry: StreamEvent) -> Event:
        event = _event(entry)
        if self._last and entry.id > self._last + 1:
            self._pending = event  # the gap is said first
            gap = wire.state_resync_required("ring_evicted", self._last, entry.id)
            self._last = entry.id
            return gap
        self._last = entry.id
        return event

    def _next_ready(self) -> Event | None:
        if self._pending is not None:
            event, self._pending = self._pending, None
            return self._ended_after(event)
        if self._replay:
            return self._replay.popleft()
        return None

    def _ended_after(self, event: Event) -> Event:
        if event.type == "session_closed":
            self._ended = True
        return event

    def get_nowait(self) -> Event | None:
        ready = self._next_ready()
        if ready is not None or self._ended:
            return ready
        entry = self._follow.receive_nowait()
        return None if entry is None else self._ended_after(self._take(entry))

    async def get(self) -> Event:
        ready = self._next_ready()
        if ready is not None:
            return ready
        if self._ended:
            raise StopAsyncIteration
        try:
            entry = await self._follow.__anext__()
        except FollowOverflow:
            # Said, as the owner's bus says it, so the client knows to reconnect with its cursor.
            self._ended = True
            return wire.client_evicted("queue_overflow", self._queued_limit, self._queued_limit, 0, 0, self._last)
        return self._ended_after(self._take(entry))

    async def get_or_nudged(self) -> Event | None:
        """As :meth:`actors.events.bus.Subscription.get_or_nudged`: the next event, or ``None`` when
        :meth:`nudge` came first (the follower's wait is a memory channel's: cancelling it loses nothing)."""
        while True:
            event = self.get_nowait()
            if event is not None:
                self._nudged = False
                return event
            if self._nudged:
                self._nudged = False
                return None
            try:
                with trio.CancelScope() as self._waiting:
                    return await self.get()
            finally:
                self._waiting = None
            # nudged while waiting: look again (an event that came with the nudge is returned first)

    def nudge(self) -> None:
        """Wake a reader waiting in :meth:`get_or_nudged` with ``None``; nothing if none waits."""
        if self._waiting is not None:
            self._nudged = True
            self._waiting.cancel()

    def close(self) -> None:
        self._follow.close()


async def remote_subscription(node: ClusterNode, session_id: str, cursor: int | None, epoch: str | None,
                              max_queued: int | None = None) -> tuple[str | None, RemoteSubscription]:
    """The session's epoch and a subscription from ``cursor`` (see the module docstring)."""
    event_epoch = await node.event_epoch(session_id)
    events = node.events
    last = await events.last_id(session_id)
    replay: list[Event] = []
    after = last
    if cursor is not None:
        reason = None
        first = await events.first_id(session_id)
        if (epoch is not None and epoch != event_epoch) or cursor > last:
            reason = "epoch_reset"
        elif first is not None and cursor < first - 1:
            reason = "ring_evicted"
        entries = await events.read_after(session_id, 0 if reason else cursor)
        if reason is not None:
            replay.append(wire.state_resync_required(reason, cursor, first or last + 1))
        replay.extend(_event(e) for e in entries)
        after = entries[-1].id if entries else (cursor if reason is None else last)
        last_replayed = entries[-1].id if entries else (cursor if reason is None else 0)
        replay.append(wire.replay_complete(len(entries), last_replayed, max(last, after)))
    follow = node.reader.subscribe(session_id, after, max_queued)
    return event_epoch, RemoteSubscription(replay, follow, after, max_queued or node.reader.max_queued)
