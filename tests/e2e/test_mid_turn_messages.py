"""Mid-turn messages over REST, as qwen's Web Shell uses them: listed while they wait, taken back before a turn
takes them, and where the last ones went (into a turn, or run as a prompt of their own)."""

from __future__ import annotations

import trio

from actors import load_script
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames


async def texts(client, sid: str, *, until: str) -> list[tuple[str, str]]:
    """The session's user and agent texts, read from its stream until the agent says ``until``."""
    out = []
    async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
        async for frame in frames(r):
            update = frame["data"].get("update") or {} if frame["type"] == "session_update" else {}
            if update.get("sessionUpdate") in ("user_message_chunk", "agent_message_chunk"):
                out.append((update["sessionUpdate"], update["content"]["text"]))
                if out[-1] == ("agent_message_chunk", until):
                    return out
    raise AssertionError("the stream ended first")


async def test_waiting_messages_are_listed_taken_back_and_the_rest_run_as_a_prompt(tmp_path):
    script = [[{"text": "working"}, {"sleep": 3600}], [{"text": "took the rest"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script)) as (_, client):
            caps = (await client.get("/capabilities")).json()["features"]
            assert {"session_mid_turn_message_query", "session_mid_turn_message_mutation"} <= set(caps)
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})
            while (await client.get(f"/session/{sid}/status")).json()["state"] != "running":
                await trio.sleep(0.01)
            for message_id, text in (("webui_1", "also this"), ("webui_2", "never mind")):
                posted = await client.post(f"/session/{sid}/mid-turn-message",
                                           json={"message": text, "messageId": message_id})
                assert posted.json() == {"accepted": True, "messageId": message_id}

            listed = (await client.get(f"/session/{sid}/mid-turn-messages")).json()
            assert [m["messageId"] for m in listed["messages"]] == ["webui_1", "webui_2"]
            assert listed["messages"][1] == {"messageId": "webui_2", "text": "never mind"}  # qwen's form
            assert (await client.delete(f"/session/{sid}/mid-turn-messages/webui_2")).json() == {"removed": True}
            assert (await client.delete(f"/session/{sid}/mid-turn-messages/webui_2")).json() == {"removed": False}
            assert (await client.delete(f"/session/{sid}/mid-turn-messages/nope")).json() == {"removed": False}

            assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
            while True:  # no tool boundary took it: it runs as a prompt of its own once the turn ends
                listed = (await client.get(f"/session/{sid}/mid-turn-messages")).json()
                if listed["promotedMessageIds"]:
                    break
                await trio.sleep(0.01)
            assert listed == {"messages": [], "settledMessageIds": [], "promotedMessageIds": ["webui_1"]}
            said = await texts(client, sid, until="took the rest")
            assert said[-2:] == [("user_message_chunk", "also this"), ("agent_message_chunk", "took the rest")]
            assert "never mind" not in repr(said)

            missing = await client.get("/session/no-such/mid-turn-messages")
            assert missing.status_code == 404
