"""Identity lives in the signal URL: siblings, unknown and revoked tokens, private config files."""

from __future__ import annotations

import json
import os
import stat

import httpx
import pytest
import trio
from mcp import MCPError

from tests.transport.mcp.harness import (
    await_end, config_url, mcp_daemon, mcp_session, mode, routed, start, status, text_of, wedged,
)

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


async def test_a_sibling_cannot_signal_another_run(tmp_path):
    model = routed(ant=wedged(60), bee=wedged(60))
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            ant = await start(mcp, name="ant", brief="ant: dig", goal="a tunnel")
            bee = await start(mcp, name="bee", brief="bee: fly", goal="honey")
            ant_url = config_url(ant["configFile"])
            assert ant_url != config_url(bee["configFile"])
            async with mcp_session(ant_url) as signal:
                tools = (await signal.list_tools()).tools
                assert sorted(t.name for t in tools) == ["goal_reached", "need_help"]
                # No signal tool has a field in which to name a run.
                assert all("name" not in t.input_schema.get("properties", {}) for t in tools)
                # Naming one is an input error the model reads (a tool execution error), and records nothing.
                refused = await signal.call_tool("goal_reached", {"name": "bee", "summary": "bee is done"})
                assert refused.is_error and 'arguments: unexpected property "name"' in text_of(refused)
                # Nothing but the two signals is served there: reporting never becomes starting.
                with pytest.raises(MCPError):
                    await signal.call_tool("start", {"name": "x", "brief": "y"})
                # The token resolves to its own run only.
                result = await signal.call_tool("goal_reached", {"summary": "tunnel dug"})
                assert not result.is_error and "self-reported" in text_of(result)
            ant_status, _ = await status(mcp, "ant")
            bee_status, _ = await status(mcp, "bee")
            assert ant_status["endReason"] == "goal_reached"
            assert bee_status["endReason"] is None and bee_status["state"] == "running"
            assert "tunnel dug" in ant_status["done"] and "tunnel dug" not in bee_status["done"]
            await mcp.call_tool("stop", {"name": "bee"})


async def _raw(http: httpx.AsyncClient, method: str, url: str) -> httpx.Response:
    body = json.dumps(INIT).encode() if method in ("POST", "PUT", "PATCH") else None
    return await http.request(method, url, content=body, headers={"Content-Type": "application/json"})


def _visible(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    # Date changes with the clock; everything else must match byte for byte.
    return response.status_code, response.content, sorted((k, v) for k, v in response.headers.items() if k != "date")


async def test_unknown_and_revoked_tokens_get_byte_identical_bare_404s(tmp_path):
    model = routed(short=wedged(0.5), long=wedged(60))
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            # Read the URL while the run lives (its config file goes with it).
            long = await start(mcp, name="long", brief="long: wait", goal="never")
            long_url = config_url(long["configFile"])
            await mcp.call_tool("stop", {"name": "long"})  # its token dies with it
            assert not os.path.exists(long["configFile"])
            short = await start(mcp, name="short", brief="short: go")
            short_url = config_url(short["configFile"])
            await await_end(mcp, "short")
        revoked = [long_url, short_url]
        unknown = [f"{base}/signal/mcp/{'A' * 43}", f"{base}/signal/mcp/not-a-token"]
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            for method in METHODS:
                answers = [_visible(await _raw(http, method, url)) for url in revoked + unknown]
                assert all(a == answers[0] for a in answers), (method, answers)
                code, body, headers = answers[0]
                assert code == 404 and body == b""
                for url in revoked:
                    token = url.rsplit("/", 1)[1]
                    assert token not in repr(headers)
        # The official client gets nowhere either: its initialize is answered 404.
        with pytest.RaisesGroup(MCPError, flatten_subgroups=True):
            with trio.fail_after(10):
                async with mcp_session(revoked[0]):
                    pass


async def test_concurrent_starts_get_private_distinct_config_files(tmp_path):
    model = routed(uno=wedged(60), dos=wedged(60))
    async with mcp_daemon(model=model, workspace=str(tmp_path), state_dir=tmp_path / "state") as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            started: dict[str, dict] = {}

            async def go(name: str) -> None:
                started[name] = await start(mcp, name=name, brief=f"{name}: work", goal="done")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(go, "uno")
                nursery.start_soon(go, "dos")
            paths = [started["uno"]["configFile"], started["dos"]["configFile"]]
            assert paths[0] != paths[1]
            urls = [config_url(p) for p in paths]
            tokens = [u.rsplit("/", 1)[1] for u in urls]
            assert tokens[0] != tokens[1] and all(len(t) >= 43 for t in tokens)  # 256 bits, url-safe
            for path, other in zip(paths, reversed(tokens)):
                assert mode(path) == 0o600
                assert other not in open(path).read()
                assert json.loads(open(path).read()) == {
                    "mcpServers": {"trellis": {"type": "http", "url": config_url(path), "httpUrl": config_url(path)}}}
            assert stat.S_IMODE(os.stat(os.path.dirname(paths[0])).st_mode) == 0o700
            assert os.path.dirname(paths[0]) == str(tmp_path / "state" / "subagents")
            for name in ("uno", "dos"):
                await mcp.call_tool("stop", {"name": name})
            assert not any(os.path.exists(p) for p in paths)
            assert len(daemon.subagents.tokens) == 0


async def test_the_signal_route_speaks_mcp_only_to_a_live_token(tmp_path):
    model = routed(live=wedged(60))
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            live = await start(mcp, name="live", brief="live: wait", goal="x")
            url = config_url(live["configFile"])
            async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
                assert (await http.get(url)).status_code == 405
                no_session = await http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
                assert no_session.status_code == 400
                init = await http.post(url, json=INIT)
                session = init.headers["mcp-session-id"]
                assert init.json()["result"]["protocolVersion"] == "2025-06-18"
                # A session opened on one run's URL is no use on another's (or on /mcp).
                other = await http.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                                        headers={"Mcp-Session-Id": session})
                assert other.status_code == 404
            await mcp.call_tool("stop", {"name": "live"})
