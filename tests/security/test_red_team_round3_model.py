"""Red team, third round: what a hostile or looping model server can make of the daemon.

Each test runs the real daemon (``python -m transport`` on loopback port 0, provider ``openai``) against a
model server in this process: the loopback fake (:mod:`transport.fake_openai`) or, for a response that
never ends, a bare SSE server below. Findings of /tmp/w/redteam3/REPORT.md:

- 4: one response streamed without end (text, or one tool call's arguments) grew the daemon's memory
  without bound: now the call ends with ``turn_error`` ``response_too_large`` naming the bound, and the
  session goes on.
- 7: tool-call arguments nested 255-1024 levels deep failed every later turn of the session with
  ``internal error: TypeError`` (the history could no longer be encoded), and deeper ones with a
  ``RecursionError``: now the call is refused to the model, naming the depth and the limit.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from actors.model.openai import MAX_RESPONSE_CHARS
from actors.model.tool_calls import MAX_ARGUMENT_DEPTH
from tests.canned_site import read_request
from tests.conftest import DaemonProcess, daemon_process
from tests.e2e.sse_client import collect
from tests.e2e.test_openai_daemon import prompt, wait_turn
from transport.fake_openai import FakeOpenAI

OVERSHOOT = 4  # the endless server gives up after this many bounds' worth, so the old code ends too


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def sse(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def endless_server(kind: str, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """The first chat request gets a response that goes on (text, or one call's arguments) until the client
    leaves, or OVERSHOOT bounds' worth; every later one a short answer."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    requests = 0

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal requests
        if (request := await read_request(stream)) is None:
            return
        head, body = request
        requests += 1
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        try:
            if requests > 1:
                await stream.send_all(sse({"role": "assistant", "content": "still here"}, "stop") + b"data: [DONE]\n\n")
                return
            if kind == "text":
                piece = sse({"content": "x" * 16384})
            else:
                await stream.send_all(sse({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {
                    "name": "todo_write", "arguments": '{"todos": "'}}]}))
                piece = sse({"tool_calls": [{"index": 0, "function": {"arguments": "y" * 16384}}]})
            for _ in range(OVERSHOOT * MAX_RESPONSE_CHARS // 16384):
                await stream.send_all(piece)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        task_status.started(f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/v1")
        await trio.serve_listeners(handle, listeners, handler_nursery=nursery)


@asynccontextmanager
async def daemon_on(url: str, tmp_path: Path) -> AsyncIterator[tuple[DaemonProcess, httpx.AsyncClient]]:
    (tmp_path / "work").mkdir()
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"approvalMode": "yolo"}))
    async with daemon_process("--model", "openai", "--openai-base-url", url, "--openai-model", "m",
                              "--workspace", str(tmp_path / "work"), "--settings", str(settings),
                              state_dir=tmp_path / "state") as daemon:
        async with daemon.client(daemon.token()) as client:
            yield daemon, client


async def turn(client: httpx.AsyncClient, sid: str, text: str, timeout: float = 10) -> dict[str, Any]:
    pid = (await client.post(f"/session/{sid}/prompt", json=prompt(text))).json()["promptId"]
    with trio.fail_after(timeout):
        return await wait_turn(client, sid, pid)


async def turn_error(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    [error] = [f["data"] for f in await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
               if f["type"] == "turn_error"]
    return error


@pytest.mark.parametrize("kind", ["text", "args"])
async def test_an_endless_response_ends_response_too_large_and_the_session_goes_on(nursery, tmp_path, kind):
    url = await nursery.start(endless_server, kind)
    with trio.fail_after(60):
        async with daemon_on(url, tmp_path) as (daemon, client):
            before = rss(daemon.pid)
            sid = (await client.post("/session", json={})).json()["sessionId"]
            first = await turn(client, sid, "hi", timeout=40)
            grown = rss(daemon.pid) - before
            error = await turn_error(client, sid)
            second = await turn(client, sid, "are you there?")
            transcript = (await client.get(f"/session/{sid}/transcript")).text
    assert first["state"] == "error" and error["code"] == "response_too_large", (first, error)
    assert f"ran past {MAX_RESPONSE_CHARS:,} characters of text, thought and tool-call arguments" in first["error"]
    assert second["state"] == "completed" and "still here" in transcript
    # Bounded (the old daemon took all OVERSHOOT bounds' worth: 50-64 MiB more, and more for a longer stream).
    assert grown < 8 * MAX_RESPONSE_CHARS, grown


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 300, 2000])
async def test_deep_tool_call_arguments_are_refused_to_the_model_and_later_turns_work(nursery, tmp_path, depth):
    raw = '{"todos": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    fake = FakeOpenAI([[{"tool_call": {"id": "c0", "name": "todo_write", "arguments": raw}}],
                       [{"text": "I will nest less."}], [{"text": "second turn ok"}]])
    url = await nursery.start(fake.serve)
    with trio.fail_after(60):
        async with daemon_on(url, tmp_path) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            first = await turn(client, sid, "plan")
            second = await turn(client, sid, "again")
    assert (first["state"], second["state"]) == ("completed", "completed"), (first, second)
    # The model read the refusal, naming the depth and the limit ...
    tool_result = [m for m in fake.requests[1].body["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_result] == [
        f"Error: arguments nest {depth:,} levels deep, more than the limit of {MAX_ARGUMENT_DEPTH}: send them flatter"]
    # ... and every later request still carries the call, as the model wrote it.
    [call] = [c for m in fake.requests[2].body["messages"] for c in m.get("tool_calls") or ()]
    assert call["function"]["arguments"] == raw
    assert b"Traceback" not in daemon.stderr
