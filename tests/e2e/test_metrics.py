"""GET /metrics over HTTP: behind the bearer token, Prometheus's text format, read back by prometheus_client."""

from __future__ import annotations

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from actors import Settings, load_script
from tests.conftest import live_daemon

TODOS = {"todos": [{"id": "t1", "content": "migrate the billing tables", "status": "in_progress"},
                   {"id": "t2", "content": "rotate the signing keys", "status": "pending"}]}


async def test_metrics_need_the_token_and_count_a_guard_turn():
    model = load_script({"responses": [
        [{"text": "Planning. "}, {"tool_call": {"id": "call_1", "name": "todo_write", "arguments": TODOS}},
         {"usage": {"prompt_tokens": 120, "completion_tokens": 30}}],
        [{"text": "I will stop here."}, {"usage": {"prompt_tokens": 160, "completion_tokens": 6}}],
        [{"text": "Still stopping."}, {"usage": {"prompt_tokens": 200, "completion_tokens": 4}}],
        [{"text": "Stopping again."}, {"usage": {"prompt_tokens": 240, "completion_tokens": 4}}],
    ]})
    settings = Settings(todo_stop_guard=True, approval_mode="yolo")
    with trio.fail_after(30):
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            bare = await httpx.AsyncClient(base_url=str(client.base_url), trust_env=False).get("/metrics")
            assert bare.status_code == 401
            sid = (await client.post("/session", json={})).json()["sessionId"]
            admitted = (await client.post(f"/session/{sid}/prompt",
                                          json={"prompt": [{"type": "text", "text": "do the migration"}]})).json()
            while (await client.get(f"/session/{sid}/turns/{admitted['promptId']}")).json()["state"] != "completed":
                await trio.sleep(0.01)
            answer = await client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(answer.text) for s in f.samples}
    assert samples[("trellis_turns_total", (("stop_reason", "end_turn"),))] == 1
    assert samples[("trellis_guard_continuations_total", ())] == 2
    assert samples[("trellis_model_call_duration_seconds_count", (("source", "guard"),))] == 2
    assert samples[("trellis_model_tokens_total", (("direction", "input"), ("source", "primary")))] == 280
    assert samples[("trellis_sessions", (("state", "idle"),))] == 1
    assert sid not in answer.text and "billing" not in answer.text
