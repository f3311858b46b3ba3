"""An ACP client's files and terminal lent to its sessions: lending, taking back, errors and timeouts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from actors import CountingIds, load_script, open_daemon
from transport.acp import AcpConnection

from tests.transport.acp.harness import Client, call, new_session, text

FS_AND_TERMINAL = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}


@asynccontextmanager
async def editor(*responses: Any, capabilities: dict[str, Any] | None = None) -> AsyncIterator[tuple[Any, Client]]:
    """A daemon with a scripted model and an initialized in-process client offering ``capabilities``."""
    model = load_script({"responses": list(responses)})
    async with open_daemon(None, model=model, ids=CountingIds()) as daemon:
        async with trio.open_nursery() as nursery:
            client = Client()
            client.conn = AcpConnection(daemon, nursery, client.deliver)
            await client.result("initialize", {"protocolVersion": 1,
                                               "clientCapabilities": capabilities or FS_AND_TERMINAL})
            try:
                yield daemon, client
            finally:
                await client.conn.close()
                nursery.cancel_scope.cancel()


def tool_messages(daemon: Any, request: int) -> list[str]:
    return [m.content for m in daemon.runtime.provider.calls[request].messages if m.role == "tool"]


def methods(client: Client) -> list[str]:
    return [m["method"] for m in client.agent_requests if m["method"].startswith(("fs/", "terminal/"))]


async def test_a_binding_lends_what_the_client_offers_and_takes_it_back(tmp_path) -> None:
    async with editor(capabilities={"fs": {"readTextFile": True}}) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        handle = daemon.get(sid)
        lent = handle._session.services.client
        assert lent is not None and lent.terminal is None
        assert lent.files.reads and not lent.files.writes  # writes stay local
        assert await client.conn.unbind(sid, abort=False)
        assert handle._session.services.client is None  # the client left: local files again


async def test_nothing_is_lent_without_the_capabilities(tmp_path) -> None:
    async with editor(capabilities={"fs": {"readTextFile": False}, "terminal": False}) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        assert daemon.get(sid)._session.services.client is None


async def test_the_clients_error_is_a_tool_error(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("here\n")
    script = ([call("read_file", path="a.txt"), call("write_file", path="new.txt", content="x")],
              [{"text": "ok"}])
    async with editor(*script) as (daemon, client):
        client.handlers["fs/read_text_file"] = lambda params: {"error": {"code": -32603, "message": "disk on fire"}}
        client.handlers["fs/write_text_file"] = lambda params: {"error": {"code": -32603, "message": "read-only"}}
        sid = await new_session(client, str(tmp_path))
        await client.result("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
        result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert result["stopReason"] == "end_turn"
        read, written = tool_messages(daemon, 1)
        assert "disk on fire" in read
        # new.txt is missing on disk too: the read error means "no such file", and the write then fails.
        assert "read-only" in written
        assert not (tmp_path / "new.txt").exists()


async def test_a_shell_that_outlives_its_timeout_is_killed_then_released(tmp_path) -> None:
    script = ([call("shell", command="sleep 100", timeout=0.5)], [{"text": "ok"}])
    async with editor(*script) as (daemon, client):
        client.handlers["terminal/create"] = lambda params: {"terminalId": "t-1"}
        client.handlers["terminal/wait_for_exit"] = lambda params: None  # never answers
        client.handlers["terminal/kill"] = lambda params: {}
        client.handlers["terminal/output"] = lambda params: {"output": "partial", "truncated": True,
                                                             "exitStatus": {"signal": "SIGTERM"}}
        client.handlers["terminal/release"] = lambda params: {}
        sid = await new_session(client, str(tmp_path))
        await client.result("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert methods(client) == ["terminal/create", "terminal/wait_for_exit", "terminal/kill", "terminal/output",
                                   "terminal/release"]
        [message] = tool_messages(daemon, 1)
        assert "partial" in message and "timed out after 0.5 s" in message and "dropped" in message


async def test_a_failing_terminal_is_a_tool_error_and_still_released(tmp_path) -> None:
    script = ([call("shell", command="true")], [{"text": "ok"}])
    async with editor(*script) as (daemon, client):
        client.handlers["terminal/create"] = lambda params: {"terminalId": "t-1"}
        client.handlers["terminal/wait_for_exit"] = lambda params: {"error": {"code": -32603, "message": "pty"}}
        client.handlers["terminal/kill"] = lambda params: {}
        client.handlers["terminal/release"] = lambda params: {}
        sid = await new_session(client, str(tmp_path))
        await client.result("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert methods(client) == ["terminal/create", "terminal/wait_for_exit", "terminal/kill",
                                   "terminal/release"]
        [message] = tool_messages(daemon, 1)
        assert message.startswith("Error: ") and "pty" in message


async def test_background_shells_stay_local(tmp_path) -> None:
    script = ([call("shell", command="echo bg > bg.txt", run_in_background=True)], [{"text": "ok"}])
    async with editor(*script) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        await client.result("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        with trio.fail_after(10):
            while not (tmp_path / "bg.txt").exists():
                await trio.sleep(0.05)
        assert methods(client) == []


async def test_a_session_closed_under_a_binding_that_lent_services_leaves_the_connection_working(tmp_path) -> None:
    with trio.fail_after(30):
        async with editor() as (daemon, client):
            sid = await new_session(client, str(tmp_path))
            assert client.conn.bindings[sid].lent is not None
            await daemon.close_session(sid)
            while sid in client.conn.bindings:
                await trio.sleep(0.01)
            assert await new_session(client, str(tmp_path))  # the connection goes on


async def test_the_update_that_embeds_the_editors_terminal_names_the_tool(tmp_path) -> None:
    # Every update of a tool call carries _meta.toolName (qwen's Web Shell labels a card by it); the one that
    # adds the live terminal to the call did not.
    script = ([call("shell", command="true")], [{"text": "ok"}])
    async with editor(*script) as (daemon, client):
        client.handlers["terminal/create"] = lambda params: {"terminalId": "t-1"}
        client.handlers["terminal/wait_for_exit"] = lambda params: {"exitCode": 0}
        client.handlers["terminal/output"] = lambda params: {"output": "", "truncated": False,
                                                             "exitStatus": {"exitCode": 0}}
        client.handlers["terminal/release"] = lambda params: {}
        sid = await new_session(client, str(tmp_path))
        await client.result("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        updates = [u for u in client.updates() if u.get("sessionUpdate") in ("tool_call", "tool_call_update")]
        embedding = [u for u in updates if {"type": "terminal", "terminalId": "t-1"} in u.get("content", [])]
        assert embedding, updates
        assert all(u["_meta"]["toolName"] == "shell" for u in updates), updates
