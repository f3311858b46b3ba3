"""The REST + SSE daemon end to end: a real server on loopback port 0, driven over HTTP."""

from __future__ import annotations

import json

import trio

from actors import Settings, Limits
from actors.session.todo import TodoWriteTool
from actors.session.tools import ToolRegistry, ToolResult
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect, frames

TEXT = {"prompt": [{"type": "text", "text": "Plan a picnic"}]}


def prompt(text: str) -> dict:
    return {"prompt": [{"type": "text", "text": text}]}


async def new_session(client) -> str:
    r = await client.post("/session", json={})
    assert r.status_code == 200
    return r.json()["sessionId"]


async def wait_turn(client, sid: str, pid: str, states=("completed", "error", "cancelled")) -> dict:
    with trio.fail_after(10):
        while True:
            r = await client.get(f"/session/{sid}/turns/{pid}")
            if r.status_code == 200 and r.json()["state"] in states:
                return r.json()
            await trio.sleep(0.01)


async def test_prompt_without_subscriber_then_replay_from_admission_cursor():
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            r = await client.post(f"/session/{sid}/prompt", json=TEXT)
            assert r.status_code == 202
            admitted = r.json()
            assert set(admitted) == {"promptId", "lastEventId", "eventEpoch"}
            assert (await wait_turn(client, sid, admitted["promptId"]))["state"] == "completed"

            got = await collect(client, sid, headers={"Last-Event-ID": str(admitted["lastEventId"])},
                                until="replay_complete")
            events = [f for f in got if f.get("id") is not None]
            assert events[0]["id"] == admitted["lastEventId"] + 1
            assert [e["id"] for e in events] == list(range(events[0]["id"], events[-1]["id"] + 1))
            # First the title the prompt gave the session at its admission: the session's, not the prompt's.
            title, metadata, *events = events  # the title, then the same as qwen serve's event for qwen's Web Shell
            assert title["data"]["update"]["sessionUpdate"] == "session_info_update" and "promptId" not in title
            assert metadata["type"] == "session_metadata_updated" and "promptId" not in metadata
            assert metadata["data"] == {"sessionId": sid, "displayName": title["data"]["update"]["title"],
                                        "titleSource": "auto"}
            assert events[-1]["type"] == "turn_complete"
            assert events[-1]["data"] == {"sessionId": sid, "stopReason": "end_turn", "promptId": admitted["promptId"]}
            updates = [e["data"]["update"]["sessionUpdate"] for e in events if e["type"] == "session_update"]
            assert updates[0] == "user_message_chunk" and "plan" in updates and "agent_message_chunk" in updates
            assert all(e["promptId"] == admitted["promptId"] for e in events)
            assert got[-1]["type"] == "replay_complete" and got[-1]["_sse_id"] is None

            # Reconnect from N: exactly the ids above N.
            n = events[3]["id"]
            again = await collect(client, sid, headers={"Last-Event-ID": str(n)}, until="replay_complete")
            ids = [f["id"] for f in again if f.get("id") is not None]
            assert ids == list(range(n + 1, events[-1]["id"] + 1))
            assert again[-1]["type"] == "replay_complete"
            assert again[-1]["data"] == {"replayedCount": len(ids), "lastReplayedEventId": ids[-1],
                                         "lastEventId": events[-1]["id"]}
            # Browsers' first connect passes the cursor as a query parameter.
            q = await collect(client, sid, params={"lastEventId": str(n)}, until="replay_complete")
            assert [f["id"] for f in q if f.get("id") is not None] == ids


async def test_resync_for_foreign_epoch_cursor_ahead_and_evicted_cursor():
    settings = Settings(limits=Limits(event_ring_size=5))
    with trio.fail_after(20):
        async with live_daemon(settings=settings) as (daemon, client):
            sid = await new_session(client)
            pid = (await client.post(f"/session/{sid}/prompt", json=TEXT)).json()["promptId"]
            await wait_turn(client, sid, pid)
            last = (await client.get(f"/session/{sid}/status")).json()["lastEventId"]
            assert last > 6
            cases = {
                "epoch_reset": {"Last-Event-ID": "1", "X-Qwen-Event-Epoch": "another-epoch"},
                "ahead": {"Last-Event-ID": str(last + 10)},
                "ring_evicted": {"Last-Event-ID": "0"},
            }
            for reason, headers in cases.items():
                got = await collect(client, sid, headers=headers, until="replay_complete")
                assert got[0]["type"] == "state_resync_required", reason
                assert got[0]["data"]["reason"] == ("epoch_reset" if reason == "ahead" else reason)
                assert got[0]["data"]["earliestAvailableId"] == last - 4
                # The ring no longer holds the whole turn: it comes folded, ids still rising, ending at its end.
                ids = [f["id"] for f in got[1:-1]]
                assert ids == sorted(set(ids)) and ids[-1] == last, (reason, ids)
                assert got[-2]["type"] == "turn_complete"
                assert got[-1]["type"] == "replay_complete"


async def test_three_prompts_run_in_fifo_order_abort_queued_and_cancel_running(scripted):
    slow = [{"sleep": 0.3}, {"text": "one"}]
    model = scripted(slow, [{"text": "three"}], [{"sleep": 30}, {"text": "never"}])
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = await new_session(client)
            pids = []
            for text in ("first", "second", "third", "fourth"):
                r = await client.post(f"/session/{sid}/prompt", json=prompt(text))
                assert r.status_code == 202
                pids.append(r.json()["promptId"])
            pending = (await client.get(f"/session/{sid}/pending-prompts")).json()["pendingPrompts"]
            assert [p["promptId"] for p in pending] == pids
            assert pending[0]["state"] == "running" and {p["state"] for p in pending[1:]} == {"queued"}

            r = await client.delete(f"/session/{sid}/pending-prompts/{pids[1]}")
            assert r.json() == {"removed": True}
            assert (await client.delete(f"/session/{sid}/pending-prompts/{pids[1]}")).json() == {"removed": False}
            assert (await wait_turn(client, sid, pids[1]))["state"] == "cancelled"
            assert (await wait_turn(client, sid, pids[2]))["state"] == "completed"
            await wait_turn(client, sid, pids[3], states=("running",))
            assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
            record = await wait_turn(client, sid, pids[3])
            assert record["state"] == "cancelled" and record["stopReason"] == "cancelled"

            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            ends = [(f["promptId"], f["data"].get("stopReason")) for f in got if f["type"] == "turn_complete"]
            assert ends == [(pids[1], "cancelled"), (pids[0], "end_turn"), (pids[2], "end_turn"), (pids[3], "cancelled")]
            started = [f["promptId"] for f in got if f["type"] == "pending_prompt_started"]
            assert started == [pids[2], pids[3]]  # the aborted one never started
            removed = [f["data"] for f in got if f["type"] == "pending_prompt_completed" and f["data"]["state"] == "removed"]
            assert [d["promptId"] for d in removed] == [pids[1]]
            # The model saw the prompts in admission order, without the aborted one.
            users = [c.messages[-1].content for c in model.calls]
            assert users == ["first", "third", "fourth"]


async def test_mid_turn_message_is_injected_before_the_next_model_call(scripted):
    todo = {"tool_call": {"name": "todo_write", "arguments": {"todos": [{"id": "1", "content": "x", "status": "pending"}]}}}
    model = scripted([{"sleep": 0.5}, todo], [{"text": "ok"}])
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = await new_session(client)
            idle = await client.post(f"/session/{sid}/mid-turn-message", json={"message": "too early"})
            assert idle.json() == {"accepted": False, "reason": "session_idle"}
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("go"))).json()["promptId"]
            await wait_turn(client, sid, pid, states=("running",))
            r = await client.post(f"/session/{sid}/mid-turn-message", json={"message": "also run tests", "messageId": "m1"})
            assert r.json() == {"accepted": True, "messageId": "m1"}
            await wait_turn(client, sid, pid)
            assert len(model.calls) == 2
            second = model.calls[1].messages
            assert second[-2].role == "tool"
            assert second[-1].role == "user"
            assert second[-1].content == "[User message received during tool execution]: also run tests"
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            injected = [f for f in got if f["type"] == "mid_turn_message_injected"]
            assert len(injected) == 1 and injected[0]["data"]["messageIds"] == ["m1"]
            types = [f["type"] for f in got]
            assert types.index("mid_turn_message_injected") < max(
                i for i, f in enumerate(got) if f["type"] == "session_update"
                and f["data"]["update"]["sessionUpdate"] == "agent_message_chunk")


async def _state(client, sid: str) -> tuple:
    status = (await client.get(f"/session/{sid}/status")).json()
    pending = (await client.get(f"/session/{sid}/pending-prompts")).json()
    transcript = (await client.get(f"/session/{sid}/transcript")).json()
    return status["lastEventId"], status["pendingCount"], pending, transcript


async def test_bad_input_gets_4xx_with_code_message_path_and_changes_nothing():
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            pid = (await client.post(f"/session/{sid}/prompt", json=TEXT)).json()["promptId"]
            await wait_turn(client, sid, pid)
            before = await _state(client, sid)
            cases = [
                ("POST", f"/session/{sid}/prompt", b"{not json", 400, "invalid_json", "$"),
                ("POST", f"/session/{sid}/prompt", b'{"prompt": [{"type": "text", "text": 3}]}', 400,
                 "invalid_request", "$.prompt[0].text"),
                ("POST", f"/session/{sid}/prompt", b'{"prompt": [{"type": "text", "text": "x"}], "extra": 1}', 400,
                 "invalid_request", "$.extra"),
                ("POST", f"/session/{sid}/prompt", b'{"prompt": [{"type": "video", "url": "x"}]}', 400,
                 "invalid_request", "$.prompt[0]"),
                ("POST", f"/session/{sid}/prompt", b'{"prompt": []}', 400, "empty_prompt", "$.prompt"),
                ("POST", f"/session/{sid}/prompt", b'{"prompt": [{"type": "text", "text": "x"}], "_meta": 3}', 400,
                 "invalid_request", "$._meta"),
                ("POST", f"/session/{sid}/mid-turn-message", b'{"message": 5}', 400, "invalid_request", "$.message"),
                ("POST", "/session/nope/prompt", json.dumps(TEXT).encode(), 404, "session_not_found", "url.sessionId"),
                ("POST", "/session", b'{"sessionId": "../etc"}', 400, "invalid_session_id", "$.sessionId"),
                ("POST", f"/session/{sid}/prompt", b'{"prompt": [{"type": "text", "text": "' + b"x" * (11 * 1024 * 1024) + b'"}]}',
                 413, "payload_too_large", None),
            ]
            for method, url, body, status, code, path in cases:
                r = await client.request(method, url, content=body, headers={"Content-Type": "application/json"})
                assert r.status_code == status, (url, body[:60], r.text)
                err = r.json()
                assert err["code"] == code and isinstance(err["error"], str) and err["error"]
                assert err.get("path") == path, (body[:60], err)
            assert await _state(client, sid) == before


async def test_unexpected_exception_in_a_turn_is_contained():
    class Explodes:
        name, kind, builtin = "explode", "other", False
        description, parameters = "raises", {"type": "object"}

        async def execute(self, context, arguments) -> ToolResult:
            raise RuntimeError("boom")

    def tools() -> ToolRegistry:
        return ToolRegistry([TodoWriteTool(), Explodes()])

    from actors import load_script

    model = load_script({"responses": [[{"tool_call": {"name": "explode", "arguments": {}}}]], "then": "demo"})
    with trio.fail_after(20):
        async with live_daemon(model=model, tools=tools) as (daemon, client):
            a, b = await new_session(client), await new_session(client)
            pid = (await client.post(f"/session/{a}/prompt", json=prompt("explode"))).json()["promptId"]
            record = await wait_turn(client, a, pid)
            assert record["state"] == "error"
            got = await collect(client, a, headers={"Last-Event-ID": "0"}, until="turn_error")
            assert got[-1]["data"]["code"] == "internal_error" and got[-1]["promptId"] == pid
            # The same session and another one keep serving.
            for sid in (a, b):
                pid = (await client.post(f"/session/{sid}/prompt", json=prompt("hello"))).json()["promptId"]
                assert (await wait_turn(client, sid, pid))["state"] == "completed"
            assert (await client.get("/health")).json() == {"status": "ok"}


async def test_restarted_daemon_restores_the_transcript_with_load(tmp_path):
    with trio.fail_after(20):
        async with live_daemon(state_dir=tmp_path) as (daemon, client):
            sid = await new_session(client)
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("remember the picnic"))).json()["promptId"]
            await wait_turn(client, sid, pid)
            before = (await client.get(f"/session/{sid}/transcript")).json()["entries"]
        async with live_daemon(state_dir=tmp_path) as (daemon, client):
            assert (await client.get(f"/session/{sid}/status")).status_code == 404
            # The transcript answers from disk before load.
            assert (await client.get(f"/session/{sid}/transcript")).json()["entries"] == before
            r = await client.post(f"/session/{sid}/load", json={})
            assert r.status_code == 200 and r.json()["sessionId"] == sid
            assert r.json()["restoredMessages"] == len(before)
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            assert got[0]["data"]["reason"] == "seeded_replay_not_in_ring"  # the earlier turn, compacted
            texts = [f["data"]["update"]["content"]["text"] for f in got
                     if f["type"] == "session_update" and "content" in f["data"]["update"]]
            assert texts[0] == "remember the picnic"
            status = (await client.get(f"/session/{sid}/status")).json()
            assert status["historyLength"] == len(before)
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("and now?"))).json()["promptId"]
            assert (await wait_turn(client, sid, pid))["state"] == "completed"
            assert (await client.post("/session/unknown-id/load", json={})).status_code == 404


async def test_slow_subscriber_is_warned_then_evicted_without_slowing_anyone(scripted):
    # Big enough to fill the slow reader's socket buffers; paced like a real model stream.
    chunks: list = []
    for i in range(3000):
        chunks.append({"text": "x" * 4000})
        if i % 10 == 9:
            chunks.append({"sleep": 0.002})
    model = scripted(chunks)
    with trio.fail_after(30):
        async with live_daemon(model=model) as (daemon, client):
            sid = await new_session(client)
            async with client.stream("GET", f"/session/{sid}/events", params={"maxQueued": "16"}) as slow:
                async with client.stream("GET", f"/session/{sid}/events") as fast:
                    pid = (await client.post(f"/session/{sid}/prompt", json=prompt("stream"))).json()["promptId"]
                    seen = []
                    async for frame in frames(fast):
                        seen.append(frame)
                        if frame["type"] == "turn_complete":
                            break
                    # The session finished while the slow reader read nothing.
                    assert (await wait_turn(client, sid, pid))["state"] == "completed"
                    ids = [f["id"] for f in seen if f.get("id") is not None]
                    assert ids == list(range(ids[0], ids[0] + len(ids)))
                    # The title, the prompt's echo and its 3,000 chunks.
                    assert len([f for f in seen if f["type"] == "session_update"]) == 3002
                slow_frames = [f async for f in frames(slow)]
            kinds = [f["type"] for f in slow_frames]
            assert kinds.count("slow_client_warning") == 1
            assert kinds[-1] == "client_evicted"
            assert kinds.index("slow_client_warning") < kinds.index("client_evicted")


async def test_bearer_token_is_required_when_configured():
    with trio.fail_after(20):
        async with live_daemon(token="s3cret") as (daemon, client):
            assert (await client.post("/session", json={})).status_code == 200
            r = await client.post("/session", json={}, headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401 and r.json()["code"] == "unauthorized"
            assert (await client.get("/health", headers={"Authorization": ""})).status_code == 200
            r = await client.get("/capabilities", headers={"Origin": "https://evil.example"})
            assert r.status_code == 403 and r.json()["code"] == "origin_not_allowed"


async def test_queue_cap_answers_503_with_limit_and_pending_count(scripted):
    settings = Settings(limits=Limits(max_pending_prompts=2))
    model = scripted([{"sleep": 5}], then="demo")
    with trio.fail_after(20):
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid = await new_session(client)
            for _ in range(2):
                assert (await client.post(f"/session/{sid}/prompt", json=TEXT)).status_code == 202
            r = await client.post(f"/session/{sid}/prompt", json=TEXT)
            assert r.status_code == 503
            assert r.json() == {"error": r.json()["error"], "code": "prompt_queue_full", "path": None, "limit": 2,
                                "pendingCount": 2}


async def test_allowed_browser_origins_get_cors_headers_and_preflights():
    with trio.fail_after(20):
        async with live_daemon(token="s3cret") as (daemon, client):
            origin = f"http://localhost:{client.base_url.port}"  # same-origin with the daemon
            pre = await client.options("/session", headers={"Origin": origin, "Authorization": "",
                                                             "Access-Control-Request-Method": "POST"})
            assert pre.status_code == 204
            assert "POST" in pre.headers["access-control-allow-methods"]
            assert "Last-Event-ID" in pre.headers["access-control-allow-headers"]
            r = await client.post("/session", json={}, headers={"Origin": origin})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
            assert "X-Qwen-Event-Epoch" in r.headers["access-control-expose-headers"]
            bad = await client.options("/session", headers={"Origin": "https://evil.example"})
            assert bad.status_code == 403 and "access-control-allow-origin" not in bad.headers
            other_port = await client.options("/session", headers={"Origin": "http://localhost:5173"})
            assert other_port.status_code == 403  # another loopback port is another web page
