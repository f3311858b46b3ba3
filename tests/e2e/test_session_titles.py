"""Session titles and the prompt counts over REST, on a real daemon on loopback port 0.

A title is given at create, taken from the first prompt when there is none, changed by
``POST /session/:id/title``; each change is a ``session_info_update`` event; it is kept in the
session record (listed after a restart). ``queuedCount`` and ``state`` come from one place for
``GET /session`` and ``GET /session/:id/status``.
"""

from __future__ import annotations

import trio

from actors import load_script
from tests.conftest import live_daemon
from tests.e2e.test_session_routes import prompt, settle


def listed(client_json: dict, sid: str) -> dict:
    return next(s for s in client_json["sessions"] if s["sessionId"] == sid)


def title_updates(events: list[dict]) -> list[dict]:
    return [e["data"]["update"] for e in events
            if e["type"] == "session_update" and e["data"]["update"]["sessionUpdate"] == "session_info_update"]


async def ring(daemon, sid: str) -> list[dict]:
    return [{"type": e.type, "data": e.data} for e in daemon.get(sid)._session.bus.ring]


async def test_the_first_prompt_titles_an_untitled_session_and_later_prompts_do_not(tmp_path):
    model = load_script([[{"text": "one"}], [{"text": "two"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model, state_dir=tmp_path) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            assert (await client.get(f"/session/{sid}/status")).json()["title"] is None
            text = "\n\n   Fix   the\tflaky   test in " + "x" * 100 + "\nsecond line"
            r = await client.post(f"/session/{sid}/prompt", json=prompt(text))
            assert r.status_code == 202
            # Listed as soon as the prompt is admitted: the first non-blank line, collapsed, cut to 80.
            title = listed((await client.get("/session")).json(), sid)["title"]
            assert title.startswith("Fix the flaky test in xxx") and len(title) == 80 and title.endswith("…")
            await settle(client, sid, r.json()["promptId"])
            r = await client.post(f"/session/{sid}/prompt", json=prompt("something else"))
            await settle(client, sid, r.json()["promptId"])
            assert (await client.get(f"/session/{sid}/status")).json()["title"] == title
            updates = title_updates(await ring(daemon, sid))
            assert [u["title"] for u in updates] == [title]
            assert set(updates[0]) == {"sessionUpdate", "title", "updatedAt"}
            assert updates[0]["updatedAt"].endswith("Z") and "T" in updates[0]["updatedAt"]


async def test_a_title_is_given_at_create_changed_cleared_and_refused_when_too_long(tmp_path):
    with trio.fail_after(30):
        async with live_daemon(state_dir=tmp_path) as (daemon, client):
            r = await client.post("/session", json={"title": "  Release notes  "})
            assert r.status_code == 200 and r.json()["title"] == "Release notes"
            sid = r.json()["sessionId"]
            r = await client.post(f"/session/{sid}/prompt", json=prompt("hello"))
            await settle(client, sid, r.json()["promptId"])
            assert (await client.get(f"/session/{sid}/status")).json()["title"] == "Release notes"  # kept

            r = await client.post(f"/session/{sid}/title", json={"title": "Renamed"})
            assert r.status_code == 200 and r.json() == {"sessionId": sid, "title": "Renamed"}
            assert listed((await client.get("/session")).json(), sid)["title"] == "Renamed"
            r = await client.post(f"/session/{sid}/title", json={"title": ""})
            assert r.status_code == 200 and r.json() == {"sessionId": sid, "title": None}
            assert (await client.get(f"/session/{sid}/status")).json()["title"] is None
            assert [u["title"] for u in title_updates(await ring(daemon, sid))] == ["Renamed", None]

            r = await client.post(f"/session/{sid}/title", json={"title": "t" * 201})
            assert r.status_code == 400 and (r.json()["code"], r.json()["path"]) == ("value_too_long", "$.title")
            assert (await client.post(f"/session/{sid}/title", json={"title": "  " + "t" * 200 + "  "})
                    ).status_code == 200  # 200 once stripped
            r = await client.post("/session", json={"title": "t" * 201})
            assert r.status_code == 400 and (r.json()["code"], r.json()["path"]) == ("value_too_long", "$.title")
            r = await client.post(f"/session/{sid}/title", json={"title": 7})
            assert r.status_code == 400 and r.json()["path"] == "$.title"
            r = await client.post(f"/session/{sid}/title", json={})
            assert r.status_code == 400 and r.json()["path"] == "$.title"
            r = await client.post("/session/nope/title", json={"title": "x"})
            assert r.status_code == 404


async def test_the_title_survives_a_restart_in_the_listing_and_the_restored_session(tmp_path):
    with trio.fail_after(30):
        async with live_daemon(state_dir=tmp_path) as (daemon, client):
            sid = (await client.post("/session", json={"sessionId": "kept", "title": "Kept title"})).json()["sessionId"]
        async with live_daemon(state_dir=tmp_path) as (daemon, client):
            entry = listed((await client.get("/session")).json(), sid)
            assert (entry["live"], entry["title"], entry["queuedCount"]) == (False, "Kept title", 0)
            r = await client.post(f"/session/{sid}/load", json={})
            assert r.status_code == 200 and r.json()["title"] == "Kept title"
            assert (await client.get(f"/session/{sid}/status")).json()["title"] == "Kept title"


async def test_queued_count_leaves_out_the_running_prompt_in_listing_and_status(tmp_path):
    # The first answer streams for a while (a sleep after its first text), so the next two stay queued.
    model = load_script({"responses": [[{"text": "a"}, {"sleep": 1.5}], [{"text": "b"}], [{"text": "c"}]],
                         "then": "error"})
    with trio.fail_after(30):
        async with live_daemon(model=model, state_dir=tmp_path) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            ids = [(await client.post(f"/session/{sid}/prompt", json=prompt(t))).json()["promptId"]
                   for t in ("a", "b", "c")]
            while (await client.get(f"/session/{sid}/status")).json()["state"] != "running":
                await trio.sleep(0.01)
            status = (await client.get(f"/session/{sid}/status")).json()
            entry = listed((await client.get("/session")).json(), sid)
            for seen in (status, entry):
                assert (seen["state"], seen["queuedCount"], seen["pendingCount"]) == ("running", 2, 3)
            await settle(client, sid, ids[-1])
            status = (await client.get(f"/session/{sid}/status")).json()
            entry = listed((await client.get("/session")).json(), sid)
            for seen in (status, entry):
                assert (seen["state"], seen["queuedCount"], seen["pendingCount"]) == ("idle", 0, 0)
