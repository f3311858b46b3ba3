"""What the HTTP surface refuses while the daemon shuts down.

From the moment a shutdown begins (:attr:`actors.Daemon.shutting_down`), every
request that would start work answers 503 ``shutting_down``: ``POST /session``,
``POST /session/:id/prompt``, ``.../mid-turn-message``, ``.../load``,
``.../resume`` and ``.../fork``, the MCP ``start`` tool at ``/mcp``, and ACP's
``session/new``, ``session/load`` and ``session/prompt`` at ``/acp``. Reads,
cancels, votes and closes keep answering while the shutdown runs.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
from quart import Response, request

from .access_log import shown_path
from .errors import json_response

log = logging.getLogger("trellis.daemon")

_WORK_ROUTES = re.compile(r"/session(?:/[^/]+/(?:prompt|mid-turn-message|load|resume|fork))?")
_ACP_WORK = frozenset({"session/new", "session/load", "session/prompt"})
MESSAGE = "the daemon is shutting down and starts no new work"


def refusal() -> Response:
    """The 503 answer: ``{"error", "code": "shutting_down", "path": null}``."""
    response = json_response({"error": MESSAGE, "code": "shutting_down", "path": None}, 503)
    response.headers["Connection"] = "close"
    return response


async def starts_work() -> bool:
    """Whether the current request would start work (reads a JSON-RPC body for ``/mcp`` and ``/acp``)."""
    if request.method != "POST":
        return False
    if _WORK_ROUTES.fullmatch(request.path):
        return True
    if request.path not in ("/mcp", "/acp"):
        return False
    try:
        message: Any = orjson.loads(await request.get_data())  # cached: the route reads it again
    except orjson.JSONDecodeError:
        return False  # the route answers it as it would
    if request.path == "/mcp" and isinstance(message, list):  # a JSON-RPC batch (MCP 2025-03-26)
        return any(_mcp_start(m) for m in message)
    if not isinstance(message, dict):
        return False
    if request.path == "/acp":
        return message.get("method") in _ACP_WORK
    return _mcp_start(message)


def _mcp_start(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    params = message.get("params")
    return message.get("method") == "tools/call" and isinstance(params, dict) and params.get("name") == "start"


async def refuse_if_shutting_down(daemon: Any) -> Response | None:
    """A ``before_request`` check: the 503 answer for work asked of a daemon that is shutting down."""
    if daemon.shutting_down and await starts_work():
        path = shown_path(request.path)
        log.warning("start refused %s %s reason=shutting_down", request.method, path,
                    extra={"method": request.method, "path": path, "reason": "shutting_down"})
        return refusal()
    return None
