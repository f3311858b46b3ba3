"""A vote that comes too late is told how its permission request ended, not only that it is unknown."""

from __future__ import annotations

import trio

from actors import Limits, Settings, load_script
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames
from tests.e2e.test_checkpoints_e2e import call

VOTE = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}


async def asked(client, sid: str, *, besides: str = "") -> str:
    """The id of the session's first permission request other than ``besides``."""
    async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
        async for frame in frames(r):
            if frame["type"] == "permission_request" and frame["data"]["requestId"] != besides:
                return frame["data"]["requestId"]
    raise AssertionError("no permission request")


async def test_a_late_vote_is_told_how_the_request_ended(tmp_path):
    script = [[call("shell", command="echo one")], [{"text": "ran"}],
              [call("shell", command="echo two")], [{"text": "never"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script)) as (_, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "one"}]})
            first = await asked(client, sid)
            assert (await client.post(f"/session/{sid}/permission/{first}", json=VOTE)).status_code == 200
            late = await client.post(f"/session/{sid}/permission/{first}", json=VOTE)
            assert late.status_code == 404
            assert late.json()["code"] == "permission_not_found" and late.json()["path"] == "url.requestId"
            assert late.json()["error"] == f"no pending permission request {first!r}: it was answered (proceed_once)"

            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "two"}]})
            second = await asked(client, sid, besides=first)
            assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
            while (await client.get(f"/session/{sid}/status")).json()["state"] != "idle":
                await trio.sleep(0.01)
            late = await client.post(f"/session/{sid}/permission/{second}", json=VOTE)
            assert late.status_code == 404
            assert late.json()["error"].endswith("it was cancelled: the work that asked it ended")

            unknown = await client.post(f"/session/{sid}/permission/perm-nope", json=VOTE)
            assert unknown.json()["error"] == "no pending permission request 'perm-nope'"


async def test_a_vote_after_the_last_client_left_is_told_the_grace_ran_out(tmp_path):
    script = [[call("shell", command="echo one")], [{"text": "never"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), settings=Settings(limits=Limits(client_grace_seconds=0.3))) \
                as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "one"}]})
            request_id = await asked(client, sid)  # its stream closed: no client is connected now
            while (await client.get(f"/session/{sid}/status")).json()["state"] != "idle":
                await trio.sleep(0.05)  # the grace (limits.clientGraceSeconds) ran out: the turn was cancelled
            late = await client.post(f"/session/{sid}/permission/{request_id}", json=VOTE)
            assert late.status_code == 404
            assert late.json()["error"].endswith(
                "it was cancelled: no client was connected for limits.clientGraceSeconds")

