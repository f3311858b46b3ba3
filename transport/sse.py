"""Server-Sent Events: cursor parsing and the frame stream of one subscription."""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio

from actors import Event, Subscription

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


async def frames(subscription: Subscription, keepalive: float = KEEPALIVE_SECONDS) -> AsyncIterator[bytes]:
    """SSE bytes: a retry hint, then every event; keep-alive comments while idle.

    Events already queued when the stream gets to send are joined into one
    chunk (ids and order unchanged), so a burst costs one send, not one per
    frame; and the keep-alive timer is armed only when nothing is ready.
    """
    try:
        yield b"retry: 3000\n\n"
        while True:
            event = subscription.get_nowait()
            if event is None:
                with trio.move_on_after(keepalive):
                    try:
                        event = await subscription.get()
                    except StopAsyncIteration:
                        return
                if event is None:
                    yield b": keepalive\n\n"
                    continue
            chunk = [encode(event)]
            size = len(chunk[0])
            while size < BATCH_BYTES and (event := subscription.get_nowait()) is not None:
                chunk.append(encode(event))
                size += len(chunk[-1])
            yield b"".join(chunk)
    finally:
        subscription.close()
