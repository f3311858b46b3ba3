"""The daemon as ``transport.serve`` runs it: MCP routes wired in, signal URLs pointing at it, bearer rules."""

from __future__ import annotations

from tests.conftest import live_daemon

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


async def test_the_served_daemon_carries_both_surfaces_under_its_bearer_rules():
    async with live_daemon(token="s3cret") as (daemon, client):
        assert str(client.base_url).rstrip("/") == daemon.subagents.base_url
        # The parent surface is the daemon's: it wants the daemon's bearer token.
        assert (await client.post("/mcp", json=INIT)).status_code == 200
        assert (await client.post("/mcp", json=INIT, headers={"Authorization": "Bearer wrong"})).status_code == 401
        # A signal URL carries its own credential: no bearer, and a dead token is a bare 404.
        answer = await client.post("/signal/mcp/not-a-token", json=INIT, headers={"Authorization": ""})
        assert (answer.status_code, answer.content) == (404, b"")
