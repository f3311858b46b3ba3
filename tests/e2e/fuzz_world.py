"""The daemon the HTTP fuzz test runs against, what it observes of the daemon's state, and how it tidies up.

One real ``python -m transport`` process on loopback port 0 serves every
fuzzed request. The fuzzer is given a *target* session (``fuzz-target``, with
one finished turn), an ACP connection, an MCP session on ``/mcp``, and a live
subagent run's signal URL with an MCP session on it, so hostile input reaches
past the id lookups. A *witness* session, an *observer* MCP session and the
signal run's name are never handed to the fuzzer: nothing it sends may change
them.

:func:`snapshot` is what "no state change" compares: the session listing,
both sessions' status (all but the subscriber count, which follows streams
closing on their own) and pending prompts, and every subagent run (all but
the age of its last event). :func:`settle` runs after a request that was
accepted and may have changed something: it waits for the target to be idle,
closes every other session, stops every other run, and re-creates whatever
the fuzzer was given and a request took away.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

TARGET = "fuzz-target"
MCP_VERSION = "2025-06-18"
MCP_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": MCP_VERSION, "capabilities": {},
                       "clientInfo": {"name": "fuzz", "version": "1"}}}
ACP_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
SETTLE_SECONDS = 30
_SSL = ssl.create_default_context()  # unused on http://, but httpx builds one per client otherwise (slow)


@attrs.define
class World:
    url: str
    token: str
    work: Path  # the daemon's --workspace, an existing directory
    witness: str = ""
    prompt_id: str = ""  # a finished turn of TARGET
    observer_mcp: str = ""  # only for snapshots
    mcp: str = ""  # given to the fuzzer
    acp: str = ""  # given to the fuzzer
    signal_run: str = ""
    signal_token: str = ""
    signal_mcp: str = ""  # an MCP session on the signal URL, given to the fuzzer
    runs_started: int = 0
    last: dict[str, Any] | None = None  # the snapshot after the previous case (None: take a new one)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=10,
                                 trust_env=False, verify=_SSL)


# ------------------------------------------------------------------ the daemon process


@contextmanager
def running_daemon(tmp: Path) -> Iterator[World]:
    """``python -m transport --port 0`` with a command runner that waits, until the block ends."""
    state, work = tmp / "state", tmp / "work"
    work.mkdir(parents=True)
    settings = tmp / "settings.json"
    settings.write_text(json.dumps({"subagents": {"runners": {"command": {"template": "sleep 600"}},
                                                  "defaultRunner": "command"}}))
    env = {k: v for k, v in os.environ.items() if k not in ("TRELLIS_TOKEN", "OPENAI_API_KEY")}
    with open(tmp / "daemon.stderr", "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(state), "--workspace", str(work),
             "--settings", str(settings)], stdout=subprocess.PIPE, stderr=stderr, env=env)
    watchdog = threading.Timer(30, proc.kill)  # a daemon that never says it listens must not hang the suite
    watchdog.start()
    try:
        line = proc.stdout.readline().decode() if proc.stdout else ""
        watchdog.cancel()
        assert line.startswith("listening on "), (line, (tmp / "daemon.stderr").read_text()[-2000:])
        world = World(url=line.split()[-1], token=(state / "token").read_text().strip(), work=work)
        trio.run(_set_up, world)
        yield world
    finally:
        watchdog.cancel()
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _set_up(world: World) -> None:
    with trio.fail_after(SETTLE_SECONDS):
        async with world.client() as client:
            r = await client.post("/session", json={"sessionId": TARGET})
            assert r.status_code == 200, r.text
            r = await client.post(f"/session/{TARGET}/prompt", json={"prompt": [{"type": "text", "text": "hi"}]})
            world.prompt_id = r.json()["promptId"]
            r = await client.post("/session", json={})
            world.witness = r.json()["sessionId"]
            world.observer_mcp = await mcp_initialize(client, "/mcp")
            world.mcp = await mcp_initialize(client, "/mcp")
            world.acp = await acp_initialize(client)
            await start_signal_run(world, client)
            await wait_idle(client, TARGET)


async def mcp_initialize(client: httpx.AsyncClient, path: str) -> str:
    r = await client.post(path, json=MCP_INIT)
    assert r.status_code == 200, r.text
    session = r.headers["Mcp-Session-Id"]
    await client.post(path, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                      headers={"Mcp-Session-Id": session})
    return session


async def acp_initialize(client: httpx.AsyncClient) -> str:
    r = await client.post("/acp", json=ACP_INIT)
    assert r.status_code == 200, r.text
    return r.headers["Acp-Connection-Id"]


async def mcp_call(client: httpx.AsyncClient, session: str, tool: str, arguments: dict[str, Any],
                   path: str = "/mcp") -> dict[str, Any]:
    r = await client.post(path, headers={"Mcp-Session-Id": session}, json={
        "jsonrpc": "2.0", "id": secrets.randbelow(10**9), "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}})
    assert r.status_code == 200, r.text
    return r.json()


async def start_signal_run(world: World, client: httpx.AsyncClient) -> None:
    """A run whose turn is ``sleep 600``: its signal URL stays live until it is stopped."""
    world.runs_started += 1
    world.signal_run = f"signal-{world.runs_started}-{secrets.token_hex(4)}"
    answer = await mcp_call(client, world.observer_mcp, "start", {"name": world.signal_run, "brief": "wait"})
    config = json.loads(Path(answer["result"]["structuredContent"]["configFile"]).read_text())
    world.signal_token = config["mcpServers"]["trellis"]["url"].rsplit("/", 1)[1]
    world.signal_mcp = await mcp_initialize(client, f"/signal/mcp/{world.signal_token}")


# ------------------------------------------------------------------ what is compared


async def runs(world: World, client: httpx.AsyncClient) -> list[dict[str, Any]]:
    answer = await mcp_call(client, world.observer_mcp, "list", {})
    return [{k: v for k, v in run.items() if k != "lastEventAgeS"}
            for run in answer["result"]["structuredContent"]["runs"]]


async def snapshot(world: World, client: httpx.AsyncClient) -> dict[str, Any]:
    listing = (await client.get("/session")).json()["sessions"]
    out: dict[str, Any] = {"sessions": sorted(json.dumps(s, sort_keys=True) for s in listing)}
    for sid in (TARGET, world.witness):
        r = await client.get(f"/session/{sid}/status")
        status = r.json() if r.status_code == 200 else r.status_code
        if isinstance(status, dict):
            status.pop("subscribers", None)
        pending = await client.get(f"/session/{sid}/pending-prompts")
        out[sid] = (status, pending.json() if pending.status_code == 200 else pending.status_code)
    out["runs"] = await runs(world, client)
    return out


def is_idle(status: dict[str, Any]) -> bool:
    return (status["state"] == "idle" and not status["hasActivePrompt"] and status["pendingCount"] == 0
            and status["automaticQueue"] == 0 and not status["pendingPermissions"])


async def wait_idle(client: httpx.AsyncClient, sid: str) -> None:
    while True:
        r = await client.get(f"/session/{sid}/status")
        if r.status_code == 200 and is_idle(r.json()):
            return
        await client.post(f"/session/{sid}/cancel")
        await trio.sleep(0.02)


# ------------------------------------------------------------------ tidying up after an accepted request


async def settle(world: World) -> None:
    """Back to the fixture's shape after a request that was accepted and may have started or changed things."""
    with trio.fail_after(SETTLE_SECONDS):
        async with world.client() as client:
            for run in await runs(world, client):
                if run["name"] != world.signal_run and run["endReason"] is None:
                    await mcp_call(client, world.observer_mcp, "stop", {"name": run["name"]})
            signal = next(r for r in await runs(world, client) if r["name"] == world.signal_run)
            if signal["endReason"] is not None or signal["state"] != "running":
                await mcp_call(client, world.observer_mcp, "stop", {"name": world.signal_run})
                await start_signal_run(world, client)
            for entry in (await client.get("/session")).json()["sessions"]:
                if entry["live"] and entry["sessionId"] not in (TARGET, world.witness):
                    await client.delete(f"/session/{entry['sessionId']}")
            if (await client.get(f"/session/{TARGET}/status")).status_code == 404:
                r = await client.post("/session", json={"sessionId": TARGET})
                assert r.status_code == 200, r.text
            await wait_idle(client, TARGET)
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            if (await client.post("/mcp", json=ping, headers={"Mcp-Session-Id": world.mcp})).status_code != 200:
                world.mcp = await mcp_initialize(client, "/mcp")
            path = f"/signal/mcp/{world.signal_token}"
            if (await client.post(path, json=ping, headers={"Mcp-Session-Id": world.signal_mcp})).status_code != 200:
                world.signal_mcp = await mcp_initialize(client, path)
            noop = {"jsonrpc": "2.0", "method": "_fuzz/noop"}  # a notification: answered 202, or 404 if gone
            if (await client.post("/acp", json=noop, headers={"Acp-Connection-Id": world.acp})).status_code != 202:
                world.acp = await acp_initialize(client)
            # Quiet: two snapshots in a row agree (a turn's last events are written after it reports idle).
            previous = await snapshot(world, client)
            while (current := await snapshot(world, client)) != previous:
                previous = current
                await trio.sleep(0.02)
            world.last = current
