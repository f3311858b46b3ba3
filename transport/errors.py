"""Error answers: every 4xx/5xx body is ``{"error", "code", "path"}``.

``error`` is the sentence qwen clients display; ``code`` is machine-readable;
``path`` names the offending field (``$.prompt[0].text`` for a body,
``url.sessionId`` for a URL parameter) when there is one, else ``null``.

No answer echoes more than a short excerpt of the input: ``error`` and ``path``
are cut to a few hundred characters (head and tail kept around an ellipsis),
and values are quoted with :func:`actors.wire.excerpt`.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from quart import Response, request
from werkzeug.exceptions import HTTPException
from werkzeug.routing import WebsocketMismatch

from actors.wire import EXCERPT_CHARS, excerpt, shorten


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


INTERNAL_ERROR = "internal error: the daemon failed while answering this request (its log says why)"
FRAMEWORK_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}  # else http_error
IMPLICIT_METHODS = frozenset({"HEAD", "OPTIONS"})  # every route answers them (HEAD with its GET)


def _shown(text: str, limit: int = 2 * EXCERPT_CHARS) -> str:
    """A method or path as a client sent it, bounded, with control characters escaped."""
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return shorten(text, limit)


# qwen serve's routes for what Trellis does not have, which qwen's Web Shell asks for when a panel opens: the
# panel shows the answer's sentence, so it says what Trellis has instead (docs/webshell.md, *What does not*).
NOT_IN_TRELLIS = (
    (re.compile(r"^/workspaces?(/[^/]*)*/(extensions|mcp|skills|agents)(/|$)"),
     "Trellis has no plugin manager: MCP servers, subagents and hooks are set in its settings file "
     "(docs/settings.md)"),
    (re.compile(r"^/workspaces?(/[^/]*)*/git/(push|pull|fetch|remotes)(/|$)"),
     "Trellis does not push, pull or manage remotes from the Web Shell: in the sandbox git has no credentials, and "
     "outside it the repository's hooks and credential helpers would run as the daemon; ask the session, or run "
     "git yourself"),
    (re.compile(r"^/scheduled-tasks(/|$)"),
     "Trellis has no scheduled tasks: in a session, the model schedules prompts with its cron_create tool "
     "(docs/reference/tools.md)"),
    (re.compile(r"^/(goals|session/[^/]+/goal)(/|$)"),  # GET /session/:id/goal answers: no goal
     "Trellis sessions have no goals: a goal belongs to a subagent run, given when the run starts "
     "(docs/how-to/subagent-clis.md)"),
)


def framework_error(exc: HTTPException, method: str, path: str, *, body_timeout: float | None = None) -> HttpError:
    """What the web framework refused (no such route, a method the route lacks, ...), said in our words.

    ``code`` as the framework's status implies, ``path`` null: the refusal is about the request line, not a field.
    """
    status = exc.code or 500
    code = FRAMEWORK_CODES.get(status, "http_error")
    if status == 404:
        message = f"no route {_shown(method)} {_shown(path)}"
    elif status == 405:
        allowed = sorted(set(getattr(exc, "valid_methods", None) or ()) - IMPLICIT_METHODS)
        message = f"{_shown(method)} is not allowed on {_shown(path)}" + (
            f"; allowed: {', '.join(allowed)}" if allowed else "")
    elif status == 413:
        message = "request body exceeds 10 MB"
    elif status == 408:
        message = "the request body did not arrive in time" + (
            f" (within {body_timeout:g} s)" if body_timeout is not None else "")
    elif isinstance(exc, WebsocketMismatch):
        message = f"{_shown(path)} does not take a WebSocket"
    elif status == 400:
        message = "the request could not be read"
    elif status >= 500:
        message = INTERNAL_ERROR
    else:
        message = f"the request was refused ({status})"
    if status in (404, 405):  # a qwen feature's route (405: setting a session's goal, whose GET answers)
        instead = next((sentence for pattern, sentence in NOT_IN_TRELLIS if pattern.match(path)), None)
        if instead is not None:
            message = f"{instead} ({message})"
    return HttpError(status, message, code)


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
