"""Server-Sent Events: cursor parsing and the frame stream of one subscription."""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio

from actors import Event, Subscription
from actors.timeouts import PerRun

KEEPALIVE_SECONDS = 15.0
MAX_SAFE_INTEGER = 2**53 - 1
_MAX_CURSOR_DIGITS = len(str(MAX_SAFE_INTEGER))  # 16


def parse_cursor(raw: str | None) -> int | None:
    """A ``Last-Event-ID``: a plain decimal up to 2**53-1, otherwise ignored (live only).

    Anything else — empty, signed, exponent or fraction, non-ASCII digits, or too
    long (thousands of digits would trip Python's int-conversion limit) — is
    ``None``, as qwen serve ignores it: the subscription is live only, no replay.
    """
    if raw is None or not raw.isascii() or not raw.isdigit():
        return None
    raw = raw.lstrip("0") or "0"
    if len(raw) > _MAX_CURSOR_DIGITS:
        return None
    value = int(raw)
    return value if value <= MAX_SAFE_INTEGER else None


def encode(event: Event) -> bytes:
    """The Server-Sent Events frame of an event; synthetic events (no id) carry no ``id:`` line."""
    head = b"" if event.id is None else b"id: %d\n" % event.id
    return head + b"event: " + event.type.encode() + b"\ndata: " + event.json() + b"\n\n"


BATCH_BYTES = 64 * 1024  # frames ready together are sent together, up to about this much


class _Stream:
    """One event stream as the keep-alive ticker sees it: whether it sent anything since the last tick."""

    __slots__ = ("subscription", "sent")

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.sent = True  # it has just sent its retry hint


class _Ticker:
    """The keep-alive clock of every event stream of one Trio run with the same ``keepalive``.

    Every ``keepalive / 2`` seconds it nudges (:meth:`Subscription.nudge`) each
    stream that wrote nothing since the tick before, and the stream writes a
    comment: a stream is never silent for more than ``keepalive`` seconds, and
    one that stays idle writes a comment every ``keepalive`` seconds. Unlike a
    timer per wait, the first comment after an event can come as soon as
    ``keepalive / 2`` seconds after it (a stream whose events are 7.5 to 15 s
    apart gets comments it did not before). One task and one deadline for all
    streams: a cancel scope with a deadline around each wait for an event cost
    about 40,000 instructions a wait, 2.9 % of a canonical turn's daemon
    instructions (``bench/bench_turn_instructions.py --fake-native``: 11.54 M
    to 11.21 M). It sleeps without a deadline while no stream is open.
    """

    def __init__(self, keepalive: float) -> None:
        if not keepalive > 0:  # refused by PerRun before its task starts, where an error would end the whole run
            raise ValueError(f"keepalive must be a positive number of seconds, not {keepalive!r}")
        self.period = keepalive / 2
        self.streams: set[_Stream] = set()
        self._lot = trio.lowlevel.ParkingLot()

    def add(self, subscription: Subscription) -> _Stream:
        stream = _Stream(subscription)
        self.streams.add(stream)
        if self._lot:
            self._lot.unpark()
        return stream

    async def run(self) -> None:
        while True:
            if not self.streams:
                await self._lot.park()
                continue
            await trio.sleep(self.period)
            for stream in self.streams:
                if stream.sent:
                    stream.sent = False
                else:
                    stream.subscription.nudge()


_TICKERS: PerRun[float, _Ticker] = PerRun("trellis sse tickers", _Ticker, limit=16,
                                          task_name=lambda _: "sse keep-alive ticker",
                                          too_many="distinct keep-alive periods")


def _ticker(keepalive: float) -> _Ticker:
    """This Trio run's ticker for ``keepalive``, started on first use (a system task: it lives as long as
    the run)."""
    return _TICKERS.get(keepalive)


async def frames(subscription: Subscription, keepalive: float = KEEPALIVE_SECONDS) -> AsyncIterator[bytes]:
    """SSE bytes: a retry hint, then every event; keep-alive comments while idle (see :class:`_Ticker`).

    Events already queued when the stream gets to send are joined into one
    chunk (ids and order unchanged), so a burst costs one send, not one per
    frame.
    """
    ticker = _ticker(keepalive)
    stream = ticker.add(subscription)
    try:
        yield b"retry: 3000\n\n"
        while True:
            event = subscription.get_nowait()
            if event is None:
                try:
                    event = await subscription.get_or_nudged()
                except StopAsyncIteration:
                    return
                if event is None:
                    stream.sent = True
                    yield b": keepalive\n\n"
                    continue
            chunk = [encode(event)]
            size = len(chunk[0])
            while size < BATCH_BYTES and (event := subscription.get_nowait()) is not None:
                chunk.append(encode(event))
                size += len(chunk[-1])
            stream.sent = True
            yield b"".join(chunk)
    finally:
        ticker.streams.discard(stream)
        subscription.close()
