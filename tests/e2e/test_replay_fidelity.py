"""Replays over REST/SSE against the real daemon: the raw ring is the live stream; restored turns keep guard chunks."""

from __future__ import annotations

import trio

from actors import Settings
from actors.model.openai import OpenAIConfig, OpenAIModel
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect
from transport.fake_openai import FakeOpenAI

TODOS = {"todos": [{"id": "t1", "content": "migrate the billing tables", "status": "in_progress"},
                   {"id": "t2", "content": "rotate the signing keys", "status": "pending"}]}
GUARDED_TURN = [
    [{"text": "Plan"}, {"text": "ning. "}, {"tool_call": {"id": "call_1", "name": "todo_write", "arguments": TODOS}}],
    [{"text": "I will "}, {"text": "stop here."}],
    [{"text": "Still "}, {"text": "stopping."}],
    [{"text": "Stopping "}, {"text": "again."}],
]


def guard_chunks(frames: list[dict]) -> list[dict]:
    return [f["data"]["update"] for f in frames if f["type"] == "session_update"
            and (f["data"]["update"].get("_meta") or {}).get("source") == "todo_stop_guard"]


def agent_text(frames: list[dict]) -> str:
    return "".join(f["data"]["update"]["content"]["text"] for f in frames if f["type"] == "session_update"
                   and f["data"]["update"]["sessionUpdate"] == "agent_message_chunk")


async def settled(client, sid: str, prompt_id: str) -> None:
    while (await client.get(f"/session/{sid}/turns/{prompt_id}")).json()["state"] in ("queued", "running"):
        await trio.sleep(0.01)
    while (await client.get(f"/session/{sid}/status")).json()["state"] != "idle":
        await trio.sleep(0.01)


async def test_replay_from_every_cursor_of_a_finished_multi_turn_session_is_the_live_stream(nursery, scripted):
    model = scripted([{"text": "one "}, {"text": "two"}], [{"text": "three "}, {"text": "four"}],
                     [{"text": "five"}])
    with trio.fail_after(60):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            for word in ("a", "b", "c"):
                pid = (await client.post(f"/session/{sid}/prompt",
                                         json={"prompt": [{"type": "text", "text": word}]})).json()["promptId"]
                await settled(client, sid, pid)
            whole = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            live = whole[:-1]
            assert [f["id"] for f in live] == list(range(1, len(live) + 1))
            assert sum(1 for f in live if f["type"] == "turn_complete") == 3
            for cursor in range(len(live) + 1):
                got = await collect(client, sid, headers={"Last-Event-ID": str(cursor)}, until="replay_complete")
                assert got[:-1] == live[cursor:], cursor  # same ids, same payloads, no gap, no repeat


async def test_a_restored_session_replays_its_compacted_turns_with_guard_chunks_intact(nursery, tmp_path):
    fake = FakeOpenAI([*GUARDED_TURN, [{"text": "after the restart"}]])
    url = await nursery.start(fake.serve)
    settings = Settings(todo_stop_guard=True, followup_suggestions=False)
    with trio.fail_after(60):
        async with live_daemon(model=OpenAIModel(OpenAIConfig(base_url=url, api_key="k", model="fake")),
                               settings=settings, state_dir=tmp_path) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            admitted = (await client.post(f"/session/{sid}/prompt",
                                          json={"prompt": [{"type": "text", "text": "migrate"}]})).json()
            await settled(client, sid, admitted["promptId"])
            before = (await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete"))[:-1]
        assert [g["_meta"]["attempt"] for g in guard_chunks(before)] == [1, 2, 2]

        async with live_daemon(model=OpenAIModel(OpenAIConfig(base_url=url, api_key="k", model="fake")),
                               settings=settings, state_dir=tmp_path) as (daemon, client):
            r = await client.post(f"/session/{sid}/load", json={})
            assert r.status_code == 200, r.text
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            resync, *restored, done = got
            assert resync["type"] == "state_resync_required"
            assert resync["data"]["reason"] == "seeded_replay_not_in_ring"
            # Folded, but every guard chunk is there, as it was sent, its _meta untouched.
            assert guard_chunks(restored) == guard_chunks(before)
            assert agent_text(restored) == agent_text(before)
            assert len(restored) < len(before)
            assert [f["type"] for f in restored].count("turn_complete") == 1
            ids = [f["id"] for f in restored]
            assert ids == list(range(1, len(ids) + 1)) and done["data"]["lastEventId"] == len(ids)
            kinds = [f["data"]["update"]["sessionUpdate"] for f in restored if f["type"] == "session_update"]
            # The title the first prompt gave the session comes first, as it was published.
            assert kinds.count("plan") == 1 and kinds[:3] == ["session_info_update", "user_message_chunk",
                                                               "agent_message_chunk"]
            assert restored[1]["type"] == "session_metadata_updated"  # the title again, as qwen serve's event
            assert restored[3]["data"]["update"]["content"]["text"] == "Planning. "  # two chunks, folded
            # The restored session goes on: its new events follow the restored ids.
            pid = (await client.post(f"/session/{sid}/prompt",
                                     json={"prompt": [{"type": "text", "text": "and now?"}]})).json()["promptId"]
            await settled(client, sid, pid)
            after = await collect(client, sid, headers={"Last-Event-ID": str(len(ids))}, until="replay_complete")
            assert after[0]["id"] == len(ids) + 1 and "after the restart" in agent_text(after)


async def test_a_damaged_replay_file_falls_back_to_the_transcript(tmp_path, scripted):
    with trio.fail_after(60):
        async with live_daemon(model=scripted([{"text": "noted"}], [{"text": "again"}]),
                               state_dir=tmp_path) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt",
                                     json={"prompt": [{"type": "text", "text": "remember"}]})).json()["promptId"]
            await settled(client, sid, pid)
        [replay] = list((tmp_path / "sessions").glob("*.replay.jsonl"))
        replay.write_bytes(b"{not json\n[]\n")  # a damaged line that is not the last
        async with live_daemon(model=scripted([{"text": "again"}]), state_dir=tmp_path) as (daemon, client):
            r = await client.post(f"/session/{sid}/load", json={})
            assert r.status_code == 200, r.text
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            texts = [f["data"]["update"]["content"]["text"] for f in got if f["type"] == "session_update"]
            assert texts == ["remember", "noted"]  # from the transcript
