"""Stop ordering with the prompt FIFO (spec 000, "Stop ordering" steps 1 and 2).

qwen scenarios: yields to a queued complete prompt without consuming an attempt (and no follow-up
suggestion); terminates a yielded guard when the queued prompt is cancelled; mid-turn input first
then FIFO priority; retains observed FIFO priority after mid-turn input completes the Todo.
Late drain recovery uses the session's pluggable drain source (the seam an ACP bridge installs)
to answer a drain after its two-second deadline.
"""

from __future__ import annotations

import trio

from actors._actor import PendingReply, reply_pair
from actors.session.fifo import DrainResult

from tests.actors.session.guard.harness import (
    RETRY,
    admit,
    call,
    collect,
    guard_session,
    guard_settings,
    guard_state,
    last_user,
    model_of,
    new_user_origins,
    next_automatic,
    primary_calls,
    run_prompt,
    says,
    text,
    todo_write,
    wait_for,
)


async def test_a_queued_complete_prompt_makes_the_guard_yield_without_an_attempt(autojump_clock):
    model = model_of([todo_write(2)], [{"sleep": 5}, text("stopping")], says("second request answered"),
                     says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            second = await admit(session, "the next request")
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            state = await guard_state(session)
            run2 = await collect(session, first.last_event_id, second.prompt_id)
    assert run1.stop_reason == "end_turn"
    assert run1.guard == []
    assert run2.guard == []
    calls = primary_calls(model)
    assert len(calls) == 3
    assert last_user(calls[2]).content == "the next request"
    assert state["attempts"] == 0


async def test_a_yield_suppresses_the_follow_up_suggestion(autojump_clock):
    model = model_of([todo_write(2)], [{"sleep": 5}, text("stopping")], says("second request answered"),
                     says("- try this\n- or that"))
    with trio.fail_after(60):
        async with guard_session(model, guard_settings(followup_suggestions=True)) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            second = await admit(session, "the next request")
            run2 = await collect(session, first.last_event_id, second.prompt_id)
            await wait_for(lambda: len(model.calls) == 4)
            await trio.sleep(1)
            events = []
            async with session.subscribe(last_event_id=first.last_event_id) as sub:
                while (e := sub.get_nowait()) is not None:
                    events.append(e)
    assert [c.purpose for c in model.calls] == ["primary", "primary", "primary", "suggestion"]
    suggested = [e.prompt_id for e in events if e.type == "followup_suggestion"]
    assert suggested == [second.prompt_id]
    assert run2.stop_reason == "end_turn"


async def test_a_queued_prompt_ends_the_chain_after_the_first_attempt(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), [{"sleep": 5}, text("g1")], says("next request"),
                     says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 3)
            second = await admit(session, "the next request")
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            run2 = await collect(session, first.last_event_id, second.prompt_id)
    assert run1.attempts == [1]  # the second attempt yielded to the queued prompt
    assert run2.guard == []
    assert len(primary_calls(model)) == 4


async def test_mid_turn_message_runs_first_then_fifo_priority_ends_the_turn(autojump_clock):
    model = model_of([todo_write(2)], [{"sleep": 5}, text("stopping")], says("answered the user"),
                     says("next request"), says("never"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            assert (await session.post_mid_turn_message("one more thing"))["accepted"]
            second = await admit(session, "the next request")
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            run2 = await collect(session, first.last_event_id, second.prompt_id)
    calls = primary_calls(model)
    assert len(calls) == 4
    assert new_user_origins(model, 2) == ["mid_turn"]  # the mid-turn continuation ran in the first request
    assert run1.guard == [] and run2.guard == []
    assert last_user(calls[3]).content == "the next request"


async def test_fifo_priority_holds_after_a_mid_turn_continuation_completes_the_todos(autojump_clock):
    model = model_of([todo_write(2)], [{"sleep": 5}, text("stopping")], [todo_write(0, completed=2)],
                     says("done for the user"), says("next request"), says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            assert (await session.post_mid_turn_message("finish up"))["accepted"]
            second = await admit(session, "the next request")
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            await collect(session, first.last_event_id, second.prompt_id)
    calls = primary_calls(model)
    assert len(calls) == 5
    assert run1.guard == []
    assert last_user(calls[4]).content == "the next request"


async def test_aborting_the_queued_prompt_releases_the_yielded_chain(autojump_clock):
    # The chain's own wakeup is due later. The first request yields to a queued prompt while a
    # mid-turn continuation still runs; aborting the queued prompt then ends the awaiting chain,
    # so the wakeup's automatic turn runs (it is not held back) and does not revive the guard.
    model = model_of(
        [todo_write(2), call("schedule_wakeup", delay=60, note="check back")],
        [{"sleep": 5}, text("stopping")],
        [{"sleep": 5}, text("answered the user")],  # the mid-turn continuation
        says("woke up"), says("never"), says("never"),
    )
    with trio.fail_after(600):
        async with guard_session(model) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            assert (await session.post_mid_turn_message("one more thing"))["accepted"]
            queued = await admit(session, "queued then aborted")
            await wait_for(lambda: len(model.calls) == 3)
            assert (await session.status())["queuedPromptPriority"] is True
            assert await session.abort_prompt(queued.prompt_id)
            released = await session.status()
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            auto = await next_automatic(session, first.last_event_id)
            state = await guard_state(session)
    assert released["queuedPromptPriority"] is False
    assert released["todoStopGuard"]["armed"] is False
    assert run1.guard == []
    assert auto.guard == []
    assert last_user(primary_calls(model)[3]).content == "@wakeup: check back"
    assert len(primary_calls(model)) == 4
    assert state["armed"] is False


async def test_a_queued_trusted_retry_takes_over_the_yielded_chain(autojump_clock):
    # FIFO priority is released when the queued prompt is a trusted retry: it continues the chain.
    model = model_of([todo_write(2)], [{"sleep": 5}, text("stopping")], says("retried"), says("g1"), says("g2"),
                     says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            second = await admit(session, "retry", RETRY)
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            run2 = await collect(session, first.last_event_id, second.prompt_id)
            state = await session.status()
    assert run1.guard == []
    assert run2.attempts == [1, 2, 2]
    assert len(primary_calls(model)) == 5
    assert state["queuedPromptPriority"] is False


async def test_releasing_a_yield_does_not_undo_a_lifecycle_invalidation(autojump_clock, tmp_path):
    # The chain yielded to a queued prompt while a mid-turn continuation runs. The cwd changes
    # (trust cleared; the live turn's late results may not re-arm), then the queued prompt is
    # aborted. The continuation's late todo write must still not re-arm the guard.
    (tmp_path / "elsewhere").mkdir()
    model = model_of(
        [todo_write(2)],
        [{"sleep": 5}, text("stopping")],
        [{"sleep": 5}, todo_write(2)],             # the mid-turn continuation writes late
        says("continuation done"), says("never"), says("never"), says("never"),
    )
    with trio.fail_after(600):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            assert (await session.post_mid_turn_message("one more thing"))["accepted"]
            queued = await admit(session, "queued then aborted")
            await wait_for(lambda: len(model.calls) == 3)
            await session.change_cwd("elsewhere")
            assert await session.abort_prompt(queued.prompt_id)
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            state = await guard_state(session)
    assert run1.guard == []
    assert len(primary_calls(model)) == 4
    assert state["armed"] is False


class SlowDrainSource:
    """A bridge-style drain source whose first watched drain answers late (after the 2 s deadline)."""

    def __init__(self, nursery, late: DrainResult, after: float) -> None:
        self._nursery = nursery
        self._late = late
        self._after = after
        self.calls: list[bool] = []

    def __call__(self, watch: bool) -> PendingReply:
        reply, pending = reply_pair()
        self.calls.append(watch)
        if watch and self.calls.count(True) == 1:  # the first drain of the stop path
            async def answer_late() -> None:
                await trio.sleep(self._after)
                reply.send(self._late)

            self._nursery.start_soon(answer_late)
        else:
            reply.send(DrainResult((), (), False))
        return pending


async def test_a_late_drain_answer_is_recovered_but_its_queued_prompt_snapshot_is_dropped(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), [{"sleep": 5}, text("g1")],
                     says("answered the late note"), says("g1 again"), says("g2"), says("never"))
    late = DrainResult(("LATE-NOTE",), (), True)  # a stale "hasQueuedPrompt" rides along
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery, guard_session(model) as session:
            source = SlowDrainSource(nursery, late, after=3)
            await session.set_drain_source(source)
            run = await run_prompt(session)
    calls = primary_calls(model)
    # The stop went on without the slow drain: guard stream 1 went out ...
    assert last_user(calls[2]).origin == "guard"
    # ... and the late messages were injected with the next drain, as new user input.
    assert new_user_origins(model, 3) == ["mid_turn"] and "LATE-NOTE" in last_user(calls[3]).content
    # The stale queued-prompt snapshot did not make the guard yield.
    assert run.attempts == [1, 1, 2, 2]
    assert len(calls) == 6
    assert source.calls.count(True) >= 3
