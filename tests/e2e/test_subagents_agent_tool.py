"""A session's ``agent`` tool: a run as background work (kind ``agent``) whose end arrives as a notification."""

from __future__ import annotations

import shlex
import sys

import trio

from actors import Settings
from tests.transport.mcp.harness import mcp_daemon, routed, signal


def _notifications(events: list) -> list[dict]:
    """The background results shown to clients (qwen serve's form: an agent chunk marked as one)."""
    return [e.data["update"] for e in events if e.type == "session_update"
            and (e.data["update"].get("_meta") or {}).get("source") == "background_notification"]


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
                    if event.type == "permission_request":  # default mode: starting a run is asked for
                        await parent.vote(event.data["requestId"], "selected", "proceed_once")
                    if event.type == "turn_complete" and _notifications(seen):
                        break
        run = daemon.subagents.get("kid")
        status = await parent.status()
    asked = [e.data["toolCall"] for e in seen if e.type == "permission_request"]
    assert [(a["kind"], a["title"]) for a in asked] == [
        ("execute", "agent kid: start a child session with the brief “kid-brief: count the files”")]
    tasks = [e.data for e in seen if e.type == "background_task"]
    started = [t for t in tasks if t["status"] == "started"]
    finished = [t for t in tasks if t["status"] == "finished"]
    assert started and started[0]["kind"] == "agent"
    assert finished and finished[0]["kind"] == "agent" and finished[0]["state"] == "completed"
    assert finished[0]["taskId"] == started[0]["taskId"]
    (shown,) = _notifications(seen)
    assert shown["sessionUpdate"] == "agent_message_chunk"
    assert shown["_meta"]["backgroundTask"]["kind"] == "agent"
    assert shown["_meta"]["backgroundTask"]["taskId"] == started[0]["taskId"]
    assert "goal_reached" in shown["content"]["text"] and "there are 3 files" in shown["content"]["text"]
    # The model reads the notification itself, in its automatic turn.
    notification = model.routes["parent"].calls[2].messages[-1].content
    assert notification.startswith("<task-notification") and 'kind="agent"' in notification
    assert started[0]["taskId"] in notification
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
    # yolo: starting a run asks in default mode (the test above answers it).
    settings = Settings(approval_mode="yolo")
    async with mcp_daemon(model=model, workspace=str(tmp_path), settings=settings) as (daemon, base):
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


async def _one_prompt(daemon, cwd, *, mode: str | None = None, vote: str | None = None) -> list:
    """One parent prompt to its turn's end, answering each permission request with ``vote``; every event."""
    parent, _ = await daemon.create_session(str(cwd))
    if mode is not None:
        await parent.set_approval_mode(mode)
    seen: list = []
    async with parent.subscribe(last_event_id=0) as events:
        await parent.prompt("parent: delegate")
        with trio.fail_after(20):
            async for event in events:
                seen.append(event)
                if event.type == "permission_request" and vote is not None:
                    await parent.vote(event.data["requestId"], "selected", vote)
                if event.type == "turn_complete":
                    break
    return seen


def _asked(seen: list) -> list[dict]:
    return [e.data["toolCall"] for e in seen if e.type == "permission_request"]


def _results(seen: list) -> list[str]:
    return [str(e.data["update"].get("rawOutput") or e.data["update"].get("content")) for e in seen
            if e.type == "session_update" and e.data["update"].get("sessionUpdate") == "tool_call_update"
            and e.data["update"].get("status") in ("completed", "failed")]


async def test_plan_mode_refuses_the_agent_tool_and_no_run_starts(tmp_path):
    """A session in plan may not execute: no more through a child session, whatever the daemon's mode."""
    model = routed(parent=[[{"tool_call": {"name": "agent", "arguments": {"name": "kid", "brief": "kid-brief"}}}],
                           [{"text": "refused"}]],
                   **{"kid-brief": signal("goal_reached", summary="ran anyway")})
    settings = Settings(approval_mode="auto-edit")
    async with mcp_daemon(model=model, workspace=str(tmp_path), settings=settings) as (daemon, _):
        seen = await _one_prompt(daemon, tmp_path, mode="plan")
        assert daemon.subagents.list() == [] and daemon.session_count == 1
    assert _asked(seen) == []
    assert any("plan mode" in r and "no run was started" in r for r in _results(seen)), _results(seen)
    assert not any(e.type == "background_task" for e in seen)


async def test_default_mode_asks_before_a_command_runner_runs_the_brief(tmp_path):
    """The request names the run, the CLI that runs and the brief; a rejection starts nothing."""
    template = f"{shlex.quote(sys.executable)} -c {{brief}} {{config}}"
    brief = "import pathlib; pathlib.Path('ran.txt').write_text('x')"
    model = routed(parent=[[{"tool_call": {"name": "agent", "arguments": {
        "name": "cli", "brief": brief, "runner": "command"}}}], [{"text": "rejected"}]])
    settings = Settings(subagents={"runners": {"command": {"template": template}}})
    async with mcp_daemon(model=model, workspace=str(tmp_path), settings=settings) as (daemon, _):
        seen = await _one_prompt(daemon, tmp_path, vote="cancel")
        assert daemon.subagents.list() == []
    (request,) = _asked(seen)
    program = sys.executable
    assert request["kind"] == "execute" and request["rawInput"]["brief"] == brief
    assert request["title"] == f"agent cli: start the command runner ({program}) with the brief “{brief}”"
    assert any("denied" in r and "no run was started" in r for r in _results(seen)), _results(seen)
    assert not (tmp_path / "ran.txt").exists()


async def test_one_request_covers_the_start_and_the_report_file(tmp_path):
    """With a report_file the start and the daemon's appends to it are asked for at once: allowed, the run
    starts and its done message is appended without a second request."""
    model = routed(parent=[[{"tool_call": {"name": "agent", "arguments": {
        "name": "kid", "brief": "kid-brief: work", "report_file": "report.md"}}}],
        [{"text": "delegated"}], [{"text": "noted"}]],
        **{"kid-brief": signal("goal_reached", summary="done")})
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, _):
        seen = await _one_prompt(daemon, tmp_path, vote="proceed_once")
        run = daemon.subagents.get("kid")
        with trio.fail_after(10):
            await run.ended.wait()
    (request,) = _asked(seen)
    assert request["title"] == ("agent kid: start a child session with the brief “kid-brief: work”, "
                                "and append its done message to report.md")
    assert request["locations"] == [{"path": str(tmp_path / "report.md")}]
    assert "done" in (tmp_path / "report.md").read_text()
