"""A session's MCP servers in process: a client's servers added to a live session by ACP ``session/load``,
"always reject" remembered per tool, and a server's process ending with its session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from tests.processes import kill_all, marker, pids_with
from tests.transport.acp.harness import acp_client, call, new_session, text

pytest.importorskip("mcp")

SERVER = Path(__file__).with_name("mcp_server.py")


def stdio(name: str, *extra: str) -> dict:
    return {"name": name, "command": sys.executable, "args": [str(SERVER), *extra], "env": []}


async def test_session_load_adds_a_clients_servers_to_a_live_session(tmp_path: Path) -> None:
    mark = marker()
    votes = iter(["reject_always", "proceed_once"])
    try:
        async with acp_client([call("mcp__late__add", a=1, b=1)], [call("mcp__late__add", a=2, b=2)],
                              [call("mcp__late__peek")], [{"text": "done"}]) as (daemon, client):
            client.handlers["session/request_permission"] = lambda params: {
                "outcome": {"outcome": "selected", "optionId": next(votes)}}
            sid = await new_session(client, str(tmp_path))
            session = daemon.get(sid)._session
            assert session.mcp.servers == {}
            await client.result("session/load", {"sessionId": sid, "cwd": str(tmp_path),
                                                 "mcpServers": [stdio("late", "--marker", mark)]})
            server = session.mcp.servers["late"]
            with trio.fail_after(20):
                await server.settled.wait()
            assert server.state == "ready" and "mcp__late__add" in session.tools
            # Loading again with the same name keeps the running server.
            await client.result("session/load", {"sessionId": sid, "cwd": str(tmp_path),
                                                 "mcpServers": [stdio("late", "--fail-start")]})
            assert session.mcp.servers["late"] is server
            answer = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
            assert answer["stopReason"] == "end_turn"
            tool_messages = [m.content for m in session.conversation.history if m.role == "tool"]
            # Rejected always: the second add is refused without asking; peek (another tool) is asked.
            assert tool_messages == ["Error: the user denied this call",
                                     "Error: the user denied such calls for the rest of this session "
                                     "(deny rule mcp__late__add matches)", "peeked"]
            assert session.authorizer.listed_rules()["session"]["deny"] == ["mcp__late__add"]
            asked = [m for m in client.agent_requests if m["method"] == "session/request_permission"]
            assert [m["params"]["toolCall"]["title"] for m in asked] == ["add (MCP server late)",
                                                                       "peek (MCP server late)"]
            await client.result("session/close", {"sessionId": sid})
            assert pids_with(mark) == []
    finally:
        kill_all(pids_with(mark))


async def test_a_sandboxed_server_sees_its_own_script_outside_the_cwd_under_tmp(tmp_path: Path) -> None:
    # The sandbox's /tmp is its own: a server script that lies under the host's /tmp (a checkout there, as
    # in CI) is bound in read-only because its command line names it; nothing else of /tmp is.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = elsewhere / "server.py"
    script.write_text(SERVER.read_text())
    (elsewhere / "neighbour.txt").write_text("not for the server")
    work = tmp_path / "work"
    work.mkdir()
    server_config = {"name": "moved", "command": sys.executable, "args": [str(script)], "env": []}
    async with acp_client([call("mcp__moved__add", a=2, b=3)], [{"text": "done"}]) as (daemon, client):
        client.handlers["session/request_permission"] = lambda params: {
            "outcome": {"outcome": "selected", "optionId": "proceed_once"}}
        sid = (await client.result("session/new", {"cwd": str(work), "mcpServers": [server_config]}))["sessionId"]
        session = daemon.get(sid)._session
        if not session.runtime.sandbox.active:
            pytest.skip("no sandbox here (bubblewrap): nothing hides /tmp")
        server = session.mcp.servers["moved"]
        with trio.fail_after(20):
            await server.settled.wait()
        assert server.state == "ready", server.state
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert [m.content for m in session.conversation.history if m.role == "tool"] == ["5"]
