"""A subagent's child session and the Todo Stop Guard (spec 000; decided in issue 16).

Decision: a child session runs no guard of its own, whatever the daemon's setting (qwen's subagents
run none; the run's goal loop is its continuation, and a guard would add up to two streams to every
turn of it). Either way, a child's todo lists never arm its parent's guard: the parent's guard only
observes the parent's own built-in todo_write results, and a run reaches the parent as a background
notification. The second test gives the child a guard anyway to show the parent is unaffected.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors.session.handle import SessionHandle
from actors.subagents import SubagentConfig
from tests.actors.session.guard.harness import todo_write, virtual_now

BASE = "http://127.0.0.1:9"  # nothing listens: these children never signal
MARK = "kid-brief"


class Routed:
    """The parent's script, and the child's (chosen by the brief in its first user message)."""

    name = "routed"

    def __init__(self) -> None:
        self.parent = load_script({"responses": [
            [{"tool_call": {"name": "agent", "arguments": {"name": "kid", "brief": f"{MARK}: list the dead code"}}}],
            [{"text": "Delegated; waiting for the subagent."}],
            [{"text": "Noted what the subagent found."}],  # the automatic turn for its notification
            [{"text": "a parent guard continuation would be this"}],
        ]})
        self.child = load_script({"responses": [
            [todo_write(2, word="dead-code")],
            [{"text": "Listed two modules; stopping here."}],
            [{"text": "child guard continuation one"}],
            [{"text": "child guard continuation two"}],
            [{"text": "never"}],
        ]})

    def stream(self, request: Any) -> Any:
        first = next((m.content for m in request.messages if m.role == "user"), "")
        return (self.child if MARK in first else self.parent).stream(request)


def guard_updates(events: list[Any]) -> list[Any]:
    return [e for e in events if ((e.update or {}).get("_meta") or {}).get("source") == "todo_stop_guard"]


async def run_parent_and_child() -> tuple[Routed, dict[str, list[Any]], dict[str, Any], dict[str, Any]]:
    model = Routed()
    events: dict[str, list[Any]] = {}
    sessions: dict[str, Any] = {}

    def observe(session: Any) -> None:
        sessions[session.session_id] = session
        session.bus.observers.append(events.setdefault(session.session_id, []).append)

    settings = Settings(todo_stop_guard=True, approval_mode="yolo")
    async with open_daemon(settings, model=model, ids=CountingIds(), now=virtual_now) as daemon:
        daemon.subagents.base_url = BASE
        daemon.subagents.config = SubagentConfig(session_approval_mode="yolo")
        daemon.session_observers.append(observe)
        parent, _ = await daemon.create_session()
        await parent.prompt("parent: delegate the dead-code search")
        with trio.fail_after(60):
            while not any(e.type == "turn_complete" and (e.prompt_id or "").startswith("auto")
                          for e in events[parent.session_id]):
                await trio.sleep(0.5)  # until the parent's turn for the run's notification has ended
        parent_guard = (await parent.status())["todoStopGuard"]
    child_id = next(sid for sid in sessions if sid != parent.session_id)
    child_guard = sessions[child_id].chain.guard.summary()
    return model, {"parent": events[parent.session_id], "child": events[child_id]}, parent_guard, child_guard


def plans(events: list[Any]) -> list[Any]:
    return [e for e in events if (e.update or {}).get("sessionUpdate") == "plan"]


async def test_a_child_session_runs_no_guard_and_its_todo_lists_never_arm_the_parent(autojump_clock):
    model, events, parent_guard, child_guard = await run_parent_and_child()
    # The child: its trusted write is its plan, but no guard continues its turn.
    assert child_guard["enabled"] is False
    assert len(plans(events["child"])) == 1 and guard_updates(events["child"]) == []
    assert len(model.child.calls) == 2
    # The parent: three calls (the agent call, its stop, the notification turn), unarmed throughout.
    assert len(model.parent.calls) == 3
    assert plans(events["parent"]) == [] and guard_updates(events["parent"]) == []
    assert parent_guard["armed"] is False and parent_guard["unfinishedCount"] == 0


async def test_even_a_child_with_a_guard_never_arms_its_parent(autojump_clock, monkeypatch: pytest.MonkeyPatch):
    async def keep_the_guard(self: SessionHandle) -> None:  # the other decision
        pass

    monkeypatch.setattr(SessionHandle, "turn_off_todo_stop_guard", keep_the_guard)
    model, events, parent_guard, child_guard = await run_parent_and_child()
    assert child_guard["enabled"] is True
    assert [u.update["_meta"]["attempt"] for u in guard_updates(events["child"])] == [1, 2, 2]
    assert len(model.child.calls) == 4
    assert len(model.parent.calls) == 3 and guard_updates(events["parent"]) == []
    assert parent_guard["armed"] is False and parent_guard["unfinishedCount"] == 0
