"""MCP over Streamable HTTP, JSON responses only: the handshake, sessions, tools, JSON-RPC errors.

Framework-free: :class:`McpEndpoint` turns (method, headers, body) into an
:class:`Answer`; the routes wrap it for Quart. What a client gets:

- ``initialize``: the protocol version echoed when supported (else our
  newest), and an ``Mcp-Session-Id`` header;
- notifications and client responses: 202, no body;
- ``ping``, ``tools/list``, ``tools/call`` (``{content, isError}``, plus
  ``structuredContent`` where a tool gives one);
- GET: 405 (no server-initiated stream); DELETE ends the session;
- no ``Mcp-Session-Id`` on a request other than ``initialize``: 400; an
  unknown one: 404 (the client re-initializes);
- JSON-RPC errors with their codes: -32700 unparsable, -32600 not a request,
  -32601 unknown method, -32602 bad params or arguments.

Sessions are scoped: one opened on a run's signal URL is no use on another.
"""

from __future__ import annotations

import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import orjson

from .schema import check

log = logging.getLogger("trellis.mcp")

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MAX_SESSIONS = 1024  # per endpoint; the oldest idle ones go first
MAX_BODY = 1024 * 1024

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


@attrs.frozen
class ToolOutput:
    """What a tool handler returns: text for people and models, optionally structured content."""

    text: str
    is_error: bool = False
    structured: dict[str, Any] | None = None


@attrs.frozen
class McpTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Callable[[dict[str, Any]], Awaitable[ToolOutput]]
    output_schema: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        out = {"name": self.name, "description": self.description, "inputSchema": self.input_schema}
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        return out


@attrs.frozen
class Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = attrs.field(factory=dict)


def _json(status: int, message: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, orjson.dumps(message), {"Content-Type": "application/json", **(headers or {})})


def _error(status: int, request_id: Any, code: int, message: str) -> Answer:
    return _json(status, {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def _result(request_id: Any, result: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
    return _json(200, {"jsonrpc": "2.0", "id": request_id, "result": result}, headers)


class McpEndpoint:
    """One MCP server surface (a name, instructions, sessions); tools are given per call."""

    def __init__(self, server_name: str, instructions: str = "") -> None:
        self.server_name = server_name
        self.instructions = instructions
        self._sessions: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (scope, protocol version)

    # ------------------------------------------------------------- HTTP methods

    def get(self) -> Answer:
        """No server-initiated stream."""
        return Answer(405, b"", {"Allow": "POST, DELETE"})

    def delete(self, scope: str, headers: Mapping[str, str]) -> Answer:
        """End a session."""
        session_id = headers.get("Mcp-Session-Id")
        if not session_id:
            return _error(400, None, INVALID_REQUEST, "Bad Request: missing Mcp-Session-Id header")
        if self._sessions.get(session_id, ("",))[0] != scope:
            return _error(404, None, INVALID_REQUEST, "Session not found")
        del self._sessions[session_id]
        return Answer(200)

    async def post(self, scope: str, tools: Mapping[str, McpTool], headers: Mapping[str, str],
                   body: bytes) -> Answer:
        """One JSON-RPC message in, one answer out."""
        if len(body) > MAX_BODY:
            return _error(413, None, INVALID_REQUEST, f"message larger than {MAX_BODY} bytes")
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _error(400, None, PARSE_ERROR, "Parse error: the body is not JSON")
        if isinstance(message, list):
            return _error(400, None, INVALID_REQUEST, "Invalid Request: batches are not supported")
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(400, None, INVALID_REQUEST, "Invalid Request: expected a JSON-RPC 2.0 object")
        request_id = message.get("id")
        method = message.get("method")
        is_request = "id" in message and method is not None
        if is_request and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))):
            return _error(400, None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
        if method is not None and not isinstance(method, str):
            return _error(400, None, INVALID_REQUEST, "Invalid Request: method must be a string")
        params = message.get("params", {})
        if params is None:
            params = {}
        if method is not None and not isinstance(params, dict):
            return _error(400, request_id, INVALID_REQUEST, "Invalid Request: params must be an object")

        if method == "initialize" and is_request:
            return self._initialize(scope, request_id, params)

        session_id = headers.get("Mcp-Session-Id")
        if not session_id:
            return _error(400, request_id, INVALID_REQUEST, "Bad Request: missing Mcp-Session-Id header")
        session = self._sessions.get(session_id)
        if session is None or session[0] != scope:
            return _error(404, request_id, INVALID_REQUEST, "Session not found")
        self._sessions.move_to_end(session_id)
        version = headers.get("MCP-Protocol-Version")
        if version is not None and version not in SUPPORTED_VERSIONS:
            return _error(400, request_id, INVALID_REQUEST, f"Bad Request: unsupported protocol version {version}")

        if not is_request:  # a notification, or a client's response to us: accepted, nothing to say
            return Answer(202)
        if method == "ping":
            return _result(request_id, {})
        if method == "tools/list":
            return _result(request_id, {"tools": [tool.describe() for tool in tools.values()]})
        if method == "tools/call":
            return await self._call(tools, request_id, params)
        return _error(200, request_id, METHOD_NOT_FOUND, f"Method not found: {method}")

    # ------------------------------------------------------------- methods

    def _initialize(self, scope: str, request_id: Any, params: dict[str, Any]) -> Answer:
        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            return _error(200, request_id, INVALID_PARAMS, "params.protocolVersion must be a string")
        version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
        session_id = secrets.token_hex(16)
        self._sessions[session_id] = (scope, version)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        result: dict[str, Any] = {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                                  "serverInfo": {"name": self.server_name, "version": "0.1.0"}}
        if self.instructions:
            result["instructions"] = self.instructions
        return _result(request_id, result, {"Mcp-Session-Id": session_id})

    async def _call(self, tools: Mapping[str, McpTool], request_id: Any, params: dict[str, Any]) -> Answer:
        name = params.get("name")
        if not isinstance(name, str):
            return _error(200, request_id, INVALID_PARAMS, "params.name must be a string")
        tool = tools.get(name)
        if tool is None:
            return _error(200, request_id, INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = params.get("arguments", {})
        if arguments is None:
            arguments = {}
        problem = check(tool.input_schema, arguments)
        if problem is not None:
            return _error(200, request_id, INVALID_PARAMS, f"Invalid arguments for {name}: {problem}")
        try:
            output = await tool.handler(arguments)
        except Exception:
            log.exception("MCP tool %s failed", name)
            output = ToolOutput(f"{name} failed inside the daemon", is_error=True)
        result: dict[str, Any] = {"content": [{"type": "text", "text": output.text}], "isError": output.is_error}
        if output.structured is not None:
            result["structuredContent"] = output.structured
        return _result(request_id, result)

    def forget_scope(self, scope: str) -> None:
        """Drop every session opened under ``scope`` (a run that ended)."""
        for session_id in [s for s, (sc, _) in self._sessions.items() if sc == scope]:
            del self._sessions[session_id]
