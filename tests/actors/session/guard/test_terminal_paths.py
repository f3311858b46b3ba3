"""Suspension and terminal paths (spec 000, "Stop ordering", last paragraph): user or permission
cancellation, PostToolUse stop, loop protection and token limits hard-suspend the chain; API
errors pause it for a trusted retry.

qwen scenarios: reports cancellation; no closure after PostToolUse stop; mid-turn input can't
revive PostToolUse-stopped guard; token-limit blocked continuation neither consumes nor revives;
failed Guard compression not counted; unarmed error-time behaviour.
"""

from __future__ import annotations

import pytest
import trio

from tests.actors.session.guard.harness import (
    RETRY,
    admit,
    call,
    collect,
    echo_json_hook,
    guard_session,
    guard_settings,
    guard_state,
    hooks_for,
    model_of,
    primary_calls,
    run_prompt,
    says,
    text,
    todo_write,
    wait_for,
)


@pytest.mark.parametrize("how", ["cancel", "abort"])
async def test_user_cancel_during_a_guard_stream_suspends_the_chain(autojump_clock, how):
    model = model_of([todo_write(2)], says("stopping"), [{"sleep": 100}, text("late")], says("never"))
    with trio.fail_after(600):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 3)
            if how == "cancel":
                assert await session.cancel()
            else:
                assert await session.abort_prompt(admitted.prompt_id)
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            await trio.sleep(300)  # nothing more happens by itself
            state = await guard_state(session)
    assert run.stop_reason == "cancelled"
    assert run.attempts == [1]
    assert len(primary_calls(model)) == 3
    assert state["suspended"] and state["attempts"] == 1


async def test_a_mid_turn_message_cannot_revive_a_cancelled_chain(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), [{"sleep": 100}, text("late")], says("answer"),
                     says("never"), says("never"))
    with trio.fail_after(600):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 3)
            await session.cancel()
            await collect(session, admitted.last_event_id, admitted.prompt_id)
            # A trusted retry finds no trusted state: it is a new chain, with no guard.
            retried = await run_prompt(session, "retry", RETRY)
    assert retried.guard == []
    assert len(primary_calls(model)) == 4


async def test_permission_cancellation_suspends_the_chain(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), [call("shell", command="echo hi")], says("never"))
    with trio.fail_after(60):
        async with guard_session(model, guard_settings(approval_mode="default")) as session:
            admitted = await admit(session)
            async with session.subscribe(last_event_id=admitted.last_event_id) as sub:
                async for event in sub:
                    if event.type == "permission_request":
                        assert await session.vote(event.data["requestId"], "cancelled")
                        break
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            state = await guard_state(session)
    assert run.stop_reason == "cancelled"
    assert run.attempts == [1]
    assert len(primary_calls(model)) == 3
    assert state["suspended"]


async def test_post_tool_use_continue_false_suspends_after_the_write_was_observed(tmp_path):
    hook = echo_json_hook(tmp_path, "stop.sh", {"continue": False, "stopReason": "enough"})
    settings = guard_settings(hooks=hooks_for("PostToolUse", hook, matcher="todo_write"))
    model = model_of([todo_write(2)], says("never"), says("never"), says("never"))
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.stop_reason == "end_turn"
    assert run.guard == []
    assert len(primary_calls(model)) == 1
    # Observed before the PostToolUse hook (armed, two open items), then hard-suspended by it.
    assert state["armed"] and state["unfinishedCount"] == 2 and state["suspended"]


async def test_post_tool_use_stop_in_a_guard_stream_ends_without_tool_closure(tmp_path):
    hook = echo_json_hook(tmp_path, "stop.sh", {"continue": False})
    settings = guard_settings(hooks=hooks_for("PostToolUse", hook, matcher="shell_output"))
    model = model_of([todo_write(2)], says("stopping"), [call("shell_output", task_id="none")], says("never"))
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.attempts == [1]
    assert len(primary_calls(model)) == 3
    assert state["suspended"]


async def test_loop_protection_on_a_repeated_failing_call_suspends(autojump_clock):
    same = [call("shell_output", f"c{i}", task_id="missing") for i in range(3)]
    model = model_of([todo_write(2)], says("stopping"), same, says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.stop_reason == "max_turn_requests"
    assert run.attempts == [1]
    assert len(primary_calls(model)) == 3
    assert state["suspended"]


async def test_loop_protection_on_too_many_tool_calls_suspends(autojump_clock):
    many = [call("shell_output", f"c{i}", task_id=f"t{i}") for i in range(3)]
    model = model_of([todo_write(2)], says("stopping"), many, says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model, guard_settings(max_tool_calls_per_turn=3)) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.stop_reason == "max_turn_requests"
    assert run.attempts == [1]
    assert state["suspended"]


async def test_a_token_limit_on_the_final_attempt_neither_consumes_nor_revives(autojump_clock):
    # Guard stream 1 answers at length; the final attempt no longer fits the context window. (The room
    # leaves the first guard send under the compaction threshold, 80% of a window the base shares.)
    model = model_of([todo_write(2)], says("stopping"), says("x" * 8000), says("never"), says("later"),
                     context_window=1500)
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
            calls_before = len(primary_calls(model))
            model.context_window = None
            later = await run_prompt(session, "a new request")
    assert run.stop_reason == "max_tokens"
    assert run.attempts == [1]  # attempt 2 was refused before a stream existed: not consumed
    assert calls_before == 3
    assert state["attempts"] == 1 and state["suspended"]
    assert later.guard == []
    # The refused guard prompt was not kept in the conversation.
    origins = [m.origin for m in primary_calls(model)[-1].messages if m.role == "user"]
    assert origins.count("guard") == 1


async def test_a_compaction_failure_before_a_guard_send_suspends_without_consuming(autojump_clock):
    # The first guard send would need compaction, which cannot happen (too little history).
    model = model_of([todo_write(2)], says("y" * 2000), says("never"), says("never"), context_window=700)
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.stop_reason == "end_turn"
    assert run.guard == []
    assert len(primary_calls(model)) == 2
    assert state["attempts"] == 0 and state["suspended"]


async def test_an_api_error_pauses_the_chain_for_a_trusted_retry(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), {"refuse": {"code": "rate_limited"}}, says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.errored and run.end.data["code"] == "rate_limited"
    assert state["armed"] and state["retryPaused"] and not state["suspended"]


async def test_a_disconnected_client_never_approves_a_guard_streams_tool(autojump_clock, tmp_path):
    marker = tmp_path / "ran"
    model = model_of([todo_write(2)], says("stopping"), [call("shell", command=f"touch '{marker}'")],
                     says("never"), says("never"))
    with trio.fail_after(600):
        async with guard_session(model, guard_settings(approval_mode="default"), workspace=str(tmp_path)) as session:
            admitted = await admit(session)
            async with session.subscribe(last_event_id=admitted.last_event_id) as sub:
                async for event in sub:
                    if event.type == "permission_request":
                        break  # ... and the only client goes away
            while (await session.status())["state"] != "idle":
                await trio.sleep(1)
            waited = trio.current_time()
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            state = await guard_state(session)
    assert waited >= 10  # the grace period passed first
    assert not marker.exists()
    assert run.stop_reason == "cancelled"
    assert run.attempts == [1]
    assert state["suspended"]
