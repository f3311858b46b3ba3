"""Progress over SSE, in process and in virtual time: when a POST streams, what the stream carries."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from actors import CountingIds, load_script, open_daemon
from tests.transport.mcp.rpc import body, open_session, request, tool_call
from transport.mcp import tools as mcp_tools
from transport.mcp.progress import Progress, ToolContext, with_heartbeat
from transport.mcp.protocol import Exchange, McpEndpoint, McpTool, ToolOutput
from transport.mcp.streaming import EventStream, accepts_event_stream

BOTH = {"Accept": "application/json, text/event-stream"}


async def crawl(args: dict[str, Any], context: ToolContext) -> ToolOutput:
    for step in range(1, 4):
        await trio.sleep(1)
        await context.progress.report(step, total=3, message=f"step {step}")
    await context.progress.report(2)  # not increasing: dropped
    return ToolOutput("crawled", structured={"steps": 3})


TOOLS = {"crawl": McpTool("crawl", "slow", {"type": "object"}, crawl)}


def events(raw: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body (comments skipped); each event must be ``message``, no ``id``."""
    found = []
    for block in raw.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        assert lines[0] == "event: message" and lines[1].startswith("data: ") and len(lines) == 2, block
        found.append(json.loads(lines[1][6:]))
    return found


@pytest.mark.parametrize("accept, ok", [
    ("application/json, text/event-stream", True),
    ("text/event-stream", True),
    ("Text/Event-Stream; q=0.5, application/json", True),
    ("application/json", False),
    ("*/*", False),
    ("text/*", False),
    ("text/event-stream;q=0", False),
    ("text/event-stream;q=nope", False),
    (None, False),
])
def test_accept_lists_the_event_stream(accept, ok):
    assert accepts_event_stream(accept) is ok


async def received(headers: dict[str, str], message: Any) -> Any:
    endpoint = McpEndpoint("t")
    session = await open_session(endpoint, TOOLS)
    return endpoint.receive("s", TOOLS, {**session, **headers}, body(message))


async def test_only_a_tool_call_with_a_progress_token_and_an_event_stream_accept_streams():
    assert (await received(BOTH, tool_call(1, "crawl", progress_token="p"))).streams
    assert (await received(BOTH, tool_call(1, "crawl", progress_token=0))).streams
    assert not (await received(BOTH, tool_call(1, "crawl"))).streams  # no token: JSON as before
    assert not (await received({"Accept": "application/json"}, tool_call(1, "crawl", progress_token="p"))).streams
    assert not (await received(BOTH, {**request(1, "ping"), "params": {"_meta": {"progressToken": "p"}}})).streams


async def test_the_stream_carries_progress_then_the_response_then_ends(autojump_clock):
    exchange = await received(BOTH, tool_call(7, "crawl", progress_token="tok"))
    assert isinstance(exchange, Exchange)
    stream = EventStream(exchange.run, keepalive=1.5)
    raw = b""
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.produce)
            async for frame in stream.frames():
                raw += frame
    messages = events(raw)
    assert [m.get("method") for m in messages] == ["notifications/progress"] * 3 + [None]
    assert [m["params"] for m in messages[:3]] == [
        {"progressToken": "tok", "progress": step, "total": 3, "message": f"step {step}"} for step in (1, 2, 3)]
    assert messages[-1] == {"jsonrpc": "2.0", "id": 7, "result": {
        "content": [{"type": "text", "text": "crawled"}], "isError": False, "structuredContent": {"steps": 3}}}
    assert b": keepalive" not in raw  # never idle for 1.5 s
    assert b"\nid:" not in raw and not raw.startswith(b"id:")  # not resumable, so no event ids


async def test_a_reader_that_goes_away_does_not_cancel_the_call(autojump_clock):
    exchange = await received(BOTH, tool_call(7, "crawl", progress_token="tok"))
    stream = EventStream(exchange.run)
    done = trio.Event()

    async def produce() -> None:
        await stream.produce()
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        frames = stream.frames()
        await frames.__anext__()  # the first progress notification
        await frames.aclose()  # the client hung up
        with trio.fail_after(60):
            await done.wait()  # the call still ran to its end


async def test_without_a_stream_the_same_call_answers_json_with_no_notification(autojump_clock):
    exchange = await received({"Accept": "application/json"}, tool_call(7, "crawl", progress_token="tok"))
    answer = await exchange.answer()
    assert answer.headers["Content-Type"] == "application/json"
    assert json.loads(answer.body)["result"]["content"][0]["text"] == "crawled"


async def test_progress_rules():
    sent: list[dict[str, Any]] = []

    async def notify(message: dict[str, Any]) -> None:
        sent.append(message)

    assert not Progress().enabled and not Progress("t").enabled and not Progress(None, notify).enabled
    progress = Progress("t", notify)
    assert await progress.report(1) and not await progress.report(1) and not await progress.report(0.5)
    assert await progress.report(1.5, message="more")
    progress.finish()
    assert not await progress.report(9)  # nothing after the response
    assert [m["params"] for m in sent] == [{"progressToken": "t", "progress": 1},
                                           {"progressToken": "t", "progress": 1.5, "message": "more"}]


async def test_with_heartbeat_beats_at_once_then_every_interval(autojump_clock):
    beats: list[float] = []

    async def work() -> str:
        await trio.sleep(12)
        return "done"

    async def beat(elapsed: float) -> None:
        beats.append(elapsed)

    assert await with_heartbeat(work, beat, 5) == "done"
    assert beats == [0, 5, 10]


async def test_await_resume_reports_progress_while_it_waits(tmp_path, autojump_clock):
    """A wedged run: notifications every PROGRESS_EVERY s of virtual time, then ``underway`` at the timeout."""
    model = load_script({"responses": [{"delay": 10_000, "steps": [{"text": "late"}]}], "then": "error"})
    async with open_daemon(model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
        registry = daemon.subagents
        registry.base_url = "http://127.0.0.1:9"  # nothing listens: this child never signals
        await registry.start({"name": "w", "brief": "think", "goal": "an answer", "max_turns": 3})
        tools = mcp_tools.parent_tools(registry)
        endpoint = McpEndpoint("t")
        headers = {**await open_session(endpoint, tools, "2025-11-25"), **BOTH}
        sent: list[dict[str, Any]] = []

        async def notify(message: dict[str, Any]) -> None:
            sent.append(message)

        exchange = endpoint.receive("s", tools, headers, body(tool_call(
            3, "await_resume", {"name": "w", "timeout_s": 30}, progress_token="wait")))
        assert exchange.streams
        response = await exchange.run(notify)
        assert response["result"]["structuredContent"]["outcome"] == "underway"
        params = [m["params"] for m in sent]
        progress = [p["progress"] for p in params]
        # A beat due at the very instant the wait times out may or may not come first: both are 30 s.
        assert progress[:6] == [0, 5, 10, 15, 20, 25] and progress[6:] in ([], [30])
        assert all(p["progressToken"] == "wait" and p["total"] == 30 for p in params)
        assert "run 'w': running, turn 1 of 3" in params[-1]["message"]
        assert "waited 25 of 30 s" in params[5]["message"]

        # The same wait without a token sends nothing (and runs no heartbeat).
        sent.clear()
        quiet = endpoint.receive("s", tools, headers, body(tool_call(4, "await_resume",
                                                                     {"name": "w", "timeout_s": 10})))
        assert not quiet.streams
        await quiet.run(notify)
        assert sent == []
        await registry.stop("w")


async def test_a_failing_exchange_ends_its_stream_and_nothing_else(autojump_clock):
    async def broken(notify: Any) -> Any:
        raise RuntimeError("bug")

    stream = EventStream(broken)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:  # stands for the app's nursery: it must survive
            nursery.start_soon(stream.produce)
            assert [frame async for frame in stream.frames()] == []
