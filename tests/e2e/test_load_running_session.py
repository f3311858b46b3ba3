"""Loading (and attaching to, and resuming) a session whose turn runs, as qwen's Web Shell 0.24.4 does it.

The shell opens a session with ``POST /session/:id/load``, then reads its stream from the answer's
``lastEventId`` with the answer's ``clientId`` (``X-Qwen-Client-Id``) and ``eventEpoch``. It shows the
session busy only when the answer says ``hasActivePrompt: true`` (qwen serve's field, on the load, attach
and resume answers): else it marks the turn done at ``replay_complete``. And it shows a permission
request only if the request is among the events it reads. Two defects, both against the real daemon on
a loopback port:

- the answers had no ``hasActivePrompt``, and the loading client's stream started after the running
  turn's events: a turn waiting for approval showed as idle, its request never shown;
- a live load published the transcript again on the session's bus: every stream already open (a running
  turn's included) got the old messages spliced in, and the bus kept them (its compacted replay too).

Now the load shows its client alone the session (the earlier turns compacted, the running turn as it
streamed, its pending request among its events) and publishes nothing (transport/load_replay.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from actors import load_script, open_daemon
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect, frames
from tests.transport.acp.harness import Client, call
from transport.acp import AcpConnection

SCRIPT = [[{"text": "Bring the blanket."}], [call("shell", command="echo hi")], [{"text": "Ran it."}]]
ALLOW = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}


def prompt(text: str) -> dict[str, Any]:
    """The body of the Web Shell's prompt."""
    return {"prompt": [{"type": "text", "text": text}], "eventDetailMode": "summary",
            "_meta": {"qwen.submittedPrompt": text}}


def shell_load(cwd: Path) -> dict[str, Any]:
    """The body of the Web Shell's load."""
    return {"cwd": str(cwd), "compactedReplayMode": "summary", "liveReplayMode": "summary", "sourceType": "default"}


async def wait_turn(client: httpx.AsyncClient, sid: str, pid: str) -> dict[str, Any]:
    with trio.fail_after(10):
        while True:
            record = (await client.get(f"/session/{sid}/turns/{pid}")).json()
            if record.get("state") in ("completed", "error", "cancelled"):
                return record
            await trio.sleep(0.01)


async def waiting_for_approval(client: httpx.AsyncClient, cwd: Path) -> tuple[str, str, str]:
    """A session whose first turn is over ("plan a picnic") and whose second waits for a shell command's
    approval; ``(session id, the waiting prompt's id, its permission request's id)``."""
    sid = (await client.post("/session", json={"cwd": str(cwd)})).json()["sessionId"]
    first = (await client.post(f"/session/{sid}/prompt", json=prompt("plan a picnic"))).json()["promptId"]
    assert (await wait_turn(client, sid, first))["state"] == "completed"
    pid = (await client.post(f"/session/{sid}/prompt", json=prompt("run echo hi"))).json()["promptId"]
    with trio.fail_after(10):
        while not (pending := (await client.get(f"/session/{sid}/status")).json()["pendingPermissions"]):
            await trio.sleep(0.01)
    return sid, pid, pending[0]


def as_the_shell_reads(loaded: dict[str, Any]) -> dict[str, str]:
    """The headers of the Web Shell's stream after a load."""
    return {"Last-Event-ID": str(loaded["lastEventId"]), "X-Qwen-Event-Epoch": loaded["eventEpoch"],
            "X-Qwen-Client-Id": loaded["clientId"]}


def texts(got: list[dict[str, Any]], kind: str) -> list[str]:
    return [f["data"]["update"]["content"]["text"] for f in got if f["type"] == "session_update"
            and f["data"]["update"].get("sessionUpdate") == kind]


def replayed_again(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in got if f["type"] == "session_update" and (f["data"]["update"].get("_meta") or {}).get("replay")]


async def test_a_load_during_a_turn_waiting_for_approval_says_so_and_shows_the_turn_and_its_request(tmp_path):
    with trio.fail_after(30):
        async with live_daemon(model=load_script({"responses": SCRIPT}), state_dir=tmp_path / "state") as (_, client):
            sid, pid, request_id = await waiting_for_approval(client, tmp_path)
            r = await client.post(f"/session/{sid}/load", json=shell_load(tmp_path))
            assert r.status_code == 200, r.text
            loaded = r.json()
            assert loaded["hasActivePrompt"] is True
            got = await collect(client, sid, headers=as_the_shell_reads(loaded), until="replay_complete")
            assert [f["type"] for f in got].count("state_resync_required") == 0
            [request] = [f for f in got if f["type"] == "permission_request"]
            assert request["data"]["requestId"] == request_id and request["promptId"] == pid
            call_id = request["data"]["toolCall"]["toolCallId"]
            assert [f for f in got if f["type"] == "session_update"
                    and f["data"]["update"].get("toolCallId") == call_id], "the running turn's tool call"
            # The conversation once: the earlier turn, then the running one.
            assert texts(got, "user_message_chunk") == ["plan a picnic", "run echo hi"]
            assert texts(got, "agent_message_chunk") == ["Bring the blanket."]
            assert not replayed_again(got)
            # While a prompt is active the earlier turn's end is left out: the shell would take it for the
            # running turn's.
            assert not [f for f in got if f["type"] in ("turn_complete", "turn_error")]
            done = got[-1]["data"]
            assert done["lastEventId"] == loaded["lastEventId"]
            assert done["replayedCount"] == len([f for f in got if "id" in f])
            assert max(f["id"] for f in got if "id" in f) <= loaded["lastEventId"]

            # The loading client answers the request it was shown; the turn goes on, on its stream.
            voted = await client.post(f"/session/{sid}/permission/{request_id}", json=ALLOW,
                                      headers={"X-Qwen-Client-Id": loaded["clientId"]})
            assert voted.status_code == 200, voted.text
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
            after = await collect(client, sid, headers={"Last-Event-ID": str(loaded["lastEventId"]),
                                                        "X-Qwen-Client-Id": loaded["clientId"]})
            assert texts(after, "agent_message_chunk") == ["Ran it."]

            # Idle, a load says so, and shows each turn with its end.
            idle = (await client.post(f"/session/{sid}/load", json=shell_load(tmp_path))).json()
            assert idle["hasActivePrompt"] is False
            got = await collect(client, sid, headers=as_the_shell_reads(idle), until="replay_complete")
            assert texts(got, "user_message_chunk") == ["plan a picnic", "run echo hi"]
            assert texts(got, "agent_message_chunk") == ["Bring the blanket.", "Ran it."]
            assert [f["type"] for f in got if f["type"] in ("turn_complete", "turn_error")] == ["turn_complete"] * 2


async def test_attach_and_resume_answers_say_whether_a_prompt_is_active(tmp_path):
    with trio.fail_after(30):
        async with live_daemon(model=load_script({"responses": SCRIPT}), state_dir=tmp_path / "state") as (_, client):
            fresh = (await client.post("/session", json={"cwd": str(tmp_path)})).json()
            assert fresh["hasActivePrompt"] is False and fresh["attached"] is False
            sid, pid, request_id = await waiting_for_approval(client, tmp_path)
            attached = (await client.post("/session", json={"sessionId": sid})).json()
            assert (attached["attached"], attached["hasActivePrompt"]) == (True, True)
            resumed = (await client.post(f"/session/{sid}/resume", json={})).json()
            assert (resumed["attached"], resumed["hasActivePrompt"], resumed["lastEventId"]) == (True, True, 0)
            # Resumed from the start, a stream shows the running turn's request too (the ring holds it).
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            assert [f["data"]["requestId"] for f in got if f["type"] == "permission_request"] == [request_id]

            assert (await client.post(f"/permission/{request_id}", json=ALLOW)).status_code == 200
            await wait_turn(client, sid, pid)
            with trio.fail_after(10):  # the turn's record is written as it settles; the work item ends after it
                while (await client.get(f"/session/{sid}/status")).json()["state"] != "idle":
                    await trio.sleep(0.01)
            assert (await client.post("/session", json={"sessionId": sid})).json()["hasActivePrompt"] is False
            assert (await client.post(f"/session/{sid}/resume", json={})).json()["hasActivePrompt"] is False


async def test_a_load_sends_nothing_to_the_streams_already_open_and_leaves_nothing_on_the_bus(tmp_path):
    with trio.fail_after(30):
        async with live_daemon(model=load_script({"responses": SCRIPT}), state_dir=tmp_path / "state") as (_, client):
            sid, pid, request_id = await waiting_for_approval(client, tmp_path)
            watcher = (await client.post("/session", json={"sessionId": sid})).json()["clientId"]
            seen: list[dict[str, Any]] = []

            async def watch() -> None:  # a tab that has the running turn open, reading on live
                async with client.stream("GET", f"/session/{sid}/events",
                                         headers={"X-Qwen-Client-Id": watcher}) as r:
                    async for frame in frames(r):
                        seen.append(frame)
                        if frame["type"] == "turn_complete":
                            return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                with trio.fail_after(10):
                    while (await client.get(f"/session/{sid}/status")).json()["subscribers"] < 1:
                        await trio.sleep(0.01)
                loaded = await client.post(f"/session/{sid}/load", json=shell_load(tmp_path))  # another tab
                assert loaded.status_code == 200, loaded.text
                assert (await client.post(f"/permission/{request_id}", json=ALLOW)).status_code == 200
            assert seen[-1]["type"] == "turn_complete" and seen[-1]["promptId"] == pid
            # The open stream got the running turn's own events, nothing of the conversation again.
            assert texts(seen, "user_message_chunk") == [] and not replayed_again(seen)
            assert texts(seen, "agent_message_chunk") == ["Ran it."]
            assert {f.get("promptId") for f in seen if f["type"] == "session_update"} == {pid}
            # Nor does the bus keep a copy: from the start, each message is there once.
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            assert texts(got, "user_message_chunk") == ["plan a picnic", "run echo hi"]
            assert texts(got, "agent_message_chunk") == ["Bring the blanket.", "Ran it."]
            assert not replayed_again(got)


async def test_a_loads_replay_goes_once_to_the_client_it_answered_and_to_no_other(tmp_path):
    with trio.fail_after(30):
        async with live_daemon(model=load_script({"responses": SCRIPT[:1]}), state_dir=tmp_path / "state") as (
                _, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("plan a picnic"))).json()["promptId"]
            await wait_turn(client, sid, pid)
            first = (await client.post(f"/session/{sid}/load", json={})).json()
            second = (await client.post(f"/session/{sid}/load", json={})).json()
            assert first["lastEventId"] == second["lastEventId"]
            other = (await client.post("/session", json={"sessionId": sid})).json()["clientId"]

            async def shown(client_id: str | None) -> list[str]:
                headers = {"Last-Event-ID": str(first["lastEventId"])}
                if client_id is not None:
                    headers["X-Qwen-Client-Id"] = client_id
                got = await collect(client, sid, headers=headers, until="replay_complete")
                assert got[-1]["data"]["replayedCount"] == len([f for f in got if "id" in f])
                return texts(got, "user_message_chunk") + texts(got, "agent_message_chunk")

            assert await shown(other) == []  # another client's stream from the same cursor: nothing replayed
            assert await shown(first["clientId"]) == ["plan a picnic", "Bring the blanket."]
            assert await shown(first["clientId"]) == []  # once: a reconnection goes on after the cursor
            assert await shown(None) == ["plan a picnic", "Bring the blanket."]  # no id: the load by its cursor
            assert await shown(None) == []
            assert await shown(second["clientId"]) == []  # taken by the stream that sent no id


async def test_a_stored_session_is_replayed_to_its_loading_client_without_a_resync(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(30):
        async with live_daemon(model=load_script({"responses": SCRIPT[:1]}), state_dir=state) as (_, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("plan a picnic"))).json()["promptId"]
            await wait_turn(client, sid, pid)
        async with live_daemon(model=load_script({"responses": []}), state_dir=state) as (_, client):
            loaded = (await client.post(f"/session/{sid}/load", json=shell_load(tmp_path))).json()
            assert (loaded["hasActivePrompt"], loaded["lastEventId"]) == (False, 0)
            got = await collect(client, sid, headers=as_the_shell_reads(loaded), until="replay_complete")
            # Shown at once: qwen's Web Shell takes a state_resync_required for lost events, and loads again.
            assert [f["type"] for f in got].count("state_resync_required") == 0
            assert texts(got, "user_message_chunk") == ["plan a picnic"]
            assert texts(got, "agent_message_chunk") == ["Bring the blanket."]
            last = max(f["id"] for f in got if "id" in f)
            assert got[-1]["data"]["lastEventId"] == last
            # Without the load's client id, a stream from 0 is what it was: the compacted replay behind a resync.
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            assert got[0]["type"] == "state_resync_required"
            assert texts(got, "user_message_chunk") == ["plan a picnic"]
            # And one from the restored turns' last id goes on after them.
            got = await collect(client, sid, headers={"Last-Event-ID": str(last)}, until="replay_complete")
            assert [f["type"] for f in got] == ["replay_complete"]


async def test_an_acp_load_of_a_live_session_streams_its_history_to_that_connection_only(tmp_path):
    async with open_daemon(model=load_script({"responses": SCRIPT[:1]}), state_dir=tmp_path / "state") as daemon:
        async with trio.open_nursery() as nursery:
            clients = []
            for _ in range(2):
                client = Client()
                client.conn = AcpConnection(daemon, nursery, client.deliver)
                await client.result("initialize", {"protocolVersion": 1})
                clients.append(client)
            owner, loader = clients
            sid = (await owner.result("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["sessionId"]
            answer = await owner.result("session/prompt", {"sessionId": sid,
                                                           "prompt": [{"type": "text", "text": "plan a picnic"}]})
            assert answer["stopReason"] == "end_turn"
            before = len(owner.updates())
            await loader.result("session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []})
            shown = [(u["sessionUpdate"], u["content"]["text"]) for u in loader.updates() if "content" in u]
            assert shown == [("user_message_chunk", "plan a picnic"), ("agent_message_chunk", "Bring the blanket.")]
            await trio.sleep(0.1)
            assert len(owner.updates()) == before  # the session's other client: nothing again
            for client in clients:
                await client.conn.close()
            nursery.cancel_scope.cancel()
