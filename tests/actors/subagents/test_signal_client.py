"""The subagent's signal tools over real HTTP (actors/subagents/client.py, signal_tools.py): failures become tool results."""

from __future__ import annotations

import socket

import httpx
import pytest
import trio

from actors.subagents import client
from actors.subagents.files import write_mcp_config
from actors.subagents.signal_tools import signal_client_tools


def a_closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


async def test_an_unreachable_signal_endpoint_is_a_failed_tool_result_naming_why(tmp_path) -> None:
    config = write_mcp_config(tmp_path, "run", f"http://127.0.0.1:{a_closed_port()}/signal/mcp/token")
    tool = next(t for t in signal_client_tools(config) if t.name == "goal_reached")
    with trio.fail_after(20):
        result = await tool.execute(None, {"summary": "done"})  # type: ignore[arg-type]
    assert result.error is not None
    assert "the signal endpoint could not be reached: ConnectError" in result.content


def answer(body: bytes, status: int = 200, content_type: str = "application/json") -> httpx.Response:
    return httpx.Response(status, content=body, headers={"content-type": content_type},
                          request=httpx.Request("POST", "http://127.0.0.1/signal/mcp/t"))


def test_the_response_is_found_in_a_json_body_or_an_event_stream() -> None:
    found = client._answer(answer(b'{"jsonrpc":"2.0","id":2,"result":{"content":[]}}'), 2)
    assert found.result == {"content": []}
    stream = (b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'
              b'event: message\ndata: {"jsonrpc":"2.0","id":2,"result":{"isError":false}}\n\n')
    assert client._answer(answer(stream, content_type="text/event-stream"), 2).result == {"isError": False}
    # An error about a request whose id the server could not read carries a null id: it is the answer too.
    refused = client._answer(answer(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}', 400), 2)
    assert refused.error == {"code": -32600, "message": "no"}


def test_an_answer_without_a_json_rpc_response_is_an_http_error_or_a_value_error() -> None:
    with pytest.raises(httpx.HTTPStatusError):
        client._answer(answer(b'{"error":"shutting down","code":"shutting_down","path":null}', 503), 2)
    with pytest.raises(ValueError):
        client._answer(answer(b'{"jsonrpc":"2.0","id":7,"result":{}}'), 2)  # another request's answer
    with pytest.raises(ValueError):
        client._answer(answer(b"not json"), 2)
