"""The daemon on the ``openai`` provider against a loopback fake OpenAI-compatible server."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import trio

from actors.model.openai import OpenAIConfig, OpenAIModel
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect
from transport.auth import read_token_file
from transport.fake_openai import FakeOpenAI

TODOS = {"todos": [{"id": "1", "content": "write tests", "status": "in_progress"}]}
KEY = "sk-test-DO-NOT-LEAK-4242"


def prompt(text: str, **meta) -> dict:
    body: dict = {"prompt": [{"type": "text", "text": text}]}
    if meta:
        body["_meta"] = meta
    return body


async def wait_turn(client, sid: str, pid: str, states=("completed", "error", "cancelled")) -> dict:
    with trio.fail_after(10):
        while True:
            r = await client.get(f"/session/{sid}/turns/{pid}")
            if r.status_code == 200 and r.json()["state"] in states:
                return r.json()
            await trio.sleep(0.01)



async def test_todo_write_tool_call_then_text_round_trips_through_the_real_wire(nursery):
    fake = FakeOpenAI([
        [{"text": "Planning. "}, {"tool_call": {"id": "call_1", "name": "todo_write", "arguments": TODOS}}],
        [{"text": "All "}, {"text": "done."}],
    ])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, model="fake-model"))
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("plan it"))).json()["promptId"]
            assert (await wait_turn(client, sid, pid))["state"] == "completed"
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
    updates = [f["data"]["update"] for f in got if f["type"] == "session_update"
               and "usage" not in (f["data"]["update"].get("_meta") or {})
               and f["data"]["update"]["sessionUpdate"] != "session_info_update"]  # the title "plan it" gave
    # The ring is raw: the replay is the stream as it came, chunk by chunk.
    assert [u["sessionUpdate"] for u in updates] == [
        "user_message_chunk", "agent_message_chunk", "plan", "agent_message_chunk", "agent_message_chunk"]
    assert [updates[3]["content"]["text"], updates[4]["content"]["text"]] == ["All ", "done."]
    assert updates[2]["entries"][0]["content"] == "write tests"
    assert len(fake.requests) == 2
    first, second = (r.body for r in fake.requests)
    assert first["stream"] is True and first["model"] == "fake-model"
    assert "todo_write" in [t["function"]["name"] for t in first["tools"]]
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assistant, tool = second["messages"][2], second["messages"][3]
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert assistant["tool_calls"][0]["function"]["name"] == "todo_write"
    assert tool["tool_call_id"] == "call_1" and "write tests" in tool["content"]


async def test_each_failure_has_its_own_code_and_a_trusted_retry_continues(nursery):
    fake = FakeOpenAI([
        {"status": 500, "body": {"error": {"message": "upstream exploded"}}},
        [{"text": "recovered 1"}],
        {"status": 429, "body": "slow down", "headers": {"Retry-After": "7"}},
        [{"text": "recovered 2"}],
        [{"text": "partial "}, {"stall": None}],
        [{"text": "recovered 3"}],
        [{"text": "partial "}, {"cut": True}],
        [{"text": "recovered 4"}],
    ])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, read_timeout=0.3))
    codes = []
    with trio.fail_after(30):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            for n in range(4):
                pid = (await client.post(f"/session/{sid}/prompt", json=prompt(f"task {n}"))).json()["promptId"]
                assert (await wait_turn(client, sid, pid))["state"] == "error"
                retry = await client.post(f"/session/{sid}/prompt", json=prompt("retry", retry=True))
                rid = retry.json()["promptId"]
                assert (await wait_turn(client, sid, rid))["state"] == "completed"
                events = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
                errors = [f for f in events if f["type"] == "turn_error"]
                codes.append(errors[-1]["data"]["code"])
                assert errors[-1]["promptId"] == pid
            # Every admitted prompt reached a terminal event; none was lost.
            terminal = [f["promptId"] for f in events if f["type"] in ("turn_complete", "turn_error")]
            assert len(terminal) == 8 and len(set(terminal)) == 8
    assert codes == ["server_error", "rate_limited", "timeout", "stream_interrupted"]
    # The trusted retry re-sent the failed turn's own conversation instead of a new user message.
    retried = fake.requests[1].body["messages"]
    assert [m["content"] for m in retried if m["role"] == "user"] == ["task 0"]
    assert KEY not in repr(events)


async def test_cancelling_a_prompt_closes_the_upstream_stream(nursery):
    fake = FakeOpenAI([[{"text": "thinking "}, {"stall": None}]])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY))
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("long"))).json()["promptId"]
            while not fake.requests:
                await trio.sleep(0.01)
            await wait_turn(client, sid, pid, states=("running",))
            assert fake.disconnects == 0
            assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
            record = await wait_turn(client, sid, pid)
            assert record["stopReason"] == "cancelled"
            with trio.fail_after(2):
                await fake.disconnected.wait()


async def test_context_window_refusal_is_a_context_overflow_and_nothing_is_sent(nursery):
    # (More in tests/e2e/test_context_limits.py.)
    fake = FakeOpenAI()
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, context_window=20))
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("x" * 400))).json()["promptId"]
            record = await wait_turn(client, sid, pid)
            assert record["state"] == "error"
            events = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
    [error] = [f for f in events if f["type"] == "turn_error"]
    assert error["data"]["code"] == "context_overflow" and "20 tokens" in error["data"]["message"]
    assert fake.requests == []


async def test_the_cli_daemon_on_openai_never_logs_or_publishes_the_key(nursery, tmp_path):
    fake = FakeOpenAI([
        {"status": 401, "body": {"error": {"message": f"bad key {KEY}"}}},
        [{"text": "hello"}],
    ])
    url = await nursery.start(fake.serve)
    inherited = {k: v for k, v in os.environ.items() if k != "TRELLIS_TOKEN"}  # so the daemon mints its own
    env = {**inherited, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": KEY, "OPENAI_MODEL": "fake"}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "transport", "--model", "openai", "--port", "0", "--log-level", "debug",
         "--state-dir", str(tmp_path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    output = b""
    try:
        with trio.fail_after(20):
            while b"\n" not in output:
                output += await proc.stdout.receive_some()
            base = output.decode().split()[-1]
            token = read_token_file(tmp_path)  # minted at start into <state-dir>/token
            async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
                sid = (await client.post("/session", json={})).json()["sessionId"]
                for text in ("first", "second"):
                    pid = (await client.post(f"/session/{sid}/prompt", json=prompt(text))).json()["promptId"]
                    await wait_turn(client, sid, pid)
                events = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
                transcript = (await client.get(f"/session/{sid}/transcript")).text
    finally:
        proc.terminate()
        with trio.fail_after(10):
            await proc.wait()
    stderr = b""
    while chunk := await proc.stderr.receive_some():
        stderr += chunk
    assert [f["data"]["code"] for f in events if f["type"] == "turn_error"] == ["http_401"]
    assert any(f["type"] == "turn_complete" for f in events)
    assert stderr, "debug logging produced nothing to check"
    for text in (repr(events), transcript, stderr.decode(), output.decode()):
        assert KEY not in text and token not in text
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
