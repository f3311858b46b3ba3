"""What hostile input found on the MCP routes: answers that quoted it whole, a refusal that came back as a crash.

Found by probing /mcp beside the HTTP fuzz test (tests/e2e/test_http_fuzz.py);
each was a bug, now fixed, and the fuzz test holds these shapes to the same
size bound as everything else.
"""

from __future__ import annotations

from typing import Any

import trio

from tests.conftest import live_daemon

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
HUGE = "h" * 500_000
SMALL = 4096  # an answer to bad input quotes at most an excerpt of it



async def mcp_post(client, session: str | None, message: dict[str, Any]):
    headers = {"Mcp-Session-Id": session} if session else {}
    return await client.post("/mcp", json=message, headers=headers)


async def open_mcp(client) -> str:
    r = await mcp_post(client, None, INIT)
    assert r.status_code == 200, r.text
    return r.headers["Mcp-Session-Id"]


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


async def test_an_unknown_huge_method_name_is_not_echoed_whole():
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            session = await open_mcp(client)
            r = await mcp_post(client, session, {"jsonrpc": "2.0", "id": 2, "method": HUGE})
            assert r.json()["error"]["code"] == -32601
            assert len(r.content) < SMALL, len(r.content)


async def test_an_unknown_huge_tool_name_is_not_echoed_whole():
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            session = await open_mcp(client)
            r = await mcp_post(client, session, call(HUGE, {}))
            assert r.json()["error"]["code"] == -32602
            assert len(r.content) < SMALL, len(r.content)


async def test_a_start_with_a_huge_cwd_is_refused_with_a_short_answer():
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            session = await open_mcp(client)
            r = await mcp_post(client, session, call("start", {"name": "n", "brief": "b",
                                                               "cwd": "/nonexistent/" + "c" * 100_000}))
            result = r.json()["result"]
            assert result["isError"]
            assert len(r.content) < SMALL, len(r.content)


async def test_a_start_with_an_overlong_report_file_is_refused_naming_it(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            session = await open_mcp(client)
            for report in ("r" * 5000, "r" * 300):  # over PATH_MAX; a name over NAME_MAX (the file system says)
                r = await mcp_post(client, session, call("start", {"name": "n", "brief": "b", "cwd": str(tmp_path),
                                                                   "report_file": report}))
                result = r.json()["result"]
                text = result["content"][0]["text"]
                assert result["isError"] and "report_file" in text and "inside the daemon" not in text, text
                assert len(r.content) < SMALL, len(r.content)
