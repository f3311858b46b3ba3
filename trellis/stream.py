"""A session's event stream as a client reads it: frames, and reconnection that repeats nothing.

:func:`events` yields each SSE frame of ``GET /session/:id/events`` as a dict
(the daemon's event: ``type``, ``data``, ``promptId``, ``id`` …). When the
connection drops — the daemon restarted, a proxy cut it, the network blinked —
it connects again with ``Last-Event-ID`` set to the last id it yielded (and
``X-Qwen-Event-Epoch`` to the stream's epoch), so the daemon replays what was
missed; a frame whose id it already yielded is skipped, so nothing is shown
twice. A daemon that restarted has a new epoch whose ids start again: the
stream then takes the daemon's ``state_resync_required`` and every frame of
the new epoch, whatever its id. Frames without an id (replay markers,
warnings) pass through. The stream ends after a terminal frame
(``session_closed``, ``client_evicted``) or when the daemon answers 404.

Waits between attempts grow from ``first_wait`` to ``max_wait`` seconds and
reset once a connection delivers a frame; ``on_reconnect`` is told of each
attempt (an interactive client says "reconnecting").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import trio

from .connect import Target

TERMINAL = frozenset({"session_closed", "client_evicted"})


class SessionGone(Exception):
    """The daemon does not know the session (404), or refused the stream (4xx): no point retrying."""


async def frames(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The frames of one SSE response, each its JSON ``data`` (comments and keep-alives skipped)."""
    data: list[bytes] = []
    buffer = b""
    async for chunk in response.aiter_bytes():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if data:
                    yield orjson.loads(b"\n".join(data))
                data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" ") if line[5:6] == b" " else line[5:])


async def events(client: httpx.AsyncClient, target: Target, session_id: str, *, last_event_id: int | None = None,
                 first_wait: float = 0.25, max_wait: float = 5.0,
                 on_reconnect: Callable[[int, BaseException | None], None] | None = None,
                 ) -> AsyncIterator[dict[str, Any]]:
    """Every frame of the session from now (or after ``last_event_id``), across dropped connections."""
    wait = first_wait
    attempt = 0
    epoch: str | None = None
    while True:
        headers = dict(target.headers)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        if epoch is not None:
            headers["X-Qwen-Event-Epoch"] = epoch
        error: BaseException | None = None
        try:
            async with client.stream("GET", f"{target.url}/session/{session_id}/events", headers=headers,
                                     timeout=httpx.Timeout(10.0, read=None)) as response:
                if response.status_code != 200:
                    body = (await response.aread()).decode("utf-8", "replace")
                    if 400 <= response.status_code < 500:
                        raise SessionGone(_message(response.status_code, body))
                    error = httpx.HTTPStatusError(_message(response.status_code, body), request=response.request,
                                                  response=response)
                else:
                    served = response.headers.get("X-Qwen-Event-Epoch")
                    if epoch is not None and served != epoch:
                        last_event_id = None  # a restarted daemon: its ids start again
                    epoch = served
                    async for frame in frames(response):
                        frame_id = frame.get("id")
                        if isinstance(frame_id, int):
                            if last_event_id is not None and frame_id <= last_event_id:
                                continue  # replayed again after a reconnect: already shown
                            last_event_id = frame_id
                        wait, attempt = first_wait, 0
                        yield frame
                        if frame.get("type") in TERMINAL:
                            return
        except (httpx.TransportError, httpx.DecodingError) as exc:
            error = exc
        attempt += 1
        if on_reconnect is not None:
            on_reconnect(attempt, error)
        await trio.sleep(wait)
        wait = min(max_wait, wait * 2)


def _message(status: int, body: str) -> str:
    """An error answer's ``{"error", "code"}`` as one line (any other body, cut short)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return f"HTTP {status} {data.get('code') or ''}: {data['error']}".replace(" :", ":")
    return f"HTTP {status}: {body.strip()[:200]}"


error_message = _message

__all__ = ["SessionGone", "TERMINAL", "error_message", "events", "frames"]
