"""qwen's Web Shell (0.24.4) renames a session that is not live: on disk, as qwen serve does.

The shell's sidebar lists stored sessions beside live ones and offers *Rename* on each:
``PATCH /workspaces/:workspace/session/:id/metadata {displayName}`` (``PATCH /session/:id/metadata`` from the
Session Overview), answered ``{sessionId, displayName}``. A stored session (closed, or from before a restart)
is renamed in its record: its lists show the new title, a restart keeps it, and restoring the session starts
with it. The real daemon on a loopback port with a scripted model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio

from actors import load_script
from tests.conftest import live_daemon
from tests.e2e.test_webshell_session_changes import BAD_BODIES
from tests.transport.test_webshell_routes import wait_turn
from transport.webshell import workspace_id


def shell_create(cwd: Path) -> dict[str, Any]:
    return {"cwd": str(cwd), "sessionScope": "thread", "approvalMode": "default", "sourceType": "default"}


def prompt(text: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": text}], "eventDetailMode": "summary",
            "_meta": {"qwen.submittedPrompt": text}}


async def stored_session(client: Any, cwd: Path, first_prompt: str = "plan a picnic") -> str:
    """A session that answered one prompt, then closed (``DELETE /session/:id``): on disk, not live."""
    sid = (await client.post("/session", json=shell_create(cwd))).json()["sessionId"]
    r = await client.post(f"/session/{sid}/prompt", json=prompt(first_prompt))
    assert (await wait_turn(client, sid, r.json()["promptId"]))["state"] == "completed"
    assert (await client.delete(f"/session/{sid}")).status_code in (200, 204)
    assert (await client.get(f"/session/{sid}/status")).status_code == 404  # not live any more
    return sid


async def listed(client: Any, cwd: Path, sid: str) -> dict[str, Any]:
    """The session as the shell's sidebar lists it, and as ``GET /session`` does."""
    [entry] = [s for s in (await client.get(f"/workspace/{quote(str(cwd), safe='')}/sessions")).json()["sessions"]
               if s["sessionId"] == sid]
    [plain] = [s for s in (await client.get("/session")).json()["sessions"] if s["sessionId"] == sid]
    assert plain["live"] is False and plain["title"] == entry.get("displayName"), (plain, entry)
    return entry


async def test_a_closed_session_is_renamed_on_disk_listed_so_and_kept_across_a_restart(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(60):
        async with live_daemon(model=load_script([[{"text": "Bring the blanket."}]]), state_dir=state) as (_, client):
            sid = await stored_session(client, tmp_path)
            assert (await listed(client, tmp_path, sid))["displayName"] == "plan a picnic"  # its first prompt
            before = (await listed(client, tmp_path, sid))["updatedAt"]

            r = await client.patch(f"/session/{sid}/metadata", json={"displayName": "  Picnic plans  "})
            assert r.status_code == 200, r.text
            assert r.json() == {"sessionId": sid, "displayName": "Picnic plans"}  # stripped, as a title is
            entry = await listed(client, tmp_path, sid)
            assert entry["displayName"] == "Picnic plans" and entry["updatedAt"] >= before
            assert (await client.get(f"/session/{sid}/status")).status_code == 404  # renamed, not restored

            # The sidebar's form: the workspace (its id, or its path percent-encoded) before the session.
            for workspace in (workspace_id(str(tmp_path)), quote(str(tmp_path), safe="")):
                name = f"Picnic via {workspace[:6]}"
                r = await client.patch(f"/workspaces/{workspace}/session/{sid}/metadata",
                                       json={"displayName": name})
                assert r.status_code == 200, r.text
                assert r.json() == {"sessionId": sid, "displayName": name}
                assert (await listed(client, tmp_path, sid))["displayName"] == name
            # Without a displayName the plain route answers the title and changes nothing.
            r = await client.patch(f"/session/{sid}/metadata", json={})
            assert r.status_code == 200 and r.json() == {"sessionId": sid, "displayName": name}

        async with live_daemon(state_dir=state) as (_, client):  # a restart: the title is on disk
            assert (await listed(client, tmp_path, sid))["displayName"] == name
            r = await client.post(f"/session/{sid}/load", json={"cwd": str(tmp_path)})
            assert r.status_code == 200, r.text
            status = (await client.get(f"/session/{sid}/status")).json()  # restored with it
            assert status["title"] == status["displayName"] == name


async def test_a_stored_session_from_before_a_restart_is_renamed_and_its_restore_starts_with_the_name(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(60):
        async with live_daemon(model=load_script([[{"text": "ok"}]]), state_dir=state) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            r = await client.post(f"/session/{sid}/prompt", json=prompt("tidy the shed"))
            await wait_turn(client, sid, r.json()["promptId"])
        async with live_daemon(state_dir=state) as (_, client):  # stored, never closed: the daemon stopped
            r = await client.patch(f"/workspaces/{quote(str(tmp_path), safe='')}/session/{sid}/metadata",
                                   json={"displayName": "Shed"})
            assert r.status_code == 200 and r.json() == {"sessionId": sid, "displayName": "Shed"}, r.text
            assert (await listed(client, tmp_path, sid))["displayName"] == "Shed"
            r = await client.post(f"/session/{sid}/load", json={"cwd": str(tmp_path)})
            assert r.status_code == 200, r.text
            assert (await client.get(f"/session/{sid}/status")).json()["title"] == "Shed"
            # Live now: renamed as a live session is (its stream is told), and the record keeps that too.
            r = await client.patch(f"/session/{sid}/metadata", json={"displayName": "Shed, tidied"})
            assert r.json() == {"sessionId": sid, "displayName": "Shed, tidied"}
        async with live_daemon(state_dir=state) as (_, client):
            assert (await listed(client, tmp_path, sid))["displayName"] == "Shed, tidied"


async def test_bad_bodies_for_a_stored_session_are_400_naming_the_field_and_change_nothing(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(60):
        async with live_daemon(model=load_script([[{"text": "ok"}]]), state_dir=state) as (_, client):
            sid = await stored_session(client, tmp_path)
            assert (await client.patch(f"/session/{sid}/metadata", json={"displayName": "Kept"})).status_code == 200
            workspace = quote(str(tmp_path), safe="")
            for path in (f"/session/{sid}/metadata", f"/workspaces/{workspace}/session/{sid}/metadata"):
                for bad, field, code in BAD_BODIES:
                    r = await client.patch(path, json=bad)
                    assert r.status_code == 400, (path, bad, r.text)
                    assert (r.json()["path"], r.json()["code"]) == (field, code), (path, bad, r.json())
                r = await client.patch(path, content=b"{not json", headers={"Content-Type": "application/json"})
                assert r.status_code == 400 and r.json()["code"] == "invalid_json"
            r = await client.patch(f"/workspaces/{workspace}/session/{sid}/metadata", json={})
            assert r.status_code == 400 and (r.json()["path"], r.json()["code"]) == ("$.displayName",
                                                                                     "invalid_metadata")
            assert (await listed(client, tmp_path, sid))["displayName"] == "Kept"

            # Unknown sessions and workspaces, and a stored session of another workspace: 404, nothing changed.
            for path in ("/session/nope/metadata", f"/workspaces/{workspace}/session/nope/metadata",
                         "/session/..nope/metadata"):
                r = await client.patch(path, json={"displayName": "x"})
                assert r.status_code == 404 and r.json()["code"] == "session_not_found", (path, r.text)
            r = await client.patch(f"/workspaces/0123456789abcdef/session/{sid}/metadata", json={"displayName": "x"})
            assert r.status_code == 404 and r.json()["code"] == "workspace_not_found"
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir()
            r = await client.patch(f"/workspaces/{quote(str(elsewhere), safe='')}/session/{sid}/metadata",
                                   json={"displayName": "x"})
            assert r.status_code == 404 and r.json()["code"] == "session_not_found"
            # Without the token, refused as every route is.
            r = await client.patch(f"/session/{sid}/metadata", json={"displayName": "x"},
                                   headers={"Authorization": ""})
            assert r.status_code == 401
            assert (await listed(client, tmp_path, sid))["displayName"] == "Kept"
            assert (await client.get(f"/session/{sid}/status")).status_code == 404  # still not live


async def test_without_a_state_directory_nothing_is_stored_so_an_unknown_id_stays_404(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            assert (await client.delete(f"/session/{sid}")).status_code in (200, 204)
            r = await client.patch(f"/session/{sid}/metadata", json={"displayName": "x"})
            assert r.status_code == 404 and r.json()["code"] == "session_not_found"
