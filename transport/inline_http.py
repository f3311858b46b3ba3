"""A hot request answered in the task hypercorn started for it: no nursery, no two tasks of quart-trio's.

quart-trio handles every HTTP request with a nursery and two tasks: one runs
the route, the other reads the request's body from hypercorn's queue and then
waits for ``http.disconnect``, cancelling the route when the client goes away.
That is what an event stream or a long wait needs. A prompt's admission needs
none of it: its body is small, and its answer is one JSON write. The nursery
and the two task starts cost about as much as the rest of quart's work for that
request, on the one route every turn goes through.

(A whole admission in one read does not even get here: its connection answers
it, see :mod:`transport.connections`. What comes here is one whose body came in
later reads, or one the connection left to hypercorn.)

So :class:`InlineHTTPConnection` answers a request in the calling task when its
method and path are an inline route (:data:`INLINE_ROUTES`: ``POST
/session/<id>/prompt``), it is HTTP/1, its queue is hypercorn's, and its body has a
``Content-Length`` of at most :data:`INLINE_BODY_MAX`:

1. what hypercorn has queued is taken without waiting (:func:`take_body`);
   once every announced byte is there, the end-of-body message follows from
   the same read and is waited for;
2. a body still on its way (a client that wrote its head and body apart) is
   read in the same task, within quart's ``BODY_TIMEOUT``; past it the route
   runs with a body timeout of zero, so quart answers its 408 as it would;
3. the client gone before its body is whole: nothing to answer.

Anything else (other routes, HTTP/2, a chunked or larger body, a test
client's own queue) goes to quart-trio unchanged, with any message taken put back in front.

With the body whole, the app's :data:`INLINE_ANSWER` (``app.extensions``; the
daemon's is :class:`transport.admission.InlineAdmission`) may answer from the
scope and body alone, without quart's request context, hooks or objects; when
it declines (``None``), or there is none, the route, the ``before_request``
checks (token, host, origin, shutting down), the error handlers and the answer
are quart's own, as for any request. An inline
request is just not cancelled when its client disconnects mid-admission, which
a route that only admits a prompt never waits on for long (the prompt is
admitted, as it would have been had the disconnect come a moment later, and
hypercorn drops the answer; a client that only half-closed its side still gets
its 202, where quart-trio would have cancelled the route and answered nothing).
Nor is quart's ``RESPONSE_TIMEOUT`` applied to the answer: the daemon sets none,
and an admission's answer is one small write. A route that answers with a stream is sent under
quart-trio's watch for the disconnect.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from quart.wrappers import Response
from quart.wrappers.response import DataBody
from quart_trio.asgi import TrioASGIHTTPConnection

from .access_log import shown_path
from .admission import PROMPT_PATH, server_error

log = logging.getLogger("trellis.http")

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]

# (method, path pattern): routes that only admit or read, never wait on anything a client controls.
INLINE_ROUTES: tuple[tuple[str, re.Pattern[str]], ...] = (("POST", PROMPT_PATH),)


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


# app.extensions[INLINE_ANSWER]: a transport.admission.InlineAnswer, (scope, whole body) -> answer, or None to
# leave the request to quart (the daemon's: transport/admission.py's InlineAdmission).
INLINE_ANSWER = "trellis.inline_answer"

WHOLE, ARRIVING, GONE, NOT_OURS = "whole", "arriving", "gone", "not ours"
INLINE_BODY_MAX = 64 * 1024  # bytes: a larger body goes to quart-trio, which may refuse it before reading it


async def take_body(scope: dict[str, Any], receive: Receive) -> tuple[list[Message], str]:
    """The request's body messages that need nothing more from the client, and how the body stands:
    :data:`WHOLE`, :data:`ARRIVING` (the rest is the client's to send), :data:`GONE` (it disconnected)
    or :data:`NOT_OURS` (not hypercorn's queue, chunked, or over :data:`INLINE_BODY_MAX`: nothing taken).

    Whatever hypercorn has queued is taken without waiting. Once the bytes the head announced have all
    arrived, the end-of-body message is already parsed and on its way (hypercorn queues it right after,
    from the same read), so that one is waited for.
    """
    channel = getattr(receive, "__self__", None)
    if scope.get("http_version") not in ("1.0", "1.1"):
        # h11's promise below (the end of a body follows its last byte in the same read) is HTTP/1's; in
        # HTTP/2 the end of a stream is a flag the client may withhold.
        return [], NOT_OURS
    length = _body_length(scope)
    if type(channel) is not trio.MemoryReceiveChannel or length is None or length > INLINE_BODY_MAX:
        return [], NOT_OURS
    taken: list[Message] = []
    received = 0
    while True:
        try:
            message = channel.receive_nowait()
        except trio.WouldBlock:
            if received != length:
                return taken, ARRIVING
            message = await receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return taken, GONE
        taken.append(message)
        if message.get("type") != "http.request":
            return taken, GONE  # http.disconnect
        received += len(message.get("body", b""))
        if not message.get("more_body", False):
            return taken, WHOLE if received == length else GONE  # a short body: h11 would have refused it


async def read_rest(taken: list[Message], receive: Receive) -> str:
    """Wait for the rest of a body (appended to ``taken``): :data:`WHOLE` or :data:`GONE`."""
    while True:
        message = await receive()
        taken.append(message)
        if message.get("type") != "http.request":
            return GONE
        if not message.get("more_body", False):
            return WHOLE


class InlineHTTPConnection(TrioASGIHTTPConnection):
    """quart-trio's HTTP connection, answering the inline routes in the calling task (see the module)."""

    async def __call__(self, receive: Receive, send: Callable[[Message], Awaitable[None]]) -> None:
        if not is_inline(self.scope):
            await super().__call__(receive, send)
            return
        taken, state = await take_body(self.scope, receive)
        if state == NOT_OURS:
            await super().__call__(receive, send)
            return
        timed_out = False
        if state == ARRIVING:
            timeout = self.app.config["BODY_TIMEOUT"]
            with trio.move_on_after(math.inf if timeout is None else timeout) as waited:
                state = await read_rest(taken, receive)
            timed_out = waited.cancelled_caught
        if state == GONE:
            return  # the client went away before its request was whole: there is no one to answer
        answer = self.app.extensions.get(INLINE_ANSWER)
        if answer is not None and not timed_out:
            try:
                answered = await answer(self.scope, b"".join(message.get("body", b"") for message in taken))
            except Exception:
                log.exception("the inline answer to %s %s failed", self.scope.get("method"),
                              shown_path(str(self.scope.get("path", ""))))
                answered = server_error()  # it may have admitted the prompt: quart must not run the route again
            if answered is not None:
                status, headers, data = answered
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": data, "more_body": False})
                return
        request = self._create_request_from_scope(send)
        for message in taken:
            request.body.append(message.get("body", b""))
        if timed_out:
            request.body_timeout = 0  # the wait is over: quart's get_data answers its 408 at once
        else:
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
