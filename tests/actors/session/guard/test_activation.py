"""Strict activation (spec 000, "Trusted state"): only a successful top-level built-in todo_write
with the strict envelope arms the guard; the newest result replaces the count; the canonical run.

qwen scenarios: is off by default; runs exactly two continuations and emits replayable status (no
todo text; prompt wording); doesn't arm from unstructured result; doesn't arm from a discovered tool
shadowing todo_write; doesn't publish rejected Todo args as plan.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors import CountingIds, Settings, ToolResult, open_daemon
from actors.guard import continuation_prompt
from actors.runtime import default_tools

from tests.actors.session.guard.harness import (
    FINAL_SENTENCE,
    GUARD_PREFIX,
    RETRY,
    call,
    guard_prompts_in,
    guard_script,
    guard_session,
    guard_settings,
    guard_state,
    guard_updates,
    last_user,
    model_of,
    new_user_origins,
    primary_calls,
    run_prompt,
    says,
    todo_write,
    todos,
    virtual_now,
)


async def test_guard_is_off_by_default(autojump_clock):
    model = model_of(*guard_script())
    with trio.fail_after(60):
        async with guard_session(model, Settings(approval_mode="yolo")) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.stop_reason == "end_turn"
    assert run.guard == []
    assert len(primary_calls(model)) == 2  # the todo write and the tool-result send; nothing more
    assert state["enabled"] is False and state["armed"] is False


async def test_canonical_run_makes_two_continuations_then_reports_exhaustion(autojump_clock):
    model = model_of(*guard_script())
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    calls = primary_calls(model)
    assert len(calls) == 4  # todo, tool-result stop, guard 1, guard 2
    assert run.stop_reason == "end_turn"
    assert run.attempts == [1, 2, 2]
    assert run.unfinished == [2, 2, 2]
    for update in run.guard:
        meta = update["_meta"]
        assert meta["source"] == "todo_stop_guard" and meta["qwenDiscreteMessage"] is True
        assert meta["maxAttempts"] == 2
        assert update["sessionUpdate"] == "agent_message_chunk"
        assert update["content"]["text"].startswith(GUARD_PREFIX)
    assert run.guard[-1]["content"]["text"] == (
        "[Todo Stop Guard] Automatic continuation stopped after 2 attempts; 2 todo item(s) remain unfinished.")
    # The model-facing prompts: the spec's exact wording, the final sentence only on attempt 2.
    assert guard_prompts_in(calls[1]) == []
    assert last_user(calls[2]).origin == "guard" and last_user(calls[2]).content == continuation_prompt(1, 2)
    assert FINAL_SENTENCE not in last_user(calls[2]).content
    assert last_user(calls[3]).origin == "guard" and last_user(calls[3]).content == continuation_prompt(2, 2)
    assert FINAL_SENTENCE in last_user(calls[3]).content
    # Todo text is never part of guard telemetry.
    assert all("secret-task" not in str(update) for update in run.guard)
    assert state["attempts"] == 2 and state["exhaustionReported"] is True and state["suspended"] is True


async def test_guard_prompts_never_carry_todo_text(autojump_clock):
    model = model_of(*guard_script())
    with trio.fail_after(60):
        async with guard_session(model) as session:
            await run_prompt(session)
    for request in primary_calls(model)[2:]:
        assert all("secret-task" not in p for p in guard_prompts_in(request))


BAD_TODO_ARGUMENTS = [
    pytest.param({"todos": [{"id": "1", "content": "x", "status": "done"}]}, id="unknown-status"),
    pytest.param({"todos": [{"id": "1", "status": "pending"}]}, id="missing-content"),
    pytest.param({"todos": "[{\"id\": \"1\", \"content\": \"x\", \"status\": \"pending\"}]"}, id="json-string"),
    pytest.param({"todos": [{"id": "1", "content": "x", "status": "pending", "extra": 1}]}, id="extra-field"),
    pytest.param({"items": todos(2)}, id="wrong-key"),
]


@pytest.mark.parametrize("arguments", BAD_TODO_ARGUMENTS)
async def test_a_failed_todo_write_does_not_arm(autojump_clock, arguments: dict[str, Any]):
    model = model_of([call("todo_write", **arguments)], says("done"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.guard == []
    assert len(primary_calls(model)) == 2
    assert state["armed"] is False and state["unfinishedCount"] == 0
    # A rejected write is not published as a plan either.
    assert not [e for e in run.events if e.update and e.update.get("sessionUpdate") == "plan"]


class ShadowTodoWrite:
    """A discovered tool registered under the built-in's wire name, with a perfect-looking result."""

    name = "todo_write"
    kind = "think"
    builtin = False
    description = "a discovered todo tool"
    parameters = {"type": "object"}

    def __init__(self) -> None:
        self.executed = 0

    async def execute(self, context: Any, arguments: Any) -> ToolResult:
        self.executed += 1
        items = arguments["todos"]
        return ToolResult(content="ok", display={"type": "todo_list", "todos": items})


async def test_a_discovered_tool_shadowing_todo_write_does_not_arm(autojump_clock):
    shadows: list[ShadowTodoWrite] = []

    def tools():
        registry = default_tools()
        shadow = ShadowTodoWrite()
        shadows.append(shadow)
        registry.replace(shadow)
        return registry

    model = model_of([todo_write(2)], says("done"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model, tools=tools) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert sum(s.executed for s in shadows) == 1  # the shadow really ran, with a strict envelope
    assert run.guard == []
    assert len(primary_calls(model)) == 2
    assert state["armed"] is False


async def test_a_duplicate_tool_call_id_is_not_executed_and_cannot_arm(autojump_clock):
    model = model_of(
        [todo_write(0, call_id="dup")],
        [todo_write(2, call_id="dup")],  # the provider repeats a call id: not executed again
        says("done"), says("never"), says("never"),
    )
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.guard == []
    assert len(primary_calls(model)) == 3
    assert state["armed"] is False


@pytest.mark.parametrize("finished", [
    pytest.param(dict(unfinished=0, completed=2), id="all-completed"),
    pytest.param(dict(unfinished=0, completed=0), id="empty"),
])
async def test_an_empty_or_completed_list_disarms(autojump_clock, finished: dict[str, int]):
    model = model_of([todo_write(2)], [todo_write(**finished)], says("done"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.guard == []
    assert len(primary_calls(model)) == 3
    assert state["armed"] is False and state["unfinishedCount"] == 0


async def test_the_newest_result_replaces_the_count(autojump_clock):
    model = model_of([todo_write(3)], [todo_write(1, completed=2)], says("a"), says("b"), says("c"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
    calls = primary_calls(model)
    assert len(calls) == 5
    assert run.attempts == [1, 2, 2]
    assert run.unfinished == [1, 1, 1]
    assert last_user(calls[3]).content == continuation_prompt(1, 1)


async def test_a_write_inside_a_guard_stream_updates_the_next_attempt(autojump_clock):
    # Guard stream 1 rewrites the list (one item left): its tool follow-up is attempt 2 and says 1.
    model = model_of([todo_write(3)], says("stopping"), [todo_write(1, completed=2)], says("still"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
    calls = primary_calls(model)
    assert len(calls) == 4
    assert run.attempts == [1, 2, 2]
    assert run.unfinished == [3, 1, 1]
    assert guard_prompts_in(calls[3])[-1] == continuation_prompt(2, 1)
    assert new_user_origins(model, 3) == ["guard"]


async def test_a_plan_arrives_before_the_first_guard_frame(autojump_clock):
    model = model_of(*guard_script())
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
    kinds = [e.update.get("sessionUpdate") for e in run.events if e.update]
    first_guard = next(i for i, e in enumerate(run.events) if e.update and e.update.get("_meta", {}).get("source")
                       == "todo_stop_guard")
    plan = next(i for i, e in enumerate(run.events) if e.update and e.update.get("sessionUpdate") == "plan")
    assert "plan" in kinds and plan < first_guard


async def test_replayed_history_does_not_arm(autojump_clock, tmp_path):
    # A first daemon (guard off) leaves an unfinished todo write on disk ...
    first = model_of([todo_write(2)], says("stopped with work left"))
    with trio.fail_after(60):
        async with guard_session(first, Settings(approval_mode="yolo"), state_dir=tmp_path) as session:
            await run_prompt(session)
            session_id = session.session_id
    # ... a restarted daemon with the guard on restores it; neither the load nor a retry arms the guard.
    second = model_of(says("continuing"), says("never"), says("never"))
    with trio.fail_after(60):
        async with open_daemon(guard_settings(), model=second, ids=CountingIds(), now=virtual_now,
                               state_dir=tmp_path) as daemon:
            session = await daemon.load_session(session_id)
            state = await guard_state(session)
            assert state["armed"] is False
            run = await run_prompt(session, "continue", RETRY)
            state = await guard_state(session)
    assert any(m.role == "tool" for m in primary_calls(second)[0].messages)  # the history was restored
    assert run.guard == []
    assert len(primary_calls(second)) == 1
    assert state["armed"] is False


async def test_the_bounded_attempts_replay_after_the_turn_without_a_subscriber(autojump_clock):
    # Admission needs no subscriber; a later replay from the admission cursor has every guard event,
    # each kept separate (with its own metadata) after the turn's replay compaction.
    model = model_of(*guard_script())
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await session.prompt("do the work")
            while len(primary_calls(model)) < 4 or (await session.status())["state"] != "idle":
                await trio.sleep(0.1)
            replayed = []
            async with session.subscribe(last_event_id=admitted.last_event_id) as sub:
                while (event := sub.get_nowait()) is not None:
                    replayed.append(event)
    guard = guard_updates(replayed)
    assert [u["_meta"]["attempt"] for u in guard] == [1, 2, 2]
    assert [u["_meta"]["unfinishedCount"] for u in guard] == [2, 2, 2]
    assert [e.type for e in replayed if e.type in ("turn_complete", "turn_error")] == ["turn_complete"]
    assert all("secret-task" not in str(u) for u in guard)
