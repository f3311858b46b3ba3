"""Subagent runs end to end: the official ``mcp`` client on ``/mcp``, child sessions signalling over HTTP.

Each run's child session reaches its signal URL as an MCP client configured from its own MCP config
file; the scripted model makes it call ``goal_reached`` / ``need_help`` as tool calls.
"""

from __future__ import annotations

import trio

from tests.transport.mcp.harness import (
    await_end, call, mcp_daemon, mcp_session, plain, routed, signal, start, status, text_of, wedged,
)


async def test_a_run_that_reaches_its_goal_records_it_as_self_reported(tmp_path):
    model = routed(alpha=plain("looked around") + signal("goal_reached", summary="all tests pass"))
    report = tmp_path / "alpha.report"
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            started = await start(mcp, name="alpha", brief="alpha: fix the build", goal="the build is green",
                                  report_file=str(report))
            assert started["maxTurns"] == 5
            ended = await await_end(mcp, "alpha")
            assert ended["outcome"] == "ended"
            answer, text = await status(mcp, "alpha")
    assert answer["endReason"] == "goal_reached"
    assert answer["state"] == "idle"
    assert (answer["turn"], answer["maxTurns"]) == (2, 5)
    assert "turn 2 of 5" in text
    assert "self-reported" in text
    written = report.read_text()
    assert "goal_reached" in written and "self-reported" in written and "all tests pass" in written
    assert "end reason: goal_reached" in written
    # The second turn re-prompted toward the goal; there was no third.
    prompts = [m.content for r in model.routes["alpha"].calls for m in r.messages if m.role == "user"]
    assert any("turn 2 of 5" in p and "the build is green" in p for p in prompts)
    assert not any("turn 3 of 5" in p for p in prompts)


async def test_a_run_that_needs_help_shows_its_own_state(tmp_path):
    model = routed(beta=signal("need_help", question="which database should I migrate?"))
    report = tmp_path / "beta.report"
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            await start(mcp, name="beta", brief="beta: migrate", goal="migrated", report_file="beta.report")
            resumed = await await_end(mcp, "beta")
            assert resumed["outcome"] == "needs_help"
            with trio.fail_after(10):
                while not daemon.subagents.get("beta").ended.is_set():
                    await trio.sleep(0.01)
            answer, text = await status(mcp, "beta")
    assert answer["state"] == "needs_help"
    assert answer["endReason"] == "need_help"
    assert answer["question"] == "which database should I migrate?"
    assert "turn 1 of 5" in text and "which database" in text
    written = report.read_text()
    assert "need_help" in written and "which database should I migrate?" in written
    assert "end reason: need_help" in written


async def test_a_run_that_hits_the_cap_says_so_out_loud(tmp_path):
    model = routed(gamma=plain("one") + plain("two"))
    report = tmp_path / "gamma.report"
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            await start(mcp, name="gamma", brief="gamma: optimise", goal="twice as fast", max_turns=2,
                        report_file=str(report))
            assert (await await_end(mcp, "gamma"))["outcome"] == "ended"
            answer, text = await status(mcp, "gamma")
    assert answer["endReason"] == "turn_cap"
    assert (answer["turn"], answer["maxTurns"]) == (2, 2)
    assert "harness limit" in answer["done"] and "never reported reached" in answer["done"]
    written = report.read_text()
    assert "harness limit of 2 turn(s) was reached and the goal was never reported reached" in written
    assert "end reason: turn_cap" in written
    assert written.count("Turn ") == 2  # one line per turn, each appended


async def test_a_run_without_a_goal_is_one_turn(tmp_path):
    model = routed(delta=plain("done"))
    report = tmp_path / "delta.report"
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            started = await start(mcp, name="delta", brief="delta: list files", max_turns=4,
                                  report_file=str(report))
            assert started["maxTurns"] == 1
            assert (await await_end(mcp, "delta"))["outcome"] == "ended"
            answer, text = await status(mcp, "delta")
    assert answer["endReason"] == "no_goal"
    assert answer["state"] == "idle"
    assert "turn 1 of 1" in text  # the idle answer keeps the turn counter
    assert "end reason: no_goal" in report.read_text()


async def test_status_while_wedged_and_while_idle(tmp_path):
    model = routed(stuck=wedged(60), calm=plain("ok"))
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            await start(mcp, name="stuck", brief="stuck: think hard", goal="an answer", max_turns=3)
            await start(mcp, name="calm", brief="calm: say ok")
            await await_end(mcp, "calm")
            idle, idle_text = await status(mcp, "calm")
            first, text = await status(mcp, "stuck")
            await trio.sleep(0.6)
            second, _ = await status(mcp, "stuck")
            # A wait that times out answers "underway" rather than failing.
            waited = await mcp.call_tool("await_resume", {"name": "stuck", "timeout_s": 0.2})
            assert waited.structured_content["outcome"] == "underway"
            stopped = await mcp.call_tool("stop", {"name": "stuck"})
            assert stopped.structured_content["endReason"] == "stopped"
    assert idle["state"] == "idle" and "turn 1 of 1" in idle_text
    assert first["state"] == "running" and first["endReason"] is None
    assert "turn 1 of 3" in text and "underway" in text
    assert second["lastEventAgeS"] >= first["lastEventAgeS"] + 0.5


async def test_list_and_unknown_names(tmp_path):
    model = routed(one=plain())
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            await start(mcp, name="one", brief="one: go")
            await await_end(mcp, "one")
            listed = await mcp.call_tool("list", {})
            assert [r["name"] for r in listed.structured_content["runs"]] == ["one"]
            assert "turn 1 of 1" in text_of(listed)
            missing = await mcp.call_tool("status", {"name": "nobody"})
            assert missing.is_error
            taken = await mcp.call_tool("start", {"name": "one", "brief": "again", "runner": "command"})
            assert taken.is_error and "no command runner" in text_of(taken)


async def test_a_run_whose_child_waits_for_a_vote_says_so_and_goes_on_once_it_is_answered(tmp_path):
    """The child of a session runner asks before a command (default mode); nobody answers it but a client of
    that session. Before, status said only "running, turn 1 of 1; last event 180 s ago" for good."""
    model = routed(delta=[[{"tool_call": {"name": "shell", "arguments": {"command": "echo hi"}}}],
                          [{"text": "ran it"}]])
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            await start(mcp, name="delta", brief="delta: run a command")
            with trio.fail_after(10):
                while not (answer := (await status(mcp, "delta"))[0]).get("waitingForVote"):
                    await trio.sleep(0.01)
            answer, text = await status(mcp, "delta")
            child = answer["childSessionId"]
            [vote] = answer["waitingForVote"]
            assert vote["title"] == "echo hi"
            assert f"Waiting for a permission vote in session {child}: echo hi" in text
            assert f"POST /session/{child}/permission/{vote['requestId']}" in text
            listed = (await call(mcp, "list")).structured_content["runs"]
            assert listed[0]["waitingForVote"] == [vote]
            # A client of the child session answers it; the run goes on and ends.
            assert await daemon.get(child).vote(vote["requestId"], "selected", "proceed_once")
            ended = await await_end(mcp, "delta")
            assert ended["outcome"] == "ended" and ended["waitingForVote"] == []
    assert ended["endReason"] == "no_goal"
