"""Usage accounting end to end: ``python -m transport --model openai`` against the loopback fake
OpenAI server, with the Todo Stop Guard making its extra calls, then a restart on the same state."""

from __future__ import annotations

import json

import trio

from tests.conftest import daemon_process
from tests.e2e.sse_client import collect
from tests.e2e.test_openai_daemon import prompt, wait_turn
from transport.fake_openai import FakeOpenAI

TODOS = {"todos": [{"id": "t1", "content": "migrate the billing tables", "status": "in_progress"},
                   {"id": "t2", "content": "rotate the signing keys", "status": "pending"}]}
SETTINGS = {"experimental": {"todoStopGuard": True}, "ui": {"enableFollowupSuggestions": False}}


def usage(prompt_tokens: int, completion_tokens: int, cached: int | None = None) -> dict:
    """An OpenAI usage chunk; caching as OpenAI reports it, in prompt_tokens_details."""
    figures: dict = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    if cached is not None:
        figures["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"usage": figures}


def tally(calls: int, inputs: int, outputs: int, cached: int) -> dict:
    return {"calls": calls, "inputTokens": inputs, "outputTokens": outputs, "cachedReadTokens": cached,
            "totalTokens": inputs + outputs}


PRIMARY = tally(2, 320, 40, 100)
GUARD = tally(2, 560, 14, 200)
EXPECTED = {**tally(4, 880, 54, 300), "bySource": {"primary": PRIMARY, "todo_stop_guard": GUARD}}


async def test_guard_calls_are_summed_and_attributed_over_the_wire_and_survive_a_restart(nursery, tmp_path):
    fake = FakeOpenAI([
        [{"text": "Planning. "}, {"tool_call": {"id": "call_1", "name": "todo_write", "arguments": TODOS}},
         usage(120, 30, cached=100)],
        [{"text": "I will stop here."}, usage(200, 10)],
        [{"text": "Still stopping."}, usage(260, 8, cached=200)],  # guard attempt 1
        [{"text": "Stopping again."}, usage(300, 6)],              # guard attempt 2
        [{"text": "a fifth call must never happen"}],
    ])
    url = await nursery.start(fake.serve)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(SETTINGS))
    state = tmp_path / "state"
    args = ("--model", "openai", "--openai-base-url", url, "--settings", str(settings))
    env = {"OPENAI_API_KEY": "sk-fake", "OPENAI_MODEL": "fake"}
    with trio.fail_after(60):
        async with daemon_process(*args, state_dir=state, env=env) as daemon:
            async with daemon.client(daemon.token()) as client:
                sid = (await client.post("/session", json={})).json()["sessionId"]
                live: list = []

                async def subscribe() -> None:
                    live.extend(await collect(client, sid, headers={"Last-Event-ID": "0"}))

                async with trio.open_nursery() as inner:
                    inner.start_soon(subscribe)
                    while (await client.get(f"/session/{sid}/status")).json()["subscribers"] < 1:
                        await trio.sleep(0.01)
                    pid = (await client.post(f"/session/{sid}/prompt", json=prompt("do the migration"))).json()[
                        "promptId"]
                record = await wait_turn(client, sid, pid)
                status = (await client.get(f"/session/{sid}/status")).json()
        assert len(fake.requests) == 4
        # A restarted daemon on the same state directory still has the turn's and the session's figures.
        async with daemon_process(*args, state_dir=state, env=env) as daemon:
            async with daemon.client(daemon.token()) as client:
                assert (await client.post(f"/session/{sid}/load", json={})).status_code == 200
                restored = (await client.get(f"/session/{sid}/turns/{pid}")).json()
                restored_status = (await client.get(f"/session/{sid}/status")).json()

    calls = [u["_meta"] for u in (f["data"]["update"] for f in live if f["type"] == "session_update")
             if "usage" in (u.get("_meta") or {})]
    assert [(c["usage"], c["usageSource"]) for c in calls] == [
        ({"inputTokens": 120, "outputTokens": 30, "totalTokens": 150, "cachedReadTokens": 100}, "primary"),
        ({"inputTokens": 200, "outputTokens": 10, "totalTokens": 210}, "primary"),
        ({"inputTokens": 260, "outputTokens": 8, "totalTokens": 268, "cachedReadTokens": 200}, "todo_stop_guard"),
        ({"inputTokens": 300, "outputTokens": 6, "totalTokens": 306}, "todo_stop_guard"),
    ]
    guard = [f for f in live if f["type"] == "session_update"
             and (f["data"]["update"].get("_meta") or {}).get("source") == "todo_stop_guard"]
    assert [g["data"]["update"]["_meta"]["attempt"] for g in guard] == [1, 2, 2]
    end = live[-1]
    assert end["type"] == "turn_complete" and end["promptId"] == pid and end["data"]["usage"] == EXPECTED
    assert record["usage"] == EXPECTED and status["usage"] == EXPECTED
    assert restored["usage"] == EXPECTED and restored_status["usage"] == EXPECTED
