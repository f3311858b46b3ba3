"""The Todo Stop Guard end to end: REST/SSE daemon, OpenAI-compatible provider, loopback fake model."""

from __future__ import annotations

import json

import trio

from actors import Settings
from actors.model.openai import OpenAIConfig, OpenAIModel
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect
from transport.fake_openai import FakeOpenAI

TODOS = {"todos": [{"id": "t1", "content": "migrate the billing tables", "status": "in_progress"},
                   {"id": "t2", "content": "rotate the signing keys", "status": "pending"}]}


async def test_admitted_without_a_subscriber_the_guard_makes_four_calls_and_replays_attempts(nursery):
    fake = FakeOpenAI([
        [{"text": "Planning. "}, {"tool_call": {"id": "call_1", "name": "todo_write", "arguments": TODOS}}],
        [{"text": "I will stop here."}],
        [{"text": "Still stopping."}],
        [{"text": "Stopping again."}],
        [{"text": "a fifth call must never happen"}],
    ])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, api_key="k", model="fake"))
    settings = Settings(todo_stop_guard=True, followup_suggestions=False)
    with trio.fail_after(30):
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            admitted = (await client.post(f"/session/{sid}/prompt",
                                          json={"prompt": [{"type": "text", "text": "do the migration"}]})).json()
            # No subscriber: wait for the model calls, then for the turn to settle.
            while len(fake.requests) < 4:
                await trio.sleep(0.01)
            while (await client.get(f"/session/{sid}/turns/{admitted['promptId']}")).json()["state"] == "running":
                await trio.sleep(0.01)
            await trio.sleep(0.2)
            assert len(fake.requests) == 4
            got = await collect(client, sid, headers={"Last-Event-ID": str(admitted["lastEventId"])},
                                until="replay_complete")
            status = (await client.get(f"/session/{sid}/status")).json()["todoStopGuard"]
    guard = [f for f in got if f["type"] == "session_update"
             and (f["data"]["update"].get("_meta") or {}).get("source") == "todo_stop_guard"]
    assert [g["data"]["update"]["_meta"]["attempt"] for g in guard] == [1, 2, 2]
    for g in guard:
        update = g["data"]["update"]
        assert update["sessionUpdate"] == "agent_message_chunk"
        assert update["_meta"] == {"source": "todo_stop_guard", "qwenDiscreteMessage": True,
                                   "attempt": update["_meta"]["attempt"], "maxAttempts": 2, "unfinishedCount": 2}
        text = json.dumps(g)
        assert "billing" not in text and "signing" not in text  # never todo text
    assert guard[-1]["data"]["update"]["content"]["text"] == (
        "[Todo Stop Guard] Automatic continuation stopped after 2 attempts; 2 todo item(s) remain unfinished.")
    ends = [f for f in got if f["type"] == "turn_complete"]
    assert len(ends) == 1 and ends[0]["promptId"] == admitted["promptId"]
    assert got.index(ends[0]) > got.index(guard[-1])
    assert status["exhaustionReported"] and status["attempts"] == 2
    # The guard's prompts reached the model with the spec's wording.
    third = fake.requests[2].body["messages"][-1]
    assert third["role"] == "user" and third["content"].startswith(
        "[Todo Stop Guard] 2 todo item(s) are still pending or in progress. Continue executing the current task now.")
    assert "This is the final automatic continuation." in fake.requests[3].body["messages"][-1]["content"]
