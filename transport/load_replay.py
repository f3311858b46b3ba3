"""What ``POST /session/:id/load`` shows the client that loaded the session, and only that client.

qwen serve answers a load with the session's replay in the body (``compactedReplay``, ``liveJournal``);
Trellis sends it on the loading client's event stream, as before, but no longer through the session's
bus: publishing it there spliced the old messages into every other open stream (a running turn's
included) and into the bus's own compacted replay. A load now keeps what it showed
(:meth:`actors.SessionHandle.load_replay`: the earlier turns compacted, then the running turn as it
streamed, its pending permission requests among its events) beside the ``clientId`` it hands out. The
first stream of that client from the ``lastEventId`` the load answered gets those events first
(:class:`Replayed`), then the bus's own replay after the id the snapshot ran to (:attr:`LoadReplay.after`),
then live events.

A live load answers that id itself, as it answered the id before the messages it used to publish; a
stream that sends no ``X-Qwen-Client-Id`` from there takes the load's replay too (:attr:`LoadReplay.by_cursor`),
as it got those messages then. A session restored by the load answers ``0``, as before: a stream from ``0``
without the client's id gets the bus's replay from the start (``state_resync_required``, then the compacted
turns), and one from any other id goes on after it, as before. A stream with another client's id never
takes a load's replay. Each replay goes out once, and is dropped after :data:`KEPT_SECONDS`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

import attrs

from actors import Event, Subscription, wire

KEPT_SECONDS = 120.0  # how long a load's replay waits for its client's stream


@attrs.define
class LoadReplay:
    """What one load showed its client first (``events``, ids up to ``after``), the ``lastEventId`` it
    answered (``cursor``: ``after``, or ``0`` for a session it restored), and the bus's epoch."""

    events: Sequence[Event]
    after: int
    cursor: int
    epoch: str
    by_cursor: bool  # a stream without a client id from ``cursor`` takes it too (a live load)
    until: float = attrs.field(factory=lambda: time.monotonic() + KEPT_SECONDS)

    def expired(self, now: float) -> bool:
        return now > self.until

    def fits(self, cursor: int | None, epoch: str | None) -> bool:
        """A stream from ``cursor`` (and ``epoch``, when it names one) is the one this load answered."""
        return cursor == self.cursor and (epoch is None or epoch == self.epoch)


class Replayed:
    """A subscription behind a load's replay: those events first, then the subscription's own (its replay
    after the cursor, whose ``replay_complete`` counts both, then live events). Read by
    :func:`transport.sse.frames` as it reads a :class:`~actors.Subscription`."""

    def __init__(self, subscription: Subscription, events: Sequence[Event]) -> None:
        self._subscription = subscription
        self._first = deque(events)
        self._counted = sum(1 for e in events if e.id is not None)

    def get_nowait(self) -> Event | None:
        if self._first:
            return self._first.popleft()
        return self._count(self._subscription.get_nowait())

    async def get_or_nudged(self) -> Event | None:
        if self._first:
            return self._first.popleft()
        return self._count(await self._subscription.get_or_nudged())

    def _count(self, event: Event | None) -> Event | None:
        if event is not None and self._counted and event.type == "replay_complete" and event.id is None:
            data = event.data
            event = wire.replay_complete(data["replayedCount"] + self._counted, data["lastReplayedEventId"],
                                         data["lastEventId"])
            self._counted = 0
        return event

    def nudge(self) -> None:
        self._subscription.nudge()

    def close(self) -> None:
        self._subscription.close()
