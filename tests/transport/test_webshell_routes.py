"""The routes and fields qwen's Web Shell needs beyond the core (transport/webshell.py), over real HTTP.

Each request body here is the one the Web Shell 0.24.4 sends (recorded against qwen serve, docs/webshell.md).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import trio

from actors import CountingIds, load_script, open_daemon
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect
from transport import serve
from transport.webshell import git_branch, workspace_id

TOKEN = "webshell-test-token"


def prompt(text: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": text}], "eventDetailMode": "summary",
            "_meta": {"qwen.submittedPrompt": text}}


def shell_create(cwd: Path | str, **extra: Any) -> dict[str, Any]:
    """The body of the Web Shell's POST /session."""
    return {"cwd": str(cwd), "sessionScope": "thread", "approvalMode": "default", "sourceType": "default", **extra}


def enc(path: Path | str) -> str:
    return quote(str(path), safe="")


async def wait_turn(client: httpx.AsyncClient, sid: str, pid: str) -> dict[str, Any]:
    with trio.fail_after(10):
        while True:
            r = await client.get(f"/session/{sid}/turns/{pid}")
            if r.status_code == 200 and r.json()["state"] in ("completed", "error", "cancelled"):
                return r.json()
            await trio.sleep(0.01)


async def turn(client: httpx.AsyncClient, sid: str, text: str, headers: dict[str, str] | None = None) -> str:
    r = await client.post(f"/session/{sid}/prompt", json=prompt(text), headers=headers or {})
    assert r.status_code == 202, r.text
    await wait_turn(client, sid, r.json()["promptId"])
    return r.json()["promptId"]


def refused(r: httpx.Response, status: int, path: str, code: str = "invalid_request") -> bool:
    body = r.json()
    return r.status_code == status and body["path"] == path and body["code"] == code and body["error"]


# ----------------------------------------------------------------- capabilities and the shell's bodies


async def test_capabilities_carry_what_qwens_sdk_requires_beside_trellis_own_fields(tmp_path):
    async with live_daemon() as (daemon, client):
        await client.post("/session", json=shell_create(tmp_path))
        caps = (await client.get("/capabilities")).json()
        assert caps["v"] == 1 and caps["protocolVersions"] == {"current": "v1", "supported": ["v1"]}
        assert caps["mode"] == "trellis" and caps["modelServices"] == []
        primary = os.path.realpath(daemon.runtime.workspace)
        assert caps["workspaceCwd"] == primary
        assert caps["workspaces"][0] == {"id": workspace_id(primary), "cwd": primary, "primary": True,
                                         "trusted": True, "removable": False}
        # A directory a session works in is a workspace too, so the shell lists its sessions.
        assert [w["cwd"] for w in caps["workspaces"][1:]] == [str(tmp_path)]
        assert not caps["workspaces"][1]["primary"]
        assert "session_source_metadata" in caps["features"] and "todo_stop_guard" in caps["features"]
        assert caps["protocolVersion"] == 1 and caps["model"] == "scripted" and "limits" in caps


async def test_the_shells_create_body_is_taken_and_its_approval_mode_set(tmp_path):
    async with live_daemon() as (daemon, client):
        r = await client.post("/session", json=shell_create(tmp_path, approvalMode="yolo"))
        assert r.status_code == 200 and r.json()["workspaceCwd"] == str(tmp_path)
        assert (await client.get(f"/session/{r.json()['sessionId']}/status")).json()["approvalMode"] == "yolo"
        # Values naming qwen features Trellis does not have are refused, naming the field.
        for field, value in (("sessionScope", "single"), ("sourceType", "channel"), ("approvalMode", "auto"),
                             ("sessionScope", 3)):
            r = await client.post("/session", json=shell_create(tmp_path, **{field: value}))
            assert refused(r, 400, f"$.{field}"), r.text
        assert "must be one of ['thread']" in (await client.post(
            "/session", json=shell_create(tmp_path, sessionScope="single"))).json()["error"]
        assert len(daemon.sessions()) == 1


async def test_prompt_and_mid_turn_bodies_take_the_event_detail_mode(tmp_path):
    async with live_daemon() as (_, client):
        sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
        assert (await client.post(f"/session/{sid}/prompt", json=prompt("hi"))).status_code == 202
        bad = {**prompt("hi"), "eventDetailMode": "verbose"}
        assert refused(await client.post(f"/session/{sid}/prompt", json=bad), 400, "$.eventDetailMode")
        r = await client.post(f"/session/{sid}/mid-turn-message", json={"message": "also", "eventDetailMode": "full"})
        assert r.status_code == 200
        r = await client.post(f"/session/{sid}/mid-turn-message", json={"message": "also", "eventDetailMode": 1})
        assert refused(r, 400, "$.eventDetailMode")


async def test_the_echo_of_a_prompt_names_the_client_that_sent_it(tmp_path, scripted):
    async with live_daemon(model=scripted([{"text": "one"}], [{"text": "two"}])) as (_, client):
        created = (await client.post("/session", json=shell_create(tmp_path))).json()
        sid, mine = created["sessionId"], created["clientId"]
        await turn(client, sid, "with a client id", {"X-Qwen-Client-Id": mine})
        await turn(client, sid, "without one")
        got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
        echoes = [f for f in got if f["type"] == "session_update"
                  and f["data"]["update"]["sessionUpdate"] == "user_message_chunk"]
        # The shell drops the echo of its own prompt by this field (it showed the prompt already).
        assert [e.get("originatorClientId") for e in echoes] == [mine, None]


async def test_a_model_is_set_by_model_or_by_qwens_model_id(tmp_path):
    async with live_daemon() as (_, client):
        sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
        assert (await client.post(f"/session/{sid}/model", json={"modelId": "m-2"})).json() == {"model": "m-2"}
        assert (await client.get(f"/session/{sid}/status")).json()["model"] == "m-2"
        assert (await client.post(f"/session/{sid}/model", json={"model": "m-3"})).json() == {"model": "m-3"}
        for body in ({}, {"model": "a", "modelId": "b"}, {"modelId": None}):
            r = await client.post(f"/session/{sid}/model", json=body)
            assert refused(r, 400, "$.model") and "modelId" in r.json()["error"], body
        assert refused(await client.post(f"/session/{sid}/model", json={"modelId": 7}), 400, "$.modelId")
        assert refused(await client.post(f"/session/{sid}/model", json={"modelId": " "}), 400, "$.model",
                       "invalid_model")


async def test_plan_mode_is_toggled_as_the_shell_does_it(tmp_path):
    async with live_daemon() as (_, client):
        sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
        route = f"/session/{sid}/approval-mode"
        assert (await client.post(route, json={"mode": "yolo", "planMode": False})).json() == {"mode": "yolo"}
        assert (await client.post(route, json={"mode": "default", "planMode": True})).json() == {"mode": "plan"}
        assert refused(await client.post(route, json={"mode": "yolo", "planMode": "no"}), 400, "$.planMode")
        assert refused(await client.post(route, json={"mode": "auto", "planMode": False}), 400, "$.mode")


async def test_load_takes_the_shells_body_and_answers_the_cursor_that_shows_the_conversation_once(tmp_path, scripted):
    async with live_daemon(model=scripted([{"text": "the answer"}]), state_dir=tmp_path / "state") as (_, client):
        sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
        await turn(client, sid, "the question")
        body = {"cwd": str(tmp_path), "compactedReplayMode": "summary", "liveReplayMode": "summary",
                "sourceType": "default"}
        r = await client.post(f"/session/{sid}/load", json=body)
        assert r.status_code == 200, r.text
        loaded = r.json()
        assert loaded["eventEpoch"] == (await client.get(f"/session/{sid}/status")).json()["eventEpoch"]
        # A live load publishes the transcript again: from the cursor it answered, a stream shows it once.
        got = await collect(client, sid, headers={"Last-Event-ID": str(loaded["lastEventId"]),
                                                  "X-Qwen-Event-Epoch": loaded["eventEpoch"]},
                            until="replay_complete")
        texts = [f["data"]["update"]["content"]["text"] for f in got if f["type"] == "session_update"
                 and "content" in f["data"]["update"]]
        assert texts == ["the question", "the answer"]
        # resume attaches as it is: its cursor is the start (the ring holds everything once).
        assert (await client.post(f"/session/{sid}/resume", json={})).json()["lastEventId"] == 0
        assert refused(await client.post(f"/session/{sid}/load", json={**body, "liveReplayMode": "all"}), 400,
                       "$.liveReplayMode")
        assert refused(await client.post(f"/session/{sid}/load", json={"historyPageSize": 200}), 400,
                       "$.historyPageSize")


# ----------------------------------------------------------------- the daemon and workspace routes


async def test_brand_settings_and_model_services_are_empty_and_providers_name_the_model():
    async with live_daemon() as (daemon, client):
        assert (await client.get("/brand")).json() == {}
        assert (await client.get("/workspace/settings")).json() == {"v": 1, "settings": []}
        assert (await client.get("/workspace/models")).json() == {"models": []}
        providers = (await client.get("/workspace/providers")).json()
        assert providers["current"] == {"authType": "scripted", "modelId": "scripted"}
        assert providers["approvalMode"] == "default"
        assert providers["workspaceCwd"] == os.path.realpath(daemon.runtime.workspace)
        [provider] = providers["providers"]
        assert provider["current"] and [m["modelId"] for m in provider["models"]] == ["scripted"]
        # Every one of them wants the token.
        for route in ("/brand", "/workspace/providers", "/daemon/status", f"/workspace/{enc('/')}/sessions"):
            r = await client.get(route, headers={"Authorization": ""})
            assert refused(r, 401, "header.Authorization", "unauthorized"), route


async def test_the_git_branch_is_read_from_head(tmp_path):
    repo, plain, linked = tmp_path / "repo", tmp_path / "plain", tmp_path / "linked"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/feature-x\n")
    (repo / "src").mkdir()
    plain.mkdir()
    (linked / "gitdir").mkdir(parents=True)
    (linked / ".git").write_text("gitdir: gitdir\n")
    (linked / "gitdir" / "HEAD").write_text("0123456789abcdef0123456789abcdef01234567\n")  # a detached head
    assert git_branch(str(repo / "src")) == "feature-x" and git_branch(str(linked)) is None
    async with live_daemon() as (daemon, client):
        r = await client.get(f"/workspaces/{enc(repo)}/git?wait=1")
        assert r.json() == {"v": 2, "workspaceCwd": str(repo), "branch": "feature-x"}
        assert (await client.get(f"/workspaces/{enc(plain)}/git")).json()["branch"] is None
        sub = await client.get(f"/workspaces/{enc(plain)}/git", params={"cwd": str(repo / "src")})
        assert sub.json()["branch"] == "feature-x"
        primary = os.path.realpath(daemon.runtime.workspace)
        by_id = (await client.get(f"/workspaces/{workspace_id(primary)}/git")).json()
        assert by_id["workspaceCwd"] == primary == (await client.get("/workspace/git")).json()["workspaceCwd"]
        assert refused(await client.get(f"/workspaces/{enc(plain)}/git", params={"cwd": "src"}), 400, "query.cwd")
        assert refused(await client.get("/workspaces/0123456789abcdef/git"), 404, "url.workspace",
                       "workspace_not_found")


async def test_a_workspaces_sessions_are_listed_with_their_first_prompt_as_title(tmp_path, scripted):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    state = tmp_path / "state"  # the titles are read from the transcripts kept there
    async with live_daemon(model=scripted([{"text": "a"}], [{"text": "b"}], [{"text": "c"}]), state_dir=state) \
            as (_, client):
        ids = []
        for text in ("plan a picnic\nwith details", "pack the basket"):
            sid = (await client.post("/session", json=shell_create(here))).json()["sessionId"]
            await turn(client, sid, text)
            ids.append(sid)
        elsewhere = (await client.post("/session", json=shell_create(there))).json()["sessionId"]
        await turn(client, elsewhere, "not here")
        listed = (await client.get(f"/workspace/{enc(here)}/sessions",
                                   params={"size": 1000, "archiveState": "active", "sourceType": "default"})).json()
        assert sorted(s["sessionId"] for s in listed["sessions"]) == sorted(ids) and "nextCursor" not in listed
        entry = next(s for s in listed["sessions"] if s["sessionId"] == ids[0])
        assert entry["displayName"] == "plan a picnic" and entry["workspaceCwd"] == str(here)
        assert entry["sourceType"] == "default" and entry["isArchived"] is False
        assert entry["hasActivePrompt"] is False and entry["activeWorkState"] == "idle"
        assert entry["createdAt"].endswith("Z") and entry["isWaitingForPermission"] is False
        # Pages, by id as well as by path.
        first = (await client.get(f"/workspaces/{workspace_id(str(here))}/sessions", params={"size": 1})).json()
        assert len(first["sessions"]) == 1 and first["nextCursor"] == "1"
        second = (await client.get(f"/workspaces/{enc(here)}/sessions",
                                   params={"size": 1, "cursor": first["nextCursor"]})).json()
        assert len(second["sessions"]) == 1 and "nextCursor" not in second
        assert {first["sessions"][0]["sessionId"], second["sessions"][0]["sessionId"]} == set(ids)
        # Nothing is archived, pinned, or of another source.
        for params in ({"archiveState": "archived"}, {"sourceType": "channel"}, {"group": "pinned"}):
            assert (await client.get(f"/workspace/{enc(here)}/sessions", params=params)).json() == {"sessions": []}
        for params, where in (({"size": "0"}, "query.size"), ({"size": "1001"}, "query.size"),
                              ({"size": "ten"}, "query.size"), ({"cursor": "-1"}, "query.cursor"),
                              ({"archiveState": "gone"}, "query.archiveState")):
            assert refused(await client.get(f"/workspace/{enc(here)}/sessions", params=params), 400, where), params
        assert refused(await client.get("/workspace/nope/sessions"), 404, "url.workspace", "workspace_not_found")


async def test_a_session_kept_on_disk_is_listed_as_idle_with_no_client(tmp_path, scripted):
    state = tmp_path / "state"
    async with live_daemon(model=scripted([{"text": "a"}]), state_dir=state) as (_, client):
        sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
        await turn(client, sid, "remember this")
    async with live_daemon(state_dir=state) as (_, client):
        [entry] = (await client.get(f"/workspace/{enc(tmp_path)}/sessions")).json()["sessions"]
        assert entry["sessionId"] == sid and entry["displayName"] == "remember this"
        assert entry["clientCount"] == 0 and entry["activeWorkState"] == "idle"


async def test_a_session_waiting_for_a_vote_is_listed_as_such(tmp_path, scripted):
    call = [{"tool_call": {"name": "shell", "arguments": {"command": "echo hi"}}}]
    async with live_daemon(model=scripted(call, [{"text": "done"}])) as (_, client):
        sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
        await client.post(f"/session/{sid}/prompt", json=prompt("run it"))
        with trio.fail_after(10):
            while not (await client.get(f"/session/{sid}/status")).json()["pendingPermissions"]:
                await trio.sleep(0.01)
        [entry] = (await client.get(f"/workspace/{enc(tmp_path)}/sessions")).json()["sessions"]
        assert entry["isWaitingForPermission"] and entry["pendingInteractionCount"] == 1
        assert entry["hasActivePrompt"] and entry["activeWorkState"] == "active"
        status = (await client.get("/daemon/status")).json()
        assert status["runtime"]["permissions"]["pending"] == 1 and status["runtime"]["activity"]["activePrompts"] == 1
        await client.post(f"/session/{sid}/cancel")


async def test_daemon_status_summarises_the_daemon(tmp_path):
    async with live_daemon() as (daemon, client):
        await client.post("/session", json=shell_create(tmp_path))
        status = (await client.get("/daemon/status")).json()
        assert status["status"] == "ok" and status["issues"] == [] and status["v"] == 1
        assert status["daemon"]["pid"] == os.getpid() and status["daemon"]["mode"] == "trellis"
        assert status["runtime"]["sessions"]["active"] == 1
        assert status["runtime"]["activity"]["activePrompts"] == 0 and status["runtime"]["activity"]["idleSinceMs"] >= 0
        assert status["limits"]["maxSessions"] == daemon.settings.limits.max_sessions
        # What the Daemon Status panel reads: the daemon's own security, and none of qwen's rate limits or workers.
        assert status["security"] == {"tokenConfigured": True, "requireAuth": True, "loopbackBind": True,
                                      "allowOriginConfigured": False, "allowOriginMode": "none",
                                      "sessionShellCommandEnabled": False}
        assert status["runtime"]["rateLimit"] == {"enabled": False, "rejectedSinceStart": {}}
        assert status["runtime"]["transport"]["acp"]["enabled"] and status["runtime"]["process"]["rss"] > 0
        assert "session_source_metadata" in status["capabilities"]["features"]
        assert (await client.get("/daemon/status", params={"detail": "full"})).json()["detail"] == "full"
        assert refused(await client.get("/daemon/status", params={"detail": "everything"}), 400, "query.detail")


# ----------------------------------------------------------------- one session


async def test_a_sessions_context_offers_trellis_approval_modes_and_commands_are_empty(tmp_path):
    async with live_daemon() as (_, client):
        sid = (await client.post("/session", json=shell_create(tmp_path, approvalMode="auto-edit"))).json()["sessionId"]
        context = (await client.get(f"/session/{sid}/context")).json()
        modes = context["state"]["modes"]
        assert modes["currentModeId"] == "auto-edit"
        assert [m["id"] for m in modes["availableModes"]] == ["default", "auto-edit", "yolo", "plan"]
        assert context["state"]["models"]["currentModelId"] == "scripted"
        [option] = context["state"]["configOptions"]
        assert option["currentValue"] == "auto-edit" and len(option["options"]) == 4
        commands = (await client.get(f"/session/{sid}/supported-commands")).json()
        assert commands == {"v": 1, "sessionId": sid, "availableCommands": [], "availableSkills": []}
        for route in ("context", "supported-commands"):
            assert refused(await client.get(f"/session/nope/{route}"), 404, "url.sessionId", "session_not_found")


# ----------------------------------------------------------------- from another origin


@asynccontextmanager
async def served(origin: str) -> AsyncIterator[httpx.AsyncClient]:
    async with open_daemon(model=load_script({"responses": []}), ids=CountingIds()) as daemon:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, daemon, host="127.0.0.1", port=0, token=TOKEN,
                                              allowed_origins=(origin,)))
            async with httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as client:
                yield client
            nursery.cancel_scope.cancel()


async def test_the_shell_on_another_origin_gets_through_preflight_with_its_headers(tmp_path):
    origin = "http://127.0.0.1:5173"
    async with served(origin) as client:
        wanted = "authorization, content-type, x-qwen-client-id, last-event-id, x-qwen-event-epoch"
        pre = await client.request("OPTIONS", "/session", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": wanted})
        assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == origin
        allowed = pre.headers["access-control-allow-headers"].lower()
        assert all(h.strip() in allowed for h in wanted.split(","))
        assert "POST" in pre.headers["access-control-allow-methods"]
        auth = {"Origin": origin, "Authorization": f"Bearer {TOKEN}"}
        r = await client.get(f"/workspace/{enc(tmp_path)}/sessions", headers=auth)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        r = await client.post("/session", json=shell_create(tmp_path), headers=auth)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        # Another page (another port) is refused, and an allowed one still needs the token.
        assert refused(await client.get("/brand", headers={**auth, "Origin": "http://127.0.0.1:5174"}), 403,
                       "header.Origin", "origin_not_allowed")
        assert (await client.get("/brand", headers={"Origin": origin})).status_code == 401


# ----------------------------------------------------------------- /fork <directive>


async def test_fork_with_a_directive_runs_it_in_a_copy_of_the_conversation(tmp_path, scripted):
    """The shell's ``/fork <directive>`` posts ``{directive}``; qwen serve starts a background agent on a copy of the
    conversation and answers 202. Trellis starts a session with the copy, titled with the directive, and runs
    the directive there as its first prompt."""
    model = scripted([{"text": "one"}], {"delay": 30, "steps": [{"text": "slow"}]}, [{"text": "forked answer"}])
    async with live_daemon(model=model, state_dir=tmp_path / "state") as (_, client):
        created = (await client.post("/session", json=shell_create(tmp_path))).json()
        sid = created["sessionId"]
        await turn(client, sid, "first")

        async def session_count() -> int:
            return len((await client.get("/session")).json()["sessions"])

        before = await session_count()
        for bad, code in (({"directive": "   "}, "missing_directive"), ({"directive": 5}, "invalid_request")):
            r = await client.post(f"/session/{sid}/fork", json=bad)
            assert refused(r, 400, "$.directive", code), r.text
        running = (await client.post(f"/session/{sid}/prompt", json=prompt("second"))).json()["promptId"]
        r = await client.post(f"/session/{sid}/fork", json={"directive": "write the tests"})
        assert refused(r, 409, "url.sessionId", "session_busy"), r.text  # as qwen: not while a turn runs
        assert await session_count() == before  # refused: nothing was started
        assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
        await wait_turn(client, sid, running)

        r = await client.post(f"/session/{sid}/fork", json={"directive": "  write the tests  "},
                              headers={"X-Qwen-Client-Id": created["clientId"]})
        assert r.status_code == 202, r.text
        launched = r.json()
        fork = launched.pop("forkSessionId")
        assert launched == {"sessionId": sid, "description": "write the tests", "launched": True}
        assert fork != sid
        with trio.fail_after(10):
            while True:
                texts = [e["message"]["content"] for e in
                         (await client.get(f"/session/{fork}/transcript")).json()["entries"]]
                if texts[-1:] == ["forked answer"]:
                    break
                await trio.sleep(0.01)
        # the copy (with the cancelled "second" the source kept), then the directive and its answer
        assert texts[:2] == ["first", "one"] and texts[-2:] == ["write the tests", "forked answer"], texts
        titles = {s["sessionId"]: s.get("title") for s in (await client.get("/session")).json()["sessions"]}
        assert titles[fork] == "write the tests"
        source = [e["message"]["content"] for e in (await client.get(f"/session/{sid}/transcript")).json()["entries"]]
        assert source[:2] == ["first", "one"] and "write the tests" not in source  # the source is left as it was


async def test_the_tasks_panel_lists_background_shells_as_qwen_does(tmp_path, scripted):
    """``GET /session/:id/tasks`` (404 before: the Environment panel said "Get tasks failed"): background
    shells in qwen serve's shape, oldest first, a finished one with its end and exit code."""
    model = scripted([{"tool_call": {"name": "shell", "arguments": {"command": "true", "run_in_background": True}}}],
                     [{"tool_call": {"name": "shell", "arguments": {"command": "sleep 30",
                                                                     "run_in_background": True}}}],
                     [{"text": "started both"}])
    async with live_daemon(model=model) as (daemon, client):
        sid = (await client.post("/session", json=shell_create(tmp_path, approvalMode="yolo"))).json()["sessionId"]
        assert (await client.get(f"/session/{sid}/tasks")).json()["tasks"] == []
        await turn(client, sid, "start two shells")
        with trio.fail_after(20):
            while True:
                body = (await client.get(f"/session/{sid}/tasks")).json()
                if [t["status"] for t in body["tasks"]] == ["completed", "running"]:
                    break
                await trio.sleep(0.02)
        assert body["v"] == 1 and body["sessionId"] == sid and isinstance(body["now"], int)
        done, running = body["tasks"]
        assert {k: done[k] for k in ("kind", "label", "description", "command", "exitCode")} == {
            "kind": "shell", "label": "true", "description": "true", "command": "true", "exitCode": 0}
        assert done["startTime"] <= done["endTime"] <= body["now"] and done["runtimeMs"] == done["endTime"] - \
            done["startTime"]
        assert running["command"] == "sleep 30" and "endTime" not in running and "exitCode" not in running
        assert done["startTime"] <= running["startTime"] and running["runtimeMs"] == body["now"] - running["startTime"]
        assert (await client.get("/session/nope/tasks")).status_code == 404


async def test_the_changes_dialog_outside_the_workspaces_and_bad_paths(tmp_path):
    """``/git/diff`` and ``/git/diff/file`` (404 before: "Failed to load changes"): where no session works, git
    is not run and the answers are qwen's "not available"; a path that is not one from the top of the work tree
    is 400 naming it (the diffs themselves: tests/security/test_workspace_git_sandboxed.py)."""
    async with live_daemon() as (_, client):
        diff = (await client.get(f"/workspaces/{enc(tmp_path)}/git/diff")).json()
        assert diff == {"v": 1, "workspaceCwd": str(tmp_path), "available": False, "filesCount": 0, "linesAdded": 0,
                        "linesRemoved": 0, "files": [], "hiddenCount": 0}
        one = await client.get(f"/workspaces/{enc(tmp_path)}/git/diff/file", params={"path": "src/a.py"})
        assert one.json() == {"v": 1, "workspaceCwd": str(tmp_path), "path": "src/a.py", "available": False,
                              "hunks": []}
        for bad, where in (({}, "query.path"), ({"path": "/etc/passwd"}, "query.path"),
                           ({"path": "../outside"}, "query.path"), ({"path": "a/../../b"}, "query.path"),
                           ({"path": "a", "oldPath": "/etc/shadow"}, "query.oldPath"),
                           ({"path": "a", "oldPath": ".."}, "query.oldPath")):
            assert refused(await client.get(f"/workspaces/{enc(tmp_path)}/git/diff/file", params=bad), 400,
                           where), bad

async def test_the_history_tab_outside_the_workspaces_and_bad_queries(tmp_path):
    """``/git/log`` and ``/git/log/commit`` (404 before: "Failed to load history"): where no session works, git is
    not run (qwen's "not available"); each bad query value is 400 naming it (the history itself:
    tests/actors/test_git_log.py, and the browser test of the Changes dialog)."""
    async with live_daemon() as (_, client):
        base = f"/workspaces/{enc(tmp_path)}/git/log"
        assert (await client.get(base)).json() == {"v": 1, "workspaceCwd": str(tmp_path), "available": False,
                                                   "entries": [], "hasMore": False}
        assert (await client.get(f"{base}/commit", params={"sha": "abcdef1"})).json() == {
            "v": 1, "workspaceCwd": str(tmp_path), "available": False}
        for params, where in (({"limit": "0"}, "query.limit"), ({"limit": "201"}, "query.limit"),
                              ({"limit": "x"}, "query.limit"), ({"skip": "-1"}, "query.skip"),
                              ({"all": "yes"}, "query.all"), ({"range": "--output=/tmp/x"}, "query.range"),
                              ({"range": "..main"}, "query.range"), ({"range": "a b"}, "query.range"),
                              ({"search": "x" * 201}, "query.search")):
            assert refused(await client.get(base, params=params), 400, where), params
        for sha in ({}, {"sha": "HEAD"}, {"sha": "abc12"}, {"sha": "a" * 41}):
            assert refused(await client.get(f"{base}/commit", params=sha), 400, "query.sha"), sha


async def test_the_branch_picker_outside_the_workspaces_and_its_actions(tmp_path):
    """``/git/branches`` (404 before: the picker showed "no route"): not run where no session works, nor are the
    picker's actions (409 ``git_refused``); a bad body is 400 naming the value; push and pull are refused in words
    that say why (the actions themselves: tests/actors/test_git_actions.py and the browser test)."""
    async with live_daemon() as (_, client):
        base = f"/workspaces/{enc(tmp_path)}/git"
        assert (await client.get(f"{base}/branches")).json() == {
            "v": 1, "workspaceCwd": str(tmp_path), "available": False, "local": [], "remote": [], "tags": [],
            "recent": [], "head": "", "detached": False}
        for action, good in (("checkout", {"ref": "main"}), ("branch", {"name": "x"}),
                             ("commit", {"message": "m", "all": True})):
            assert refused(await client.post(f"{base}/{action}", json=good), 409, None, "git_refused"), action
        for action, bad, where in (("checkout", {"ref": "-b"}, "$.ref"), ("checkout", {"ref": "a b"}, "$.ref"),
                                   ("checkout", {}, "$.ref"), ("checkout", {"ref": "x", "force": True}, "$.force"),
                                   ("branch", {"name": "--orphan"}, "$.name"),
                                   ("branch", {"name": "x", "startPoint": "-p"}, "$.startPoint"),
                                   ("commit", {"message": "  "}, "$.message"),
                                   ("commit", {"message": "m", "all": "yes"}, "$.all")):
            r = await client.post(f"{base}/{action}", json=bad)
            assert r.status_code == 400 and r.json()["path"] == where, (action, bad, r.json())
        for action in ("push", "pull"):
            r = await client.post(f"{base}/{action}", json={})
            assert r.status_code == 404 and "no credentials" in r.json()["error"], r.json()
