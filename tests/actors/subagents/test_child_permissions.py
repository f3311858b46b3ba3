"""A child session started by a session's ``agent`` tool takes that session's permission rules: it is never
laxer than its parent, and what the user allowed there runs unasked in it too (in-process daemon on loopback,
scripted models routed by the brief)."""

from __future__ import annotations

import trio

from actors import Settings
from actors.permission_rules import RuleLists
from tests.transport.mcp.harness import mcp_daemon, routed, signal


def _child_tool_results(model) -> list[str]:
    return [m.content for call in model.routes["kid-brief"].calls for m in call.messages if m.role == "tool"]


async def _delegate(daemon, cwd, **create) -> None:
    parent, _ = await daemon.create_session(str(cwd), **create)
    async with parent.subscribe(last_event_id=0) as events:
        await parent.prompt("parent: delegate")
        with trio.fail_after(20):
            async for event in events:
                assert event.type != "permission_request", event.data  # nobody answers in these tests
                if event.type == "turn_complete":
                    break
    with trio.fail_after(20):
        await daemon.subagents.get("kid").ended.wait()


async def test_a_child_cannot_read_what_its_parents_own_deny_rule_refuses(tmp_path):
    """The session's own ``Read(./secret/**)`` (read_file never asks: only a rule keeps it out), in yolo."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("the-secret\n")
    model = routed(
        parent=[[{"tool_call": {"name": "agent", "arguments": {"name": "kid", "brief": "kid-brief"}}}],
                [{"text": "delegated"}], [{"text": "noted"}]],
        **{"kid-brief": [[{"tool_call": {"name": "read_file", "arguments": {"path": "secret/key"}}}],
                         *signal("goal_reached", summary="read it")]})
    async with mcp_daemon(model=model, workspace=str(tmp_path), settings=Settings(approval_mode="yolo")) as (
            daemon, _):
        await _delegate(daemon, tmp_path, permissions=RuleLists(deny=("Read(./secret/**)",)))
    results = _child_tool_results(model)
    assert not any("the-secret" in r for r in results), results
    assert any(f"deny rule Read(/{tmp_path}/secret/**) matches" in r for r in results), results


async def test_what_the_user_allowed_in_the_parent_runs_unasked_in_its_child(tmp_path):
    """The parent's own allow rules (an "always allow" makes one) pass to its child, in ``default`` mode:
    the child's ``echo`` and the start itself run without a question nobody would answer."""
    model = routed(
        parent=[[{"tool_call": {"name": "agent", "arguments": {"name": "kid", "brief": "kid-brief"}}}],
                [{"text": "delegated"}], [{"text": "noted"}]],
        **{"kid-brief": [[{"tool_call": {"name": "shell", "arguments": {"command": "echo child-ran"}}}],
                         *signal("goal_reached", summary="echoed")]})
    async with mcp_daemon(model=model, workspace=str(tmp_path)) as (daemon, _):
        await _delegate(daemon, tmp_path, permissions=RuleLists(allow=("Bash(echo:*)", "agent")))
        assert daemon.subagents.get("kid").end_reason == "goal_reached"
    assert any("child-ran" in r for r in _child_tool_results(model)), _child_tool_results(model)
