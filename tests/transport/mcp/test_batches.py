"""JSON-RPC batches: answered on a session that negotiated 2025-03-26, refused on every other revision."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from tests.transport.mcp.rpc import body, open_session, request, tool_call
from transport.mcp.protocol import McpEndpoint, McpTool, ToolOutput


async def echo(args: dict[str, Any], context: Any) -> ToolOutput:
    return ToolOutput(f"echo {args['word']}")


async def nap(args: dict[str, Any], context: Any) -> ToolOutput:
    await trio.sleep(args["s"])
    return ToolOutput(f"slept {args['s']}")


TOOLS = {
    "echo": McpTool("echo", "say it back", {"type": "object", "properties": {"word": {"type": "string"}},
                                            "required": ["word"]}, echo),
    "nap": McpTool("nap", "sleep", {"type": "object", "properties": {"s": {"type": "number"}}}, nap),
}


async def test_a_2025_03_26_session_gets_one_response_per_request_in_order():
    endpoint = McpEndpoint("t")
    headers = await open_session(endpoint, TOOLS, "2025-03-26")
    answer = await endpoint.post("s", TOOLS, headers, body([
        request(1, "ping"),
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
        tool_call("two", "echo", {"word": "hi"}),
        tool_call(3, "echo", {}),  # a tool execution error stays a result inside the batch
        {"jsonrpc": "2.0", "id": 4},  # neither request nor response: answered with id null (JSON-RPC §5)
        request(5, "initialize", protocolVersion="2025-03-26"),
        request(6, "resources/list"),
    ]))
    assert answer.status == 200 and answer.headers["Content-Type"] == "application/json"
    responses = json.loads(answer.body)
    assert isinstance(responses, list)
    assert [r["id"] for r in responses] == [1, "two", 3, None, 5, 6]  # the notification is answered by nothing
    assert responses[0]["result"] == {}
    assert responses[1]["result"]["content"][0]["text"] == "echo hi"
    assert responses[2]["result"]["isError"] is True and "arguments.word: required" in \
        responses[2]["result"]["content"][0]["text"]
    assert responses[3]["error"]["code"] == -32600
    assert responses[4]["error"]["code"] == -32600 and "initialize must not be part" in responses[4]["error"]["message"]
    assert responses[5]["error"]["code"] == -32601


async def test_a_batch_of_notifications_and_responses_only_gets_202():
    endpoint = McpEndpoint("t")
    headers = await open_session(endpoint, TOOLS, "2025-03-26")
    answer = await endpoint.post("s", TOOLS, headers, body([
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 9, "result": {}},
    ]))
    assert (answer.status, answer.body) == (202, b"")


async def test_the_requests_of_a_batch_run_concurrently(autojump_clock):
    endpoint = McpEndpoint("t")
    headers = await open_session(endpoint, TOOLS, "2025-03-26")
    started = trio.current_time()
    answer = await endpoint.post("s", TOOLS, headers, body([tool_call(i, "nap", {"s": 10}) for i in range(5)]))
    assert trio.current_time() - started == pytest.approx(10)  # not 50
    assert [r["result"]["content"][0]["text"] for r in json.loads(answer.body)] == ["slept 10"] * 5


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2024-11-05"])
async def test_every_other_revision_refuses_a_batch_clearly(version):
    endpoint = McpEndpoint("t")
    headers = await open_session(endpoint, TOOLS, version)
    answer = await endpoint.post("s", TOOLS, headers, body([request(1, "ping")]))
    assert answer.status == 400
    error = json.loads(answer.body)
    assert error["id"] is None and error["error"]["code"] == -32600
    message = error["error"]["message"]
    assert f"not supported in protocol version {version}" in message and "2025-03-26" in message
    assert "one message per POST" in message


async def test_the_session_s_version_decides_not_the_header():
    endpoint = McpEndpoint("t")
    headers = await open_session(endpoint, TOOLS, "2025-06-18")
    # Claiming 2025-03-26 in the header does not make a 2025-06-18 session batch.
    answer = await endpoint.post("s", TOOLS, {**headers, "MCP-Protocol-Version": "2025-03-26"},
                                 body([request(1, "ping")]))
    assert answer.status == 400 and "negotiated (2025-06-18)" in json.loads(answer.body)["error"]["message"]
    # Without a session there is no negotiated version, so no batch either (initialize can't be batched).
    bare = await endpoint.post("s", TOOLS, {}, body([request(5, "initialize", protocolVersion="2025-03-26")]))
    assert bare.status == 400 and "Mcp-Session-Id" in json.loads(bare.body)["error"]["message"]


async def test_empty_and_oversized_batches():
    endpoint = McpEndpoint("t")
    headers = await open_session(endpoint, TOOLS, "2025-03-26")
    empty = await endpoint.post("s", TOOLS, headers, b"[]")
    assert empty.status == 400 and json.loads(empty.body)["error"]["code"] == -32600
    huge = await endpoint.post("s", TOOLS, headers, body([request(i, "ping") for i in range(65)]))
    assert huge.status == 400 and "at most 64" in json.loads(huge.body)["error"]["message"]
