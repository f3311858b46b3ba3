"""qwen's Web Shell (0.24.4) kept in step when another client changes a session, and its rename, over real HTTP.

The real daemon on a loopback port with a scripted model; two clients. What the shell reads (from its bundle):

- ``approval_mode_changed {sessionId, previous, next, persisted, planExecutionMode?}``: its mode picker follows
  ``next``; the event is dropped unless ``sessionId``, ``previous``, ``next`` are strings and ``persisted`` a
  boolean. It ignores the ``current_mode_update`` session update Trellis published alone before.
- ``model_switched {sessionId, modelId}``: its model picker follows ``modelId``.
- Its rename is ``PATCH /session/:id/metadata`` (``PATCH /workspaces/:workspace/session/:id/metadata`` from the
  sidebar) ``{displayName}``, answered ``{sessionId, displayName}``; every tab learns of it from
  ``session_metadata_updated``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import trio

from actors import load_script
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames
from tests.transport.test_webshell_routes import wait_turn
from transport.webshell import workspace_id

Next = Callable[[str], Awaitable[dict[str, Any]]]


def shell_create(cwd: Path) -> dict[str, Any]:
    return {"cwd": str(cwd), "sessionScope": "thread", "approvalMode": "default", "sourceType": "default"}


def prompt(text: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": text}], "eventDetailMode": "summary",
            "_meta": {"qwen.submittedPrompt": text}}


@asynccontextmanager
async def other_client(client: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """A second client of the same daemon (its own connections), with the same token."""
    async with httpx.AsyncClient(base_url=client.base_url, headers=dict(client.headers), timeout=10) as other:
        yield other


@asynccontextmanager
async def watching(client: httpx.AsyncClient, sid: str) -> AsyncIterator[tuple[Next, list[dict[str, Any]]]]:
    """A live stream of ``sid`` (subscribed once this yields): ``next_of(type)`` reads on to the next frame of that
    type; every frame read is kept in the list."""
    seen: list[dict[str, Any]] = []
    async with client.stream("GET", f"/session/{sid}/events", params={"maxQueued": "1024"}) as r:
        assert r.status_code == 200
        stream = frames(r).__aiter__()

        async def next_of(kind: str) -> dict[str, Any]:
            with trio.fail_after(10):
                async for frame in stream:
                    seen.append(frame)
                    if frame["type"] == kind:
                        return frame
            raise AssertionError(f"the stream ended before a {kind} frame")

        yield next_of, seen


def the_shell_takes_a_mode_change(data: Any) -> bool:
    """The shell's own check of ``approval_mode_changed`` data (else it drops the event)."""
    return (isinstance(data, dict) and all(isinstance(data.get(k), str) and data[k] for k in
                                           ("sessionId", "previous", "next"))
            and isinstance(data.get("persisted"), bool)
            and (data.get("planExecutionMode") is None or isinstance(data["planExecutionMode"], str)))


def the_shell_takes_a_model_switch(data: Any) -> bool:
    return isinstance(data, dict) and all(isinstance(data.get(k), str) and data[k] for k in ("sessionId", "modelId"))


def the_shell_takes_metadata(data: Any) -> bool:
    return (isinstance(data, dict) and isinstance(data.get("sessionId"), str) and data["sessionId"] != ""
            and (data.get("displayName") is None or isinstance(data["displayName"], str))
            and data.get("titleSource") in (None, "manual", "auto"))


async def ring_types(daemon: Any, sid: str) -> list[str]:
    return [e.type for e in daemon.get(sid)._session.bus.ring]


# ----------------------------------------------------------------- approval mode


async def test_a_mode_another_client_sets_reaches_a_watching_client_as_qwens_approval_mode_changed(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client), other_client(client) as other:
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            async with watching(client, sid) as (next_of, _):
                r = await other.post(f"/session/{sid}/approval-mode", json={"mode": "yolo"})
                assert r.status_code == 200 and r.json() == {"mode": "yolo"}
                frame = await next_of("approval_mode_changed")
                assert frame["data"] == {"sessionId": sid, "previous": "default", "next": "yolo", "persisted": False}
                assert the_shell_takes_a_mode_change(frame["data"])
                assert "promptId" not in frame  # no turn runs: the session's event

                # The shell's plan toggle ({mode, planMode: true}) is a change to plan, from yolo.
                r = await other.post(f"/session/{sid}/approval-mode", json={"mode": "yolo", "planMode": True})
                assert r.json() == {"mode": "plan"}
                frame = await next_of("approval_mode_changed")
                assert (frame["data"]["previous"], frame["data"]["next"]) == ("yolo", "plan")

                # Whatever changes it: here the daemon's own handle (ACP's session/set_mode, a subagent's start
                # and the replay tool call it), not a route.
                assert await daemon.get(sid).set_approval_mode("auto-edit") == "auto-edit"
                frame = await next_of("approval_mode_changed")
                assert (frame["data"]["previous"], frame["data"]["next"]) == ("plan", "auto-edit")
            # Each right after its current_mode_update, which Trellis's own clients read (the first: the shell's
            # create sets the mode it names, as qwen serve publishes every mode set).
            types = await ring_types(daemon, sid)
            changes = [i for i, t in enumerate(types) if t == "approval_mode_changed"]
            assert len(changes) == 4
            ring = daemon.get(sid)._session.bus.ring
            for i in changes:
                assert ring[i - 1].data["update"]["sessionUpdate"] == "current_mode_update"


async def test_a_bad_mode_changes_nothing_and_publishes_nothing(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            r = await client.post(f"/session/{sid}/approval-mode", json={"mode": "auto"})  # qwen's classifier mode
            assert r.status_code == 400 and r.json()["path"] == "$.mode"
            assert "approval_mode_changed" not in await ring_types(daemon, sid)
            assert (await client.get(f"/session/{sid}/status")).json()["approvalMode"] == "default"


# ----------------------------------------------------------------- model


async def test_a_model_another_client_names_reaches_a_watching_client_as_qwens_model_switched(tmp_path):
    model = load_script([[{"text": "ok"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client), other_client(client) as other:
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            async with watching(client, sid) as (next_of, _):
                r = await other.post(f"/session/{sid}/model", json={"modelId": "qwen3-coder-plus"})
                assert r.status_code == 200, r.text
                frame = await next_of("model_switched")
                assert frame["data"] == {"sessionId": sid, "modelId": "qwen3-coder-plus"}
                assert the_shell_takes_a_model_switch(frame["data"]) and "promptId" not in frame

                # A prompt's /model command switches it too, within its turn.
                r = await other.post(f"/session/{sid}/prompt", json=prompt("/model qwen3-max"))
                pid = r.json()["promptId"]
                frame = await next_of("model_switched")
                assert frame["data"] == {"sessionId": sid, "modelId": "qwen3-max"} and frame["promptId"] == pid
                await wait_turn(other, sid, pid)
            assert (await client.get(f"/session/{sid}/status")).json()["modelName"] == "qwen3-max"


# ----------------------------------------------------------------- rename: PATCH .../metadata


async def test_patch_metadata_renames_as_the_title_route_does_and_another_client_sees_it(tmp_path):
    with trio.fail_after(30):
        async with live_daemon(state_dir=tmp_path / "state") as (daemon, client), other_client(client) as other:
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            async with watching(client, sid) as (next_of, seen):
                r = await other.patch(f"/session/{sid}/metadata", json={"displayName": "  Picnic plans  "})
                assert r.status_code == 200, r.text
                assert r.json() == {"sessionId": sid, "displayName": "Picnic plans"}  # stripped, as a title is
                frame = await next_of("session_metadata_updated")
                assert frame["data"] == {"sessionId": sid, "displayName": "Picnic plans", "titleSource": "manual"}
                assert the_shell_takes_metadata(frame["data"])
                # The same change as POST /session/:id/title: its session_info_update first.
                info = [f for f in seen if f["type"] == "session_update"]
                assert info[-1]["data"]["update"]["sessionUpdate"] == "session_info_update"
                assert info[-1]["data"]["update"]["title"] == "Picnic plans"

                # The sidebar's form: the workspace (its id, or its path percent-encoded) before the session.
                for workspace in (workspace_id(str(tmp_path)), quote(str(tmp_path), safe="")):
                    name = f"Picnic via {workspace[:6]}"
                    r = await other.patch(f"/workspaces/{workspace}/session/{sid}/metadata",
                                          json={"displayName": name})
                    assert r.status_code == 200, r.text
                    assert r.json() == {"sessionId": sid, "displayName": name}
                    assert (await next_of("session_metadata_updated"))["data"]["displayName"] == name

            status = (await client.get(f"/session/{sid}/status")).json()
            assert status["title"] == status["displayName"] == name
            [entry] = (await client.get(f"/workspace/{quote(str(tmp_path), safe='')}/sessions")).json()["sessions"]
            assert entry["displayName"] == name
            # Kept in the record as a title is: listed after a restart.
        async with live_daemon(state_dir=tmp_path / "state") as (_, client):
            [entry] = (await client.get(f"/workspace/{quote(str(tmp_path), safe='')}/sessions")).json()["sessions"]
            assert entry["displayName"] == name


async def test_patch_metadata_without_a_display_name_changes_nothing_and_answers_the_title(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            sid = (await client.post("/session", json={**shell_create(tmp_path)})).json()["sessionId"]
            r = await client.patch(f"/session/{sid}/metadata", json={})
            assert r.status_code == 200 and r.json() == {"sessionId": sid, "displayName": None}
            await client.post(f"/session/{sid}/title", json={"title": "Given"})
            r = await client.patch(f"/session/{sid}/metadata", json={})
            assert r.json() == {"sessionId": sid, "displayName": "Given"}
            # The same name again: answered, nothing published a second time.
            before = len([t for t in await ring_types(daemon, sid) if t == "session_metadata_updated"])
            r = await client.patch(f"/session/{sid}/metadata", json={"displayName": "Given"})
            assert r.json() == {"sessionId": sid, "displayName": "Given"}
            assert len([t for t in await ring_types(daemon, sid) if t == "session_metadata_updated"]) == before


BAD_BODIES = [
    ({"displayName": ""}, "$.displayName", "invalid_metadata"),
    ({"displayName": "   "}, "$.displayName", "invalid_metadata"),
    ({"displayName": None}, "$.displayName", "invalid_metadata"),  # it renames, it does not clear
    ({"displayName": 7}, "$.displayName", "invalid_metadata"),
    ({"displayName": "two\nlines"}, "$.displayName", "invalid_metadata"),
    ({"displayName": "x" * 201}, "$.displayName", "value_too_long"),
    ({"pr": {"number": 1, "url": "https://github.com/o/r/pull/1"}}, "$.pr", "invalid_request"),  # no pull requests
    ({"displayName": "ok", "bogus": 1}, "$.bogus", "invalid_request"),
]


async def test_bad_metadata_bodies_are_400_naming_the_field_and_change_nothing(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            await client.post(f"/session/{sid}/title", json={"title": "Kept"})
            published = await ring_types(daemon, sid)
            workspace = quote(str(tmp_path), safe="")
            for path in (f"/session/{sid}/metadata", f"/workspaces/{workspace}/session/{sid}/metadata"):
                for bad, field, code in BAD_BODIES:
                    r = await client.patch(path, json=bad)
                    assert r.status_code == 400, (path, bad, r.text)
                    assert (r.json()["path"], r.json()["code"]) == (field, code), (path, bad, r.json())
                r = await client.patch(path, content=b"{not json", headers={"Content-Type": "application/json"})
                assert r.status_code == 400 and r.json()["code"] == "invalid_json"
            # The workspace route wants something to change, as qwen serve's does.
            r = await client.patch(f"/workspaces/{workspace}/session/{sid}/metadata", json={})
            assert r.status_code == 400 and (r.json()["path"], r.json()["code"]) == ("$.displayName",
                                                                                     "invalid_metadata")
            assert (await client.get(f"/session/{sid}/status")).json()["title"] == "Kept"
            assert await ring_types(daemon, sid) == published  # nothing published

            # Unknown sessions and workspaces, and a session of another workspace.
            r = await client.patch("/session/nope/metadata", json={"displayName": "x"})
            assert r.status_code == 404 and r.json()["code"] == "session_not_found"
            r = await client.patch(f"/workspaces/0123456789abcdef/session/{sid}/metadata", json={"displayName": "x"})
            assert r.status_code == 404 and r.json()["code"] == "workspace_not_found"
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir()
            r = await client.patch(f"/workspaces/{quote(str(elsewhere), safe='')}/session/{sid}/metadata",
                                   json={"displayName": "x"})
            assert r.status_code == 404 and r.json()["code"] == "session_not_found"
            assert (await client.get(f"/session/{sid}/status")).json()["title"] == "Kept"


async def test_metadata_needs_the_token_like_every_route_and_the_capability_offers_the_rename(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            async with httpx.AsyncClient(base_url=client.base_url, timeout=10) as anonymous:
                for path in (f"/session/{sid}/metadata",
                             f"/workspaces/{quote(str(tmp_path), safe='')}/session/{sid}/metadata"):
                    r = await anonymous.patch(path, json={"displayName": "sneaky"})
                    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
            assert (await client.get(f"/session/{sid}/status")).json()["title"] is None
            # The shell's sidebar offers Rename only with this feature.
            assert "workspace_session_metadata" in (await client.get("/capabilities")).json()["features"]


async def test_the_shell_on_another_origin_may_send_its_rename_through_preflight(tmp_path):
    from tests.transport.test_webshell_routes import TOKEN, served

    origin = "http://127.0.0.1:5173"
    with trio.fail_after(30):
        async with served(origin) as client:
            auth = {"Origin": origin, "Authorization": f"Bearer {TOKEN}"}
            sid = (await client.post("/session", json=shell_create(tmp_path), headers=auth)).json()["sessionId"]
            path = f"/workspaces/{quote(str(tmp_path), safe='')}/session/{sid}/metadata"
            pre = await client.request("OPTIONS", path, headers={
                "Origin": origin, "Access-Control-Request-Method": "PATCH",
                "Access-Control-Request-Headers": "authorization, content-type"})
            assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == origin
            assert "PATCH" in [m.strip() for m in pre.headers["access-control-allow-methods"].split(",")]
            r = await client.patch(path, json={"displayName": "From the sidebar"}, headers=auth)
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
            assert r.json() == {"sessionId": sid, "displayName": "From the sidebar"}
            r = await client.patch(path, json={"displayName": "x"}, headers={"Origin": origin})  # no token
            assert r.status_code == 401
