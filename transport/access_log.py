"""The access log: one ``info`` line per HTTP request, on logger ``trellis.access``.

:class:`AccessLog` wraps the ASGI app (:func:`transport.serve` does), so every
answer is counted — a route's, a refusal before any route (401, 421, 503
``shutting_down``), an error page, an event stream. A line is written when the
answer ends: for an event stream (SSE) that is when the stream closes, so its
duration is how long the client was subscribed; an answer cut short (the
client went away, the server stopped) is logged then, with the status that
was sent (``500`` when none was).

What a line holds: method, path, status, duration, client address, and the
*names* of the query parameters (never their values). Never a header
(``Authorization``), never a body. A subagent's signal path
``/signal/mcp/<token>`` is written ``/signal/mcp/<redacted>``; characters that
are not printable are escaped, and a long path is cut.

    INFO trellis.access: POST /session/s-1/prompt 202 3.4ms
    INFO trellis.access: GET /session/s-1/events?lastEventId=… 200 5012.7ms (stream)

Fields (``--log-format json``): ``method``, ``path``, ``query`` (names),
``status``, ``ms``, ``client``, and ``stream: true`` for event streams.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

log = logging.getLogger("trellis.access")

MAX_PATH = 300  # characters of a path written (the rest cut, an ellipsis in the middle)
_SIGNAL_PATH = re.compile(r"/+signal/+mcp/", re.IGNORECASE)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _printable(text: str) -> str:
    if text.isprintable() and " " not in text:
        return text
    return "".join(c if c.isprintable() and c != " " else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)


def shown_path(path: str) -> str:
    """``path`` as the log shows it: a signal token redacted, escaped, at most :data:`MAX_PATH` characters."""
    match = _SIGNAL_PATH.match(path)
    if match is not None:
        return "/signal/mcp/<redacted>"
    path = _printable(path)
    if len(path) > MAX_PATH:
        half = (MAX_PATH - 1) // 2
        path = path[:half] + "…" + path[-half:]
    return path


def query_names(query_string: bytes) -> list[str]:
    """The parameter names of a query string (values dropped), escaped and deduplicated, at most 20."""
    if not query_string:
        return []
    try:
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    except ValueError:
        return ["<unparsed>"]
    names: list[str] = []
    for name, _ in pairs:
        name = _printable(name)[:64]
        if name not in names:
            names.append(name)
        if len(names) == 20:
            break
    return names


def write_line(scope: Scope, status: int | None, started: float, stream: bool = False) -> None:
    """The access line of an answer to ``scope`` that began at ``started`` (``time.perf_counter()``) and ended
    now, with ``status`` (500 when ``None``: none was sent)."""
    ms = round((time.perf_counter() - started) * 1000, 1)
    method = _printable(str(scope.get("method", "?")))[:16]
    path = shown_path(str(scope.get("path", "")))
    names = query_names(scope.get("query_string") or b"")
    shown = path + ("?" + "&".join(f"{n}=…" for n in names) if names else "")
    code = status if status is not None else 500
    client = scope.get("client")
    fields: dict[str, Any] = {"method": method, "path": path, "query": names, "status": code, "ms": ms,
                              "client": client[0] if client else None}
    if stream:
        fields["stream"] = True
    log.info("%s %s %d %.1fms%s", method, shown, code, ms, " (stream)" if stream else "", extra=fields)


class AccessLog:
    """An ASGI app that is ``app`` plus one access line per HTTP request (when ``trellis.access`` logs info)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None
        stream = False
        done = False

        def finish() -> None:
            nonlocal done
            if done:
                return
            done = True
            write_line(scope, status, started, stream)

        async def logged_send(message: Message) -> None:
            nonlocal status, stream
            kind = message.get("type")
            if kind == "http.response.start":
                status = int(message.get("status", 0))
                for key, value in message.get("headers", ()):
                    if key.lower() == b"content-type" and value.lower().startswith(b"text/event-stream"):
                        stream = True
            await send(message)
            if kind == "http.response.body" and not message.get("more_body", False):
                finish()

        try:
            await self.app(scope, receive, logged_send)
        finally:
            finish()  # an answer cut short, or one the app never gave (hypercorn sends 500 then)


__all__ = ["AccessLog", "query_names", "shown_path", "write_line"]
