"""What one ACP-over-HTTP SSE stream carries, and what waits for it while no stream is attached.

Frames that come from bus events carry the event id (the SSE ``id:``, the
client's ``Last-Event-ID``); replies and requests of our own carry none. While
no stream is attached, at most ``limit`` frames wait; past that the oldest
id-bearing frame goes first (a resuming client gets it back from the ring),
then the oldest of any kind. A stream that falls ``limit`` frames behind is
ended, so its client resumes from the ring instead of silently missing frames.

Attaching with a cursor *resumes*: the ring replay goes out first, then the
frames of our own that waited (a ``session/prompt`` answer among them), so an
answer never overtakes the updates that precede it.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

import attrs
import orjson
import trio

MAX_BUFFERED = 256
END = object()
KEEPALIVE = object()


@attrs.frozen
class Frame:
    message: dict[str, Any]
    event_id: int | None = None

    def sse(self) -> bytes:
        head = b"" if self.event_id is None else b"id: %d\n" % self.event_id
        return head + b"data: " + orjson.dumps(self.message) + b"\n\n"


class Outbox:
    """The frames of one stream (the connection's, or one session's)."""

    def __init__(self, limit: int = MAX_BUFFERED) -> None:
        self._replay: deque[Frame] = deque()  # a resume's replay, sent whole before anything else
        self._frames: deque[Frame] = deque()
        self._limit = limit
        self._lot = trio.lowlevel.ParkingLot()
        self._tokens = itertools.count(1)
        self._stream = 0  # the token of the attached stream; 0 when none is
        self._kicked = 0  # the token of a stream ended for falling behind (its end still counts as a drop)
        self.skip_through = 0  # bus events up to this id went out in a replay already
        self.dropped = 0

    @property
    def attached(self) -> bool:
        return self._stream != 0

    @property
    def pending(self) -> int:
        return len(self._replay) + len(self._frames)

    def push(self, message: dict[str, Any], event_id: int | None = None) -> None:
        if event_id is not None and event_id <= self.skip_through:
            return
        if len(self._frames) >= self._limit:
            self._drop_one()
            if self._stream:
                # Too slow: end its stream; its client resumes from the ring.
                self._kicked, self._stream = self._stream, 0
        self._frames.append(Frame(message, event_id))
        self._lot.unpark_all()

    def _drop_one(self) -> None:
        self.dropped += 1
        for i, frame in enumerate(self._frames):
            if frame.event_id is not None:
                del self._frames[i]
                return
        self._frames.popleft()

    def attach(self, replay: list[Frame] | None = None, *, skip_through: int = 0,
               resend: list[dict[str, Any]] = ()) -> int:  # type: ignore[assignment]
        """Attach a new stream (a previous one ends); returns its token.

        ``replay`` (a resume) replaces the waiting id-bearing frames, which it covers;
        ``resend`` are requests of ours the client may have lost with its old stream.
        """
        token = next(self._tokens)
        self._stream, self._kicked = token, 0
        if replay is not None:
            kept = [f for f in self._frames if f.event_id is None]
            waiting_ids = {f.message.get("id") for f in kept if "method" in f.message}
            kept += [Frame(m) for m in resend if m.get("id") not in waiting_ids]
            self._replay = deque(replay)
            self._frames = deque(kept)
            self.skip_through = max(self.skip_through, skip_through)
        self._lot.unpark_all()
        return token

    def detach(self, token: int) -> bool:
        """The stream with ``token`` ended; ``True`` if it was the attached one."""
        if token == 0 or token not in (self._stream, self._kicked):
            return False
        if self._stream == token:
            self._stream = 0
        self._kicked = 0
        return True

    def close(self) -> None:
        """End the attached stream, if any, for good."""
        self._stream = self._kicked = 0
        self._lot.unpark_all()

    async def next(self, token: int, keepalive: float) -> Any:
        """The next frame for stream ``token``; ``KEEPALIVE`` after ``keepalive`` idle seconds; ``END``."""
        while True:
            if self._stream != token:
                return END
            if self._replay:
                return self._replay.popleft()
            if self._frames:
                return self._frames.popleft()
            with trio.move_on_after(keepalive) as scope:
                await self._lot.park()
            if scope.cancelled_caught:
                return KEEPALIVE
