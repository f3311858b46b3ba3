"""Background relevance and automatic turns (spec 000, "Stop ordering", relevant background input).

Wakeups and cron run under virtual time; background shells are real subprocesses on the real clock.

qwen scenarios: ignores pre-existing background tasks; defers for new shell / new @wakeup;
continues the same guard when its task completes; already-used attempt retained when related task
completes; old notification can't displace a chain waiting on its own task; pre-existing task
notification establishes an independent chain; related result can't re-arm after hard stop / after
cwd change; resumes an API-paused chain for its related background result; coalesces unrelated
recurring cron fires while waiting; history restoration (here: a cwd change) unblocks deferred work;
follow-up suggestions suppressed while a chain can resume.
"""

from __future__ import annotations

import trio

from tests.actors.session.guard.harness import (
    admit,
    call,
    collect,
    guard_session,
    guard_settings,
    guard_state,
    last_user,
    model_of,
    next_automatic,
    primary_calls,
    run_prompt,
    says,
    todo_write,
    wait_for,
)


def wakeup(delay: float, note: str = "check back") -> dict:
    return call("schedule_wakeup", delay=delay, note=note)


def shell_bg(command: str) -> dict:
    return call("shell", command=command, run_in_background=True)


# ----------------------------------------------------------------- baseline isolation


async def test_a_pre_existing_wakeup_does_not_block_a_new_prompts_guard(autojump_clock):
    model = model_of([wakeup(3600)], says("scheduled"), [todo_write(2)], says("stop"), says("g1"), says("g2"))
    with trio.fail_after(600):
        async with guard_session(model) as session:
            await run_prompt(session, "schedule it")
            run = await run_prompt(session, "now the real work")
    assert run.attempts == [1, 2, 2]
    assert len(primary_calls(model)) == 6


async def test_a_pre_existing_running_shell_does_not_block_a_new_prompts_guard(tmp_path):
    model = model_of([shell_bg("sleep 30")], says("started"), [todo_write(2)], says("stop"), says("g1"),
                     says("g2"))
    with trio.fail_after(20):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            await run_prompt(session, "start a server")
            run = await run_prompt(session, "now the real work")
            status = await session.status()
    assert [t["status"] for t in status["backgroundTasks"]] == ["running"]
    assert run.attempts == [1, 2, 2]


# ----------------------------------------------------------------- deferral and related results


async def test_a_wakeup_scheduled_in_the_chain_defers_the_guard_until_it_fires(autojump_clock):
    model = model_of([todo_write(2), wakeup(30)], says("waiting for the wakeup"),
                     says("woke"), says("g1"), says("g2"), says("never"))
    with trio.fail_after(600):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            deferred = await guard_state(session)
            calls_then = len(primary_calls(model))
            auto = await next_automatic(session, run.end.id)
    assert run.stop_reason == "end_turn" and run.guard == []
    assert calls_then == 2
    assert deferred["armed"] and deferred["attempts"] == 0 and not deferred["suspended"]
    assert last_user(primary_calls(model)[2]).content == "@wakeup: check back"
    assert auto.attempts == [1, 2, 2]  # the wakeup's turn continues the same chain
    assert trio.current_time() >= 30


async def test_a_shell_started_by_a_guard_stream_defers_and_its_result_keeps_the_budget(tmp_path):
    model = model_of([todo_write(2)], says("stop"), [shell_bg("sleep 0.3; echo built")],
                     says("read the result"), says("g2"), says("never"))
    with trio.fail_after(20):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
            calls_then = len(primary_calls(model))
            auto = await next_automatic(session, run.end.id)
    assert run.attempts == [1]  # the shell's tool result closed no further guard stream: deferred
    assert calls_then == 3
    first_auto = primary_calls(model)[3]
    assert last_user(first_auto).origin == "automatic" and 'task_id="shell-1"' in last_user(first_auto).content
    assert auto.attempts == [2, 2]  # the same chain, its used attempt retained
    assert len(primary_calls(model)) == 5


async def test_an_unrelated_notification_waits_for_the_chain_then_runs_unarmed(tmp_path):
    model = model_of(
        [shell_bg("sleep 0.4")], says("old shell started"),                      # request 1 (unarmed)
        [todo_write(2), shell_bg("sleep 1.2")], says("waiting on my build"),     # request 2: deferred
        says("build done"), says("g1"), says("g2"),                             # related: same chain
        says("old shell noted"),                                                 # unrelated, afterwards
        says("never"),
    )
    with trio.fail_after(20):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            first = await admit(session, "start the old shell")
            second = await admit(session, "real work")
            run2 = await collect(session, first.last_event_id, second.prompt_id)
            await wait_for(lambda: len(model.calls) >= 5, timeout=10)
            # The old shell finished first, yet the chain's own result ran first.
            related = await next_automatic(session, run2.end.id)
            unrelated = await next_automatic(session, related.end.id)
    assert run2.guard == []
    calls = primary_calls(model)
    assert 'task_id="shell-2"' in last_user(calls[4]).content
    assert related.attempts == [1, 2, 2]
    assert 'task_id="shell-1"' in last_user(calls[7]).content
    assert unrelated.guard == []
    assert len(calls) == 8


async def test_an_unrelated_wakeup_is_held_back_while_the_chain_can_resume(autojump_clock):
    model = model_of(
        [wakeup(20, "old reminder")], says("scheduled"),
        [todo_write(2), wakeup(300, "my build")], says("waiting"),
        says("build checked"), says("g1"), says("g2"),
        says("old reminder handled"), says("never"),
    )
    with trio.fail_after(3000):
        async with guard_session(model) as session:
            await run_prompt(session, "remind me")
            run = await run_prompt(session, "real work")
            await trio.sleep(100)
            held = await session.status()
            related = await next_automatic(session, run.end.id)
            unrelated = await next_automatic(session, related.end.id)
    assert held["automaticQueue"] == 1 and held["state"] == "idle"
    calls = primary_calls(model)
    assert last_user(calls[4]).content == "@wakeup: my build"
    assert related.attempts == [1, 2, 2]
    assert last_user(calls[7]).content == "@wakeup: old reminder"
    assert unrelated.guard == []


async def test_unrelated_recurring_cron_fires_coalesce_while_the_chain_waits(autojump_clock):
    model = model_of(
        [call("cron_create", schedule="* * * * *", prompt="poll the queue", recurring=True)], says("created"),
        [todo_write(2), wakeup(320, "my build")], says("waiting"),
        says("build checked"), says("g1"), says("g2"),
        says("polled"), says("polled again"), says("polled again"),
    )
    with trio.fail_after(3000):
        async with guard_session(model) as session:
            await run_prompt(session, "start polling")
            run = await run_prompt(session, "real work")
            await trio.sleep(310)
            held = await session.status()
            related = await next_automatic(session, run.end.id)
            cron = await next_automatic(session, related.end.id)
    assert held["automaticQueue"] == 1  # five fires, one queued item
    assert related.attempts == [1, 2, 2]
    cron_text = last_user(primary_calls(model)[7]).content
    assert cron_text.startswith("poll the queue") and "fired 5 times" in cron_text
    assert cron.guard == []


async def test_a_cwd_change_releases_held_back_work_and_a_related_result_cannot_resume(autojump_clock, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    model = model_of(
        [wakeup(20, "old reminder")], says("scheduled"),
        [todo_write(2), wakeup(300, "my build")], says("waiting"),
        says("old reminder handled"), says("build checked"), says("never"), says("never"),
    )
    with trio.fail_after(3000):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            await run_prompt(session, "remind me")
            run = await run_prompt(session, "real work")
            await trio.sleep(100)
            assert (await session.status())["automaticQueue"] == 1
            await session.change_cwd("elsewhere")
            released = await next_automatic(session, run.end.id)
            released_at = trio.current_time()
            later = await next_automatic(session, released.end.id)
    calls = primary_calls(model)
    assert last_user(calls[4]).content == "@wakeup: old reminder" and released_at < 300
    assert last_user(calls[5]).content == "@wakeup: my build"
    assert released.guard == [] and later.guard == []  # no resume after the cwd change
    assert len(calls) == 6


async def test_a_related_result_cannot_revive_a_hard_stopped_chain(autojump_clock):
    model = model_of([todo_write(2), wakeup(60)], [{"sleep": 10}, {"text": "stopping"}],
                     says("woke"), says("never"), says("never"))
    with trio.fail_after(600):
        async with guard_session(model) as session:
            admitted = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            await session.cancel()
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            auto = await next_automatic(session, run.end.id)
            state = await guard_state(session)
    assert run.stop_reason == "cancelled"
    assert auto.guard == []
    assert len(primary_calls(model)) == 3
    assert state["suspended"]


async def test_a_related_result_resumes_an_api_paused_chain(autojump_clock):
    model = model_of([todo_write(2), wakeup(60)], [{"fail": {"code": "server_error"}}],
                     says("woke"), says("g1"), says("g2"), says("never"))
    with trio.fail_after(600):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            paused = await guard_state(session)
            auto = await next_automatic(session, run.end.id)
    assert run.errored
    assert paused["retryPaused"] and paused["armed"]
    assert auto.attempts == [1, 2, 2]
    assert len(primary_calls(model)) == 5


async def test_follow_up_suggestions_wait_while_a_deferred_chain_can_resume(autojump_clock):
    model = model_of([todo_write(2), wakeup(30)], says("waiting"), says("woke"), says("g1"), says("g2"),
                     says("never"))
    with trio.fail_after(600):
        async with guard_session(model, guard_settings(followup_suggestions=True)) as session:
            run = await run_prompt(session)
            await next_automatic(session, run.end.id)
    # No suggestion call competed with the chain; the automatic turn got the next scripted answers.
    assert [c.purpose for c in model.calls] == ["primary"] * 5
    assert not [e for e in run.events if e.type == "followup_suggestion"]


async def test_a_queued_related_notification_defers_the_guard(tmp_path):
    # The chain's shell already finished when the model stops: its queued notification is relevant.
    model = model_of([todo_write(2), shell_bg("true")], [{"sleep": 1.0}, {"text": "stopping"}],
                     says("noted"), says("g1"), says("g2"), says("never"))
    with trio.fail_after(20):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
            auto = await next_automatic(session, run.end.id)
    assert any(e.type == "background_task" and e.data["status"] == "finished" for e in run.events)
    assert run.guard == []
    assert auto.attempts == [1, 2, 2]
    assert len(primary_calls(model)) == 5


async def test_held_back_work_runs_once_a_new_prompt_settles_even_through_an_error(autojump_clock):
    model = model_of(
        [wakeup(20, "old reminder")], says("scheduled"),
        [todo_write(2), wakeup(300, "my build")], says("waiting"),
        {"refuse": {"code": "server_error"}},               # a new request fails before arming
        says("old reminder handled"), says("never"), says("never"),
    )
    with trio.fail_after(3000):
        async with guard_session(model) as session:
            await run_prompt(session, "remind me")
            await run_prompt(session, "real work")
            await trio.sleep(100)
            assert (await session.status())["automaticQueue"] == 1
            failed = await run_prompt(session, "something else")
            released = await next_automatic(session, failed.end.id)
            released_at = trio.current_time()
    assert failed.errored
    assert last_user(primary_calls(model)[5]).content == "@wakeup: old reminder"
    assert released_at < 300 and released.guard == []
