"""A small MCP client (Streamable HTTP, JSON-RPC) for a subagent's two signal tools.

A child session is an MCP client of its own signal URL, read from its own MCP
config file at call time — the same path a command-line agent takes with
``--mcp-config``. This is the handful of messages that needs (initialize,
initialized, tools/call, DELETE) over httpx, so the runtime does not depend on
the ``mcp`` SDK; the tests drive the server with the official client instead.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

PROTOCOL_VERSION = "2025-06-18"
TIMEOUT = 30.0


class SignalRefused(Exception):
    """The endpoint did not accept this run's token (404): the run has ended or never existed."""


class SignalUnreachable(Exception):
    """The endpoint could not be reached or answered an HTTP error (the transport's reason in the message)."""


def _decode(response: httpx.Response, request_id: int) -> dict[str, Any]:
    """The JSON-RPC answer to ``request_id``, from a JSON body or an SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if isinstance(message, dict) and message.get("id") == request_id:
                    return message
        raise ValueError("the SSE answer carried no response to the request")
    message = response.json()
    if not isinstance(message, dict):
        raise ValueError("the answer is not a JSON-RPC object")
    return message


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
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                           "clientInfo": {"name": "trellis-subagent", "version": "0.1.0"}}}
        response = await http.post(url, json=init, headers=headers)
        if response.status_code == 404:
            raise SignalRefused("the signal endpoint refused this run's token; the run has ended")
        response.raise_for_status()
        result = _decode(response, 1).get("result") or {}
        session_id = response.headers.get("mcp-session-id")
        if session_id:
            headers["Mcp-Session-Id"] = session_id
        headers["MCP-Protocol-Version"] = str(result.get("protocolVersion", PROTOCOL_VERSION))
        try:
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments}}
            response = await http.post(url, json=call, headers=headers)
            if response.status_code == 404:
                raise SignalRefused("the signal endpoint refused this run's token; the run has ended")
            message = _decode(response, 2)
        finally:
            if session_id:
                try:
                    await http.delete(url, headers=headers)
                except httpx.HTTPError:
                    pass  # ending the MCP session is a courtesy
    if "error" in message:
        error = message["error"] or {}
        return True, f"{error.get('message', 'error')} (JSON-RPC {error.get('code')})"
    result = message.get("result") or {}
    text = "\n".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict)
                     and c.get("type") == "text")
    return bool(result.get("isError")), text
