"""Permission round trips over REST/SSE for shell commands, by approval mode."""

from __future__ import annotations

import trio

from actors import Limits, Settings, load_script
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect, frames


def call(name: str, **arguments) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


def shell_script(command: str):
    return load_script({"responses": [[call("shell", command=command)], [{"text": "after the shell"}]]})


async def wait_turn(client, sid, pid, states=("completed", "error", "cancelled")) -> dict:
    with trio.fail_after(10):
        while True:
            r = await client.get(f"/session/{sid}/turns/{pid}")
            if r.status_code == 200 and r.json()["state"] in states:
                return r.json()
            await trio.sleep(0.01)


async def next_permission_request(client, sid) -> dict:
    got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="permission_request")
    return got[-1]["data"]


async def test_default_mode_waits_for_the_vote_and_runs_on_approval(tmp_path):
    model = shell_script("echo approved > out.txt")
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})).json()["promptId"]
            request = await next_permission_request(client, sid)
            assert request["toolCall"]["title"] == "echo approved > out.txt"
            assert [o["kind"] for o in request["options"]] == ["allow_once", "allow_always", "reject_once",
                                                               "reject_always"]
            await trio.sleep(0.2)
            assert not (tmp_path / "out.txt").exists()  # nothing runs before the vote
            assert (await client.get(f"/session/{sid}/status")).json()["pendingPermissions"] == [request["requestId"]]
            vote = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
            r = await client.post(f"/session/{sid}/permission/{request['requestId']}", json=vote)
            assert r.status_code == 200
            late = await client.post(f"/session/{sid}/permission/{request['requestId']}", json=vote)
            assert late.status_code == 404 and late.json()["code"] == "permission_not_found"
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
    assert (tmp_path / "out.txt").read_text() == "approved\n"
    assert "[exit code 0]" in model.calls[1].messages[-1].content


async def test_a_denied_command_is_refused_and_the_turn_goes_on(tmp_path):
    model = shell_script("echo denied > out.txt")
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})).json()["promptId"]
            request = await next_permission_request(client, sid)
            bad = await client.post(f"/permission/{request['requestId']}",
                                    json={"outcome": {"outcome": "selected", "optionId": "nope"}})
            assert bad.status_code == 400 and bad.json()["path"] == "$.outcome.optionId"
            r = await client.post(f"/permission/{request['requestId']}",
                                  json={"outcome": {"outcome": "selected", "optionId": "cancel"}})
            assert r.status_code == 200
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            resolved = [f["data"] for f in got if f["type"] == "permission_resolved"]
            assert resolved == [{"requestId": request["requestId"], "sessionId": sid,
                                 "outcome": {"outcome": "selected", "optionId": "cancel"}}]
    assert not (tmp_path / "out.txt").exists()
    assert "denied" in model.calls[1].messages[-1].content


async def test_a_client_that_goes_away_cancels_the_request_never_approves_it(tmp_path):
    model = shell_script("echo never > out.txt")
    settings = Settings(limits=Limits(client_grace_seconds=0.3))
    with trio.fail_after(20):
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            async with client.stream("GET", f"/session/{sid}/events") as stream:
                pid = (await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})).json()["promptId"]
                async for frame in frames(stream):
                    if frame["type"] == "permission_request":
                        break
            # The only subscriber disconnected with the request pending; no one came back in time.
            record = await wait_turn(client, sid, pid)
            assert record["stopReason"] == "cancelled"
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            resolved = [f["data"]["outcome"] for f in got if f["type"] == "permission_resolved"]
            assert resolved == [{"outcome": "cancelled"}]
    assert not (tmp_path / "out.txt").exists()
    assert len(model.calls) == 1


async def test_plan_mode_refuses_and_yolo_runs_without_asking(tmp_path):
    model = load_script({"responses": [
        [call("shell", command="echo plan > plan.txt")], [{"text": "refused"}],
        [call("shell", command="echo yolo > yolo.txt")], [{"text": "ran"}],
    ]})
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            bad = await client.post(f"/session/{sid}/approval-mode", json={"mode": "sometimes"})
            assert bad.status_code == 400 and bad.json()["path"] == "$.mode"
            for mode, text in (("plan", "first"), ("yolo", "second")):
                assert (await client.post(f"/session/{sid}/approval-mode", json={"mode": mode})).json() == {"mode": mode}
                pid = (await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})).json()["promptId"]
                await wait_turn(client, sid, pid)
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            assert not [f for f in got if f["type"] == "permission_request"]
    assert not (tmp_path / "plan.txt").exists() and (tmp_path / "yolo.txt").exists()
    assert "plan mode" in model.calls[1].messages[-1].content


async def test_reject_always_refuses_later_calls_of_that_kind_without_asking(tmp_path):
    model = load_script({"responses": [
        [call("shell", command="echo one > one.txt")], [call("shell", command="echo two > two.txt")],
        [{"text": "gave up"}],
    ]})
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})).json()["promptId"]
            request = await next_permission_request(client, sid)
            r = await client.post(f"/permission/{request['requestId']}",
                                  json={"outcome": {"outcome": "selected", "optionId": "reject_always"}})
            assert r.status_code == 200
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            assert len([f for f in got if f["type"] == "permission_request"]) == 1  # the second call never asked
    assert not (tmp_path / "one.txt").exists() and not (tmp_path / "two.txt").exists()
    assert "denied such calls" in model.calls[2].messages[-1].content
