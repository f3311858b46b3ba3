"""MCP 2025-11-25 on the real daemon over loopback, driven by the official ``mcp`` client (and raw HTTP
where that client cannot go: batches, which it never sends, and the answer's content type).

Tool titles and annotations on both routes, output schemas every structured answer matches, input
errors as tool execution errors, progress over SSE during ``await_resume``, batches by version.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from mcp import MCPError

from tests.transport.mcp.harness import config_url, mcp_daemon, mcp_session, routed, start, text_of, wedged
from tests.transport.mcp.schemas import problems, strict
from transport.mcp import tools as mcp_tools

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def hints(tool: Any) -> tuple[bool, ...]:
    dumped = tool.annotations.model_dump(by_alias=True)
    return tuple(dumped[h] for h in HINTS)


async def raw_session(http: httpx.AsyncClient, url: str, version: str) -> dict[str, str]:
    hello = await http.post(url, headers=ACCEPT, json={
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    assert hello.json()["result"]["protocolVersion"] == version
    headers = {**ACCEPT, "Mcp-Session-Id": hello.headers["mcp-session-id"], "MCP-Protocol-Version": version}
    await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


async def test_both_routes_list_titles_annotations_and_output_schemas(tmp_path):
    async with mcp_daemon(model=routed(ant=wedged(60)), workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            parent = {t.name: t for t in (await mcp.list_tools()).tools}
            ant = await start(mcp, name="ant", brief="ant: dig", goal="a tunnel")
            async with mcp_session(config_url(ant["configFile"])) as signal:
                child = {t.name: t for t in (await signal.list_tools()).tools}
            await mcp.call_tool("stop", {"name": "ant"})
    for tool in [*parent.values(), *child.values()]:
        assert tool.title and tool.annotations.title == tool.title, tool.name
        assert None not in hints(tool), tool.name  # every hint spelled out, none left to the spec's defaults
    assert hints(parent["stop"]) == (False, True, True, False)  # the destructive one
    assert hints(parent["start"]) == (False, False, False, True)
    assert all(hints(parent[n])[0] for n in ("status", "list", "await_resume"))  # read-only
    assert [n for n, t in {**parent, **child}.items() if hints(t)[1]] == ["stop"]
    for name in ("start", "status", "stop", "list", "await_resume"):
        assert parent[name].output_schema["type"] == "object", name
    assert all(t.output_schema is None for t in child.values())  # text only: no structuredContent there


async def test_every_structured_answer_validates_against_its_output_schema(tmp_path):
    model = routed(calm=[[{"text": "ok"}]], stuck=wedged(60))
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            schemas = {t.name: t.output_schema for t in (await mcp.list_tools()).tools}
            # The official client validates each result against the listed schema itself (it raises
            # otherwise); here the schema is also closed, so no field the daemon sends goes undeclared.
            answers = [("start", await mcp.call_tool("start", {"name": "calm", "brief": "calm: say ok"})),
                       ("start", await mcp.call_tool("start", {"name": "stuck", "brief": "stuck: think",
                                                               "goal": "an answer", "report_file": "r.md"})),
                       ("await_resume", await mcp.call_tool("await_resume", {"name": "calm", "timeout_s": 20})),
                       ("await_resume", await mcp.call_tool("await_resume", {"name": "stuck", "timeout_s": 0.1})),
                       ("status", await mcp.call_tool("status", {"name": "stuck"})),
                       ("list", await mcp.call_tool("list", {})),
                       ("stop", await mcp.call_tool("stop", {"name": "stuck"})),
                       ("status", await mcp.call_tool("status", {"name": "stuck"}))]
    outcomes = []
    for name, result in answers:
        assert not result.is_error, text_of(result)
        assert problems(strict(schemas[name]), result.structured_content) == [], (name, result.structured_content)
        outcomes.append(result.structured_content.get("outcome"))
    assert "ended" in outcomes and "underway" in outcomes


async def test_input_errors_reach_the_model_as_tool_results(tmp_path):
    async with mcp_daemon(model=routed(ant=wedged(60)), workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            bad = await mcp.call_tool("start", {"name": "a", "brief": "b", "runner": "shell", "max_turns": "3"})
            assert bad.is_error
            text = text_of(bad)
            assert 'arguments.runner: expected one of "session", "command", got "shell"' in text
            assert 'arguments.max_turns: expected integer, got "3"' in text
            missing = await mcp.call_tool("await_resume", {"timeout_s": 1})
            assert missing.is_error and "arguments.name: required" in text_of(missing)
            assert daemon.subagents.list() == []  # nothing was started
            # An unknown tool stays a protocol error.
            with pytest.raises(MCPError) as unknown:
                await mcp.call_tool("launch", {})
            assert unknown.value.error.code == -32602 and "Unknown tool: launch" in unknown.value.error.message
            ant = await start(mcp, name="ant", brief="ant: dig", goal="a tunnel")
            async with mcp_session(config_url(ant["configFile"])) as signal:
                named = await signal.call_tool("need_help", {"question": "?", "name": "bee"})
                assert named.is_error and 'arguments: unexpected property "name"' in text_of(named)
            await mcp.call_tool("stop", {"name": "ant"})


async def test_await_resume_streams_progress_to_a_client_that_asks(tmp_path, monkeypatch):
    monkeypatch.setattr(mcp_tools, "PROGRESS_EVERY", 0.1)
    async with mcp_daemon(model=routed(stuck=wedged(60)), workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            await start(mcp, name="stuck", brief="stuck: think", goal="an answer", max_turns=3)
            seen: list[tuple[float, float | None, str | None]] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append((progress, total, message))

            with trio.fail_after(20):
                waited = await mcp.call_tool("await_resume", {"name": "stuck", "timeout_s": 1},
                                             progress_callback=on_progress)
                while len(seen) < 5:  # the client hands notifications to callbacks in tasks of their own
                    await trio.sleep(0.01)
            assert waited.structured_content["outcome"] == "underway"
            progress = [p for p, _, _ in seen]
            assert progress == sorted(progress) and len(set(progress)) == len(progress)  # strictly increasing
            assert all(total == 1.0 for _, total, _ in seen)
            assert "run 'stuck': running, turn 1 of 3" in seen[-1][2]

        async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
            url = f"{base}/mcp"
            headers = await raw_session(http, url, "2025-11-25")
            call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                    "params": {"name": "await_resume", "arguments": {"name": "stuck", "timeout_s": 0.35}}}
            # No progress token: the JSON answer, as before.
            plain = await http.post(url, headers=headers, json=call)
            assert plain.headers["content-type"].startswith("application/json")
            assert plain.json()["result"]["structuredContent"]["outcome"] == "underway"
            # A token, but an Accept without the event stream: still JSON, no notification.
            asked = {**call, "params": {**call["params"], "_meta": {"progressToken": "p"}}}
            json_only = await http.post(url, headers={**headers, "Accept": "application/json"}, json=asked)
            assert json_only.headers["content-type"].startswith("application/json")
            # A token and an Accept that lists it: progress events, then the response, then the end.
            streamed = await http.post(url, headers=headers, json=asked)
            assert streamed.headers["content-type"].startswith("text/event-stream")
            messages = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
            assert [m.get("method") for m in messages[:-1]] == ["notifications/progress"] * (len(messages) - 1)
            assert len(messages) >= 3 and all(m["params"]["progressToken"] == "p" for m in messages[:-1])
            assert messages[-1]["id"] == 5 and messages[-1]["result"]["structuredContent"]["outcome"] == "underway"
        async with mcp_session(f"{base}/mcp") as mcp:
            await mcp.call_tool("stop", {"name": "stuck"})


async def test_batches_on_the_wire_follow_the_negotiated_version(tmp_path):
    async with mcp_daemon(workspace=str(tmp_path)) as (daemon, base):
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            url = f"{base}/mcp"
            batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                     {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list", "arguments": {}}},
                     {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}]
            old = await raw_session(http, url, "2025-03-26")
            answered = await http.post(url, headers=old, json=batch)
            assert answered.status_code == 200 and answered.headers["content-type"].startswith("application/json")
            assert [(r["id"], "result" in r) for r in answered.json()] == [(1, True), (2, True)]
            assert answered.json()[1]["result"]["structuredContent"] == {"runs": []}
            for version in ("2025-06-18", "2025-11-25"):
                refused = await http.post(url, headers=await raw_session(http, url, version), json=batch)
                assert refused.status_code == 400
                assert f"not supported in protocol version {version}" in refused.json()["error"]["message"]


async def test_a_batched_start_is_refused_while_the_daemon_shuts_down(tmp_path):
    async with mcp_daemon(workspace=str(tmp_path)) as (daemon, base):
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            url = f"{base}/mcp"
            headers = await raw_session(http, url, "2025-03-26")
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            start_call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "start", "arguments": {"name": "late", "brief": "b"}}}
            daemon._shutting_down = True  # as shutdown_gracefully sets it first thing
            try:
                refused = await http.post(url, headers=headers, json=[ping, start_call])
                assert refused.status_code == 503 and refused.json()["code"] == "shutting_down"
                reads = await http.post(url, headers=headers, json=[ping])
                assert reads.status_code == 200
            finally:
                daemon._shutting_down = False
            assert daemon.subagents.list() == []
