"""What an idle session (created, never prompted) runs, and that what it starts late behaves as it would at once.

An idle session runs its mailbox and its background manager only: the prompt FIFO starts with its first message
and the work loop with the first work (actors.session.session). These tests check the late starts: the first
prompt of a never-used session, reads and a close before anything ran, a shutdown with idle sessions, and that
tasks started from a caller's context (an HTTP request's) do not keep it.
"""

from __future__ import annotations

import contextvars
from typing import Any

import pytest
import trio
import trio.testing

from actors import CountingIds, Settings, TooManySubscribers, load_script, open_daemon
from actors._actor import ActorGone
from actors.session.tools import ToolRegistry
from actors.settings import Limits

REQUEST = contextvars.ContextVar[Any]("a_callers_context_variable")


def all_tasks() -> list[trio.lowlevel.Task]:
    tasks, stack = [], [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        tasks.append(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return tasks


async def until(sub: Any, kind: str) -> list[Any]:
    out = []
    async for event in sub:
        out.append(event)
        if event.type == kind:
            break
    return out


async def test_an_idle_session_starts_neither_its_fifo_nor_its_work_loop(autojump_clock):
    with trio.fail_after(60):
        async with open_daemon(ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            await trio.testing.wait_all_tasks_blocked()
            assert not session._session.fifo_ref.started
            assert not [t for t in all_tasks() if t.name == f"work:{session.session_id}"]
            status = await session.status()  # answered by the session's own mailbox
            assert status["state"] == "idle" and status["pendingCount"] == 0
            assert not session._session.fifo_ref.started


async def test_the_first_prompt_of_a_never_used_session_runs_and_later_ones_keep_their_order(autojump_clock):
    model = load_script([[{"sleep": 5}, {"text": "a"}], [{"text": "b"}]])
    with trio.fail_after(60):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            await trio.testing.wait_all_tasks_blocked()
            sub = session.subscribe()
            first = (await session.prompt("one")).prompt_id
            second = (await session.prompt("two")).prompt_id
            got = await until(sub, "turn_complete")
            got += await until(sub, "turn_complete")
            ends = [(e.prompt_id, e.data["stopReason"]) for e in got if e.type == "turn_complete"]
            assert ends == [(first, "end_turn"), (second, "end_turn")]
            assert [c.messages[-1].content for c in model.calls] == ["one", "two"]


async def test_a_never_prompted_session_answers_fifo_reads(autojump_clock):
    with trio.fail_after(60):
        async with open_daemon(ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            await trio.testing.wait_all_tasks_blocked()
            assert await session.pending_prompts() == []
            assert await session.turn("current") is None
            assert not await session.abort_prompt("prompt-nope")
            answer = await session.post_mid_turn_message("hello?")
            assert answer["accepted"] is False


async def test_closing_a_never_prompted_session_ends_it_with_session_closed(autojump_clock):
    with trio.fail_after(60):
        async with open_daemon(ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            await trio.testing.wait_all_tasks_blocked()
            sub = session.subscribe()
            await daemon.close_session(session.session_id)
            got = [e async for e in sub]
            assert [e.type for e in got] == ["session_closed"] and got[0].data["reason"] == "closed"
            assert daemon.session_count == 0
            # Its FIFO never started, and never will: a late prompt hears that the session is gone.
            try:
                await session.prompt("too late")
            except ActorGone:
                pass
            else:
                raise AssertionError("a closed session admitted a prompt")


async def test_shutdown_with_idle_sessions_closes_each_of_them_in_order(autojump_clock):
    model = load_script([[{"sleep": 1000}]])
    with trio.fail_after(60):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            idle = [(await daemon.create_session())[0] for _ in range(3)]
            busy, _ = await daemon.create_session()
            subs = [s.subscribe() for s in (*idle, busy)]
            running = (await busy.prompt("long")).prompt_id
            while (await busy.status())["currentPromptId"] != running:
                await trio.sleep(0.1)
            assert await daemon.shutdown_gracefully()
        for sub in subs[:-1]:
            got = [e async for e in sub]
            assert [e.type for e in got] == ["session_closed"]
            assert got[0].data["reason"] == "daemon_shutdown"
        got = [e async for e in subs[-1]]
        ends = [e for e in got if e.type == "turn_complete" and e.prompt_id == running]
        assert len(ends) == 1 and ends[0].data["stopReason"] == "cancelled"
        assert got[-1].type == "session_closed" and got[-1].data["reason"] == "daemon_shutdown"
        assert trio.current_time() < 1000


async def test_a_sessions_tasks_do_not_keep_the_context_of_whoever_started_them(autojump_clock):
    model = load_script([[{"text": "a"}]])
    with trio.fail_after(60):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            REQUEST.set(object())  # as an HTTP request's task has its framework's variables
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("go")  # the FIFO and the work loop start from this task
            await until(sub, "turn_complete")
            mine = trio.lowlevel.current_task()
            spawned = [t for t in all_tasks() if t is not mine and REQUEST in t.context]
            assert not spawned, [t.name for t in spawned]


def test_a_copied_tool_registry_shares_until_either_side_changes() -> None:
    class Tool:
        builtin = True
        kind = "other"
        description = "d"
        parameters: dict[str, Any] = {"type": "object"}

        def __init__(self, name: str) -> None:
            self.name = name

    base = ToolRegistry([Tool("a")])
    one, two = base.copy(), base.copy()
    assert one.names() == two.names() == ("a",)
    one.register(Tool("b"))
    assert one.names() == ("a", "b") and two.names() == ("a",) and base.names() == ("a",)
    base.register(Tool("c"))
    assert base.names() == ("a", "c") and two.names() == ("a",) and one.names() == ("a", "b")
    assert [s.name for s in two.specs()] == ["a"] and [s.name for s in one.specs()] == ["a", "b"]


async def test_limits_max_subscribers_bounds_a_sessions_event_streams() -> None:
    with trio.fail_after(10):
        async with open_daemon(Settings(limits=Limits(max_subscribers=2))) as daemon:
            handle, _ = await daemon.create_session()
            first, second = handle.subscribe(), handle.subscribe()
            with pytest.raises(TooManySubscribers):
                handle.subscribe()
            first.close()
            handle.subscribe().close()  # a closed stream's place is free again
            second.close()
