"""Every answer ended whole: the ASGI layer between hypercorn and the app.

Two rules, both about how an answer ends on a keep-alive HTTP/1.1 connection:

- **The last body message is sent shielded.** Hypercorn finishes an answer
  inside the app's ``send`` of its last ``http.response.body``: it writes the
  end of the body, then either starts the connection's keep-alive timer (the
  connection is idle again) or, when the answer said ``Connection: close``,
  closes the socket. quart-trio cancels the task that sends it as soon as the
  client's ``http.disconnect`` arrives — which hypercorn queues during that very
  send — so the timer's start or the close dies at its first checkpoint: the
  idle connection is never closed, or the closed one stays open. Shielded,
  that send completes; it writes at most the body's final chunk, and hypercorn
  shields its own socket writes already. (Reproduction and upstream patch:
  ``docs/upstream/README.md``, faults 2 and 3.)
- **A request whose body is left unread closes its connection**, and says so
  (``Connection: close``): an answer sent before the whole body came in (a
  refusal that did not read it), or any 4xx/5xx to a request with a body. What
  is left of the body must not be taken for the next request on the
  connection; hypercorn closes such a connection anyway, and the client is told
  rather than left to find it closed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

CLOSE = (b"connection", b"close")


def announces_body(headers: Any) -> bool:
    """Whether a request head announces a body (a non-zero ``Content-Length``, or chunked)."""
    for name, value in headers:
        if name == b"content-length" and value.strip() not in (b"", b"0"):
            return True
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return True
    return False


class WholeAnswers:
    """ASGI middleware applying the module's two rules to HTTP requests; anything else passes through."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        has_body = announces_body(scope["headers"])
        body_whole = not has_body

        async def receive_noting_end() -> Message:
            nonlocal body_whole
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_whole = True
            return message

        async def send_whole(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start" and has_body and (message["status"] >= 400 or not body_whole):
                headers = list(message.get("headers", ()))
                if not any(name.lower() == b"connection" for name, _ in headers):
                    message = {**message, "headers": [*headers, CLOSE]}
            elif kind == "http.response.body" and not message.get("more_body", False):
                with trio.CancelScope(shield=True):
                    await send(message)
                return
            await send(message)

        await self.app(scope, receive_noting_end if has_body else receive, send_whole)
