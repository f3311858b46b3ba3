"""Hand-built JSON-RPC messages for the in-process protocol tests (no HTTP, no SDK)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from transport.mcp.protocol import McpEndpoint, McpTool


def body(message: Any) -> bytes:
    return json.dumps(message).encode()


def init(version: str = "2025-06-18", request_id: int = 1) -> bytes:
    return body({"jsonrpc": "2.0", "id": request_id, "method": "initialize",
                 "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t"}}})


def request(request_id: Any, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def tool_call(request_id: Any, name: str, arguments: Any = None, progress_token: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments if arguments is not None else {}}
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def open_session(endpoint: McpEndpoint, tools: Mapping[str, McpTool], version: str = "2025-06-18",
                       scope: str = "s") -> dict[str, str]:
    """Initialize; the headers a client then sends (session id and the negotiated version)."""
    answer = await endpoint.post(scope, tools, {}, init(version))
    assert json.loads(answer.body)["result"]["protocolVersion"] == version
    return {"Mcp-Session-Id": answer.headers["Mcp-Session-Id"], "MCP-Protocol-Version": version}
