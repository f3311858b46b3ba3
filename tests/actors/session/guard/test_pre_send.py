"""Re-checks just before a guard send goes out (spec 000, "Continuations and observability";
reference: the ``beforeSend`` hook runs *after* compression and token checks, before the send).

qwen scenarios: revalidates plan mode after continuation compression; rechecks queued prompts after
compression. History compaction is a model call of its own; anything that happens while it runs
(Plan mode, a queued prompt) must still stop the guard stream before it is sent.
"""

from __future__ import annotations

import trio

from tests.actors.session.guard.harness import (
    admit,
    call,
    collect,
    guard_prompts_in,
    guard_session,
    guard_state,
    last_user,
    model_of,
    primary_calls,
    says,
    text,
    todo_write,
    wait_for,
)

WINDOW = 1200


def compacting_script(*after: object) -> list:
    """Enough history that the first guard send needs compaction; the compaction call takes 5 s."""
    return [
        [todo_write(2)], [call("shell_output", task_id="a")], [call("shell_output", task_id="b")],
        says("z" * 3000),                                  # the natural stop; history is now long
        {"delay": 5, "steps": [text("summary")]},           # the compaction call
        *after,
    ]


async def test_compaction_happens_before_the_first_guard_send(autojump_clock):
    # The control case: nothing happens during compaction, the guard send follows it.
    model = model_of(*compacting_script(says("g1"), says("g2"), says("never")), context_window=WINDOW)
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await admit(session)
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
    assert [c.purpose for c in model.calls][:6] == ["primary"] * 4 + ["compaction", "primary"]
    assert run.attempts[0] == 1


async def test_plan_mode_set_during_compaction_stops_the_guard_send(autojump_clock):
    model = model_of(*compacting_script(says("g1"), says("g2"), says("never")), context_window=WINDOW)
    with trio.fail_after(60):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 5)  # the compaction call is running
            await session.set_approval_mode("plan")
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            state = await guard_state(session)
    after_compaction = [c for c in model.calls[5:] if c.purpose == "primary"]
    # No guard-attributable stream may be sent once Plan mode cleared trust.
    assert all(guard_prompts_in(c) == [] for c in after_compaction)
    assert run.guard == []
    assert state["armed"] is False and state["attempts"] == 0


async def test_a_prompt_queued_during_compaction_takes_priority_over_the_guard_send(autojump_clock):
    model = model_of(*compacting_script(says("queued prompt answered"), says("never"), says("never")),
                     context_window=WINDOW)
    with trio.fail_after(60):
        async with guard_session(model) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 5)  # the compaction call is running
            second = await admit(session, "the queued request")
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            await collect(session, first.last_event_id, second.prompt_id)
    calls = primary_calls(model)
    assert run1.guard == []  # yielded without consuming an attempt
    assert last_user(calls[4]).content == "the queued request"
    assert all(guard_prompts_in(c) == [] for c in calls)
