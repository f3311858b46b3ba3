"""The daemon's MCP surfaces (Streamable HTTP): ``/mcp`` and ``/signal/mcp/<token>``.

``register(app, daemon)`` adds both routes to the quart-trio app built by
:func:`transport.app.create_app`. An unminted or revoked token gets a bare
404 — empty body, nothing echoed, byte-identical either way, for every HTTP
method — before anything else is looked at, so nothing can be enumerated.

This module is the Quart adapter only: the protocol is ``protocol.py`` (pure),
and a POST answers JSON, or an SSE stream (``streaming.py``) when a tool call
asked for progress and the client accepts one. ``docs/mcp.md`` describes the
behaviour on the wire.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from quart import Response, current_app, make_response, request
from quart_trio import QuartTrio

from actors import Daemon

from .protocol import Answer, McpEndpoint, McpTool
from .streaming import HEADERS as SSE_HEADERS
from .streaming import EventStream
from .tools import parent_tools, signal_tools

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
PARENT_SCOPE = "parent"


def bare_404() -> Response:
    """The one answer for a token that is not live: no body, no JSON-RPC, nothing echoed."""
    return Response(b"", status=404, content_type="text/plain")


def _response(answer: Answer) -> Response:
    response = Response(answer.body, status=answer.status, content_type=answer.headers.get("Content-Type"))
    for key, value in answer.headers.items():
        if key != "Content-Type":
            response.headers[key] = value
    return response


async def _post(endpoint: McpEndpoint, scope: str, tools: Mapping[str, McpTool]) -> Response:
    received = endpoint.receive(scope, tools, request.headers, await request.get_data())
    if isinstance(received, Answer):
        return _response(received)
    if not received.streams:
        return _response(await received.answer())
    stream = EventStream(received.run)
    # The call runs in the app's nursery, not in the response body: a generator must not hold a nursery
    # across its yields, and a client that goes away must not cancel the call (the spec says so).
    current_app.nursery.start_soon(stream.produce)
    response = await make_response(stream.frames(), SSE_HEADERS)
    response.timeout = None  # as long as the call takes (await_resume: up to 240 s)
    return response


def register(app: QuartTrio, daemon: Daemon) -> None:
    """Add ``/mcp`` (the parent surface) and ``/signal/mcp/<token>`` (a subagent's) to ``app``.

    Signal URLs point at ``daemon.subagents.base_url``: whoever serves the app sets it from the bound
    address (see :func:`base_url_from_bind`).
    """
    if app.extensions.get("trellis.mcp") is daemon:
        return  # already registered (create_app may do it; a test harness may too)
    app.extensions["trellis.mcp"] = daemon
    registry = daemon.subagents
    parent = McpEndpoint("trellis", "Start and watch subagent runs. goal_reached is self-reported.",
                         title="Trellis subagent runs")
    signals = McpEndpoint("trellis-signal", "Report on your own run: goal_reached or need_help.",
                          title="Trellis run signals")
    tools = parent_tools(registry)

    @app.route("/mcp", methods=["GET", "POST", "DELETE"])
    async def mcp_parent() -> Response:
        if request.method == "GET":
            return _response(parent.get())
        if request.method == "DELETE":
            return _response(parent.delete(PARENT_SCOPE, request.headers))
        return await _post(parent, PARENT_SCOPE, tools)

    @app.route("/signal/mcp", methods=ALL_METHODS)
    @app.route("/signal/mcp/", methods=ALL_METHODS)
    async def mcp_signal_without_token() -> Response:
        return bare_404()

    @app.route("/signal/mcp/<path:token>", methods=ALL_METHODS)
    async def mcp_signal(token: str) -> Response:
        # The token is resolved before the method, the headers or the body are looked at.
        run = registry.resolve(token)
        if run is None:
            return bare_404()
        scope = f"run:{run.scope_key}"
        if request.method == "POST":
            return await _post(signals, scope, signal_tools(registry, run))
        if request.method == "DELETE":
            return _response(signals.delete(scope, request.headers))
        if request.method in ("GET", "HEAD"):
            return _response(signals.get())
        return Response(b"", status=405, headers={"Allow": "POST, DELETE"})

    def forget(run: object) -> None:
        signals.forget_scope(f"run:{getattr(run, 'scope_key', '')}")

    registry.on_run_end.append(forget)


def base_url_from_bind(bind: str) -> str:
    """A URL a local subagent can reach from hypercorn's bound address (``0.0.0.0``/``::`` become loopback)."""
    parts = urlsplit(bind)
    host = parts.hostname or "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return bind.rstrip("/")
    if address.is_unspecified:
        host = "127.0.0.1" if address.version == 4 else "[::1]"
    elif address.version == 6:
        host = f"[{host}]"
    return urlunsplit((parts.scheme, f"{host}:{parts.port}" if parts.port else host, "", "", "")).rstrip("/")


__all__ = ["base_url_from_bind", "bare_404", "register"]
