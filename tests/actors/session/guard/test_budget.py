"""Budget and stream-commit semantics (spec 000, "Continuations and observability").

The counter commits only once the response stream is returned: an error before it (refusal,
cancellation) does not consume an attempt, a failure after it does. Every guard-attributable
stream counts, tool follow-ups included; a completed list may use the remaining attempt for tool
closure; the second stream's tool calls run but open no third stream.

qwen scenarios: counts every Guard-attributable tool follow-up as a model call; closes Guard tools
with the remaining attempt after completion ([1,2], unfinished 0); mid-turn input sponsors tool
response after completion; keeps tool responses of the final stream.
"""

from __future__ import annotations

import trio

from actors.guard import continuation_prompt

from tests.actors.session.guard.harness import (
    RETRY,
    admit,
    call,
    collect,
    guard_session,
    guard_state,
    last_user,
    model_of,
    new_user_origins,
    primary_calls,
    run_prompt,
    says,
    text,
    todo_write,
    wait_for,
)


async def test_a_refused_guard_send_does_not_consume_the_attempt(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), {"refuse": {"code": "overloaded"}},
                     says("retrying"), says("g1"), says("g2"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            refused = await run_prompt(session)
            state = await guard_state(session)
            retried = await run_prompt(session, "retry", RETRY)
    assert refused.errored and refused.guard == []
    assert state["attempts"] == 0 and state["retryPaused"]
    assert retried.attempts == [1, 2, 2]  # the whole budget is still there
    calls = primary_calls(model)
    assert len(calls) == 6
    # The refused guard prompt was not kept; the retry's prompt was sent instead.
    assert last_user(calls[3]).origin == "prompt"
    assert [m.origin for m in calls[3].messages if m.role == "user"].count("guard") == 0


async def test_a_failure_after_commit_consumes_the_attempt(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), [{"fail": {"code": "server_error"}}],
                     says("retrying"), says("g2"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            failed = await run_prompt(session)
            state = await guard_state(session)
            retried = await run_prompt(session, "retry", RETRY)
    assert failed.errored and failed.attempts == [1]
    assert state["attempts"] == 1
    assert retried.attempts == [2, 2]
    assert len(primary_calls(model)) == 5


async def test_the_attempt_commits_only_when_the_stream_is_returned(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), {"delay": 10, "steps": [text("g1")]}, says("g2"),
                     says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 3)  # the guard send is out, the stream not yet back
            before = await guard_state(session)
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
    assert before["attempts"] == 0
    assert run.attempts == [1, 2, 2]


async def test_cancelling_before_the_stream_is_returned_does_not_consume(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), {"delay": 10, "steps": [text("g1")]}, says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 3)
            await session.cancel()
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            state = await guard_state(session)
    assert run.stop_reason == "cancelled"
    assert run.guard == []
    assert state["attempts"] == 0 and state["suspended"]


async def test_every_guard_attributable_tool_follow_up_counts(autojump_clock):
    # Guard stream 1 calls a tool; sending its result is guard stream 2 (with the final prompt).
    model = model_of([todo_write(2)], says("stopping"), [call("shell_output", task_id="none")], says("g2"),
                     says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
    calls = primary_calls(model)
    assert len(calls) == 4
    assert run.attempts == [1, 2, 2]
    assert calls[3].messages[-2].role == "tool"
    assert last_user(calls[3]).content == continuation_prompt(2, 2)


async def test_tool_closure_after_guard_stream_one_completes_every_todo(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), [todo_write(0, completed=2)], says("all done"),
                     says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    calls = primary_calls(model)
    assert len(calls) == 4
    assert run.attempts == [1, 2]
    assert run.unfinished == [2, 0]
    # The closure stream sends the tool result without another unfinished-Todo prompt.
    assert calls[3].messages[-1].role == "tool"
    assert new_user_origins(model, 3) == []
    assert state["armed"] is False and state["attempts"] == 2
    assert run.stop_reason == "end_turn"


async def test_the_second_guard_stream_runs_its_tool_calls_but_opens_no_third(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), says("g1"),
                     [call("shell_output", "late-call", task_id="none")],
                     says("third stream must not happen"), says("next request"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            count = len(primary_calls(model))
            await run_prompt(session, "next")
    assert count == 4
    assert run.attempts == [1, 2, 2]
    assert run.stop_reason == "end_turn"
    # The tool ran and its result was kept in the conversation.
    tool_results = [m for m in primary_calls(model)[-1].messages if m.role == "tool"]
    assert any(m.tool_call_id == "late-call" for m in tool_results)
    assert any(e.update and e.update.get("toolCallId") == "late-call" for e in run.events)


async def test_completing_the_list_in_the_second_stream_keeps_results_without_a_third(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), says("g1"), [todo_write(0, completed=2, call_id="fin")],
                     says("third stream must not happen"), says("next"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            count = len(primary_calls(model))
            await run_prompt(session, "next")
    assert count == 4
    assert run.attempts == [1, 2]  # no exhaustion report: nothing is unfinished
    assert any(m.tool_call_id == "fin" for m in primary_calls(model)[-1].messages if m.role == "tool")


async def test_mid_turn_input_sponsors_the_tool_result_send_after_completion(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), [{"sleep": 5}, todo_write(0, completed=2)],
                     says("answering the user"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 3)
            assert (await session.post_mid_turn_message("how is it going?"))["accepted"]
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            state = await guard_state(session)
    assert len(primary_calls(model)) == 4
    assert run.attempts == [1]  # the remaining attempt was not used
    assert new_user_origins(model, 3) == ["mid_turn"]
    assert state["attempts"] == 0  # the user input started a fresh stage
