"""A prompt's admission over HTTP: its answer, and the plain request answered without quart.

Every turn starts with ``POST /session/<id>/prompt``, and quart spends more on
that request than the admission does: a request and an app context, URL
matching, the ``before_request`` and ``after_request`` hooks, a ``Request``
and a ``Response`` object, and the answer sent in three ASGI messages.

:func:`admission_answer` turns what the session's FIFO said into the route's
answer; the quart route and :class:`InlineAdmission` both use it.

:class:`InlineAdmission` answers from the ASGI scope and the whole body
(:class:`transport.inline_http.InlineHTTPConnection` calls it, under
:data:`transport.inline_http.INLINE_ANSWER`) when the request is the plain
case, checked in this order:

1. the app serves no cluster (whose hook may forward the request to the
   session's node) and the daemon is not shutting down;
2. no ``Origin`` header (a browser's request gets quart's CORS handling);
3. its ``Host`` is one the daemon accepts, and its bearer token is the daemon's;
4. the session is live here, and an ``X-Qwen-Client-Id``, if sent, is one the
   session registered;
5. the body decodes to a prompt with at least one content block;
6. the session takes the prompt's images (refused before anything is queued).

Then the FIFO is asked, and its answer (202, or 503 for a full queue,
unavailable storage or a session closing meanwhile) is sent with the headers
quart would have sent. At the first check that fails, it declines (``None``)
having changed nothing, and quart answers the same request and body: every
refusal keeps its one implementation, in the route and its hooks.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from actors import ActorGone, Admitted, SessionHandle, UnknownSession, wire
from actors.session.fifo import StorageUnavailable
from actors.session.images import ImageRefused

from .auth import bearer_matches
from .errors import INTERNAL_ERROR, HttpError, session_closing
from .hosts import HostPolicy

PROMPT_PATH = re.compile(r"/session/([^/]+)/prompt")  # the route's path, its session id captured
JSON_HEADERS = (b"content-type", b"application/json")

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body
# What an app may offer as its inline answer (app.extensions[transport.inline_http.INLINE_ANSWER]): the scope
# and the whole body in, an answer or None (leave the request to quart) out.
InlineAnswer = Callable[[dict[str, Any], bytes], Awaitable[Answer | None]]


def admission_answer(admitted: Any) -> dict[str, Any]:
    """The 202 body for an admitted prompt; :class:`HttpError` (503) for a full queue or storage that failed."""
    if isinstance(admitted, StorageUnavailable):
        raise HttpError(503, f"the prompt was not admitted: {admitted.reason}", "storage_unavailable")
    if not isinstance(admitted, Admitted):
        raise HttpError(503, f"the session already has {admitted.pending_count} pending prompt(s)",
                        "prompt_queue_full", limit=admitted.limit, pendingCount=admitted.pending_count)
    return {"promptId": admitted.prompt_id, "lastEventId": admitted.last_event_id,
            "eventEpoch": admitted.event_epoch}


def _answer(status: int, payload: dict[str, Any]) -> Answer:
    data = orjson.dumps(payload)
    headers = [JSON_HEADERS, (b"content-length", b"%d" % len(data))]
    if status >= 400:  # as the app's after_request hook does for a refusal of a request with a body
        headers.append((b"connection", b"close"))
    return status, headers, data


def server_error() -> Answer:
    """The answer to an inline answer that raised: quart's to a route that raised (its ``InternalServerError``
    through the app's error handler), 500 with the JSON error body, the connection closed. Nothing else is
    safe to do: the prompt may have been admitted already, so the request cannot go to quart instead."""
    error = HttpError(500, INTERNAL_ERROR, "http_error")
    return _answer(error.status, error.payload())


def _first_headers(scope: dict[str, Any], names: tuple[bytes, ...]) -> dict[bytes, str]:
    """The first value of each header in ``names`` that the request has (as quart's ``headers.get``)."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:  # names lower-cased by h11
        if name in names and name not in found:
            found[name] = value.decode("latin-1")
    return found


_WANTED = (b"origin", b"host", b"authorization", b"x-qwen-client-id")


class InlineAdmission:
    """``POST /session/<id>/prompt`` answered from its scope and body when it is the plain case (see the
    module); ``None`` hands it to quart."""

    def __init__(self, daemon: Any, *, expected: bytes | None, hosts: HostPolicy | None,
                 client_known: Callable[[str, str], bool]) -> None:
        # client_known(session_id, client_id): the app's registry of the ids its sessions handed out
        self._daemon = daemon
        self._expected = expected
        self._hosts = hosts
        self._client_known = client_known

    async def __call__(self, scope: dict[str, Any], body: bytes) -> Answer | None:
        match = PROMPT_PATH.fullmatch(scope["path"])
        if match is None or scope["method"] != "POST" or self._daemon.shutting_down:
            return None
        headers = _first_headers(scope, _WANTED)
        if b"origin" in headers:
            return None
        if self._hosts is not None and not self._hosts.allows(headers.get(b"host")):
            return None
        if not bearer_matches(headers.get(b"authorization", ""), self._expected):
            return None
        session_id = match[1]
        client_id = headers.get(b"x-qwen-client-id")
        handle = self._live(session_id, client_id)
        if handle is None:
            return None
        try:
            prompt = wire.decode(body, wire.PromptBody)
        except wire.WireError:
            return None
        if not prompt.prompt:
            return None
        try:
            admitted = await handle.prompt(prompt, client_id=client_id)
            return _answer(202, admission_answer(admitted))
        except ImageRefused:
            return None  # raised before anything was queued: the route refuses it again
        except ActorGone:
            error = session_closing()
        except HttpError as caught:
            error = caught
        return _answer(error.status, error.payload())

    def _live(self, session_id: str, client_id: str | None) -> SessionHandle | None:
        try:
            handle = self._daemon.get(session_id)
        except UnknownSession:
            return None
        return handle if client_id is None or self._client_known(session_id, client_id) else None
