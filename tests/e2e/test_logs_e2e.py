"""The daemon's log, end to end: ``python -m transport --log-level info --log-format json`` as a subprocess.

Against the loopback fake OpenAI server (so an API key is really sent), with a subagent run whose
child session signals over HTTP (so a signal token is really in a request path), a failing hook and a
refused prompt: stderr is one JSON object per line, with an access line per request, a line at each
turn's start and end, warnings for the refusal and the hook — and neither the bearer token, the API
key, the signal token, the prompt's text nor the hook command's arguments anywhere in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.e2e.test_openai_daemon import prompt, wait_turn
from transport.auth import read_token_file
from transport.fake_openai import FakeOpenAI
from transport.process_image import SECRET_ENV

KEY = "sk-log-test-" + "k" * 24
PROMPT_TEXT = "the prompt text is private 7f3a"
HOOK_SECRET = "hook-arg-secret-91c2"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


async def mcp_call(client: httpx.AsyncClient, session: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    r = await client.post("/mcp", json=body, headers={"Mcp-Session-Id": session, "Accept": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()["result"]


async def test_the_json_log_has_access_and_turn_lines_and_no_secret(nursery, tmp_path: Path):
    fake = FakeOpenAI([
        # The parent's prompt: slow enough that a second prompt finds the queue full.
        {"steps": [{"text": "hello"}, {"usage": {"prompt_tokens": 11, "completion_tokens": 7}}], "delay": 1.0},
        # The subagent run's child session: a signal over HTTP, late enough to read the run's token first.
        {"steps": [{"tool_call": {"name": "goal_reached", "arguments": {"summary": "probe done"}}}], "delay": 2.0},
        [{"text": "signalled"}],
    ])
    url = await nursery.start(fake.serve)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "ui": {"enableFollowupSuggestions": False},
        "hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command",
                                                   "command": f"./no-such-hook.sh --key {HOOK_SECRET}"}]}]},
    }))
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    environ = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | {"OPENAI_API_KEY": KEY}
    command = [sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(state), "--workspace", str(work),
               "--model", "openai", "--openai-base-url", url, "--openai-model", "fake", "--settings", str(settings),
               "--max-pending-prompts", "1", "--log-level", "info", "--log-format", "json"]
    process = await trio.lowlevel.open_process(command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = bytearray(), bytearray()

    async def drain(stream: Any, into: bytearray) -> None:
        while chunk := await stream.receive_some():
            into += chunk

    signal_token = ""
    try:
        async with trio.open_nursery() as readers:
            readers.start_soon(drain, process.stderr, stderr)
            readers.start_soon(drain, process.stdout, stdout)
            with trio.fail_after(60):
                while b"\n" not in stdout:
                    assert process.poll() is None, bytes(stderr).decode()
                    await trio.sleep(0.02)
                base = stdout.decode().split()[-1]
                token = read_token_file(state)
                headers = {"Authorization": f"Bearer {token}"}
                async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10, trust_env=False) as client:
                    sid = (await client.post("/session", json={})).json()["sessionId"]
                    first = await client.post(f"/session/{sid}/prompt", json=prompt(PROMPT_TEXT))
                    assert first.status_code == 202, first.text
                    pid = first.json()["promptId"]
                    refused = await client.post(f"/session/{sid}/prompt", json=prompt(PROMPT_TEXT))
                    assert refused.status_code == 503 and refused.json()["code"] == "prompt_queue_full"
                    assert (await wait_turn(client, sid, pid))["state"] == "completed"

                    init = await client.post("/mcp", json=INIT, headers={"Accept": "application/json"})
                    mcp = init.headers["Mcp-Session-Id"]
                    started = await mcp_call(client, mcp, "start", {"name": "probe", "brief": "probe: look",
                                                                    "goal": "report back"})
                    config = started["structuredContent"]["configFile"]
                    signal_url = json.loads(Path(config).read_text())["mcpServers"]["trellis"]["url"]
                    signal_token = signal_url.rsplit("/", 1)[1]
                    assert len(signal_token) > 20
                    answer: dict[str, Any] = {}
                    while answer.get("endReason") != "goal_reached":
                        await trio.sleep(0.2)
                        answer = (await mcp_call(client, mcp, "status", {"name": "probe"}))["structuredContent"]
            process.terminate()
            with trio.fail_after(15):
                await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
    assert process.returncode == 0, bytes(stderr).decode()

    text = bytes(stderr).decode()
    records = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
    assert all({"ts", "level", "logger", "message"} <= r.keys() for r in records)
    for secret in (token, KEY, signal_token, PROMPT_TEXT, HOOK_SECRET):
        assert secret not in text, secret
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was in use all along

    access = [r for r in records if r["logger"] == "trellis.access"]
    assert all(r["level"] == "info" for r in access)
    posts = [r for r in access if r["method"] == "POST" and r["path"] == f"/session/{sid}/prompt"]
    assert [r["status"] for r in posts] == [202, 503]
    assert all(isinstance(r["ms"], float) and r["client"] == "127.0.0.1" for r in posts)
    signals = [r for r in access if r["path"].startswith("/signal/")]
    assert signals and {r["path"] for r in signals} == {"/signal/mcp/<redacted>"}
    assert any(r["method"] == "POST" and r["status"] == 200 for r in signals)

    turns = [r for r in records if r["logger"] == "trellis.session" and r.get("prompt") == pid]
    assert [r["message"].split(" session=")[0] for r in turns] == ["turn started", "turn ended"]
    ended = turns[1]
    assert (ended["session"], ended["stop"], ended["calls"], ended["tokens_in"], ended["tokens_out"]) == \
        (sid, "end_turn", 1, 11, 7)
    assert ended["ms"] >= 900  # the fake held the answer back a second
    assert ended["message"] == (f"turn ended session={sid} prompt={pid} stop=end_turn calls=1 tokens_in=11 "
                                f"tokens_out=7 ms={ended['ms']}")

    warnings = [r for r in records if r["level"] == "warning"]
    [full] = [r for r in warnings if r.get("reason") == "prompt_queue_full"]
    assert (full["session"], full["pending"], full["limit"]) == (sid, 1, 1)
    hooks = [r for r in warnings if r["logger"] == "trellis.hooks" and r["session"] == sid]
    assert hooks and hooks[0]["event"] == "UserPromptSubmit" and hooks[0]["command"] == "./no-such-hook.sh"
    assert hooks[0]["why"] == "exited with 127"
