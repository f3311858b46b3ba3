"""A session's ``agent`` tool: a run as background work (kind ``agent``) whose end arrives as a notification."""

from __future__ import annotations

import trio

from tests.transport.mcp.harness import mcp_daemon, routed, signal


def _user_texts(events: list) -> list[str]:
    return [e.data["update"]["content"]["text"] for e in events if e.type == "session_update"
            and e.data["update"].get("sessionUpdate") == "user_message_chunk"]


async def test_the_agent_tool_runs_a_subagent_as_background_work(tmp_path):
    model = routed(
        parent=[
            [{"text": "Delegating. "}, {"tool_call": {"name": "agent", "arguments": {
                "name": "kid", "brief": "kid-brief: count the files", "goal": "a count"}}}],
            [{"text": "The subagent is on it."}],
            [{"text": "Noted the subagent's claim."}],  # the automatic turn for its notification
        ],
        **{"kid-brief": signal("goal_reached", summary="there are 3 files")},
    )
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        parent, _ = await daemon.create_session(str(tmp_path))
        seen: list = []
        async with parent.subscribe(last_event_id=0) as events:
            await parent.prompt("parent: please delegate the counting")
            with trio.fail_after(20):
                async for event in events:
                    seen.append(event)
                    if event.type == "turn_complete" and any(
                            "<task-notification" in t for t in _user_texts(seen)):
                        break
        run = daemon.subagents.get("kid")
        status = await parent.status()
    tasks = [e.data for e in seen if e.type == "background_task"]
    started = [t for t in tasks if t["status"] == "started"]
    finished = [t for t in tasks if t["status"] == "finished"]
    assert started and started[0]["kind"] == "agent"
    assert finished and finished[0]["kind"] == "agent" and finished[0]["state"] == "completed"
    assert finished[0]["taskId"] == started[0]["taskId"]
    notification = next(t for t in _user_texts(seen) if "<task-notification" in t)
    assert 'kind="agent"' in notification and started[0]["taskId"] in notification
    assert "goal_reached" in notification and "self-reported" in notification
    assert "there are 3 files" in notification
    assert run.end_reason == "goal_reached" and run.status()["turn"] == 1
    assert [t["kind"] for t in status["backgroundTasks"]] == ["agent"]
    # The tool's own result told the model where the end will come from.
    tool_results = [m for m in model.routes["parent"].calls[1].messages if m.role == "tool"]
    assert "started in the background" in tool_results[0].content


async def test_an_agent_item_is_live_while_the_run_is_and_kill_task_stops_it(tmp_path):
    model = routed(
        parent=[
            [{"tool_call": {"name": "agent", "arguments": {"name": "slow", "brief": "slow-brief: ponder",
                                                           "goal": "an answer"}}}],
            [{"text": "Started."}],
            [{"text": "It was stopped."}],
        ],
        **{"slow-brief": [{"delay": 60, "steps": [{"text": "late"}]}]},
    )
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        parent, _ = await daemon.create_session(str(tmp_path))
        async with parent.subscribe(last_event_id=0) as events:
            await parent.prompt("parent: start something slow")
            with trio.fail_after(20):
                async for event in events:
                    if event.type == "turn_complete":
                        break
        item = next(t for t in (await parent.status())["backgroundTasks"] if t["kind"] == "agent")
        assert item["status"] == "running"
        # Live agent work is in the baseline a new work chain snapshots (the Todo Stop Guard's view).
        assert item["taskId"] in parent._session.background.snapshot()
        assert await parent._session.background.kill(item["taskId"])
        run = daemon.subagents.get("slow")
        with trio.fail_after(10):
            await run.ended.wait()
        assert run.end_reason == "stopped"
        finished = next(t for t in (await parent.status())["backgroundTasks"] if t["kind"] == "agent")
        assert finished["status"] == "killed"
