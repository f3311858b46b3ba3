"""The UI's files at ``/`` and ``/ui/`` (no token, strict headers) and the routes it added to the API.

``DELETE /session/:id/background-tasks/:taskId`` and ``GET /subagents`` are
real API routes: they want the token like every other.
"""

from __future__ import annotations

import httpx
import trio

from actors import Settings
from tests.conftest import live_daemon
from tests.processes import kill_all, marker, sleeping

FILES = {"/": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css",
         "/ui/stream.js": "text/javascript"}


async def wait_for(condition, timeout: float = 10) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.02)


async def test_the_ui_files_are_served_without_a_token_with_a_strict_policy():
    async with live_daemon() as (_, client):
        bare = httpx.AsyncClient(base_url=str(client.base_url), trust_env=False)
        async with bare:
            for path, kind in FILES.items():
                response = await bare.get(path)
                assert response.status_code == 200, path
                assert response.headers["Content-Type"].startswith(kind), path
                policy = response.headers["Content-Security-Policy"]
                assert "script-src 'self'" in policy and "default-src 'none'" in policy
                assert "frame-ancestors 'none'" in policy
                assert response.headers["X-Content-Type-Options"] == "nosniff"
            page = (await bare.get("/")).text
            assert 'src="/ui/app.js"' in page and "<script>" not in page  # no inline script: the CSP allows none
            # Only the UI's files are open: the API still wants the token.
            assert (await bare.get("/session")).status_code == 401
            assert (await bare.get("/subagents")).status_code == 401
            assert (await bare.post("/")).status_code == 401


async def test_a_ui_path_that_is_not_one_of_its_files_is_404_and_shows_nothing_else():
    async with live_daemon() as (_, client):
        for path in ("/ui/nope.js", "/ui/", "/ui/.hidden.js", "/ui/..%2F__init__.py", "/ui/%2E%2E/app.py",
                     "/ui/static/app.js", "/ui/app.py", "/ui/app"):
            response = await client.get(path)
            assert response.status_code == 404, path
            assert response.json()["code"] == "not_found", path


async def test_the_session_list_says_which_sessions_run(scripted, tmp_path):
    model = scripted([{"text": "slow"}, {"sleep": 30}])
    async with live_daemon(model=model, state_dir=tmp_path) as (daemon, client):
        sid = (await client.post("/session", json={})).json()["sessionId"]
        assert [s["state"] for s in (await client.get("/session")).json()["sessions"]] == ["idle"]
        await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})
        handle = daemon.get(sid)
        await wait_for(lambda: handle.summary()["state"] == "running")
        assert [s["state"] for s in (await client.get("/session")).json()["sessions"]] == ["running"]


async def test_killing_a_background_task_stops_its_process_and_says_so(scripted, tmp_path):
    mark = marker()
    model = scripted([{"tool_call": {"name": "shell", "arguments": {
        "command": f"echo started; sleep {mark}", "run_in_background": True}}}], [{"text": "it runs"}],
        [{"text": "it stopped"}])
    async with live_daemon(model=model, state_dir=tmp_path) as (daemon, client):
        try:
            sid = (await client.post("/session", json={})).json()["sessionId"]
            await client.post(f"/session/{sid}/approval-mode", json={"mode": "yolo"})
            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})
            handle = daemon.get(sid)
            await wait_for(lambda: bool(sleeping(mark)))
            task_id = (await handle.status())["backgroundTasks"][0]["taskId"]
            answer = await client.delete(f"/session/{sid}/background-tasks/{task_id}")
            assert answer.status_code == 200 and answer.json() == {"killed": True, "taskId": task_id}
            await wait_for(lambda: not sleeping(mark))
            # Killed already, unknown, or another session's: nothing to kill, and nothing changes.
            again = await client.delete(f"/session/{sid}/background-tasks/{task_id}")
            assert again.json() == {"killed": False, "taskId": task_id}
            assert (await client.delete(f"/session/{sid}/background-tasks/shell-nope")).json()["killed"] is False
            gone = await client.delete("/session/no-such-session/background-tasks/x")
            assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"
        finally:
            kill_all(sleeping(mark))


async def test_subagent_runs_are_listed_with_their_turn_counter(tmp_path):
    from tests.transport.mcp.harness import mcp_daemon, routed, signal

    model = routed(parent=[[{"tool_call": {"name": "agent", "arguments": {
        "name": "kid", "brief": "kid-brief: count the files", "goal": "a count"}}}], [{"text": "on it"}],
        [{"text": "noted"}]], **{"kid-brief": signal("goal_reached", summary="3 files")})
    async with mcp_daemon(model=model, workspace=str(tmp_path), settings=Settings(approval_mode="yolo")) as (daemon, base):
        async with httpx.AsyncClient(base_url=base, trust_env=False) as client:  # an app without a token
            assert (await client.get("/subagents")).json() == {"runs": []}
            parent, _ = await daemon.create_session(str(tmp_path))
            await parent.prompt("parent: delegate")  # routed by its words (harness.routed)
            await wait_for(lambda: "kid" in {r["name"] for r in daemon.subagents.list()}
                           and daemon.subagents.get("kid").end_reason is not None, 20)
            runs = (await client.get("/subagents")).json()["runs"]
    assert [(r["name"], r["turn"], r["maxTurns"], r["endReason"], r["goalReachedSelfReported"]) for r in runs] \
        == [("kid", 1, runs[0]["maxTurns"], "goal_reached", True)]
    assert "token" not in str(runs).lower()
