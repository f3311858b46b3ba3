"""MCP servers as tool sources, end to end: the settings' ``mcpServers``, a real daemon on loopback, the
scripted model calling ``mcp__<server>__<tool>``, and a real MCP server (tests/actors/mcp_client/mcp_server.py,
written with the official ``mcp`` server package) over stdio, Streamable HTTP and SSE."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actors import load_script
from actors.settings_file import settings_from_dict
from tests.conftest import daemon_process, live_daemon
from tests.e2e.sse_client import frames
from tests.processes import kill_all, marker, pids_with
from transport.process_image import SECRET_ENV

pytest.importorskip("mcp")

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "actors" / "mcp_client" / "mcp_server.py"
WAIT = 30


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"name": tool, "arguments": arguments}}


def stdio(*extra: str, **fields: Any) -> dict[str, Any]:
    """A settings entry that runs the test server over stdio with this interpreter."""
    return {"command": sys.executable, "args": [str(SERVER), *extra], **fields}


@contextmanager
def url_server(kind: str = "--http") -> Iterator[int]:
    """The test server over Streamable HTTP (``--http``) or SSE (``--sse``) on 127.0.0.1; its port."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    proc = subprocess.Popen([sys.executable, str(SERVER), kind], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        yield int(proc.stdout.readline())  # type: ignore[union-attr]
    finally:
        proc.terminate()
        proc.wait(10)


async def start(client: Any, cwd: Path, text: str = "go") -> tuple[str, str]:
    sid = (await client.post("/session", json={"cwd": str(cwd)})).json()["sessionId"]
    r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})
    assert r.status_code == 202, r.text
    return sid, r.json()["promptId"]


async def wait_turn(client: Any, sid: str, pid: str) -> dict[str, Any]:
    with trio.fail_after(WAIT):
        while True:
            r = await client.get(f"/session/{sid}/turns/{pid}")
            if r.status_code == 200 and r.json()["state"] in ("completed", "error", "cancelled"):
                return r.json()
            await trio.sleep(0.02)


async def events(client: Any, sid: str) -> list[dict[str, Any]]:
    """Every event of the session so far (the replay from the start)."""
    out = []
    async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
        async for frame in frames(r):
            if frame["type"] == "replay_complete":
                return out
            out.append(frame)
    return out


def updates(got: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f["data"]["update"] for f in got if f["type"] == "session_update"
            and f["data"]["update"]["sessionUpdate"] == kind]


def answers(model: Any) -> list[str]:
    """What each tool call gave the model, in order (the tool messages of its last request)."""
    return [m.content for m in model.calls[-1].messages if m.role == "tool"]


async def test_a_stdio_server_gives_tools_whose_calls_and_failures_are_tool_results(tmp_path: Path) -> None:
    mark = marker()
    settings = settings_from_dict({"approvalMode": "yolo", "mcpServers": {"test": stdio("--marker", mark)}})
    model = load_script({"responses": [[call("mcp__test__add", a=2, b=40)], [call("mcp__test__fail")],
                                       [call("mcp__test__cwd")], [{"text": "done"}]]})
    try:
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid, pid = await start(client, tmp_path)
            record = await wait_turn(client, sid, pid)
            assert (record["state"], record["stopReason"]) == ("completed", "end_turn")
            offered = {tool.name: tool for tool in model.calls[0].tools}
            assert {"mcp__test__add", "mcp__test__fail", "mcp__test__peek", "shell"} <= set(offered)
            add = offered["mcp__test__add"]
            assert add.parameters["type"] == "object" and set(add.parameters["properties"]) == {"a", "b"}
            assert "Add two integers." in add.description
            added, failed, cwd = answers(model)
            assert added == "42"
            assert failed.startswith("Error: ") and "deliberate failure" in failed  # the turn went on
            assert cwd == os.path.realpath(tmp_path)  # the server works in the session's cwd
            got = await events(client, sid)
            statuses = [u["status"] for u in updates(got, "tool_call_update")]
            assert statuses == ["completed", "failed", "completed"]
            assert pids_with(mark), "the server runs while its session does"
            assert (await client.delete(f"/session/{sid}")).status_code in (200, 204)
            assert pids_with(mark) == [], "closing the session leaves no process of its MCP server"
    finally:
        kill_all(pids_with(mark))


async def test_servers_at_a_url_over_streamable_http_and_sse(tmp_path: Path) -> None:
    with url_server("--http") as http, url_server("--sse") as sse:
        settings = settings_from_dict({"approvalMode": "yolo", "mcpServers": {
            "web": {"httpUrl": f"http://127.0.0.1:{http}/mcp", "headers": {"X-Test": "1"}},
            "claude": {"type": "http", "url": f"http://127.0.0.1:{http}/mcp"},
            "old": {"type": "sse", "url": f"http://127.0.0.1:{sse}/sse"},
            "bare": {"url": f"http://127.0.0.1:{sse}/sse"},  # Streamable HTTP refused: SSE then
        }})
        model = load_script({"responses": [[call("mcp__web__add", a=1, b=1), call("mcp__claude__add", a=1, b=2),
                                            call("mcp__old__add", a=1, b=3), call("mcp__bare__add", a=1, b=4),
                                            call("mcp__web__fail")], [{"text": "done"}]]})
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid, pid = await start(client, tmp_path)
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
            *sums, failed = answers(model)
            assert sums == ["2", "3", "4", "5"]
            assert failed.startswith("Error: ") and "deliberate failure" in failed
            servers = daemon.get(sid)._session.mcp.servers
            assert {name: server.state for name, server in servers.items()} == dict.fromkeys(
                ["web", "claude", "old", "bare"], "ready")


async def test_a_server_that_cannot_start_is_reported_and_the_session_works(tmp_path: Path, caplog) -> None:
    settings = settings_from_dict({"mcpServers": {
        "broken": stdio("--fail-start"), "missing": {"command": str(tmp_path / "no-such-server")},
        "down": {"httpUrl": "http://127.0.0.1:9/mcp"}}})
    model = load_script({"responses": [[{"text": "still here"}]]})
    with caplog.at_level(logging.WARNING, logger="trellis.mcp"):
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid, pid = await start(client, tmp_path)
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
            assert not [t.name for t in model.calls[0].tools if t.name.startswith("mcp__")]
            got = await events(client, sid)
            notices = [u for u in updates(got, "agent_message_chunk") if u.get("_meta", {}).get("source") == "daemon"]
            texts = sorted(u["content"]["text"] for u in notices)
            assert len(texts) == 3
            assert texts[0].startswith("MCP server 'broken' did not start: exited with code 3 (stderr: test server: "
                                       "refusing to start on purpose)")
            assert texts[1].startswith("MCP server 'down' did not start: ConnectError")
            assert texts[2].startswith(f"MCP server 'missing' did not start: cannot run "
                                       f"'{tmp_path / 'no-such-server'}': no such file or command")
            assert all(t.endswith("The session goes on without its tools.") for t in texts)
            # Published with the first prompt, after its user message: a client that follows the prompt sees them.
            prompt_events = [f for f in got if f.get("promptId") == pid and f["type"] == "session_update"]
            assert sum(1 for f in prompt_events if f["data"]["update"] in notices) == 3
            assert [u["content"]["text"] for u in updates(got, "agent_message_chunk") if "_meta" not in u] == [
                "still here"]
    logged = [r.getMessage() for r in caplog.records if r.name == "trellis.mcp"]
    assert sum("did not start" in line for line in logged) == 3


async def test_calls_ask_for_permission_per_tool_unless_the_server_is_trusted(tmp_path: Path) -> None:
    settings = settings_from_dict({"mcpServers": {"test": stdio(), "mine": stdio(trust=True)}})
    model = load_script({"responses": [
        [call("mcp__test__add", a=1, b=2)], [call("mcp__test__add", a=3, b=4)], [call("mcp__test__peek")],
        [call("mcp__mine__add", a=5, b=6)], [{"text": "done"}]]})
    async with live_daemon(model=model, settings=settings) as (daemon, client):
        sid, pid = await start(client, tmp_path)
        asked = []
        with trio.fail_after(WAIT):
            async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
                async for frame in frames(r):
                    if frame["type"] == "permission_request":
                        asked.append(frame["data"]["toolCall"])
                        option = "proceed_always_session" if len(asked) == 1 else "cancel"  # allow add always; reject peek
                        vote = {"outcome": {"outcome": "selected", "optionId": option}}
                        await client.post(f"/session/{sid}/permission/{frame['data']['requestId']}", json=vote)
                    if frame["type"] == "turn_complete":
                        break
        assert [(a["title"], a["kind"]) for a in asked] == [("add (MCP server test)", "other"),
                                                          ("peek (MCP server test)", "other")]
        assert asked[0]["rawInput"] == {"a": 1, "b": 2}
        # add was allowed always (that tool only: peek, annotated read-only, still asked); the trusted one never asks.
        assert answers(model) == ["3", "7", "Error: the user denied this call", "11"]


async def test_the_server_environment_is_minimal_and_holds_no_daemon_secret(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRELLIS_TOKEN", "daemon-token")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-daemon")
    monkeypatch.setenv("DAEMON_ONLY", "not for servers")
    monkeypatch.setenv("FOR_EXPANSION", "expanded")
    env = {"GIVEN": "given", "FROM": "${FOR_EXPANSION}/x", "LEAK": "$TRELLIS_TOKEN$OPENAI_API_KEY"}
    settings = settings_from_dict({"approvalMode": "yolo", "mcpServers": {"test": stdio(env=env)}})
    names = ["TRELLIS_TOKEN", "OPENAI_API_KEY", "DAEMON_ONLY", "GIVEN", "FROM", "LEAK", "PATH", "TRELLIS_TASK"]
    model = load_script({"responses": [[call("mcp__test__env", name=n) for n in names], [{"text": "done"}]]})
    async with live_daemon(model=model, settings=settings) as (daemon, client):
        sid, pid = await start(client, tmp_path)
        assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
    got = dict(zip(names, answers(model)))
    assert got["TRELLIS_TOKEN"] == got["OPENAI_API_KEY"] == got["DAEMON_ONLY"] == "<unset>"
    assert (got["GIVEN"], got["FROM"], got["LEAK"]) == ("given", "expanded/x", "")
    assert got["PATH"] == os.environ["PATH"] and got["TRELLIS_TASK"] != "<unset>"  # marked, to be found and killed


async def test_a_timeout_and_a_crash_are_tool_errors_and_the_turn_goes_on(tmp_path: Path) -> None:
    settings = settings_from_dict({"approvalMode": "yolo", "mcpServers": {"test": stdio(timeout=500)}})
    model = load_script({"responses": [[call("mcp__test__slow", seconds=5)], [call("mcp__test__add", a=1, b=2)],
                                       [call("mcp__test__crash")], [call("mcp__test__add", a=1, b=2)],
                                       [{"text": "done"}]]})
    async with live_daemon(model=model, settings=settings) as (daemon, client):
        sid, pid = await start(client, tmp_path)
        assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
        slow, added, crashed, after = answers(model)
        assert slow == "Error: the MCP server 'test' did not answer within 0.5 s; the call was cancelled"
        assert added == "3"  # the server still works after a call timed out
        assert "exited with code 7" in crashed and crashed.startswith("Error: the MCP server 'test'")
        assert after == "Error: the MCP server 'test' is not running (exited with code 7)"
        got = await events(client, sid)
        notices = [u["content"]["text"] for u in updates(got, "agent_message_chunk") if "_meta" in u]
        assert notices == ["MCP server 'test' stopped: exited with code 7. Its tools answer with an error for the "
                           "rest of this session."]
        # A new prompt in the same session works (without the server).
        r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "again"}]})
        assert r.status_code == 202


async def test_leaving_the_daemon_leaves_no_server_process(tmp_path: Path) -> None:
    mark = marker()
    settings = settings_from_dict({"mcpServers": {"test": stdio("--marker", mark)}})
    try:
        async with live_daemon(settings=settings) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            server = daemon.get(sid)._session.mcp.servers["test"]
            with trio.fail_after(WAIT):
                await server.settled.wait()
            assert server.state == "ready" and pids_with(mark)
        assert pids_with(mark) == []
    finally:
        kill_all(pids_with(mark))


async def test_a_killed_daemon_leaves_no_server_process(tmp_path: Path) -> None:
    mark = marker()
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"mcpServers": {"test": stdio("--marker", mark)}}))
    try:
        async with daemon_process("--settings", str(settings), state_dir=tmp_path / "state") as running:
            async with running.client(running.token()) as client:
                r = await client.post("/session", json={"cwd": str(tmp_path)})
                assert r.status_code == 200
                with trio.fail_after(WAIT):
                    while len(pids_with(mark)) < 1:
                        await trio.sleep(0.05)
            os.kill(running.pid, signal.SIGKILL)
            with trio.fail_after(10):
                while pids_with(mark):
                    await trio.sleep(0.05)
    finally:
        kill_all(pids_with(mark))


async def test_closing_a_session_during_a_call_cancels_the_turn_and_kills_the_server(tmp_path: Path) -> None:
    mark = marker()
    settings = settings_from_dict({"approvalMode": "yolo", "mcpServers": {"test": stdio("--marker", mark)}})
    model = load_script({"responses": [[call("mcp__test__slow", seconds=60)], [{"text": "never"}]]})
    try:
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid, pid = await start(client, tmp_path)
            with trio.fail_after(WAIT):
                while not any(u.get("status") == "in_progress" for u in updates(await events(client, sid),
                                                                                "tool_call")):
                    await trio.sleep(0.05)
            with trio.fail_after(10):
                assert (await client.delete(f"/session/{sid}")).status_code in (200, 204)
            assert pids_with(mark) == []
            assert sid not in [s["sessionId"] for s in (await client.get("/session")).json()["sessions"]
                               if s.get("live")]
    finally:
        kill_all(pids_with(mark))
