"""A prompt's admission answered in hypercorn's request task (transport/inline_http.py), and every other
request, or a body still on its way, left to quart-trio as before."""

from __future__ import annotations

import orjson
import pytest
import trio

from tests.conftest import live_daemon
from tests.transport.served import Spawned
from quart import request
from quart_trio import QuartTrio

from transport.inline_http import (ARRIVING, GONE, INLINE_ANSWER, INLINE_BODY_MAX, NOT_OURS, WHOLE,
                                   InlineHTTPConnection, is_inline, read_rest, take_body)

PROMPT = orjson.dumps({"prompt": [{"type": "text", "text": "hello"}]})


def scope(method: str, path: str, headers: list[tuple[bytes, bytes]] = ()) -> dict:
    return {"type": "http", "method": method, "path": path, "headers": list(headers), "http_version": "1.1"}


# ----------------------------------------------------------------- which requests


@pytest.mark.parametrize(("method", "path", "inline"), [
    ("POST", "/session/s-1/prompt", True),
    ("GET", "/session/s-1/prompt", False),
    ("POST", "/session/s-1/prompt/x", False),
    ("POST", "/session/s-1/mid-turn-message", False),
    ("GET", "/session/s-1/events", False),
    ("POST", "/session", False),
])
def test_only_the_prompt_route_is_inline(method: str, path: str, inline: bool):
    assert is_inline(scope(method, path)) is inline


# ----------------------------------------------------------------- take_body


def sized(length: int) -> dict:
    return scope("POST", "/x", [(b"content-length", b"%d" % length)])


async def test_a_body_already_queued_is_taken_whole_without_waiting():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": PROMPT, "more_body": True})
    send.send_nowait({"type": "http.request", "body": b"", "more_body": False})
    with trio.fail_after(1):
        taken, state = await take_body(sized(len(PROMPT)), receive.receive)
    assert state == WHOLE and [m["body"] for m in taken] == [PROMPT, b""]


async def test_once_every_announced_byte_is_in_the_end_of_body_is_waited_for(autojump_clock):
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": PROMPT, "more_body": True})

    async def end_later() -> None:
        await trio.sleep(1)
        send.send_nowait({"type": "http.request", "body": b"", "more_body": False})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(end_later)
        taken, state = await take_body(sized(len(PROMPT)), receive.receive)
    assert state == WHOLE and len(taken) == 2
    assert trio.current_time() == 1  # it waited for the end, not for the client


async def test_a_body_still_arriving_is_not_waited_for_and_what_was_taken_is_returned():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": PROMPT[:5], "more_body": True})
    with trio.fail_after(1):  # waiting here would hang: nothing else is sent
        taken, state = await take_body(sized(len(PROMPT)), receive.receive)
    assert state == ARRIVING and [m["body"] for m in taken] == [PROMPT[:5]]
    send.send_nowait({"type": "http.request", "body": PROMPT[5:], "more_body": True})
    send.send_nowait({"type": "http.request", "body": b"", "more_body": False})
    assert await read_rest(taken, receive.receive) == WHOLE
    assert b"".join(m["body"] for m in taken) == PROMPT


async def test_a_request_without_a_body_is_whole_with_its_end_message():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": b"", "more_body": False})
    taken, state = await take_body(scope("POST", "/x"), receive.receive)
    assert state == WHOLE and len(taken) == 1


async def test_a_client_gone_mid_body_is_gone_taken_or_read():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": PROMPT[:5], "more_body": True})
    send.send_nowait({"type": "http.disconnect"})
    taken, state = await take_body(sized(len(PROMPT)), receive.receive)
    assert state == GONE and [m["type"] for m in taken] == ["http.request", "http.disconnect"]
    send.send_nowait({"type": "http.disconnect"})
    assert await read_rest([], receive.receive) == GONE


async def test_a_chunked_or_large_body_or_a_foreign_receive_is_left_to_quart_untouched():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": b"", "more_body": False})
    chunked = scope("POST", "/x", [(b"transfer-encoding", b"chunked")])
    assert await take_body(chunked, receive.receive) == ([], NOT_OURS)
    assert await take_body(sized(INLINE_BODY_MAX + 1), receive.receive) == ([], NOT_OURS)
    assert receive.receive_nowait()["type"] == "http.request"  # nothing was taken

    async def foreign() -> dict:
        raise AssertionError("a receive that is not hypercorn's queue is not called")

    assert await take_body(scope("POST", "/x"), foreign) == ([], NOT_OURS)
    # HTTP/2: the end of a body is a flag the client may withhold, not something h11 parses at once.
    assert await take_body({**sized(0), "http_version": "2"}, receive.receive) == ([], NOT_OURS)
    send.send_nowait({"type": "http.request", "body": b"", "more_body": False})
    with trio.fail_after(1):
        assert (await take_body({**sized(0), "http_version": "1.0"}, receive.receive))[1] == WHOLE


# ----------------------------------------------------------------- the connection, on a bare app


def bare_app() -> QuartTrio:
    app = QuartTrio("inline-test")
    app.config["BODY_TIMEOUT"] = 5

    @app.post("/session/<sid>/prompt")
    async def prompt(sid: str):
        return {"length": len(await request.get_data()), "task": trio.lowlevel.current_task().name}, 202

    return app


async def call(app: QuartTrio, messages: list[dict], late: list[tuple[float, dict]] = ()) -> list[dict]:
    send, receive = trio.open_memory_channel(10)
    for message in messages:
        send.send_nowait(message)
    sent: list[dict] = []

    async def collect(message: dict) -> None:
        sent.append(message)

    async def feed() -> None:
        for delay, message in late:
            await trio.sleep(delay)
            await send.send(message)

    head = [(b"content-length", b"%d" % len(PROMPT)), (b"host", b"x")]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(feed)
        connection = InlineHTTPConnection(app, {**scope("POST", "/session/s/prompt", head), "http_version": "1.1",
                                                "query_string": b"", "root_path": "", "scheme": "http",
                                                "raw_path": b"/session/s/prompt", "client": None, "extensions": {}})
        await connection(receive.receive, collect)
        nursery.cancel_scope.cancel()
    return sent


def status_and_body(sent: list[dict]) -> tuple[int, bytes]:
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def test_a_late_body_is_read_in_the_calling_task(autojump_clock):
    sent = await call(bare_app(), [], [(1, {"type": "http.request", "body": PROMPT, "more_body": True}),
                                       (0, {"type": "http.request", "body": b"", "more_body": False})])
    status, body = status_and_body(sent)
    assert status == 202 and orjson.loads(body)["length"] == len(PROMPT)


async def test_a_body_that_stops_arriving_is_answered_408_at_the_body_timeout(autojump_clock):
    start = trio.current_time()
    sent = await call(bare_app(), [{"type": "http.request", "body": PROMPT[:5], "more_body": True}])
    assert status_and_body(sent)[0] == 408
    assert trio.current_time() - start == 5


async def test_a_client_gone_before_its_body_is_whole_gets_no_answer(autojump_clock):
    sent = await call(bare_app(), [{"type": "http.request", "body": PROMPT[:5], "more_body": True}],
                      [(1, {"type": "http.disconnect"})])
    assert sent == []


# ----------------------------------------------------------------- the real server


async def test_a_prompt_is_admitted_in_hypercorns_task_without_quart_trios_two():
    with trio.fail_after(30):
        async with live_daemon() as (_, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            await client.post(f"/session/{sid}/prompt", content=PROMPT)  # the connection is open and warm
            spawned = Spawned()
            trio.lowlevel.add_instrument(spawned)
            try:
                r = await client.post(f"/session/{sid}/prompt", content=PROMPT)
            finally:
                trio.lowlevel.remove_instrument(spawned)
            assert r.status_code == 202 and r.json()["promptId"]
            assert [n for n in spawned.names if "quart_trio" in n] == []
            # Any other route still gets quart-trio's body reader and handler tasks.
            spawned = Spawned()
            trio.lowlevel.add_instrument(spawned)
            try:
                assert (await client.get(f"/session/{sid}/pending-prompts")).status_code == 200
            finally:
                trio.lowlevel.remove_instrument(spawned)
            assert len([n for n in spawned.names if "quart_trio" in n]) == 2


async def test_a_prompt_whose_body_comes_after_its_head_is_admitted_and_refusals_still_refuse():
    with trio.fail_after(30):
        async with live_daemon() as (_, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            token = client.headers["Authorization"]
            host, port = client.base_url.host, client.base_url.port

            async def raw(body_parts: list[bytes], auth: str = token, chunked: bool = False) -> bytes:
                stream = await trio.open_tcp_stream(host, port)
                length = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % sum(map(len, body_parts))
                head = (b"POST /session/%s/prompt HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: %s\r\n"
                        b"Content-Type: application/json\r\n%s\r\nConnection: close\r\n\r\n"
                        % (sid.encode(), host.encode(), port, auth.encode(), length))
                await stream.send_all(head)
                for part in body_parts:
                    await trio.sleep(0.05)  # the request task has started and found no body yet
                    if chunked:
                        part = b"%x\r\n%s\r\n" % (len(part), part)
                    await stream.send_all(part)
                if chunked:
                    await stream.send_all(b"0\r\n\r\n")
                answer = b""
                while chunk := await stream.receive_some():
                    answer += chunk
                await stream.aclose()
                return answer

            admitted = []
            for parts, chunked, quart_tasks in (([PROMPT[:7], PROMPT[7:]], False, 0), ([PROMPT], True, 2)):
                spawned = Spawned()
                trio.lowlevel.add_instrument(spawned)
                try:
                    answer = await raw(parts, chunked=chunked)
                finally:
                    trio.lowlevel.remove_instrument(spawned)
                assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
                # A late body is read in hypercorn's task; a chunked one (no length to go by) is quart-trio's.
                assert len([n for n in spawned.names if "quart_trio" in n]) == quart_tasks
                admitted.append(orjson.loads(answer.split(b"\r\n\r\n", 1)[1])["promptId"])
            assert (await raw([PROMPT], auth="Bearer wrong")).startswith(b"HTTP/1.1 401")
            assert (await raw([b'{"prompt": 1}'])).startswith(b"HTTP/1.1 400")
            assert len(set(admitted)) == 2
            for prompt_id in admitted:  # each one a turn of the session, under its own id
                assert (await client.get(f"/session/{sid}/turns/{prompt_id}")).status_code == 200


async def test_an_inline_answer_that_raises_is_answered_500_and_the_route_is_not_run(autojump_clock):
    app = bare_app()
    ran = []

    async def raises(scope: dict, body: bytes) -> None:
        ran.append(body)
        raise RuntimeError("a fault in the inline answer")

    app.extensions[INLINE_ANSWER] = raises
    sent = await call(app, [{"type": "http.request", "body": PROMPT, "more_body": False}])
    status, body = status_and_body(sent)
    assert status == 500 and orjson.loads(body)["code"] == "http_error" and ran == [PROMPT]
    assert (b"connection", b"close") in sent[0]["headers"]
