"""The showcase demo (``trellis serve``'s default model) over REST on a real daemon: its first answer asks
to run a shell command, starts a background task, streams a markdown answer with a heading, a code block
and a table, and leaves a todo the Todo Stop Guard continues (or the background notification closes)."""

from __future__ import annotations

import trio

from actors import Settings
from actors.model.showcase import ShowcaseModel
from tests.conftest import live_daemon

QUICK = "sleep 0.3; echo 'background check: all good'"


def work(tmp_path):
    (tmp_path / "work").mkdir(exist_ok=True)
    return tmp_path / "work"


def ring(daemon, sid: str) -> list:
    return list(daemon.get(sid)._session.bus.ring)


def text_of(events) -> str:
    return "".join(e.data["update"]["content"]["text"] for e in events if e.type == "session_update"
                   and e.data["update"]["sessionUpdate"] == "agent_message_chunk")


async def approve_until_idle(daemon, client, sid: str) -> list[str]:
    """Allow every permission request until the session is idle with no automatic work left; their titles."""
    titles, voted = [], set()
    with trio.fail_after(30):
        while True:
            for e in ring(daemon, sid):
                if e.type == "permission_request" and e.data["requestId"] not in voted:
                    voted.add(e.data["requestId"])
                    titles.append(e.data["toolCall"]["title"])
                    r = await client.post(f"/session/{sid}/permission/{e.data['requestId']}",
                                          json={"outcome": {"outcome": "selected", "optionId": "proceed_once"}})
                    assert r.status_code == 200, r.text
            status = (await client.get(f"/session/{sid}/status")).json()
            finished = any(e.type == "background_task" and e.data["status"] == "finished" for e in ring(daemon, sid))
            if status["state"] == "idle" and not status["automaticQueue"] and finished and \
                    any(e.type == "turn_complete" and e.prompt_id.startswith("auto") for e in ring(daemon, sid)):
                return titles
            await trio.sleep(0.02)


def todos_of(events) -> list[dict]:
    plans = [e.data["update"]["entries"] for e in events if e.type == "session_update"
             and e.data["update"]["sessionUpdate"] == "plan"]
    return plans[-1] if plans else []


async def run_showcase(settings: Settings | None, tmp_path) -> tuple[list, list[str]]:
    model = ShowcaseModel(answer_seconds=0.3, background_command=QUICK)
    async with live_daemon(model=model, settings=settings, state_dir=tmp_path / "state") as (daemon, client):
        sid = (await client.post("/session", json={"cwd": str(work(tmp_path))})).json()["sessionId"]
        r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "Show me"}]})
        assert r.status_code == 202
        titles = await approve_until_idle(daemon, client, sid)
        return ring(daemon, sid), titles


async def test_the_first_answer_shows_permission_background_markdown_and_todos(tmp_path):
    with trio.fail_after(60):
        events, titles = await run_showcase(None, tmp_path)
    assert titles == ["ls -la", QUICK]  # the default approval mode asks for both commands
    text = text_of(events)
    assert "## What you just saw" in text and "```python" in text and "| Feature | Where it showed |" in text
    chunks = [e for e in events if e.type == "session_update"
              and e.data["update"]["sessionUpdate"] == "agent_message_chunk"]
    assert len(chunks) > 50  # streamed in small pieces
    assert [e.data["status"] for e in events if e.type == "background_task"][:1] == ["started"]
    # The background notification's automatic turn read the check's output and reported it; the guard is
    # off, so the last todo stays open.
    assert "Background check: background check: all good. " in text
    assert [t["status"] for t in todos_of(events)] == ["completed", "completed", "completed", "in_progress"]
    assert [e.data["update"]["title"] for e in events if e.type == "session_update"
            and e.data["update"]["sessionUpdate"] == "session_info_update"] == ["Show me"]


async def test_with_the_guard_on_the_open_todo_is_continued(tmp_path):
    settings = Settings(todo_stop_guard=True)
    with trio.fail_after(60):
        events, _ = await run_showcase(settings, tmp_path)
    guard = [e for e in events if e.type == "session_update"
             and (e.data["update"].get("_meta") or {}).get("source") == "todo_stop_guard"]
    assert guard, "the guard did not continue the turn"
    assert "The Todo Stop Guard continued this turn" in text_of(events)
    assert [t["status"] for t in todos_of(events)] == ["completed"] * 4


async def test_a_later_prompt_gets_a_short_streamed_answer(tmp_path):
    model = ShowcaseModel(answer_seconds=0.3, background_command=QUICK)
    with trio.fail_after(60):
        async with live_daemon(model=model, state_dir=tmp_path / "state") as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(work(tmp_path))})).json()["sessionId"]
            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "first"}]})
            await approve_until_idle(daemon, client, sid)
            before = len(ring(daemon, sid))
            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "Plan a picnic"}]})
            while (await client.get(f"/session/{sid}/status")).json()["state"] != "idle" or \
                    not any(e.type == "turn_complete" for e in ring(daemon, sid)[before:]):
                await trio.sleep(0.02)
            later = ring(daemon, sid)[before:]
    assert "## Plan a picnic" in text_of(later)
    assert not [e for e in later if e.type == "permission_request"]
