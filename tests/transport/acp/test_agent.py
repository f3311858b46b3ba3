"""The ACP agent methods over a real daemon: stop reasons, errors, permissions, cancel and close."""

from __future__ import annotations

import trio

from actors import Settings

from tests.transport.acp.harness import acp_client, call, new_session, text


def permission_requests(client) -> list[dict]:
    return [m for m in client.agent_requests if m["method"] == "session/request_permission"]


async def test_stop_reasons_and_turn_errors(tmp_path) -> None:
    script = (
        {"refuse": {"code": "rate_limited", "message": "slow down"}},
        {"refuse": {"code": "refusal", "message": "I will not"}},
        [call("todo_write", todos=[]), call("todo_write", todos=[])],
    )
    settings = Settings(max_tool_calls_per_turn=1)
    async with acp_client(*script, settings=settings) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        failed = await client.request("session/prompt", {"sessionId": sid, "prompt": text("one")})
        assert failed["error"]["code"] == -32603
        assert failed["error"]["message"] == "slow down"
        assert failed["error"]["data"]["code"] == "rate_limited"
        refused = await client.result("session/prompt", {"sessionId": sid, "prompt": text("two")})
        assert refused["stopReason"] == "refusal"
        looped = await client.result("session/prompt", {"sessionId": sid, "prompt": text("three"),
                                                         "_meta": {"zed.dev/trace": "abc"}})
        assert looped["stopReason"] == "max_turn_requests"
        assert looped["_meta"]["trellis.dev/promptId"]


async def test_reject_always_rejects_later_calls_of_the_same_kind_without_asking(tmp_path) -> None:
    script = ([call("shell", command="echo one > one.txt")], [call("shell", command="echo two > two.txt")],
              [{"text": "gave up"}])
    async with acp_client(*script) as (daemon, client):
        client.handlers["session/request_permission"] = lambda params: {
            "outcome": {"outcome": "selected", "optionId": next(
                o["optionId"] for o in params["options"] if o["kind"] == "reject_always")}}
        sid = await new_session(client, str(tmp_path))
        result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert result["stopReason"] == "end_turn"
        assert len(permission_requests(client)) == 1  # the second call was rejected without asking
        assert not (tmp_path / "one.txt").exists() and not (tmp_path / "two.txt").exists()
        denied = [m.content for m in daemon.runtime.provider.calls[2].messages if m.role == "tool"]
        assert len(denied) == 2 and all("denied" in d for d in denied)


async def test_an_unknown_option_or_a_client_error_approves_nothing(tmp_path) -> None:
    script = ([call("shell", command="echo x > x.txt")], [call("shell", command="echo y > y.txt")],
              [{"text": "end"}])
    async with acp_client(*script) as (daemon, client):
        answers = iter([{"outcome": {"outcome": "selected", "optionId": "made-up"}},
                        {"error": {"code": -32603, "message": "dialog crashed"}}])
        client.handlers["session/request_permission"] = lambda params: next(answers)
        sid = await new_session(client, str(tmp_path))
        result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        # The first cancel ends the turn (a cancelled permission is a hard stop).
        assert result["stopReason"] == "cancelled"
    assert not (tmp_path / "x.txt").exists() and not (tmp_path / "y.txt").exists()


async def test_cancel_answers_every_prompt_of_the_binding_cancelled(tmp_path) -> None:
    slow = {"steps": [{"text": "working"}, {"sleep": 30}]}
    async with acp_client(slow, slow) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        running = await client.send("session/prompt", {"sessionId": sid, "prompt": text("one")})
        queued = await client.send("session/prompt", {"sessionId": sid, "prompt": text("two")})
        await client.wait_for(lambda m: m.get("method") == "session/update"
                              and m["params"]["update"].get("content", {}).get("text") == "working")
        await client.send("session/cancel", {"sessionId": sid}, notify=True)
        assert (await client.answer(running))["result"]["stopReason"] == "cancelled"
        assert (await client.answer(queued))["result"]["stopReason"] == "cancelled"
        assert len(daemon.runtime.provider.calls) == 1  # the queued prompt never ran


async def test_close_ends_the_session_and_answers_its_prompt(tmp_path) -> None:
    async with acp_client({"steps": [{"text": "working"}, {"sleep": 30}]}) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        running = await client.send("session/prompt", {"sessionId": sid, "prompt": text("one")})
        await client.wait_for(lambda m: m.get("method") == "session/update"
                              and m["params"]["update"].get("content", {}).get("text") == "working")
        assert await client.result("session/close", {"sessionId": sid}) == {}
        assert (await client.answer(running))["result"]["stopReason"] == "cancelled"
        assert daemon.session_count == 0
        gone = await client.request("session/prompt", {"sessionId": sid, "prompt": text("again")})
        assert gone["error"]["code"] == -32602


async def test_a_session_closed_elsewhere_ends_its_waiting_prompt_cancelled(tmp_path) -> None:
    async with acp_client({"steps": [{"text": "working"}, {"sleep": 30}]}) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        running = await client.send("session/prompt", {"sessionId": sid, "prompt": text("one")})
        await client.wait_for(lambda m: m.get("method") == "session/update"
                              and m["params"]["update"].get("content", {}).get("text") == "working")
        await daemon.close_session(sid)  # say, DELETE /session/:id on the REST surface
        answer = await client.answer(running)
        # The session says its running turn ended (turn_complete cancelled) as it closes.
        assert answer["result"]["stopReason"] == "cancelled"
        with trio.fail_after(5):
            while sid in client.conn.bindings:
                await trio.sleep(0.01)


async def test_new_session_starts_client_mcp_servers_and_reports_modes(tmp_path) -> None:
    async with acp_client() as (daemon, client):
        result = await client.result("session/new", {"cwd": str(tmp_path), "mcpServers": [
            {"name": "fs", "command": str(tmp_path / "no-such-mcp-server"), "args": [], "env": []}]})
        assert "_meta" not in result  # the servers are connected now, none is ignored
        [server] = daemon.get(result["sessionId"])._session.mcp.servers.values()
        with trio.fail_after(5):
            await server.settled.wait()
        assert server.state == "failed" and "no such file or command" in (server.error or "")
        assert result["modes"]["currentModeId"] == "default"
        # auto-edit is qwen-code's: edits run unasked, commands still ask (it is not yolo under another name)
        described = {m["id"]: m["description"] for m in result["modes"]["availableModes"]}
        assert described["auto-edit"] == "Edit files without asking; ask before running commands"
        sid = result["sessionId"]
        assert await client.result("session/set_mode", {"sessionId": sid, "modeId": "plan"}) == {}
        assert (await daemon.get(sid).status())["approvalMode"] == "plan"
        await client.wait_for(lambda m: m.get("method") == "session/update"
                              and m["params"]["update"] == {"sessionUpdate": "current_mode_update",
                                                            "currentModeId": "plan"})


async def test_mcp_servers_of_a_shape_we_cannot_use_are_refused_naming_the_path(tmp_path) -> None:
    async with acp_client() as (daemon, client):
        init = await client.result("initialize", {"protocolVersion": 1})
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True}
        for servers, path in [({"fs": {}}, "$.mcpServers"), ([{"name": "fs"}], "$.mcpServers[0].command"),
                              ([{"type": "acp", "name": "a", "serverId": "1"}], "$.mcpServers[0].type"),
                              ([{"type": "http", "name": "w", "url": "x"}], "$.mcpServers[0].url")]:
            answer = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
            assert answer["error"]["code"] == -32602 and answer["error"]["data"] == {"path": path}, answer
        answer = await client.request("session/load", {"sessionId": "s1", "cwd": str(tmp_path),
                                                       "mcpServers": [{"name": "a", "command": "x", "env": [1]}]})
        assert answer["error"]["data"] == {"path": "$.mcpServers[0].env[0]"}
        assert daemon.session_count == 0


async def test_session_new_takes_permission_rules_in_meta_and_refuses_a_bad_one_naming_it(tmp_path) -> None:
    script = ([call("shell", command="echo hi && rm -rf x")], [{"text": "refused"}])
    async with acp_client(*script) as (daemon, client):
        await client.result("initialize", {"protocolVersion": 1})
        bad = await client.request("session/new", {"cwd": str(tmp_path),
                                                   "_meta": {"permissions": {"deny": ["Bash(rm:*)", "Bahs"]}}})
        assert bad["error"]["code"] == -32602 and bad["error"]["data"] == {"path": "$._meta.permissions.deny[1]"}
        assert "unknown tool 'Bahs'" in bad["error"]["message"]
        assert daemon.session_count == 0
        created = await client.result("session/new", {"cwd": str(tmp_path), "_meta": {"permissions": {
            "allow": ["Bash(echo:*)"], "deny": ["Bash(rm:*)"]}}})
        sid = created["sessionId"]
        assert (await daemon.get(sid).permission_rules())["session"]["deny"] == ["Bash(rm:*)"]
        result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert result["stopReason"] == "end_turn"
        assert permission_requests(client) == []  # refused by the rule, never asked
        refusals = [m["params"]["update"] for m in client.sent
                    if m.get("method") == "session/update" and m["params"]["update"].get("status") == "failed"]
        assert [r["_meta"] for r in refusals] == [{"rule": "Bash(rm:*)", "toolName": "shell"}]


async def test_a_daemon_notice_is_a_paragraph_of_its_own_in_the_agent_message(tmp_path) -> None:
    async with acp_client([{"text": "Hello from the model."}]) as (daemon, client):
        result = await client.result("session/new", {"cwd": str(tmp_path), "mcpServers": [
            {"name": "fs", "command": str(tmp_path / "no-such-mcp-server"), "args": [], "env": []}]})
        sid = result["sessionId"]
        answer = await client.result("session/prompt", {"sessionId": sid, "prompt": text("hi")})
        assert answer["stopReason"] == "end_turn"
        chunks = [u for u in client.updates() if u["sessionUpdate"] == "agent_message_chunk"]
        # A client joins the chunks into one text: the notice must not run into the model's first sentence.
        joined = "".join(c["content"]["text"] for c in chunks)
        notice = next(c for c in chunks if (c.get("_meta") or {}).get("source") == "daemon")["content"]["text"]
        assert notice.startswith("\n\nMCP server 'fs' did not start") and notice.endswith("tools.\n\n")
        assert "tools.\n\nHello from the model." in joined
