"""The session actor in process, under virtual time."""

from __future__ import annotations

import trio

from actors import CountingIds, load_script, open_daemon
from actors.model import ScriptedModel


async def events_until(sub, kind: str) -> list:
    out = []
    async for event in sub:
        out.append(event)
        if event.type == kind:
            return out
    return out


async def test_prompts_run_one_at_a_time_in_admission_order(autojump_clock):
    model = load_script([[{"sleep": 5}, {"text": "a"}], [{"text": "b"}], [{"text": "c"}]])
    with trio.fail_after(60):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, attached = await daemon.create_session()
            assert not attached
            sub = session.subscribe()
            pids = [(await session.prompt(t)).prompt_id for t in ("one", "two", "three")]
            got = []
            async for event in sub:
                got.append(event)
                if event.type == "turn_complete" and event.prompt_id == pids[-1]:
                    break
            order = [e.prompt_id for e in got if e.type == "turn_complete"]
            assert order == pids
            assert [c.messages[-1].content for c in model.calls] == ["one", "two", "three"]
            # Virtual time: the first turn's five seconds passed without a real sleep.
            assert trio.current_time() >= 5


async def test_cancel_ends_the_running_prompt_as_cancelled_and_the_next_one_runs(autojump_clock):
    model = load_script([[{"sleep": 100}, {"text": "late"}], [{"text": "next"}]])
    with trio.fail_after(60):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            first = (await session.prompt("slow")).prompt_id
            second = (await session.prompt("fast")).prompt_id
            while (await session.status())["currentPromptId"] != first:
                await trio.sleep(0.1)
            assert await session.cancel()
            got = await events_until(sub, "turn_complete")
            assert got[-1].data["stopReason"] == "cancelled" and got[-1].prompt_id == first
            got = await events_until(sub, "turn_complete")
            assert got[-1].data["stopReason"] == "end_turn" and got[-1].prompt_id == second
            assert (await session.turn(first))["state"] == "cancelled"
            assert trio.current_time() < 100
            # The cancelled turn's prompt stays in the conversation; its unfinished answer does not.
            system, *sent = model.calls[1].messages
            assert system.role == "system"
            assert [m.content for m in sent] == ["slow", "fast"]


async def test_cancel_of_a_tool_loop_answers_dangling_tool_calls(autojump_clock):
    todo = {"tool_call": {"id": "c1", "name": "todo_write",
                          "arguments": {"todos": [{"id": "1", "content": "x", "status": "pending"}]}}}
    model = load_script([[todo], {"delay": 100, "steps": [{"text": "never"}]}, [{"text": "after"}]])
    with trio.fail_after(60):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("go")
            while len(model.calls) < 2:
                await trio.sleep(0.1)
            await session.cancel()
            assert (await events_until(sub, "turn_complete"))[-1].data["stopReason"] == "cancelled"
            await session.prompt("again")
            await events_until(sub, "turn_complete")
            roles = [(m.role, m.tool_call_id) for m in model.calls[2].messages]
            assert roles == [("system", None), ("user", None), ("assistant", None), ("tool", "c1"), ("user", None)]


async def test_a_crashing_session_is_contained_and_reports_it(autojump_clock):
    with trio.fail_after(60):
        async with open_daemon(model=ScriptedModel(), ids=CountingIds()) as daemon:
            doomed, _ = await daemon.create_session()
            other, _ = await daemon.create_session()
            sub = doomed.subscribe()
            await doomed._ref.tell("not a message")  # the session's handler raises on it
            got = [e async for e in sub]
            assert got[-1].type == "session_closed" and got[-1].data["reason"] == "crashed"
            assert daemon.session_count == 1
            sub = other.subscribe()
            await other.prompt("still here?")
            assert (await events_until(sub, "turn_complete"))[-1].data["stopReason"] == "end_turn"


async def test_closing_a_session_ends_its_actors_and_subscriptions(autojump_clock):
    model = load_script([[{"sleep": 1000}]])
    with trio.fail_after(60):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("long")
            await trio.sleep(1)
            await daemon.close_session(session.session_id)
            got = [e async for e in sub]
            assert got[-1].type == "session_closed" and got[-1].data["reason"] == "closed"
            assert daemon.session_count == 0
            assert trio.current_time() < 1000


async def test_demo_model_plans_and_completes_three_todos(autojump_clock):
    with trio.fail_after(60):
        async with open_daemon(ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            admitted = await session.prompt("Plan a picnic")
            got = await events_until(session.subscribe(admitted.last_event_id), "turn_complete")
            plans = [e.update["entries"] for e in got if e.update and e.update["sessionUpdate"] == "plan"]
            assert len(plans) == 4
            assert [p["status"] for p in plans[0]] == ["in_progress", "pending", "pending"]
            assert [p["status"] for p in plans[-1]] == ["completed"] * 3
            assert got[-1].data["stopReason"] == "end_turn"


async def test_attach_to_a_live_session_returns_the_same_session(autojump_clock):
    with trio.fail_after(60):
        async with open_daemon(ids=CountingIds()) as daemon:
            first, attached = await daemon.create_session(session_id="mine")
            again, attached_again = await daemon.create_session(session_id="mine")
            assert (first.session_id, attached, attached_again) == ("mine", False, True)
            assert again.epoch == first.epoch
