"""What qwen's Web Shell (0.24.4) sends and reads, on the real HTTP daemon on a loopback port with a scripted model.

Each test is one thing the shell does that qwen serve answers and Trellis once did not:

- its Retry after a failed turn is ``POST /session/:id/prompt`` with a top-level ``retry: true`` (qwen serve's
  form), the same trusted retry as ``_meta.retry`` (the conversation re-sent as it is, the prompt not added again);
- it reads one ``suggestion`` from ``followup_suggestion`` (else a "malformed followup_suggestion payload" line);
- it refuses a ``history_truncated`` without ``maxBytes``, the ``live_journal`` one too;
- it reads a session's title as ``displayName``: from ``GET /session/:id/status``, from its session list, and
  live only from ``session_metadata_updated {sessionId, displayName}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio

from actors import Limits, Settings, load_script
from actors.events.bus import DEFAULT_RING_BYTES
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect
from tests.transport.test_webshell_routes import wait_turn


def prompt(text: str, **extra: Any) -> dict[str, Any]:
    """The body of the shell's prompt (its ``eventDetailMode`` and ``_meta`` as it sends them)."""
    return {"prompt": [{"type": "text", "text": text}], "eventDetailMode": "summary",
            "_meta": {"qwen.submittedPrompt": text}, **extra}


def shell_create(cwd: Path) -> dict[str, Any]:
    return {"cwd": str(cwd), "sessionScope": "thread", "approvalMode": "default", "sourceType": "default"}


async def ring(daemon: Any, sid: str) -> list[dict[str, Any]]:
    return [{"type": e.type, "promptId": e.prompt_id, "data": e.data} for e in daemon.get(sid)._session.bus.ring]


# ----------------------------------------------------------------- Retry after a failed turn


async def test_the_shells_retry_after_a_failed_turn_resends_the_conversation_without_the_prompt_again(tmp_path):
    model = load_script([{"refuse": {"code": "rate_limited", "message": "slow down"}}, [{"text": "recovered"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            r = await client.post(f"/session/{sid}/prompt", json=prompt("fix the parser"))
            failed = await wait_turn(client, sid, r.json()["promptId"])
            assert failed["state"] == "error", failed

            r = await client.post(f"/session/{sid}/prompt", json=prompt("fix the parser", retry=True))
            assert r.status_code == 202, r.text
            assert (await wait_turn(client, sid, r.json()["promptId"]))["state"] == "completed"
            # A trusted retry: the failed turn's prompt is sent once more as it stands, not added a second time.
            users = [m.content for m in model.calls[1].messages if m.role == "user"]
            assert users == ["fix the parser"]
            assert (await client.get(f"/session/{sid}/status")).json()["historyLength"] == 2


async def test_retry_false_is_an_ordinary_prompt_and_a_retry_that_is_not_a_boolean_is_refused(tmp_path):
    model = load_script([[{"text": "one"}], [{"text": "two"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            for value in ("yes", 1, None, {"retry": True}):
                r = await client.post(f"/session/{sid}/prompt", json=prompt("hello", retry=value))
                assert r.status_code == 400, (value, r.text)
                body = r.json()
                assert (body["code"], body["path"], body["error"]) == ("invalid_request", "$.retry",
                                                                       "expected a boolean"), value
            r = await client.post(f"/session/{sid}/prompt", json=prompt("hello", retry=False))
            assert r.status_code == 202, r.text
            await wait_turn(client, sid, r.json()["promptId"])
            r = await client.post(f"/session/{sid}/prompt", json=prompt("again", retry=False))
            await wait_turn(client, sid, r.json()["promptId"])
            assert [m.content for m in model.calls[1].messages if m.role == "user"] == ["hello", "again"]


# ----------------------------------------------------------------- followup_suggestion


async def test_a_followup_suggestion_carries_the_one_suggestion_the_shell_reads(tmp_path):
    model = load_script([[{"text": "done"}], [{"text": "next idea\nanother idea"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model, settings=Settings(followup_suggestions=True)) as (daemon, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            r = await client.post(f"/session/{sid}/prompt", json=prompt("question"))
            pid = r.json()["promptId"]
            await wait_turn(client, sid, pid)
            with trio.fail_after(10):
                while not [e for e in await ring(daemon, sid) if e["type"] == "followup_suggestion"]:
                    await trio.sleep(0.01)
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="followup_suggestion")
    frame = got[-1]
    assert frame["type"] == "followup_suggestion" and frame["promptId"] == pid
    # qwen serve's {sessionId, suggestion, promptId}; `suggestions` is Trellis's own clients' (all of them).
    assert frame["data"] == {"sessionId": sid, "promptId": pid, "suggestion": "next idea",
                             "suggestions": ["next idea", "another idea"]}


# ----------------------------------------------------------------- history_truncated


async def test_a_running_turn_longer_than_the_ring_is_marked_truncated_with_the_rings_byte_bound(tmp_path):
    steps: list[Any] = [{"text": f"chunk {i} "} for i in range(12)] + [{"sleep": 30}, {"text": "end"}]
    model = load_script([steps])
    settings = Settings(limits=Limits(event_ring_size=4))
    with trio.fail_after(30):
        async with live_daemon(model=model, settings=settings) as (daemon, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            r = await client.post(f"/session/{sid}/prompt", json=prompt("talk"))
            pid = r.json()["promptId"]
            with trio.fail_after(10):  # all twelve chunks out, the turn still running (its sleep)
                while sum(1 for e in await ring(daemon, sid) if "chunk 11" in str(e["data"])) == 0:
                    await trio.sleep(0.01)
            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            await client.post(f"/session/{sid}/cancel")
            await wait_turn(client, sid, pid)
    resync, truncated = got[0], got[1]
    assert resync["type"] == "state_resync_required"
    assert truncated["type"] == "history_truncated"
    data = truncated["data"]
    assert data["scope"] == "live_journal" and data["reason"] == "replay_window_exceeded"
    assert data["maxBytes"] == DEFAULT_RING_BYTES and data["maxEvents"] == 4
    assert data["truncatedEvents"] > 0 and data["retainedEvents"] == 4 and data["fullTranscriptAvailable"] is True


# ----------------------------------------------------------------- titles as displayName


def metadata_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "session_metadata_updated"]


async def test_a_title_is_the_shells_displayname_in_status_in_its_list_and_in_a_metadata_event(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(30):
        async with live_daemon(model=load_script([[{"text": "ok"}]]), state_dir=state) as (daemon, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            status = (await client.get(f"/session/{sid}/status")).json()
            assert status["title"] is None and status["displayName"] is None
            r = await client.post(f"/session/{sid}/prompt", json=prompt("plan a picnic\nwith details"))
            await wait_turn(client, sid, r.json()["promptId"])
            status = (await client.get(f"/session/{sid}/status")).json()
            assert status["displayName"] == status["title"] == "plan a picnic"

            r = await client.post(f"/session/{sid}/title", json={"title": "Picnic, renamed"})
            assert r.status_code == 200, r.text
            assert (await client.get(f"/session/{sid}/status")).json()["displayName"] == "Picnic, renamed"
            listed = (await client.get(f"/workspace/{quote(str(tmp_path), safe='')}/sessions")).json()
            [entry] = listed["sessions"]
            assert entry["sessionId"] == sid and entry["displayName"] == "Picnic, renamed"

            r = await client.post(f"/session/{sid}/title", json={"title": ""})  # cleared
            assert (await client.get(f"/session/{sid}/status")).json()["displayName"] is None
            [entry] = (await client.get(f"/workspace/{quote(str(tmp_path), safe='')}/sessions")).json()["sessions"]
            assert entry["displayName"] == "plan a picnic"  # no title: the start of its first prompt, as before

            got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
    events = [f for f in got if f.get("id") is not None]
    metadata = metadata_events(events)
    assert [m["data"] for m in metadata] == [
        {"sessionId": sid, "displayName": "plan a picnic", "titleSource": "auto"},
        {"sessionId": sid, "displayName": "Picnic, renamed", "titleSource": "manual"},
        {"sessionId": sid, "displayName": None},
    ]
    assert all("promptId" not in m for m in metadata)  # the session's events, never a prompt's
    # Each right after the session_info_update of the same change.
    for m in metadata:
        before = next(e for e in events if e["id"] == m["id"] - 1)
        assert before["data"]["update"]["sessionUpdate"] == "session_info_update"
        assert before["data"]["update"]["title"] == m["data"]["displayName"]


async def test_a_stored_session_is_listed_by_its_title_after_a_restart(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(30):
        async with live_daemon(model=load_script([[{"text": "ok"}]]), state_dir=state) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            r = await client.post(f"/session/{sid}/prompt", json=prompt("remember this"))
            await wait_turn(client, sid, r.json()["promptId"])
            await client.post(f"/session/{sid}/title", json={"title": "Kept on disk"})
        async with live_daemon(state_dir=state) as (_, client):
            [entry] = (await client.get(f"/workspace/{quote(str(tmp_path), safe='')}/sessions")).json()["sessions"]
            assert entry["sessionId"] == sid and entry["displayName"] == "Kept on disk"
            assert entry["clientCount"] == 0
