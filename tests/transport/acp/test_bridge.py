"""Bridge mode: mid-turn drains asked of the ACP client, and the queue-released method."""

from __future__ import annotations

import pytest
import trio

from actors import Settings
from actors.session.fifo import DrainResult, MidTurnItem
from transport.acp.bridge import to_drain_result

from tests.transport.acp.harness import acp_client, call, new_session, text

TODOS = [{"id": "a", "content": "step one", "status": "in_progress"},
         {"id": "b", "content": "step two", "status": "pending"}]
GUARDED = Settings(todo_stop_guard=True)
DRAIN = "craft/drainMidTurnQueue"


def drains(client) -> list[dict]:
    return [m["params"] for m in client.agent_requests if m["method"] == DRAIN]


def guard_attempts(client) -> list[int]:
    return [u["_meta"]["attempt"] for u in client.updates()
            if (u.get("_meta") or {}).get("source") == "todo_stop_guard"]


@pytest.mark.parametrize("answer, watch, late, expected", [
    ({"messages": ["m"], "items": [{"messageId": "1", "displayText": "m"}]}, True, False,
     DrainResult(("m",), (MidTurnItem("1", "m"),), False)),  # an omitted hasQueuedPrompt is false
    ({"messages": [], "hasQueuedPrompt": True}, True, False, DrainResult((), (), True)),
    ({"messages": [], "hasQueuedPrompt": "yes"}, True, False, DrainResult((), (), False)),  # only `true` counts
    ({"messages": [], "hasQueuedPrompt": 1}, True, False, DrainResult((), (), False)),
    ({"messages": [], "hasQueuedPrompt": True}, False, False, DrainResult((), (), False)),  # not asked for
    ({"messages": ["late"], "hasQueuedPrompt": True}, True, True, DrainResult(("late",), (), False)),  # stale
    ({"items": [{"messageId": "x", "displayText": "from items"}]}, False, False,
     DrainResult(("from items",), (MidTurnItem("x", "from items"),), False)),
    ("garbage", True, False, DrainResult((), (), False)),
    ({"messages": "not a list", "items": [3]}, True, False, DrainResult((), (), False)),
    ({"messages": [str(i) for i in range(15)]}, False, False,
     DrainResult(tuple(str(i) for i in range(10)), (), False)),
])
def test_answers_become_drain_results(answer, watch, late, expected) -> None:
    assert to_drain_result(answer, watch, late=late) == expected


async def test_a_drained_message_joins_the_turn_at_the_tool_boundary(tmp_path) -> None:
    async with acp_client([call("todo_write", todos=TODOS)], [{"text": "ok"}], bridge=True) as (daemon, client):
        client.handlers[DRAIN] = lambda params: {
            "messages": ["also check B"], "items": [{"messageId": "m1", "displayText": "also check B",
                                                     "content": [{"type": "text", "text": "also check B"}]}]}
        sid = await new_session(client, str(tmp_path))
        answer = await client.request("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert answer["result"]["stopReason"] == "end_turn"
        assert drains(client) == [{"sessionId": sid}]  # a tool boundary does not watch the queue
        last = daemon.runtime.provider.calls[1].messages[-1]
        assert last.content == "[User message received during tool execution]: also check B"


@pytest.mark.parametrize("answer", [
    {"messages": [], "items": []},  # an older client: hasQueuedPrompt omitted
    {"messages": [], "items": [], "hasQueuedPrompt": False},
    {"messages": [], "items": [], "hasQueuedPrompt": "true"},
])
async def test_without_a_queued_prompt_the_guard_continues(tmp_path, answer) -> None:
    script = ([call("todo_write", todos=TODOS)], [{"text": "stopping"}], [{"text": "g1"}], [{"text": "g2"}])
    async with acp_client(*script, settings=GUARDED, bridge=True) as (daemon, client):
        client.handlers[DRAIN] = lambda params: answer
        sid = await new_session(client, str(tmp_path))
        result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert result["stopReason"] == "end_turn"
        assert len(daemon.runtime.provider.calls) == 4
        assert guard_attempts(client) == [1, 2, 2]
        assert {"sessionId": sid, "todoStopGuardWatchQueuedPrompt": True} in drains(client)


async def test_a_queued_prompt_in_the_bridge_makes_the_guard_yield_until_released(tmp_path) -> None:
    script = ([call("todo_write", todos=TODOS)], [{"text": "stopping"}], [{"text": "g1"}])
    async with acp_client(*script, settings=GUARDED, bridge=True) as (daemon, client):
        client.handlers[DRAIN] = lambda params: {"messages": [], "items": [],
                                                 "hasQueuedPrompt": bool(params.get("todoStopGuardWatchQueuedPrompt"))}
        sid = await new_session(client, str(tmp_path))
        result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert result["stopReason"] == "end_turn"
        assert len(daemon.runtime.provider.calls) == 2  # no guard continuation: the queued prompt goes first
        assert guard_attempts(client) == []
        assert await client.result("craft/todoStopGuardQueueReleased", {"sessionId": sid}) == {"released": True}
        assert await client.result("craft/todoStopGuardQueueReleased", {"sessionId": sid}) == {"released": False}
        unknown = await client.request("craft/todoStopGuardQueueReleased", {"sessionId": "nope"})
        assert unknown["error"]["code"] == -32602


async def test_method_not_found_switches_draining_off_for_the_session(tmp_path) -> None:
    script = ([call("todo_write", todos=TODOS)], [call("todo_write", todos=TODOS)], [{"text": "done"}])
    async with acp_client(*script, bridge=True) as (daemon, client):
        client.handlers[DRAIN] = lambda params: {"error": {"code": -32601, "message": "Method not found"}}
        sid = await new_session(client, str(tmp_path))
        result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert result["stopReason"] == "end_turn"
        assert len(drains(client)) == 1  # asked once; the second boundary drained the local FIFO
        assert daemon.get(sid)._session.mid_turn.source is None


async def test_three_timeouts_switch_draining_off(tmp_path) -> None:
    script = tuple([call("todo_write", todos=TODOS)] for _ in range(5)) + ([{"text": "done"}],)
    async with acp_client(*script, bridge=True, drain_deadline=0.05, drain_late_limit=0.1) as (daemon, client):
        client.handlers[DRAIN] = lambda params: None  # never answers
        sid = await new_session(client, str(tmp_path))
        with trio.fail_after(10):
            result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert result["stopReason"] == "end_turn"
        assert len(drains(client)) == 3
        assert daemon.get(sid)._session.mid_turn.source is None


async def test_a_late_answer_still_delivers_its_messages(tmp_path) -> None:
    async with acp_client([call("todo_write", todos=TODOS)], [{"text": "ok"}], bridge=True,
                          drain_deadline=0.05, drain_late_limit=1.0) as (daemon, client):
        sid = await new_session(client, str(tmp_path))

        async def answer_late() -> None:
            request = await client.wait_for(lambda m: m.get("method") == DRAIN)
            await trio.sleep(0.2)
            await client.send_raw(
                f'{{"jsonrpc":"2.0","id":"{request["id"]}","result":{{"messages":["late news"],'
                f'"hasQueuedPrompt":true}}}}')

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_late)
            result = await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")})
        assert result["stopReason"] == "end_turn"
        last = daemon.runtime.provider.calls[1].messages[-1]
        assert last.content.endswith("late news")
        assert client.conn.bindings[sid].drain.timeouts == 1


async def test_without_the_capability_no_drain_is_asked(tmp_path) -> None:
    async with acp_client([call("todo_write", todos=TODOS)], [{"text": "ok"}]) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        assert (await client.result("session/prompt", {"sessionId": sid, "prompt": text("go")}))["stopReason"] == \
            "end_turn"
        assert drains(client) == []
        assert daemon.get(sid)._session.mid_turn.source is None


async def test_a_session_closed_under_a_bound_bridge_leaves_the_connection_working(tmp_path) -> None:
    # The binding's teardown takes its drain source back from a session that is gone: quietly.
    with trio.fail_after(30):
        async with acp_client(bridge=True) as (daemon, client):
            sid = await new_session(client, str(tmp_path))
            assert client.conn.bindings[sid].drain is not None
            await daemon.close_session(sid)
            while sid in client.conn.bindings:
                await trio.sleep(0.01)
            assert await new_session(client, str(tmp_path))  # the connection goes on
