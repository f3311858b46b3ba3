"""Tool input errors are tool execution errors (MCP 2025-11-25): ``isError`` results the model can read.

Unknown tools and malformed ``tools/call`` requests stay protocol errors.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.transport.mcp.rpc import body, open_session, tool_call
from transport.mcp.protocol import McpEndpoint, McpTool, ToolOutput

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "runner": {"type": "string", "enum": ["session", "command"]},
        "max_turns": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["name"],
    "additionalProperties": False,
}
calls: list[dict[str, Any]] = []


async def handler(args: dict[str, Any], context: Any) -> ToolOutput:
    calls.append(args)
    return ToolOutput("ran")


TOOLS = {"start": McpTool("start", "start something", SCHEMA, handler)}


async def call(arguments: Any) -> tuple[int, dict[str, Any]]:
    endpoint = McpEndpoint("t")
    headers = await open_session(endpoint, TOOLS, "2025-11-25")
    answer = await endpoint.post("s", TOOLS, headers, body(tool_call(7, "start", arguments)))
    return answer.status, json.loads(answer.body)


@pytest.mark.parametrize("arguments, said", [
    # The same check and words as a session's built-in tools (actors/session/tool_arguments.py).
    ({}, "arguments.name: required"),
    ({"name": 3}, "arguments.name: expected string, got 3"),
    ({"name": ""}, 'arguments.name: expected a non-empty string, got ""'),
    ({"name": "a", "runner": "shell"}, 'arguments.runner: expected one of "session", "command", got "shell"'),
    ({"name": "a", "max_turns": "5"}, 'arguments.max_turns: expected integer, got "5"'),
    ({"name": "a", "max_turns": 99}, "arguments.max_turns: expected at most 50, got 99"),
    ({"name": "a", "colour": "red"}, 'arguments: unexpected property "colour" (expected only '),
])
async def test_bad_arguments_are_an_is_error_result_naming_the_field(arguments, said):
    calls.clear()
    status, message = await call(arguments)
    assert status == 200 and "error" not in message  # a successful JSON-RPC result, not a protocol error
    assert message["id"] == 7
    result = message["result"]
    assert result["isError"] is True
    [block] = result["content"]
    assert block["type"] == "text"
    assert said in block["text"]
    assert block["text"].startswith("Invalid arguments for start: ")
    assert "call start again with corrected arguments" in block["text"]
    assert calls == []  # the handler never ran


async def test_every_problem_is_named_at_once():
    _, message = await call({"runner": "x", "max_turns": 0})
    text = message["result"]["content"][0]["text"]
    for said in ("arguments.name: required", "arguments.runner: expected one of",
                 "arguments.max_turns: expected at least 1, got 0"):
        assert said in text


async def test_good_arguments_still_run_the_tool():
    calls.clear()
    status, message = await call({"name": "a", "runner": "command", "max_turns": 3})
    assert status == 200
    assert message["result"] == {"content": [{"type": "text", "text": "ran"}], "isError": False}
    assert calls == [{"name": "a", "runner": "command", "max_turns": 3}]


@pytest.mark.parametrize("params, said", [
    ({"name": "nope", "arguments": {}}, "Unknown tool: nope (this server has: start)"),
    ({"arguments": {}}, "params.name must be a string"),
    ({"name": "start", "arguments": ["a"]}, "params.arguments must be an object"),
    ({"name": "start", "arguments": {"name": "a"}, "_meta": "x"}, "params._meta must be an object"),
])
async def test_unknown_tools_and_malformed_calls_stay_protocol_errors(params, said):
    endpoint = McpEndpoint("t")
    headers = await open_session(endpoint, TOOLS, "2025-11-25")
    answer = await endpoint.post("s", TOOLS, headers, body({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                                                            "params": params}))
    message = json.loads(answer.body)
    assert "result" not in message
    assert message["error"]["code"] == -32602 and said in message["error"]["message"]
