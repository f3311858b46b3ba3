"""Lifecycle operations over REST: rewind, fork, cwd change, model, approval mode — and their guard effects."""

from __future__ import annotations

import trio

from actors import Settings, load_script
from tests.conftest import live_daemon

TODOS = {"todos": [{"id": "1", "content": "a", "status": "pending"}]}


def prompt(text: str) -> dict:
    return {"prompt": [{"type": "text", "text": text}]}


async def settle(client, sid, pid) -> dict:
    with trio.fail_after(10):
        while True:
            r = (await client.get(f"/session/{sid}/turns/{pid}")).json()
            if r["state"] not in ("queued", "running"):
                return r
            await trio.sleep(0.01)


async def guard_of(client, sid) -> dict:
    return (await client.get(f"/session/{sid}/status")).json()["todoStopGuard"]


async def test_rewind_fork_cwd_and_model(tmp_path):
    model = load_script({"responses": [[{"text": "one"}], [{"text": "two"}], [{"text": "three"}]], "then": "demo"})
    with trio.fail_after(20):
        async with live_daemon(model=model, state_dir=tmp_path / "state") as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            for text in ("first", "second"):
                await settle(client, sid, (await client.post(f"/session/{sid}/prompt", json=prompt(text))).json()["promptId"])
            assert (await client.get(f"/session/{sid}/status")).json()["historyLength"] == 4

            bad = await client.post(f"/session/{sid}/rewind", json={"turn": 5})
            assert bad.status_code == 400 and bad.json()["path"] == "$.turn"
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 1})
            assert r.json() == {"historyLength": 2}
            transcript = (await client.get(f"/session/{sid}/transcript")).json()["entries"]
            assert [e["message"]["content"] for e in transcript] == ["first", "one"]

            forked = (await client.post(f"/session/{sid}/fork", json={})).json()
            assert forked["sessionId"] != sid and forked["workspaceCwd"] == (await client.get(f"/session/{sid}/status")).json()["workspaceCwd"]
            fork_transcript = (await client.get(f"/session/{forked['sessionId']}/transcript")).json()["entries"]
            assert [e["message"]["content"] for e in fork_transcript] == ["first", "one"]

            (tmp_path / "elsewhere").mkdir()
            r = await client.post(f"/session/{sid}/cwd", json={"cwd": str(tmp_path / "elsewhere")})
            assert r.json() == {"workspaceCwd": str(tmp_path / "elsewhere")}
            bad = await client.post(f"/session/{sid}/cwd", json={"cwd": str(tmp_path / "missing")})
            assert bad.status_code == 400 and bad.json()["code"] == "invalid_cwd"
            assert (await client.get(f"/session/{sid}/status")).json()["workspaceCwd"] == str(tmp_path / "elsewhere")

            assert (await client.post(f"/session/{sid}/model", json={"model": "bigger"})).json() == {"model": "bigger"}
            await settle(client, sid, (await client.post(f"/session/{sid}/prompt", json=prompt("third"))).json()["promptId"])
            assert model.calls[-1].model == "bigger"


async def test_lifecycle_events_clear_guard_trust_and_model_changes_do_not(tmp_path):
    write = [{"tool_call": {"name": "todo_write", "arguments": TODOS}}]
    stop = [{"text": "stop"}]
    model = load_script({"responses": [write, {"delay": 0.3, "steps": stop}, write, {"delay": 0.3, "steps": stop}]})
    settings = Settings(todo_stop_guard=True)
    with trio.fail_after(20):
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("go"))).json()["promptId"]
            with trio.fail_after(5):
                while not (await guard_of(client, sid))["armed"]:
                    await trio.sleep(0.01)
            # A model change keeps the armed chain; a cwd change while the turn runs clears it.
            await client.post(f"/session/{sid}/model", json={"model": "other"})
            assert (await guard_of(client, sid))["armed"]
            await client.post(f"/session/{sid}/cwd", json={"cwd": str(tmp_path)})
            assert not (await guard_of(client, sid))["armed"]
            await settle(client, sid, pid)
            assert len(model.calls) == 2  # no guard continuation after the trust-clearing event

            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("again"))).json()["promptId"]
            with trio.fail_after(5):
                while not (await guard_of(client, sid))["armed"]:
                    await trio.sleep(0.01)
            await client.post(f"/session/{sid}/approval-mode", json={"mode": "plan"})
            assert not (await guard_of(client, sid))["armed"]
            await settle(client, sid, pid)
            assert len(model.calls) == 4
