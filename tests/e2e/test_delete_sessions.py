"""Deleting sessions for good (``POST /sessions/delete``, qwen's Web Shell's route) against the real daemon: a
stored one and a live one, what each leaves on disk, and the checkpoint objects no other session reaches."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import trio

from actors import load_script
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames
from tests.e2e.test_checkpoints_e2e import call, prompt_and_wait


def session_files(state: Path, sid: str) -> list[str]:
    """Every file of the state directory that names the session. ``os.walk`` passes over a directory that goes
    while it walks (a closed session's home, renamed and then removed in the background; ``rglob`` raised)."""
    found = []
    for top, dirs, files in os.walk(state):
        found += [os.path.relpath(os.path.join(top, name), state) for name in [*dirs, *files] if sid in name]
    return sorted(found)


def object_path(state: Path, content: bytes) -> Path:
    sha = hashlib.sha256(content).hexdigest()
    return state / "checkpoints" / "objects" / sha[:2] / sha[2:]


def age_every_object(state: Path, seconds: float) -> None:
    """As if every checkpoint object had last been written or used ``seconds`` ago."""
    then = time.time() - seconds
    for path in (state / "checkpoints" / "objects").rglob("*"):
        if path.is_file():
            os.utime(path, (then, then))


async def test_a_stored_session_is_deleted_with_what_only_it_reached_and_the_rest_stays(tmp_path):
    state, work_a, work_b = tmp_path / "state", tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    script = [[call("write_file", path="a.txt", content="only in A\n"),
               call("write_file", path="shared.txt", content="in both\n")], [{"text": "A wrote"}],
              [call("write_file", path="shared.txt", content="in both\n")], [{"text": "B wrote"}],
              [call("write_file", path="shared.txt", content="B again\n")], [{"text": "B changed it"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=state) as (daemon, client):
            a = (await client.post("/session", json={"cwd": str(work_a), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, a, "write")
            b = (await client.post("/session", json={"cwd": str(work_b), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, b, "write")
            await prompt_and_wait(client, b, "change")
            assert (await client.delete(f"/session/{a}")).status_code == 204
            listed = {s["sessionId"]: s for s in (await client.get("/session")).json()["sessions"]}
            assert listed[a]["restorable"] and not listed[a]["live"]
            assert session_files(state, a)  # its transcript, journal, record and checkpoint log
            only_a, shared = object_path(state, b"only in A\n"), object_path(state, b"in both\n")
            assert only_a.exists() and shared.exists()

            answer = await client.post("/sessions/delete", json={"sessionIds": [a, "no-such", "../up", a]})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["removed"] == [a] and body["notFound"] == ["no-such"]
            assert [(e["sessionId"], e["code"]) for e in body["errors"]] == [("../up", "invalid_session_id")]
            assert body["errors"][0]["error"] == body["errors"][0]["message"]

            assert session_files(state, a) == []
            assert a not in {s["sessionId"] for s in (await client.get("/session")).json()["sessions"]}
            assert (await client.get(f"/session/{a}/transcript")).status_code == 404
            again = await client.post("/sessions/delete", json={"sessionIds": [a]})
            assert again.json() == {"removed": [], "notFound": [a], "errors": []}

            # The sweep spares what was used within its grace (a walk may hold it), then deletes what no log
            # reaches: A's own file; the content B's first turn still reaches stays.
            await daemon.sweep_checkpoints()
            assert only_a.exists()
            age_every_object(state, 7200)
            deleted, freed = await daemon.sweep_checkpoints()
            assert deleted >= 1 and freed >= len(b"only in A\n")
            assert not only_a.exists() and shared.exists()

            # B rewinds its files with what was kept.
            r = await client.post(f"/session/{b}/rewind", json={"turn": 1, "files": True})
            assert r.status_code == 200, r.text
            assert (work_b / "shared.txt").read_text() == "in both\n"

            # The id is free: a session made with it starts empty.
            made = (await client.post("/session", json={"sessionId": a})).json()
            assert made["sessionId"] == a
            assert (await client.get(f"/session/{a}/status")).json()["historyLength"] == 0


async def test_a_live_session_is_closed_first_its_work_ending_then_deleted(tmp_path):
    state = tmp_path / "state"
    script = [[{"text": "working"}, {"sleep": 3600}], [{"text": "never"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=state) as (_, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            running = (await client.post(f"/session/{sid}/prompt",
                                         json={"prompt": [{"type": "text", "text": "go"}]})).json()["promptId"]
            queued = (await client.post(f"/session/{sid}/prompt",
                                        json={"prompt": [{"type": "text", "text": "later"}]})).json()["promptId"]
            while (await client.get(f"/session/{sid}/status")).json()["state"] != "running":
                await trio.sleep(0.01)
            seen: list[tuple[str, dict]] = []

            async def watch(task_status=trio.TASK_STATUS_IGNORED) -> None:
                async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
                    task_status.started()
                    async for frame in frames(r):
                        seen.append((frame["type"], frame["data"]))

            async with trio.open_nursery() as nursery:
                await nursery.start(watch)
                answer = await client.post("/sessions/delete", json={"sessionIds": [sid]})
                assert answer.json() == {"removed": [sid], "notFound": [], "errors": []}
                with trio.fail_after(10):
                    while not any(kind == "session_closed" for kind, _ in seen):
                        await trio.sleep(0.01)
                nursery.cancel_scope.cancel()

            ends = {d.get("promptId"): (kind, d.get("stopReason") or d.get("state")) for kind, d in seen
                    if kind in ("turn_complete", "turn_error", "pending_prompt_completed")}
            assert ends[running] == ("turn_complete", "cancelled")
            assert ends[queued] == ("turn_complete", "cancelled")  # it never ran, and ends once all the same
            assert session_files(state, sid) == []
            assert (await client.get(f"/session/{sid}/status")).status_code == 404
            assert sid not in {s["sessionId"] for s in (await client.get("/session")).json()["sessions"]}


async def test_a_daemon_without_a_state_directory_refuses_and_a_bad_body_names_its_field(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (_, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            refused = await client.post("/sessions/delete", json={"sessionIds": [sid]})
            assert refused.status_code == 409 and refused.json()["code"] == "deletion_unavailable"
            assert (await client.get(f"/session/{sid}/status")).status_code == 200  # nothing changed
            bad = await client.post("/sessions/delete", json={"sessionIds": "s1"})
            assert bad.status_code == 400 and bad.json()["path"] == "$.sessionIds"
            many = await client.post("/sessions/delete", json={"sessionIds": [f"s{i}" for i in range(501)]})
            assert many.status_code == 400 and many.json()["code"] == "too_many_sessions_named"
