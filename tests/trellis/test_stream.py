"""``trellis.stream``: SSE frames, and reconnection with Last-Event-ID that repeats nothing.

A small trio HTTP server plays each connection as the test says (frames, a cut
in the middle of a frame, an error status); the last test restarts a real
daemon on the same port and state directory.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, aclosing
from typing import Any

import httpx
import pytest
import trio

from tests.conftest import daemon_process
from trellis import stream
from trellis.connect import Target

Plan = Callable[[trio.SocketStream], Awaitable[None]]


class FakeDaemon:
    """Answers connection ``n`` with ``plans[n]``, recording each request's headers."""

    def __init__(self, *plans: Plan) -> None:
        self.plans = list(plans)
        self.requests: list[dict[str, str]] = []
        self.url = ""

    async def serve(self, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        task_status.started(self.url)
        await trio.serve_listeners(self.handle, listeners)

    async def handle(self, conn: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await conn.receive_some(65536)
            if not chunk:
                return
            data += chunk
        request_line, *lines = data.split(b"\r\n\r\n")[0].decode().split("\r\n")
        headers = {"request": request_line}
        headers.update({k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)})
        self.requests.append(headers)
        plan = self.plans[len(self.requests) - 1]
        try:
            await plan(conn)
        finally:
            await conn.aclose()


def frame(event_id: int | None, kind: str, **data: Any) -> bytes:
    body = {"v": 1, "type": kind, "data": data}
    head = b""
    if event_id is not None:
        body["id"] = event_id
        head = f"id: {event_id}\n".encode()
    return head + f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode()


async def sse_head(conn: trio.SocketStream) -> None:
    await conn.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")


async def chunk(conn: trio.SocketStream, data: bytes) -> None:
    await conn.send_all(b"%x\r\n%s\r\n" % (len(data), data))


async def end(conn: trio.SocketStream) -> None:
    await conn.send_all(b"0\r\n\r\n")


async def answer(conn: trio.SocketStream, status: int, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    await conn.send_all(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
                        "Connection: close\r\n\r\n".encode() + raw)


async def collect(target: Target, session: str = "s1", **kwargs: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    got: list[dict[str, Any]] = []
    reconnects: list[Any] = []
    async with httpx.AsyncClient(trust_env=False) as client:
        events = stream.events(client, target, session, first_wait=0.001, max_wait=0.01,
                               on_reconnect=lambda attempt, error: reconnects.append((attempt, error)), **kwargs)
        async with aclosing(events) as frames:
            async for f in frames:
                got.append(f)
    return got, reconnects


async def test_a_stream_cut_mid_frame_resumes_from_the_last_id_without_repeats(nursery):
    async def first(conn: trio.SocketStream) -> None:
        await sse_head(conn)
        await chunk(conn, b"retry: 3000\n\n" + frame(1, "session_update", n=1) + frame(2, "session_update", n=2))
        await chunk(conn, frame(None, "slow_client_warning", queued=3) + frame(3, "session_update", n=3))
        await chunk(conn, b'id: 4\nevent: session_update\ndata: {"id": 4, "ty')  # then the connection breaks

    async def second(conn: trio.SocketStream) -> None:
        await sse_head(conn)
        # The daemon replays from the cursor; a proxy or a replay may well start earlier: 2 and 3 again.
        await chunk(conn, frame(2, "session_update", n=2) + frame(3, "session_update", n=3))
        await chunk(conn, b": keep-alive\n\n" + frame(4, "session_update", n=4).replace(b"\n", b"\r\n"))
        await chunk(conn, frame(5, "turn_complete", n=5) + frame(6, "session_closed", reason="closed"))
        await chunk(conn, frame(7, "session_update", n=7))  # after a terminal frame: never read
        await end(conn)

    fake = FakeDaemon(first, second)
    url = await nursery.start(fake.serve)
    with trio.fail_after(10):
        got, reconnects = await collect(Target(url, "tok"), last_event_id=0)
    assert [f.get("id") for f in got] == [1, 2, None, 3, 4, 5, 6]
    assert got[2]["type"] == "slow_client_warning"
    assert [r["last-event-id"] for r in fake.requests] == ["0", "3"]
    assert all(r["authorization"] == "Bearer tok" for r in fake.requests)
    assert fake.requests[0]["request"] == "GET /session/s1/events HTTP/1.1"
    assert len(reconnects) == 1 and reconnects[0][0] == 1 and isinstance(reconnects[0][1], httpx.TransportError)


async def test_a_clean_end_and_a_server_error_are_retried_and_the_first_request_sends_no_cursor(nursery):
    async def ends(conn: trio.SocketStream) -> None:
        await sse_head(conn)
        await chunk(conn, frame(7, "session_update", n=7))
        await end(conn)

    async def unavailable(conn: trio.SocketStream) -> None:
        await answer(conn, 503, {"error": "too many", "code": "too_many_subscribers", "path": None})

    async def closes(conn: trio.SocketStream) -> None:
        await sse_head(conn)
        await chunk(conn, frame(7, "session_update", n=7) + frame(8, "client_evicted", reason="queue_overflow"))
        await end(conn)

    fake = FakeDaemon(ends, unavailable, closes)
    url = await nursery.start(fake.serve)
    with trio.fail_after(10):
        got, reconnects = await collect(Target(url))
    assert [f["id"] for f in got] == [7, 8]  # client_evicted ends the stream too
    assert [r.get("last-event-id") for r in fake.requests] == [None, "7", "7"]
    assert "authorization" not in fake.requests[0]  # no token: none sent
    assert [attempt for attempt, _ in reconnects] == [1, 2]
    assert reconnects[0][1] is None
    assert isinstance(reconnects[1][1], httpx.HTTPStatusError) and "too_many_subscribers" in str(reconnects[1][1])


async def test_an_unknown_session_is_not_retried(nursery):
    async def gone(conn: trio.SocketStream) -> None:
        await answer(conn, 404, {"error": "unknown session 's1'", "code": "session_not_found", "path": "url.id"})

    fake = FakeDaemon(gone)
    url = await nursery.start(fake.serve)
    with trio.fail_after(10), pytest.raises(stream.SessionGone, match="HTTP 404 session_not_found: unknown session"):
        await collect(Target(url))
    assert len(fake.requests) == 1


async def test_frames_parse_multiline_data_and_skip_comments():
    class Response:
        async def aiter_bytes(self):
            for piece in (b": hi\n\nda", b"ta: {\"a\":\ndata: 1}\n", b"\n", b"data:{\"b\": 2}\r\n\r\n"):
                yield piece

    with trio.fail_after(5):
        got = [f async for f in stream.frames(Response())]  # type: ignore[arg-type]
    assert got == [{"a": 1}, {"b": 2}]


async def test_across_a_daemon_restart_the_new_turn_arrives_whole(tmp_path):
    """A restored session's bus numbers its events from 1 again (its compacted earlier turns first): the new
    epoch's first ids are at or below the cursor of the old one, and must not be skipped as already shown."""
    merged = [{"text": c} for c in "abcdef"]  # six chunks that the compacted replay folds into one
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [merged, merged]}))
    token = "a-fixed-token"
    args = ("--script", str(script))
    env = {"TRELLIS_TOKEN": token}
    got: list[dict[str, Any]] = []
    with trio.fail_after(60):
        async with httpx.AsyncClient(trust_env=False) as client, AsyncExitStack() as stack:
            async with daemon_process(*args, state_dir=tmp_path / "state", env=env) as first:
                target = Target(first.url, token)
                port = first.url.rsplit(":", 1)[1]
                async with first.client(token) as rest:
                    sid = (await rest.post("/session", json={})).json()["sessionId"]
                    await rest.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "one"}]})
                frames = await stack.enter_async_context(aclosing(
                    stream.events(client, target, sid, last_event_id=0, first_wait=0.01)))
                async for f in frames:
                    if f["type"] == "turn_complete":
                        break
                first.process.kill()  # a crash: a graceful stop would send session_closed, which ends the stream
                await first.process.wait()
            # Not read on yet: the daemon restarts meanwhile, the session is restored and runs a turn.
            async with daemon_process(*args, "--port", port, state_dir=tmp_path / "state", env=env) as second:
                async with second.client(token) as rest:
                    assert (await rest.post(f"/session/{sid}/load", json={})).status_code == 200
                    admitted = (await rest.post(f"/session/{sid}/prompt",
                                                json={"prompt": [{"type": "text", "text": "two"}]})).json()
                    turn = f"/session/{sid}/turns/{admitted['promptId']}"
                    while (await rest.get(turn)).json()["state"] != "completed":
                        await trio.sleep(0.01)
                with trio.move_on_after(5):  # what a turn_complete skipped as "already shown" would leave waiting
                    async for f in frames:
                        got.append(f)
                        if f["type"] == "turn_complete" and f.get("promptId") == admitted["promptId"]:
                            break
    mine = [f for f in got if f.get("promptId") == admitted["promptId"]]
    first_update = mine[0]["data"]["update"] if mine and mine[0]["type"] == "session_update" else {}
    assert first_update.get("sessionUpdate") == "user_message_chunk", [(f.get("id"), f["type"]) for f in got]
    texts = "".join(f["data"]["update"]["content"]["text"] for f in mine if f["type"] == "session_update"
                    and f["data"]["update"]["sessionUpdate"] == "agent_message_chunk")
    assert texts == "abcdef"
