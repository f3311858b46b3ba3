"""The subagent's signal tools over real HTTP (actors/subagents/client.py, tools.py): failures become tool results."""

from __future__ import annotations

import socket

import trio

from actors.subagents.files import write_mcp_config
from actors.subagents.tools import signal_client_tools


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
