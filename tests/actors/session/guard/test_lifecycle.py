"""Lifecycle resets (spec 000, "Trusted state"): what a new prompt, a trusted retry, a mid-turn
message and the trust-clearing lifecycle events do to the work chain.

qwen scenarios: failed chain cleared by new ordinary prompt; counts a started-then-failed stream
and resumes only the final attempt on trusted retry; recaptures baseline when retry has no trusted
state; no resume after cwd change; no revival after plan enter/leave; late Todo write can't re-arm
after trust clears as its stream starts; mid-turn input first + budget reset ([1,1,2,2], 6 calls).
"""

from __future__ import annotations

import pytest
import trio

from actors import CountingIds, open_daemon
from actors.guard import continuation_prompt

from tests.actors.session.guard.harness import (
    RETRY,
    admit,
    call,
    collect,
    guard_script,
    guard_session,
    guard_settings,
    guard_state,
    last_user,
    model_of,
    new_user_origins,
    primary_calls,
    run_prompt,
    says,
    text,
    todo_write,
    virtual_now,
    wait_for,
)


def failing_guard_script() -> list:
    """A todo write, a natural stop, then guard stream 1 starts and fails after commit."""
    return [[todo_write(2)], says("stopping"), [text("working"), {"fail": {"code": "server_error"}}]]


async def test_a_new_prompt_after_exhaustion_starts_unarmed(autojump_clock):
    model = model_of(*guard_script(), says("second answer"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            first = await run_prompt(session)
            second = await run_prompt(session, "something else")
            state = await guard_state(session)
    assert first.attempts == [1, 2, 2]
    assert second.guard == []
    assert len(primary_calls(model)) == 5
    assert state == {**state, "armed": False, "attempts": 0, "suspended": False, "exhaustionReported": False}


async def test_a_new_ordinary_prompt_clears_a_retry_paused_chain(autojump_clock):
    model = model_of(*failing_guard_script(), says("unrelated answer"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            failed = await run_prompt(session)
            paused = await guard_state(session)
            fresh = await run_prompt(session, "a new request")
            state = await guard_state(session)
    assert failed.errored and failed.attempts == [1]
    assert paused["armed"] and paused["retryPaused"] and paused["attempts"] == 1
    assert fresh.guard == []
    assert len(primary_calls(model)) == 4
    assert state["armed"] is False and state["attempts"] == 0


@pytest.mark.parametrize("meta", [RETRY, {"continueLastTurn": True}], ids=["retry", "continueLastTurn"])
async def test_a_trusted_retry_resumes_only_the_final_attempt(autojump_clock, meta):
    # "counts a started-then-failed stream and resumes only the final attempt on trusted retry"
    model = model_of(*failing_guard_script(), says("resumed"), says("final"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            failed = await run_prompt(session)
            retried = await run_prompt(session, "retry", meta)
            state = await guard_state(session)
    assert failed.errored and failed.end.data["code"] == "server_error"
    assert failed.attempts == [1]
    assert retried.stop_reason == "end_turn"
    assert retried.attempts == [2, 2]  # only the final attempt, then exhaustion
    calls = primary_calls(model)
    assert len(calls) == 5
    assert last_user(calls[4]).content == continuation_prompt(2, 2)
    assert state["attempts"] == 2 and state["exhaustionReported"]


async def test_a_retry_without_trusted_state_starts_a_new_chain(autojump_clock):
    # After exhaustion nothing trusted is left: a retry is a fresh, unarmed chain.
    model = model_of(*guard_script(), says("retried"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            await run_prompt(session)
            retried = await run_prompt(session, "retry", RETRY)
            state = await guard_state(session)
    assert retried.guard == []
    assert len(primary_calls(model)) == 5
    assert state["armed"] is False and state["suspended"] is False


async def test_a_retry_without_trusted_state_recaptures_the_background_baseline(autojump_clock):
    # A wakeup from the first (unarmed) request is old news for the retry's new chain: no deferral.
    model = model_of(
        [call("schedule_wakeup", delay=3600, note="later")], says("scheduled"),
        [todo_write(2)], says("stopping"), says("g1"), says("g2"),
    )
    with trio.fail_after(600):
        async with guard_session(model) as session:
            await run_prompt(session, "schedule something")
            retried = await run_prompt(session, "retry", RETRY)
    assert retried.attempts == [1, 2, 2]
    assert len(primary_calls(model)) == 6


async def _fail_then(session, action) -> None:
    await run_prompt(session)
    assert (await guard_state(session))["retryPaused"]
    await action(session)


async def _plan_round_trip(session) -> None:
    await session.set_approval_mode("plan")
    await session.set_approval_mode("yolo")


async def _fork(session) -> None:
    await session.snapshot()


CLEARING = [
    pytest.param(lambda s: s.rewind(0), id="rewind"),
    pytest.param(lambda s: s.load(), id="load"),
    pytest.param(_plan_round_trip, id="plan-enter-leave"),
    pytest.param(_fork, id="fork"),
]


@pytest.mark.parametrize("action", CLEARING)
async def test_trust_clearing_events_stop_a_trusted_retry_from_continuing(autojump_clock, tmp_path, action):
    model = model_of(*failing_guard_script(), says("answered"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model, state_dir=tmp_path) as session:
            await _fail_then(session, action)
            cleared = await guard_state(session)
            retried = await run_prompt(session, "retry", RETRY)
    assert cleared["armed"] is False and cleared["attempts"] == 0
    assert retried.guard == []
    assert len(primary_calls(model)) == 4


async def test_a_cwd_change_stops_a_trusted_retry_from_continuing(autojump_clock, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    model = model_of(*failing_guard_script(), says("answered"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            await _fail_then(session, lambda s: s.change_cwd("elsewhere"))
            retried = await run_prompt(session, "retry", RETRY)
    assert retried.guard == []
    assert len(primary_calls(model)) == 4


KEEPING = [
    pytest.param(lambda s: s.set_model("another-model"), id="model"),
    pytest.param(lambda s: s.set_approval_mode("auto-edit"), id="auto-edit"),
    pytest.param(lambda s: s.set_approval_mode("default"), id="default-mode"),
]


@pytest.mark.parametrize("action", KEEPING)
async def test_model_and_non_plan_mode_changes_keep_the_chain(autojump_clock, action):
    model = model_of(*failing_guard_script(), says("resumed"), says("final"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            await _fail_then(session, action)
            kept = await guard_state(session)
            retried = await run_prompt(session, "retry", RETRY)
    assert kept["armed"] and kept["attempts"] == 1
    assert retried.attempts == [2, 2]
    assert len(primary_calls(model)) == 5


async def test_a_mid_turn_message_keeps_activation_and_starts_a_fresh_stage(autojump_clock):
    model = model_of(
        [todo_write(2)], says("stopping"),
        [{"sleep": 5}, text("guard one")],  # guard stream 1: the user writes meanwhile
        says("answering the user"), says("g1 again"), says("g2"), says("never"),
    )
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 3)
            posted = await session.post_mid_turn_message("also check the tests")
            assert posted["accepted"]
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
    calls = primary_calls(model)
    assert len(calls) == 6
    assert run.attempts == [1, 1, 2, 2]
    assert new_user_origins(model, 3) == ["mid_turn"]  # the user continuation, without a guard prompt
    assert "also check the tests" in last_user(calls[3]).content
    assert last_user(calls[4]).content == continuation_prompt(1, 2)
    assert last_user(calls[5]).content == continuation_prompt(2, 2)


@pytest.mark.parametrize("invalidate", ["cwd", "fork"])
async def test_a_late_todo_write_after_trust_cleared_cannot_rearm(autojump_clock, tmp_path, invalidate):
    (tmp_path / "elsewhere").mkdir()
    model = model_of([{"sleep": 5}, todo_write(2)], says("stopping"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 1)
            if invalidate == "cwd":
                await session.change_cwd("elsewhere")
            else:
                await session.snapshot()
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            state = await guard_state(session)
    assert run.guard == []
    assert len(primary_calls(model)) == 2
    assert state["armed"] is False


async def test_entering_plan_mode_while_running_clears_the_chain_at_the_stop(autojump_clock):
    model = model_of([todo_write(2)], [{"sleep": 5}, text("stopping")], says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            await session.set_approval_mode("plan")
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            await session.set_approval_mode("yolo")  # leaving Plan does not revive it
            state = await guard_state(session)
    assert run.guard == []
    assert len(primary_calls(model)) == 2
    assert state["armed"] is False


async def test_a_mid_turn_message_during_the_final_attempt_opens_a_new_stage(autojump_clock):
    # The bound is two consecutive automatic streams without new user input.
    model = model_of([todo_write(2)], says("stopping"), says("g1"), [{"sleep": 5}, text("g2")],
                     says("answering the user"), says("g1 again"), says("g2 again"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 4)
            assert (await session.post_mid_turn_message("keep going"))["accepted"]
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
    assert run.attempts == [1, 2, 1, 2, 2]
    assert len(primary_calls(model)) == 7
    assert new_user_origins(model, 4) == ["mid_turn"]


async def test_a_forked_session_starts_unarmed(autojump_clock):
    model = model_of(*failing_guard_script(), says("fork answered"), says("never"), says("never"))
    with trio.fail_after(60):
        async with open_daemon(guard_settings(), model=model, ids=CountingIds(), now=virtual_now) as daemon:
            session, _ = await daemon.create_session()
            await run_prompt(session)
            fork = await daemon.fork_session(session.session_id)
            source_state = await guard_state(session)
            retried = await run_prompt(fork, "retry", RETRY)
            fork_state = await guard_state(fork)
    assert source_state["armed"] is False  # the fork cleared the source's trust too
    assert retried.guard == []
    assert fork_state["armed"] is False
    assert len(primary_calls(model)) == 4


async def test_guard_continuations_are_not_user_turns_for_rewind(autojump_clock):
    model = model_of(*guard_script(), says("second"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            await run_prompt(session)
            with pytest.raises(ValueError, match="from 0 to 0"):
                await session.rewind(1)
            await run_prompt(session, "second request")
            kept = await session.rewind(1)
    # Everything of the first request, guard continuations included, is kept.
    first_request = [m for m in primary_calls(model)[3].messages if m.role != "system"]  # the prompt is no history
    assert kept == len(first_request) + 1
