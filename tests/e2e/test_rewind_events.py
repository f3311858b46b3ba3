"""A rewind reaches every client: ``conversation_rewound`` and ``rewind_undone`` on the stream and in its replay.

The client that rewinds hears its answer; every other client (another page, a terminal, a page opened later and
replaying the ring) learns from these events that turns left the conversation, or came back.
"""

from __future__ import annotations

from typing import Any

import trio

from actors import load_script
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames
from tests.e2e.test_checkpoints_e2e import call, prompt_and_wait
from tests.e2e.test_mcp_servers import events as ring  # as a client opened now replays them

REWIND_EVENTS = ("conversation_rewound", "rewind_undone")


def rewind_frames(events: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(e["type"], e["data"]) for e in events if e["type"] in REWIND_EVENTS]


async def test_a_rewind_reaches_a_client_that_did_not_ask_and_the_replay_keeps_it(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with trio.fail_after(60):
        async with live_daemon(model=load_script([[{"text": "one"}], [{"text": "two"}], [{"text": "three"}]])) \
                as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work)})).json()["sessionId"]
            for text in ("one", "two", "three"):
                await prompt_and_wait(client, sid, text)
            last = (await client.get(f"/session/{sid}/status")).json()["lastEventId"]

            seen: list[dict[str, Any]] = []
            subscribed = trio.Event()
            heard = trio.Event()

            async def other_client() -> None:
                # Subscribed live from the last event: it sees only what comes now.
                async with client.stream("GET", f"/session/{sid}/events",
                                         headers={"Last-Event-ID": str(last)}) as r:
                    async for frame in frames(r):
                        if frame["type"] == "replay_complete":
                            subscribed.set()
                        seen.append(frame)
                        if frame["type"] == "conversation_rewound":
                            heard.set()
                            return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(other_client)
                await subscribed.wait()
                refused = await client.post(f"/session/{sid}/rewind", json={"turn": 7})
                assert refused.status_code == 400  # a refused rewind drops nothing, and says nothing
                r = await client.post(f"/session/{sid}/rewind", json={"turn": 1})
                assert r.json() == {"historyLength": 2}
                await heard.wait()

            assert rewind_frames(seen) == [("conversation_rewound",
                                            {"sessionId": sid, "turn": 1, "historyLength": 2, "undoId": None})]
            assert isinstance(seen[-1]["id"], int) and seen[-1]["id"] > last
            # A client opened later replays the turns and then their rewind, in the order they happened.
            events = await ring(client, sid)
            assert rewind_frames(events) == rewind_frames(seen)
            kinds = [e["type"] for e in events]
            assert kinds.index("conversation_rewound") > max(i for i, k in enumerate(kinds) if k == "turn_complete")


async def test_a_rewind_with_the_files_and_its_undo_are_events(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("original\n")
    script = [[call("write_file", path="notes.txt", content="by the model\n")], [{"text": "wrote"}],
              [{"text": "talked"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=tmp_path / "state") as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, sid, "write")
            await prompt_and_wait(client, sid, "talk")
            assert len((await client.get(f"/session/{sid}/checkpoints")).json()["checkpoints"]) == 1

            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 200, r.text
            rewound = r.json()
            assert (work / "notes.txt").read_text() == "original\n"
            missing = await client.post(f"/session/{sid}/checkpoints/undo/nope", json={})
            assert missing.status_code == 404  # a refused undo says nothing either
            r = await client.post(f"/session/{sid}/checkpoints/undo/{rewound['undoId']}", json={})
            assert r.status_code == 200, r.text
            undone = r.json()
            assert (work / "notes.txt").read_text() == "by the model\n"

            assert rewind_frames(await ring(client, sid)) == [
                ("conversation_rewound", {"sessionId": sid, "turn": 0, "historyLength": 0,
                                          "undoId": rewound["undoId"]}),
                ("rewind_undone", {"sessionId": sid, "undoId": rewound["undoId"],
                                   "historyLength": undone["historyLength"], "newUndoId": undone["undoId"]}),
            ]
            assert undone["historyLength"] == 6 and undone["undoId"] != rewound["undoId"]
