"""Answering one POST as ``text/event-stream``: notifications while it works, then the response.

Streamable HTTP lets a server answer a POSTed request either with one JSON
body or with an SSE stream that carries notifications related to it and ends
with its response. The daemon streams only when that buys something: a
``tools/call`` carrying ``_meta.progressToken`` from a client whose
``Accept`` lists ``text/event-stream``. Everything else stays JSON.

The exchange runs in a task of its own (:meth:`EventStream.produce`, started
in a long-lived nursery) and the response body only reads a channel
(:meth:`EventStream.frames`): a generator must not hold a nursery open across
its ``yield``s. The stream is not resumable — its events carry no ``id``, so
a client that loses it gets an error rather than trying to resume with a GET
that this server answers 405 — and a client that goes away does not cancel
the call (the spec says a disconnect is not a cancellation); the call runs to
its end and its answer is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio

from actors.wire import jsonrpc

log = logging.getLogger("trellis.mcp")

KEEPALIVE_SECONDS = 15.0
BUFFER = 64  # notifications waiting for a slow reader; past that, progress is dropped (it is lossy anyway)
HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

# ``(notify) -> the JSON-RPC answer`` (one response object, or a batch's array of them)
Run = Callable[[Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[Any]]


def accepts_event_stream(accept: str | None) -> bool:
    """Whether an ``Accept`` header lists ``text/event-stream`` (with a non-zero ``q``).

    Wildcards don't count: ``*/*`` is what a client sends that never thought about
    MCP's streams, and it gets the JSON it can read.
    """
    for item in (accept or "").split(","):
        media, *options = (part.strip() for part in item.split(";"))
        if media.lower() != "text/event-stream":
            continue
        for option in options:
            key, _, value = option.partition("=")
            if key.strip().lower() == "q":
                try:
                    if float(value) <= 0:
                        break
                except ValueError:
                    break
        else:
            return True
    return False


def event(message: Any) -> bytes:
    """One SSE event carrying one JSON-RPC message (or batch); ``message`` is the default event type."""
    return b"event: message\ndata: " + jsonrpc.encode(message) + b"\n\n"


class EventStream:
    """One exchange's SSE answer: start :meth:`produce` in a nursery, serve :meth:`frames` as the body."""

    def __init__(self, run: Run, *, keepalive: float = KEEPALIVE_SECONDS) -> None:
        self._run = run
        self._keepalive = keepalive
        self._send, self._receive = trio.open_memory_channel[bytes](BUFFER)

    async def _notify(self, message: dict[str, Any]) -> None:
        try:
            self._send.send_nowait(event(message))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # a slow or vanished reader: this notification is dropped, the call goes on

    async def produce(self) -> None:
        """Run the exchange, then send its answer and end the stream."""
        async with self._send:
            try:
                answer = await self._run(self._notify)
            except Exception:
                # It runs in the app's nursery: a bug here must end this stream, not the daemon's HTTP.
                log.exception("an MCP exchange failed while streaming")
                return
            try:
                await self._send.send(event(answer))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the client went away; the call ran to its end all the same

    async def frames(self) -> AsyncIterator[bytes]:
        """The body: every event as it comes, keep-alive comments while idle, until the answer is sent."""
        with self._receive:
            while True:
                frame = None
                with trio.move_on_after(self._keepalive):
                    try:
                        frame = await self._receive.receive()
                    except trio.EndOfChannel:
                        return
                yield b": keepalive\n\n" if frame is None else frame
