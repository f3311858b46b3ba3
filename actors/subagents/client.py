"""A small MCP client (Streamable HTTP, JSON-RPC) for a subagent's two signal tools.

A child session is an MCP client of its own signal URL, read from its own MCP
config file at call time — the same path a command-line agent takes with
``--mcp-config``. This is the handful of messages that needs (initialize,
initialized, tools/call, DELETE) over httpx, so the runtime does not depend on
the ``mcp`` SDK; the tests drive the server with the official client instead.
"""

from __future__ import annotations

from typing import Any

import httpx

from actors.wire import jsonrpc
from actors.wire.jsonrpc import Response

PROTOCOL_VERSION = "2025-06-18"
TIMEOUT = 30.0


class SignalRefused(Exception):
    """The endpoint did not accept this run's token (404): the run has ended or never existed."""


class SignalUnreachable(Exception):
    """The endpoint could not be reached or answered an HTTP error (the transport's reason in the message)."""


def _answer(response: httpx.Response, call_id: int) -> Response:
    """The JSON-RPC response to ``call_id``, from a JSON body or an SSE stream.

    An HTTP error without one raises ``httpx.HTTPStatusError``; a body that holds none, ``ValueError``.
    """
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        bodies = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    else:
        bodies = [response.content]
    for body in bodies:
        message = jsonrpc.parse(body)
        # Null is the id of an error about a request whose id the server could not read.
        if isinstance(message, Response) and message.id in (call_id, None):
            return message
    response.raise_for_status()
    raise ValueError("the answer carried no JSON-RPC response to the request")


def _error_text(error: dict[str, Any]) -> str:
    return f"{error['message']} (JSON-RPC {error['code']})"


async def call_signal_tool(url: str, tool: str, arguments: dict[str, Any],
                           timeout: float = TIMEOUT) -> tuple[bool, str]:
    """Call ``tool`` on the signal endpoint ``url``; ``(is_error, text)``.

    Raises :class:`SignalRefused` on a 404 and :class:`SignalUnreachable` on transport failures,
    so callers never see the HTTP client's own exceptions.
    """
    try:
        return await _call_signal_tool(url, tool, arguments, timeout)
    except httpx.HTTPError as exc:
        raise SignalUnreachable(f"{type(exc).__name__}: {exc}") from None


async def _call_signal_tool(url: str, tool: str, arguments: dict[str, Any], timeout: float) -> tuple[bool, str]:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    # trust_env=False: a proxy from the environment must never see a loopback signal URL with its token.
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as http:
        init = jsonrpc.request(1, "initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                                 "clientInfo": {"name": "trellis-subagent", "version": "0.1.0"}})
        response = await http.post(url, content=jsonrpc.encode(init), headers=headers)
        if response.status_code == 404:
            raise SignalRefused("the signal endpoint refused this run's token; the run has ended")
        response.raise_for_status()
        initialized = _answer(response, 1)
        if initialized.error is not None:
            return True, _error_text(initialized.error)
        session_id = response.headers.get("mcp-session-id")
        if session_id:
            headers["Mcp-Session-Id"] = session_id
        version = initialized.result.get("protocolVersion") if isinstance(initialized.result, dict) else None
        headers["MCP-Protocol-Version"] = str(version or PROTOCOL_VERSION)
        try:
            await http.post(url, content=jsonrpc.encode(jsonrpc.notification("notifications/initialized")),
                            headers=headers)
            call = jsonrpc.request(2, "tools/call", {"name": tool, "arguments": arguments})
            response = await http.post(url, content=jsonrpc.encode(call), headers=headers)
            if response.status_code == 404:
                raise SignalRefused("the signal endpoint refused this run's token; the run has ended")
            answer = _answer(response, 2)
        finally:
            if session_id:
                try:
                    await http.delete(url, headers=headers)
                except httpx.HTTPError:
                    pass  # ending the MCP session is a courtesy
    if answer.error is not None:
        return True, _error_text(answer.error)
    result = answer.result
    if not isinstance(result, dict) or not isinstance(result.get("content", []), list):
        raise ValueError("the answer is not a tools/call result")
    text = "\n".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict)
                     and c.get("type") == "text")
    return bool(result.get("isError")), text
