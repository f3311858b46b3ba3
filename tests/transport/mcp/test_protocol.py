"""MCP over Streamable HTTP: the handshake, sessions, versions and JSON-RPC errors, in process and on the wire."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.transport.mcp.harness import mcp_daemon, mcp_session, text_of
from transport.mcp import base_url_from_bind
from transport.mcp.protocol import McpEndpoint, McpTool, ToolOutput


async def echo(args: dict[str, Any], context: Any) -> ToolOutput:
    return ToolOutput(f"echo {args['word']}", structured={"word": args["word"]})


TOOLS = {"echo": McpTool("echo", "say it back", {"type": "object", "properties": {"word": {"type": "string"}},
                                                 "required": ["word"], "additionalProperties": False}, echo)}


def body(message: Any) -> bytes:
    return json.dumps(message).encode()


def init(version: str = "2025-06-18", request_id: int = 1) -> bytes:
    return body({"jsonrpc": "2.0", "id": request_id, "method": "initialize",
                 "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t"}}})


async def session(endpoint: McpEndpoint, scope: str = "s", version: str = "2025-06-18") -> dict[str, str]:
    answer = await endpoint.post(scope, TOOLS, {}, init(version))
    return {"Mcp-Session-Id": answer.headers["Mcp-Session-Id"]}


async def test_initialize_echoes_a_supported_version_and_sets_a_session():
    endpoint = McpEndpoint("t")
    for asked, answered in (("2025-03-26", "2025-03-26"), ("2025-11-25", "2025-11-25"), ("1999-01-01", "2025-11-25")):
        answer = await endpoint.post("s", TOOLS, {}, init(asked))
        result = json.loads(answer.body)["result"]
        assert answer.status == 200 and result["protocolVersion"] == answered
        assert result["capabilities"] == {"tools": {"listChanged": False}}
        session_id = answer.headers["Mcp-Session-Id"]
        assert session_id.isascii() and session_id.isprintable() and " " not in session_id


async def test_notifications_get_202_and_requests_without_a_session_400():
    endpoint = McpEndpoint("t")
    headers = await session(endpoint)
    notified = await endpoint.post("s", TOOLS, headers, body({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    assert (notified.status, notified.body) == (202, b"")
    bare = await endpoint.post("s", TOOLS, {}, body({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert bare.status == 400
    unknown = await endpoint.post("s", TOOLS, {"Mcp-Session-Id": "nope"},
                                  body({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert unknown.status == 404
    other_scope = await endpoint.post("elsewhere", TOOLS, headers,
                                      body({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert other_scope.status == 404
    assert endpoint.get().status == 405


@pytest.mark.parametrize("raw, status, code", [
    (b"{not json", 400, -32700),
    (body([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]), 400, -32600),
    (body({"id": 1, "method": "ping"}), 400, -32600),
    (body({"jsonrpc": "2.0", "id": True, "method": "ping"}), 400, -32600),
    (body({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}), 200, -32601),
    (body({"jsonrpc": "2.0", "id": 1, "params": {}}), 400, -32600),
    (body({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}), 400, -32600),
    (body({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": None}), 400, -32600),  # JSON-RPC §4.2
    (body({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), 400, -32600),
    (body({"jsonrpc": "2.0", "id": None, "method": "ping"}), 400, -32600),
    # Protocol errors of tools/call: no tool by that name, or params that break CallToolRequest's schema.
    # (Arguments that miss a tool's inputSchema are tool execution errors: test_tool_errors.py.)
    (body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "nope"}}), 200, -32602),
    (body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}), 200, -32602),
    (body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": [1]}}),
     200, -32602),
    (body({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"word": "x"}, "_meta": {"progressToken": 1.5}}}), 200, -32602),
])
async def test_bad_input_gets_json_rpc_errors_with_their_codes(raw, status, code):
    endpoint = McpEndpoint("t")
    answer = await endpoint.post("s", TOOLS, await session(endpoint), raw)
    assert answer.status == status
    assert json.loads(answer.body)["error"]["code"] == code


async def test_tools_list_call_ping_delete_and_the_version_header():
    endpoint = McpEndpoint("t")
    headers = await session(endpoint)
    listed = json.loads((await endpoint.post("s", TOOLS, headers, body(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))).body)
    assert listed["result"]["tools"][0]["name"] == "echo"
    called = json.loads((await endpoint.post("s", TOOLS, headers, body(
        {"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": {"name": "echo",
                                                                        "arguments": {"word": "hi"}}}))).body)
    assert called == {"jsonrpc": "2.0", "id": "x", "result": {
        "content": [{"type": "text", "text": "echo hi"}], "isError": False, "structuredContent": {"word": "hi"}}}
    pong = await endpoint.post("s", TOOLS, headers, body({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
    assert json.loads(pong.body)["result"] == {}
    wrong = await endpoint.post("s", TOOLS, {**headers, "MCP-Protocol-Version": "1.0"},
                                body({"jsonrpc": "2.0", "id": 4, "method": "ping"}))
    assert wrong.status == 400
    assert "unsupported protocol version" in json.loads(wrong.body)["error"]["message"]
    assert endpoint.delete("s", headers).status == 200
    assert endpoint.delete("s", headers).status == 404
    assert endpoint.delete("s", {}).status == 400


async def test_the_session_s_negotiated_version_governs_and_the_header_must_agree():
    endpoint = McpEndpoint("t")
    headers = await session(endpoint, version="2025-06-18")
    ping = body({"jsonrpc": "2.0", "id": 4, "method": "ping"})
    # The header may repeat the negotiated version, in any case of its name, or be left out.
    for extra in ({"MCP-Protocol-Version": "2025-06-18"}, {"mcp-protocol-version": "2025-06-18"}, {}):
        assert (await endpoint.post("s", TOOLS, {**headers, **extra}, ping)).status == 200
    # Another version we speak is still not this session's: a 400, not a silent switch.
    other = await endpoint.post("s", TOOLS, {**headers, "MCP-Protocol-Version": "2025-03-26"}, ping)
    assert other.status == 400
    message = json.loads(other.body)["error"]["message"]
    assert "2025-03-26" in message and "negotiated (2025-06-18)" in message


def test_signal_urls_point_at_a_reachable_address():
    assert base_url_from_bind("http://127.0.0.1:4170") == "http://127.0.0.1:4170"
    assert base_url_from_bind("http://0.0.0.0:4170") == "http://127.0.0.1:4170"
    assert base_url_from_bind("http://[::]:4170") == "http://[::1]:4170"
    assert base_url_from_bind("http://[::1]:80") == "http://[::1]:80"


async def test_the_parent_surface_on_the_wire(tmp_path):
    async with mcp_daemon(workspace=str(tmp_path)) as (daemon, base):
        async with httpx.AsyncClient(base_url=base, timeout=10, trust_env=False) as http:
            assert (await http.get("/mcp")).status_code == 405
            assert (await http.post("/mcp", content=b"[")).status_code == 400
            assert (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).status_code \
                == 400
            hello = await http.post("/mcp", content=init("2025-03-26"))
            assert hello.json()["result"]["protocolVersion"] == "2025-03-26"
            assert "mcp-session-id" in hello.headers
        async with mcp_session(f"{base}/mcp") as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert sorted(tools) == ["await_resume", "list", "start", "status", "stop"]
            assert {"state", "turn", "maxTurns", "endReason", "lastEventAgeS"} <= set(
                tools["status"].output_schema["required"])
            refused = await mcp.call_tool("start", {"name": "a", "brief": "b", "cwd": "/no/such/place"})
            assert refused.is_error and "not a directory" in text_of(refused)
