"""A client's MCP servers over ACP: the official ACP SDK passes ``mcpServers`` in ``session/new`` and
``session/load`` to ``python -m transport acp``, whose model then calls their tools (the permission
asked of the client as for ``shell``). The servers are the test server of tests/actors/mcp_client,
over stdio and Streamable HTTP."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

acp = pytest.importorskip("acp")
pytest.importorskip("mcp")
from acp import schema, text_block  # noqa: E402

from tests.e2e.test_acp_stdio import TIMEOUT, RecordingClient, spawn, write_script  # noqa: E402
from tests.e2e.test_mcp_servers import SERVER, call, url_server  # noqa: E402
from tests.processes import kill_all, marker, pids_with  # noqa: E402


def tool_texts(client: RecordingClient) -> list[str]:
    return [u.content[0].content.text for u in client.updates
            if u.session_update == "tool_call_update" and u.content]


def wait_gone(mark: str, timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while pids_with(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids_with(mark)


def test_session_new_connects_the_clients_stdio_and_http_servers(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    mark = marker()
    script = write_script(
        tmp_path / "script.json",
        [call("mcp__test__add", a=2, b=3), call("mcp__test__env", name="GIVEN"), call("mcp__web__add", a=10, b=1)],
        [{"text": "Done."}])
    stdio = schema.McpServerStdio(name="test", command=sys.executable, args=[str(SERVER), "--marker", mark],
                                  env=[schema.EnvVariable(name="GIVEN", value="from-acp")])

    async def scenario(port: int) -> None:
        client = RecordingClient()
        web = schema.HttpMcpServer(type="http", name="web", url=f"http://127.0.0.1:{port}/mcp", headers=[])
        async with spawn(client, tmp_path / "state", script) as (conn, _):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            assert (init.agent_capabilities.mcp_capabilities.http, init.agent_capabilities.mcp_capabilities.sse) == (
                True, True)
            session = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=[stdio, web]), TIMEOUT)
            done = await asyncio.wait_for(
                conn.prompt(session_id=session.session_id, prompt=[text_block("use the servers")]), TIMEOUT)
            assert done.stop_reason == "end_turn"
            assert [r["toolCall"].title for r in client.permission_requests] == [
                "add (MCP server test)", "env (MCP server test)", "add (MCP server web)"]
            assert tool_texts(client) == ["5", "from-acp", "11"]
            assert pids_with(mark)

    try:
        with url_server("--http") as port:
            asyncio.run(scenario(port))
        assert wait_gone(mark) == [], "the agent's exit leaves no process of a client's MCP server"
    finally:
        kill_all(pids_with(mark))


def test_session_load_starts_the_clients_servers_in_a_second_process(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    mark = marker()
    script = write_script(tmp_path / "script.json", [{"text": "first"}])
    stdio = schema.McpServerStdio(name="test", command=sys.executable, args=[str(SERVER), "--marker", mark], env=[])

    async def first() -> str:
        async with spawn(RecordingClient(), state, script) as (conn, _):
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            await asyncio.wait_for(conn.prompt(session_id=session.session_id, prompt=[text_block("hi")]), TIMEOUT)
            return session.session_id

    async def second(session_id: str) -> Any:
        client = RecordingClient("allow_always")
        async with spawn(client, state, write_script(tmp_path / "again.json", [call("mcp__test__add", a=20, b=22)],
                                                     [{"text": "second"}])) as (conn, _):
            await conn.initialize(protocol_version=1)
            await asyncio.wait_for(conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[stdio]),
                                   TIMEOUT)
            done = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[text_block("add")]), TIMEOUT)
            assert done.stop_reason == "end_turn"
            return tool_texts(client)

    try:
        session_id = asyncio.run(first())
        assert asyncio.run(second(session_id)) == ["42"]
        assert wait_gone(mark) == []
    finally:
        kill_all(pids_with(mark))
