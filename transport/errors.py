"""Error answers: every 4xx/5xx body is ``{"error", "code", "path"}``.

``error`` is the sentence qwen clients display; ``code`` is machine-readable;
``path`` names the offending field (``$.prompt[0].text`` for a body,
``url.sessionId`` for a URL parameter) when there is one, else ``null``.

No answer echoes more than a short excerpt of the input: ``error`` and ``path``
are cut to a few hundred characters (head and tail kept around an ellipsis),
and values are quoted with :func:`actors.wire.excerpt`.
"""

from __future__ import annotations

from typing import Any

import orjson
from quart import Response, request

from actors.wire import excerpt, shorten


class HttpError(Exception):
    """Raised by a route; rendered as a JSON error answer."""

    def __init__(self, status: int, message: str, code: str, path: str | None = None, **extra: Any) -> None:
        message = shorten(message)
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.path = None if path is None else shorten(path)
        self.extra = extra

    def payload(self) -> dict[str, Any]:
        """The answer's JSON body."""
        body: dict[str, Any] = {"error": self.message, "code": self.code, "path": self.path}
        body.update(self.extra)
        return body

    def response(self) -> Response:
        return json_response(self.payload(), self.status)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status=status, headers=headers, content_type="application/json")


def not_found_session(session_id: str) -> HttpError:
    return HttpError(404, f"unknown session {excerpt(session_id)}", "session_not_found", "url.sessionId")


def session_closing() -> HttpError:
    """The answer when a session stopped between its lookup and the answer (a DELETE or a shutdown under way)."""
    return HttpError(503, "the session is closing", "session_closing")


def int_query(name: str, low: int, high: int) -> int | None:
    """The integer query parameter ``name`` (``None`` when absent), or 400 naming ``query.<name>``.

    Only plain ASCII decimals are taken: ``str.isdigit`` also accepts digits such as ``²`` that ``int``
    refuses, and thousands of digits trip Python's int-conversion limit; either was a 500.
    """
    raw = request.args.get(name)
    if raw is None:
        return None
    digits = raw.lstrip("0") or "0"
    if not (raw.isascii() and raw.isdigit()) or len(digits) > len(str(high)) or not low <= int(digits) <= high:
        raise HttpError(400, f"{name} must be an integer from {low} to {high}", "invalid_request", f"query.{name}")
    return int(digits)
