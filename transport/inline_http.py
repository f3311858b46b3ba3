"""A hot request answered in the task hypercorn started for it: no nursery, no two tasks of quart-trio's.

quart-trio handles every HTTP request with a nursery and two tasks: one runs
the route, the other reads the request's body from hypercorn's queue and then
waits for ``http.disconnect``, cancelling the route when the client goes away.
That is what an event stream or a long wait needs. A prompt's admission needs
none of it: its body came with its head, and its answer is one JSON write. The
nursery and the two task starts cost about as much as the rest of quart's work
for that request, on the one route every turn goes through.

So :class:`InlineHTTPConnection` answers a request in the calling task when

1. its method and path are an inline route (:data:`INLINE_ROUTES`: ``POST
   /session/<id>/prompt``), and
2. every byte of its body has arrived (:func:`take_body`: nothing waits on
   the client, so quart's ``BODY_TIMEOUT`` has nothing to time).

Otherwise it hands the request on to quart-trio unchanged, with any message it
took put back in front of the queue. The route, the ``before_request`` checks
(token, host, origin, shutting down), the error handlers and the answer are
quart's own in both cases; an inline request is just not cancelled when its
client disconnects mid-admission, which a route that only admits a prompt
never waits on for long (the prompt is admitted, as it would have been had the
disconnect come a moment later, and hypercorn drops the answer). A route that
answers with a stream is sent under quart-trio's watch for the disconnect.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from quart.wrappers import Response
from quart.wrappers.response import DataBody
from quart_trio.asgi import TrioASGIHTTPConnection

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]

# (method, path pattern): routes that only admit or read, never wait on anything a client controls.
INLINE_ROUTES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("POST", re.compile(r"/session/[^/]+/prompt")),
)


def is_inline(scope: dict[str, Any]) -> bool:
    """Whether ``scope`` (an ASGI HTTP scope) asks for an inline route."""
    method, path = scope.get("method"), scope.get("path", "")
    return any(method == m and pattern.fullmatch(path) for m, pattern in INLINE_ROUTES)


def _body_length(scope: dict[str, Any]) -> int | None:
    """The body's length by its head: 0 with none, ``None`` when chunked (not known in advance)."""
    length = 0
    for name, value in scope.get("headers", ()):  # names lower-cased by h11, values validated
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            length = int(value)
    return length


async def take_body(scope: dict[str, Any], receive: Receive) -> tuple[list[Message], bool]:
    """The request's body messages if they need no more from the client, and whether that is all of them.

    Whatever hypercorn has queued is taken without waiting. Once the bytes the head announced have all
    arrived, the end-of-body message is already parsed and on its way (hypercorn queues it right after,
    from the same read), so that one is waited for; anything else still missing is left to quart-trio.
    The second value is false when the body is not whole; the messages taken must then be put back.
    """
    channel = getattr(receive, "__self__", None)
    length = _body_length(scope)
    if type(channel) is not trio.MemoryReceiveChannel or length is None:  # not hypercorn's queue, or chunked
        return [], False
    taken: list[Message] = []
    received = 0
    while True:
        try:
            message = channel.receive_nowait()
        except trio.WouldBlock:
            if received != length:
                return taken, False
            message = await receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return taken, False
        taken.append(message)
        if message.get("type") != "http.request":
            return taken, False  # http.disconnect: the client is gone
        received += len(message.get("body", b""))
        if not message.get("more_body", False):
            return taken, received == length


def _put_back(taken: list[Message], receive: Receive) -> Receive:
    """``receive`` that first gives back ``taken``, in order."""
    if not taken:
        return receive
    pending = list(taken)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


class InlineHTTPConnection(TrioASGIHTTPConnection):
    """quart-trio's HTTP connection, answering the inline routes in the calling task (see the module)."""

    async def __call__(self, receive: Receive, send: Callable[[Message], Awaitable[None]]) -> None:
        if not is_inline(self.scope):
            await super().__call__(receive, send)
            return
        taken, whole = await take_body(self.scope, receive)
        if not whole:
            await super().__call__(_put_back(taken, receive), send)  # a body still arriving, or the client gone
            return
        request = self._create_request_from_scope(send)
        for message in taken:
            request.body.append(message.get("body", b""))
        request.body.set_complete()
        response = await self.app.handle_request(request)
        if isinstance(response, Response) and not isinstance(response.response, DataBody):
            # A stream (no inline route answers one today): send it under quart-trio's disconnect watch.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_disconnect, nursery, receive)
                await self._send_response(send, response)
                nursery.cancel_scope.cancel()
            return
        await self._send_response(send, response)

    @staticmethod
    async def _watch_disconnect(nursery: trio.Nursery, receive: Receive) -> None:
        while (await receive()).get("type") != "http.disconnect":
            pass
        nursery.cancel_scope.cancel()
