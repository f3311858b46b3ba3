"""A prompt's admission answered in hypercorn's request task (transport/inline_http.py), and every other
request, or a body still on its way, left to quart-trio as before."""

from __future__ import annotations

import orjson
import pytest
import trio

from tests.conftest import live_daemon
from transport.inline_http import is_inline, take_body

PROMPT = orjson.dumps({"prompt": [{"type": "text", "text": "hello"}]})


class Spawned(trio.abc.Instrument):
    """The names of the tasks spawned while it is installed."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


def scope(method: str, path: str, headers: list[tuple[bytes, bytes]] = ()) -> dict:
    return {"type": "http", "method": method, "path": path, "headers": list(headers)}


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


async def test_a_body_already_queued_is_taken_whole_without_waiting():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": PROMPT, "more_body": True})
    send.send_nowait({"type": "http.request", "body": b"", "more_body": False})
    with trio.fail_after(1):
        taken, whole = await take_body(scope("POST", "/x", [(b"content-length", b"%d" % len(PROMPT))]),
                                       receive.receive)
    assert whole and [m["body"] for m in taken] == [PROMPT, b""]


async def test_once_every_announced_byte_is_in_the_end_of_body_is_waited_for(autojump_clock):
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": PROMPT, "more_body": True})

    async def end_later() -> None:
        await trio.sleep(1)
        send.send_nowait({"type": "http.request", "body": b"", "more_body": False})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(end_later)
        taken, whole = await take_body(scope("POST", "/x", [(b"content-length", b"%d" % len(PROMPT))]),
                                       receive.receive)
    assert whole and len(taken) == 2
    assert trio.current_time() == 1  # it waited for the end, not for the client


async def test_a_body_still_arriving_is_not_waited_for_and_what_was_taken_is_returned():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": PROMPT[:5], "more_body": True})
    with trio.fail_after(1):  # waiting here would hang: nothing else is sent
        taken, whole = await take_body(scope("POST", "/x", [(b"content-length", b"%d" % len(PROMPT))]),
                                       receive.receive)
    assert not whole and [m["body"] for m in taken] == [PROMPT[:5]]


async def test_a_request_without_a_body_is_whole_with_its_end_message():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": b"", "more_body": False})
    taken, whole = await take_body(scope("POST", "/x"), receive.receive)
    assert whole and len(taken) == 1


async def test_a_chunked_body_a_disconnect_or_a_foreign_receive_are_left_to_quart():
    send, receive = trio.open_memory_channel(10)
    send.send_nowait({"type": "http.request", "body": b"", "more_body": False})
    chunked = scope("POST", "/x", [(b"transfer-encoding", b"chunked")])
    assert await take_body(chunked, receive.receive) == ([], False)  # nothing taken: its length is not known

    receive.receive_nowait()
    send.send_nowait({"type": "http.request", "body": PROMPT[:5], "more_body": True})
    send.send_nowait({"type": "http.disconnect"})  # the client went away mid-body
    taken, whole = await take_body(scope("POST", "/x", [(b"content-length", b"%d" % len(PROMPT))]),
                                   receive.receive)
    assert not whole and [m["type"] for m in taken] == ["http.request", "http.disconnect"]

    async def foreign() -> dict:
        raise AssertionError("a receive that is not hypercorn's queue is not called")

    assert await take_body(scope("POST", "/x"), foreign) == ([], False)


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
            for answer in (await raw([PROMPT[:7], PROMPT[7:]]), await raw([PROMPT], chunked=True)):
                assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
                admitted.append(orjson.loads(answer.split(b"\r\n\r\n", 1)[1])["promptId"])
            assert (await raw([PROMPT], auth="Bearer wrong")).startswith(b"HTTP/1.1 401")
            assert (await raw([b'{"prompt": 1}'])).startswith(b"HTTP/1.1 400")
            assert len(set(admitted)) == 2
            for prompt_id in admitted:  # each one a turn of the session, under its own id
                assert (await client.get(f"/session/{sid}/turns/{prompt_id}")).status_code == 200
