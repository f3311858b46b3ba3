"""A turn that ends with a tool call unanswered answers it, so the conversation stays valid for the model."""

from __future__ import annotations

import trio

from actors import CountingIds, load_script, open_daemon
from tests.actors.session.guard.harness import admit, run_prompt

NOT_EXECUTED = "Error: not executed (the turn ended first)"


async def test_a_call_cancelled_while_it_waits_is_answered_even_when_an_earlier_turn_used_its_id(autojump_clock):
    # Models reuse ids across turns (call_1 again): the earlier answer must not count for the new call.
    model = load_script([
        [{"tool_call": {"id": "call_1", "name": "todo_write", "arguments": {"todos": []}}}],
        [{"text": "planned"}],
        [{"tool_call": {"id": "call_1", "name": "shell", "arguments": {"command": "echo hi"}}}],
    ])
    with trio.fail_after(60):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            await run_prompt(session, "plan")
            admitted = await admit(session, "run it")
            # The shell call waits for a vote (default approval mode); cancelling ends the turn there.
            async with session.subscribe(last_event_id=admitted.last_event_id) as sub:
                async for event in sub:
                    if event.type == "permission_request":
                        assert await session.cancel()
                    if event.type in ("turn_complete", "turn_error") and event.prompt_id == admitted.prompt_id:
                        break
            assert event.type == "turn_complete" and event.data["stopReason"] == "cancelled"
            history = await session.snapshot()
    tools = [(m.tool_call_id, m.content) for m in history if m.role == "tool"]
    assert tools[-1] == ("call_1", NOT_EXECUTED)
    assert [m.role for m in history[-2:]] == ["assistant", "tool"]
