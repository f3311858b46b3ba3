"""External Stop hooks and the guard (spec 000, "Stop ordering" steps 3 and 5).

Hooks are real ``/bin/sh`` scripts, so these tests run on the real clock (a virtual clock would
jump past a hook's timeout while the subprocess runs).

qwen scenarios: coalesces a blocking Stop hook with the guard (one call containing both texts);
counters independent; reports Guard exhaustion before coalesced hook reaches its cap; hook cap
suspends; still runs when external hooks are disabled; automatic turns never call Stop hooks;
independent cron/notification turn arms its own guard.
"""

from __future__ import annotations

import json

import trio

from actors.guard import continuation_prompt

from tests.actors.session.guard.harness import (
    admit,
    call,
    collect,
    count_lines,
    guard_session,
    guard_settings,
    guard_state,
    guard_script,
    hook_script,
    hooks_for,
    last_user,
    model_of,
    new_user_origins,
    next_automatic,
    primary_calls,
    run_prompt,
    says,
    todo_write,
    user_messages,
    wait_for,
)

HOOK_REASON = "HOOK-REASON: the tests are red"


def blocking_hook(directory, *, times: int | None = None, log=None) -> str:
    """A Stop hook that blocks (every time, or only its first ``times`` runs), logging each run."""
    log = log or directory / "stop-hook.log"
    block = json.dumps({"decision": "block", "reason": HOOK_REASON})
    limit = "" if times is None else f'[ "$(wc -l < \'{log}\')" -le {times} ] || {{ echo "{{}}"; exit 0; }}\n'
    return hook_script(directory, "stop-hook.sh",
                       f"cat > /dev/null\necho ran >> '{log}'\n{limit}printf '%s' '{block}'")


def logging_hook(directory, log) -> str:
    return hook_script(directory, "stop-log.sh", f"cat > /dev/null\necho ran >> '{log}'\necho '{{}}'")


async def test_a_blocking_stop_hook_and_the_guard_coalesce_into_one_call(tmp_path):
    settings = guard_settings(hooks=hooks_for("Stop", blocking_hook(tmp_path, times=1)))
    model = model_of(*guard_script())
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
    calls = primary_calls(model)
    assert len(calls) == 4
    assert run.attempts == [1, 2, 2]
    # One continuation call carries both reasons: the hook's first, then the guard's.
    assert new_user_origins(model, 2) == ["hook", "guard"]
    added = user_messages(calls[2])[-2:]
    assert added[0].content == HOOK_REASON
    assert added[1].content == continuation_prompt(1, 2)
    assert new_user_origins(model, 3) == ["guard"]  # the hook did not block again
    assert count_lines(tmp_path / "stop-hook.log") == 3  # consulted at each of the three natural stops


async def test_hook_and_guard_counters_are_independent(tmp_path):
    # The hook always blocks (cap 3); the guard stops after its two attempts while the hook goes on.
    settings = guard_settings(hooks=hooks_for("Stop", blocking_hook(tmp_path)), stop_hook_block_cap=3)
    model = model_of([todo_write(2)], *[says(f"reply {i}") for i in range(6)])
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert len(primary_calls(model)) == 5  # todo, stop, hook+guard 1, hook+guard 2, hook alone
    assert new_user_origins(model, 2) == ["hook", "guard"]
    assert new_user_origins(model, 3) == ["hook", "guard"]
    assert new_user_origins(model, 4) == ["hook"]
    assert run.attempts == [1, 2, 2]
    # Exhaustion is reported before the hook's cap overrides the stop.
    texts = [e.update["content"]["text"] for e in run.events if e.update and "content" in e.update]
    exhausted = next(i for i, t in enumerate(texts) if "stopped after 2 attempts" in t)
    capped = next(i for i, t in enumerate(texts) if "Stop hook blocked continuation 3 consecutive" in t)
    assert exhausted < capped
    assert run.stop_reason == "end_turn" and state["suspended"]


async def test_the_stop_hook_cap_ends_the_turn_and_suspends_the_guard(tmp_path):
    settings = guard_settings(hooks=hooks_for("Stop", blocking_hook(tmp_path)), stop_hook_block_cap=1)
    model = model_of(*guard_script())
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert len(primary_calls(model)) == 3  # the coalesced hook + guard 1 call, then the cap
    assert run.attempts == [1]
    assert any(e.update and "Stop hook blocked continuation 1 consecutive time(s)" in
               e.update.get("content", {}).get("text", "") for e in run.events)
    assert run.stop_reason == "end_turn"
    assert state["suspended"] and state["attempts"] == 1


async def test_disable_all_hooks_leaves_the_guard_running(tmp_path):
    settings = guard_settings(hooks=hooks_for("Stop", blocking_hook(tmp_path)), disable_all_hooks=True)
    model = model_of(*guard_script())
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
    assert count_lines(tmp_path / "stop-hook.log") == 0
    assert run.attempts == [1, 2, 2]
    assert len(primary_calls(model)) == 4
    assert all(m.origin != "hook" for m in user_messages(primary_calls(model)[-1]))


async def test_automatic_turns_never_call_stop_hooks_but_run_their_own_guard(tmp_path):
    log = tmp_path / "ran.log"
    settings = guard_settings(hooks=hooks_for("Stop", logging_hook(tmp_path, log)))
    model = model_of(
        [call("schedule_wakeup", delay=0.3, note="resume")], says("scheduled"),
        [todo_write(2)], says("auto stop"), says("auto g1"), says("auto g2"), says("never"),
    )
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            first = await run_prompt(session)
            assert count_lines(log) == 1  # the foreground stop ran the hook
            auto = await next_automatic(session, first.end.id)
    assert first.guard == []
    # The wakeup's turn establishes its own chain and runs the built-in guard only.
    assert auto.attempts == [1, 2, 2]
    assert count_lines(log) == 1
    assert len(primary_calls(model)) == 6
    assert user_messages(primary_calls(model)[2])[-1].origin == "automatic"
    assert [m.origin for m in user_messages(primary_calls(model)[-1])].count("hook") == 0


async def test_mid_turn_input_seen_with_a_queued_prompt_after_a_slow_hook_still_runs_first(tmp_path):
    # "If one drain observes both a mid-turn message and a queued full prompt, the mid-turn message
    # runs first and FIFO priority remains in force." Here that drain is the one after a slow hook.
    hook = hook_script(tmp_path, "slow.sh", "cat > /dev/null\nsleep 1\necho '{}'")
    settings = guard_settings(hooks=hooks_for("Stop", hook))
    model = model_of([todo_write(2)], says("stopping"), says("answered the user"), says("queued answered"),
                     says("never"), says("never"))
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            await trio.sleep(0.3)  # the Stop hook is running now
            assert (await session.post_mid_turn_message("MIDTURN-NOTE"))["accepted"]
            second = await admit(session, "the queued request")
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            await collect(session, first.last_event_id, second.prompt_id)
    calls = primary_calls(model)
    seen = [m.content for c in calls for m in user_messages(c)]
    assert any("MIDTURN-NOTE" in t for t in seen), "the drained mid-turn message never reached the model"
    assert new_user_origins(model, 2) == ["mid_turn"]
    assert last_user(calls[3]).content == "the queued request"
    assert run1.guard == []


async def test_a_failed_guard_compaction_keeps_the_coalesced_hook_continuation(tmp_path):
    # The coalesced send needs compaction, which fails: the guard part is dropped and its chain
    # suspended, but the external hook's continuation still goes out.
    settings = guard_settings(hooks=hooks_for("Stop", blocking_hook(tmp_path, times=1)))
    model = model_of([todo_write(2)], says("y" * 2000), says("hook handled"), says("never"), says("never"))
    model.context_window = 700
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert len(primary_calls(model)) == 3
    assert new_user_origins(model, 2) == ["hook"]
    assert run.guard == []
    assert state["suspended"] and state["attempts"] == 0
