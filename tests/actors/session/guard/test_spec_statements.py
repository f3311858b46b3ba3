"""Spec 000 statements no other test covered (issue 16), each in the real session on the scripted model.

- A Stop hook is skipped when a queued prompt has priority (stop ordering: step 2 before step 3).
- A failed todo_write whose todos are valid but whose arguments carry an unexpected field never arms.
- A live client re-attaching to the same session keeps the in-memory guard state.
- A coalesced Stop hook's tool loop goes on sending tool results after the guard's budget is spent:
  enabling the guard never truncates a hook continuation.

Hooks are scripted through the daemon's ``hook_runner`` (no process), so these run on virtual time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from actors import CountingIds, open_daemon
from tests.actors.session.guard.harness import (
    admit,
    call,
    collect,
    guard_settings,
    guard_state,
    model_of,
    primary_calls,
    run_prompt,
    says,
    text,
    todo_write,
    todos,
    virtual_now,
)

HOOK_REASON = "HOOK: write the changelog entry first"
BLOCK = (0, json.dumps({"decision": "block", "reason": HOOK_REASON}), "")
ALLOW = (0, "", "")


class ScriptedHook:
    """A Stop hook's answers in order (then: allow), and the work item each run was for."""

    def __init__(self, *answers: tuple[int, str, str]) -> None:
        self.answers = list(answers)
        self.ran_for: list[str | None] = []
        self.session: Any = None

    async def __call__(self, hook: Any, stdin: bytes, cwd: str) -> tuple[int, str, str]:
        work = self.session._session.work if self.session is not None else None
        self.ran_for.append(work.prompt_id if work is not None and work.running else None)
        await trio.lowlevel.checkpoint()
        return self.answers.pop(0) if self.answers else ALLOW


@asynccontextmanager
async def hooked_session(model: Any, hook: ScriptedHook) -> AsyncIterator[tuple[Any, Any]]:
    settings = guard_settings(hooks={"Stop": [{"hooks": [{"type": "command", "command": "gate"}]}]})
    async with open_daemon(settings, model=model, ids=CountingIds(), now=virtual_now, hook_runner=hook) as daemon:
        session, _ = await daemon.create_session()
        hook.session = session
        yield daemon, session


async def test_a_queued_prompt_with_priority_skips_the_stop_hook(autojump_clock):
    hook = ScriptedHook(BLOCK)  # it would block the first stop it saw
    model = model_of([todo_write(2)], [text("half done "), {"sleep": 5}, text("pausing")], says("status: half"),
                     says("changelog written"), says("never"))
    with trio.fail_after(60):
        async with hooked_session(model, hook) as (_, session):
            work = await admit(session, "refactor the module")
            await trio.sleep(1)
            queued = await admit(session, "how far along?")
            first = await collect(session, work.last_event_id, work.prompt_id)
            second = await collect(session, queued.last_event_id, queued.prompt_id)
            state = await guard_state(session)
    assert first.stop_reason == "end_turn" and first.guard == []  # yielded: no attempt used
    assert hook.ran_for == [queued.prompt_id, queued.prompt_id]  # never at the stop that yielded
    calls = primary_calls(model)
    assert len(calls) == 4
    assert calls[2].messages[-1].content == "how far along?"
    assert calls[3].messages[-1].content == HOOK_REASON  # the queued prompt's own stop ran the hook
    assert second.stop_reason == "end_turn" and state["awaitingQueuedPrompt"] is False


async def test_a_failed_write_with_valid_todos_and_an_unexpected_argument_does_not_arm(autojump_clock):
    model = model_of([call("todo_write", todos=todos(2), merge=True)], says("done"), says("never"), says("never"))
    with trio.fail_after(60):
        async with hooked_session(model, ScriptedHook()) as (_, session):
            run = await run_prompt(session)
            state = await guard_state(session)
    calls = primary_calls(model)
    assert len(calls) == 2 and run.guard == []
    assert calls[1].messages[-1].content == 'Error: todo_write: arguments: unexpected property "merge" (expected only todos)'
    assert state["armed"] is False and state["unfinishedCount"] == 0
    assert not [e for e in run.events if e.update and e.update.get("sessionUpdate") == "plan"]


async def test_a_live_client_reattaching_keeps_the_guard_state(autojump_clock):
    model = model_of([todo_write(2)], says("stopping"), [text("guard one "), {"sleep": 10}, text("more")],
                     says("blocked"), says("never"))
    with trio.fail_after(60):
        async with hooked_session(model, ScriptedHook()) as (daemon, session):
            work = await admit(session)
            client = session.subscribe(last_event_id=work.last_event_id)
            await trio.sleep(5)  # inside guard stream 1
            before = await guard_state(session)
            cursor = 0
            while (event := client.get_nowait()) is not None:
                cursor = event.id or cursor
            client.close()  # the client's connection drops (the last subscriber leaves) ...
            await trio.sleep(1)
            again, attached = await daemon.create_session(session_id=session.session_id)  # ... and it comes back
            after = await guard_state(again)
            rest = await collect(again, cursor, work.prompt_id)
            final = await guard_state(again)
    assert attached and again.session_id == session.session_id
    assert before["armed"] and before["attempts"] == 1 and before["unfinishedCount"] == 2
    assert after == before  # the in-memory chain is untouched by the re-attach
    assert rest.attempts == [2, 2]  # the chain goes on with the budget it had: stream 2, then exhaustion
    assert final["attempts"] == 2 and final["exhaustionReported"] is True


async def test_a_coalesced_stop_hooks_tool_loop_goes_on_after_the_guard_budget_is_spent(autojump_clock):
    hook = ScriptedHook(ALLOW, BLOCK)  # the guard alone at the first stop; hook and guard together at the second
    model = model_of(
        [todo_write(2, call_id="w1")],
        says("planned; stopping"),  # stop 1: guard stream 1
        says("part one done"),  # stop 2: hook blocks and the guard's last attempt: one combined stream
        [text("writing the changelog "), todo_write(2, call_id="w2")],  # the combined stream asks for a tool
        [text("and the entry "), todo_write(1, 1, call_id="w3")],  # the hook's loop goes on: another tool
        says("changelog entry written"),
        says("never"),
    )
    with trio.fail_after(60):
        async with hooked_session(model, hook) as (_, session):
            run = await run_prompt(session)
            state = await guard_state(session)
    calls = primary_calls(model)
    assert len(calls) == 6
    combined = [m.origin for m in calls[3].messages[-2:]]
    assert combined == ["hook", "guard"]  # one continuation for both
    # After the guard's budget is spent, the hook's continuation still sends every tool result,
    # with no guard prompt and no guard attempt.
    for later in calls[4:]:
        assert later.messages[-1].role == "tool"
        assert "guard" not in [m.origin for m in later.messages[len(calls[3].messages):]]
    assert run.attempts == [1, 2, 2]  # 2 continuations and the exhaustion report, nothing more
    assert run.stop_reason == "end_turn"
    assert hook.ran_for == [run.prompt_id] * 3  # its last run, at the loop's natural stop, allows
    assert state["attempts"] == 2 and state["suspended"] is True  # exhausted: the loop's own write cannot revive it
