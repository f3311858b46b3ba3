"""Configuration gates (spec 000, "Configuration and safety boundary") and the feature-off baseline.

qwen scenarios: is off by default; forced off in safe / bare / plan; preserves feature-off Stop-hook
loop reporting; with the setting disabled, Stop-hook, cron, notification and prompt behaviour is
unchanged.
"""

from __future__ import annotations

import json

import pytest
import trio

from actors import Settings
from actors.settings_file import load_settings

from tests.actors.session.guard.harness import (
    admit,
    call,
    collect,
    count_lines,
    guard_script,
    guard_session,
    guard_settings,
    guard_state,
    hook_script,
    hooks_for,
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

OFF = Settings(approval_mode="yolo")


def test_the_setting_is_off_by_default_and_read_from_experimental(tmp_path):
    assert Settings().todo_stop_guard is False and Settings().guard_enabled is False
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"experimental": {"todoStopGuard": True}}))
    assert load_settings(path).guard_enabled is True


@pytest.mark.parametrize("gate", [{"safe_mode": True}, {"bare": True}], ids=["safe", "bare"])
async def test_safe_and_bare_mode_force_the_guard_off(autojump_clock, gate):
    model = model_of(*guard_script())
    with trio.fail_after(60):
        async with guard_session(model, guard_settings(**gate)) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert run.guard == []
    assert len(primary_calls(model)) == 2
    assert state["enabled"] is False


async def test_plan_approval_mode_forces_the_guard_off(autojump_clock):
    model = model_of(*guard_script())
    with trio.fail_after(60):
        async with guard_session(model, guard_settings(approval_mode="plan")) as session:
            run = await run_prompt(session)
            state = await guard_state(session)
    assert state["enabled"] is True  # enabled, but a Plan-mode write cannot arm it
    assert run.guard == []
    assert len(primary_calls(model)) == 2
    assert state["armed"] is False


async def test_off_a_queued_prompt_and_mid_turn_input_behave_as_before(autojump_clock):
    model = model_of([todo_write(2)], [{"sleep": 5}, text("stopping")], says("answered"), says("second"),
                     says("never"))
    with trio.fail_after(60):
        async with guard_session(model, OFF) as session:
            first = await admit(session)
            await wait_for(lambda: len(model.calls) == 2)
            assert (await session.post_mid_turn_message("note"))["accepted"]
            second = await admit(session, "second request")
            run1 = await collect(session, first.last_event_id, first.prompt_id)
            run2 = await collect(session, first.last_event_id, second.prompt_id)
    # Off, a stop does not drain mid-turn input: it becomes its own turn after the first request,
    # ahead of the queued prompt.
    calls = primary_calls(model)
    assert run1.guard == [] and run2.guard == []
    assert new_user_origins(model, 1) == []
    assert "note" in last_user(calls[2]).content
    assert last_user(calls[3]).content == "second request"


async def test_off_the_stop_hook_loop_is_unchanged(tmp_path):
    log = tmp_path / "hook.log"
    block = json.dumps({"decision": "block", "reason": "keep going"})
    hook = hook_script(tmp_path, "h.sh", f"cat > /dev/null\necho ran >> '{log}'\nprintf '%s' '{block}'")
    settings = Settings(approval_mode="yolo", hooks=hooks_for("Stop", hook), stop_hook_block_cap=2)
    model = model_of([todo_write(2)], says("a"), says("b"), says("c"), says("never"))
    with trio.fail_after(30):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            run = await run_prompt(session)
    assert len(primary_calls(model)) == 4
    assert new_user_origins(model, 2) == ["hook"] and new_user_origins(model, 3) == ["hook"]
    assert count_lines(log) == 2
    assert run.guard == []
    assert any(e.update and "Stop hook blocked continuation 2 consecutive time(s)" in
               e.update.get("content", {}).get("text", "") for e in run.events)


async def test_off_notifications_and_wakeups_run_as_before(autojump_clock):
    model = model_of([todo_write(2), call("schedule_wakeup", delay=30, note="check")], says("waiting"),
                     says("checked"), says("never"))
    with trio.fail_after(600):
        async with guard_session(model, OFF) as session:
            run = await run_prompt(session)
            auto = await next_automatic(session, run.end.id)
    assert run.guard == [] and auto.guard == []
    assert len(primary_calls(model)) == 3
    assert last_user(primary_calls(model)[2]).content == "@wakeup: check"


async def test_off_recurring_cron_runs_as_before(autojump_clock):
    model = model_of([call("cron_create", schedule="* * * * *", prompt="poll", recurring=True)], says("created"),
                     says("polled 1"), says("polled 2"), says("never"))
    with trio.fail_after(600):
        async with guard_session(model, OFF) as session:
            run = await run_prompt(session)
            first = await next_automatic(session, run.end.id)
            second = await next_automatic(session, first.end.id)
    assert first.guard == [] and second.guard == []
    assert [last_user(c).content for c in primary_calls(model)[2:4]] == ["poll", "poll"]


async def test_off_follow_up_suggestions_run_as_before(autojump_clock):
    model = model_of([todo_write(2), call("schedule_wakeup", delay=30, note="check")], says("waiting"),
                     says("- next idea"))
    with trio.fail_after(600):
        async with guard_session(model, Settings(approval_mode="yolo", followup_suggestions=True)) as session:
            await run_prompt(session)
            await wait_for(lambda: len(model.calls) == 3)
    assert [c.purpose for c in model.calls] == ["primary", "primary", "suggestion"]
