"""A prompt admission read whole in one read, answered by its connection (transport/connections.py's
_TCPServer._offer_inline): the same answer as hypercorn's, the connection's HTTP state and keep-alive kept,
and everything else left to hypercorn. Raw sockets against a real served app."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import orjson
import trio

from actors import Limits, Settings
from tests.transport.served import Spawned, served_app
from transport import connections

PROMPT = orjson.dumps({"prompt": [{"type": "text", "text": "hello"}]})


class Client:
    """One raw HTTP/1.1 connection to the served app."""

    def __init__(self, stream: trio.SocketStream, host: bytes, token: bytes) -> None:
        self.stream, self.host, self.token = stream, host, token
        self.buffer = b""

    def admission(self, sid: str, token: bytes | None = None, body: bytes = PROMPT) -> bytes:
        return (b"POST /session/%s/prompt HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (sid.encode(), self.host, token or self.token, len(body), body))

    async def answer(self) -> tuple[bytes, dict[bytes, bytes], bytes]:
        """The next answer: its status line, headers (lower-cased names) and its sized body."""
        while b"\r\n\r\n" not in self.buffer:
            chunk = await self.stream.receive_some()
            assert chunk, f"closed before an answer: {self.buffer!r}"
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status, *lines = head.split(b"\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(b":") for line in lines)}
        length = int(headers.get(b"content-length", b"0"))
        while len(self.buffer) < length:
            self.buffer += await self.stream.receive_some()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    async def closed(self) -> bool:
        return await self.stream.receive_some() == b""


class Served:
    def __init__(self, daemon: Any, url: str, token: str) -> None:
        self.daemon = daemon
        self.host, _, port = url.removeprefix("http://").partition(":")
        self.port = int(port)
        self.token = token.encode()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Client]:
        stream = await trio.open_tcp_stream(self.host, self.port)
        async with stream:
            yield Client(stream, f"{self.host}:{self.port}".encode(), self.token)

    async def session(self) -> str:
        async with self.connection() as c:
            await c.stream.send_all(b"POST /session HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                                    b"Content-Length: 2\r\n\r\n{}" % (c.host, c.token))
            return orjson.loads((await c.answer())[2])["sessionId"]


@asynccontextmanager
async def served(model: Any = None, settings: Settings | None = None, inline: Any = True,
                 max_requests: int = 1000) -> AsyncIterator[Served]:
    async with served_app(model, settings, inline=inline, max_requests=max_requests) as s:
        yield Served(s.daemon, s.url, s.token)


async def spawned_while(work: Any) -> tuple[Any, list[str]]:
    spawned = Spawned()
    trio.lowlevel.add_instrument(spawned)
    try:
        return await work(), spawned.names
    finally:
        trio.lowlevel.remove_instrument(spawned)


def without_date(headers: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {k: v for k, v in headers.items() if k != b"date"}


def by_hypercorn(tasks: list[str]) -> bool:
    return any("hypercorn" in name for name in tasks)  # its app task: the connection's own answers start none


async def admit_whole(c: Client, sid: str) -> tuple[bytes, dict[bytes, bytes], bytes]:
    await c.stream.send_all(c.admission(sid))
    return await c.answer()


async def admit_apart(c: Client, sid: str) -> tuple[bytes, dict[bytes, bytes], bytes]:
    request = c.admission(sid)
    await c.stream.send_all(request[:-len(PROMPT)])  # the head, then the body in a write of its own (as httpx)
    await trio.sleep(0.05)
    await c.stream.send_all(request[-len(PROMPT):])
    return await c.answer()


async def test_a_whole_admission_is_answered_by_its_connection_as_hypercorn_answers_it():
    with trio.fail_after(30):
        async with served() as s, served(inline=False) as plain:
            answers = []
            for server in (s, plain):
                sid = await server.session()
                async with server.connection() as c:
                    answers.append(await spawned_while(partial(admit_whole, c, sid)))
            ((status, headers, body), inline_tasks), ((h_status, h_headers, h_body), hypercorn_tasks) = answers
            assert not by_hypercorn(inline_tasks) and by_hypercorn(hypercorn_tasks)
            assert status == h_status == b"HTTP/1.1 202 "
            assert without_date(headers) == without_date(h_headers)
            # The same ids (CountingIds): the same answer, but for each daemon's own event epoch.
            answer, h_answer = orjson.loads(body), orjson.loads(h_body)
            assert answer.keys() == {"promptId", "lastEventId", "eventEpoch"}
            assert body.replace(answer["eventEpoch"].encode(), h_answer["eventEpoch"].encode()) == h_body


async def test_a_body_written_apart_from_its_head_is_read_on_and_the_connection_goes_on():
    with trio.fail_after(30):
        async with served() as s:
            sid = await s.session()
            async with s.connection() as c:
                (status, _, body), tasks = await spawned_while(partial(admit_apart, c, sid))
                assert status == b"HTTP/1.1 202 " and not by_hypercorn(tasks)
                # The connection goes on: a request hypercorn answers, then another admission.
                await c.stream.send_all(b"GET /session/%s/pending-prompts HTTP/1.1\r\nHost: %s\r\n"
                                        b"Authorization: Bearer %s\r\n\r\n" % (sid.encode(), c.host, c.token))
                pending = await c.answer()
                assert pending[0] == b"HTTP/1.1 200 " and "pendingPrompts" in orjson.loads(pending[2])
                (status, _, again), tasks = await spawned_while(partial(admit_whole, c, sid))
                assert status == b"HTTP/1.1 202 " and not by_hypercorn(tasks)
            assert orjson.loads(body)["promptId"] != orjson.loads(again)["promptId"]


async def test_a_body_slower_than_the_wait_is_hypercorns(monkeypatch):
    monkeypatch.setattr(connections, "BODY_WAIT", 0)  # the wait is over at once, however fast the body comes
    with trio.fail_after(30):
        async with served() as s:
            sid = await s.session()
            async with s.connection() as c:
                (status, _, body), tasks = await spawned_while(partial(admit_apart, c, sid))
                assert status == b"HTTP/1.1 202 " and by_hypercorn(tasks) and orjson.loads(body)["promptId"]
                (status, _, _), tasks = await spawned_while(partial(admit_whole, c, sid))
                assert status == b"HTTP/1.1 202 " and not by_hypercorn(tasks)


async def test_a_client_that_ends_before_its_body_gets_what_hypercorn_gives_it():
    with trio.fail_after(30):
        async with served() as s, served(inline=False) as plain:
            heard = []
            for server in (s, plain):
                sid = await server.session()
                async with server.connection() as c:
                    await c.stream.send_all(c.admission(sid)[:-3])
                    await c.stream.send_eof()
                    while chunk := await c.stream.receive_some():
                        c.buffer += chunk
                    heard.append(c.buffer.split(b"\r\n")[0])
                assert (await server.daemon.get(sid).pending_prompts()) == []
            assert heard[0] == heard[1]


async def test_a_declined_admission_is_answered_by_hypercorn_and_the_connection_goes_on():
    with trio.fail_after(30):
        async with served() as s:
            sid = await s.session()
            async with s.connection() as c:
                origin = b"http://localhost:%d" % s.port  # same-origin: allowed, and answered by quart's CORS hook
                with_origin = c.admission(sid).replace(b"\r\nHost:", b"\r\nOrigin: %s\r\nHost:" % origin)

                async def admit(request: bytes):
                    await c.stream.send_all(request)
                    return await c.answer()

                (status, headers, _), tasks = await spawned_while(partial(admit, with_origin))
                assert status == b"HTTP/1.1 202 " and headers[b"access-control-allow-origin"] == origin
                assert [n for n in tasks if "hypercorn" in n]
                (status, headers, _), tasks = await spawned_while(partial(admit, c.admission(sid)))
                assert status == b"HTTP/1.1 202 " and not [n for n in tasks if "hypercorn" in n]
            async with s.connection() as c:
                await c.stream.send_all(c.admission(sid, token=b"wrong"))
                status, headers, body = await c.answer()
                assert status == b"HTTP/1.1 401 " and orjson.loads(body)["code"] == "unauthorized"
                assert headers[b"www-authenticate"] == b"Bearer"
                assert headers[b"connection"] == b"close" and await c.closed()  # as every refusal of a body


async def test_two_admissions_in_one_read_are_left_to_hypercorn_and_both_answered_in_order():
    with trio.fail_after(30):
        async with served() as s:
            sid = await s.session()
            async with s.connection() as c:
                await c.stream.send_all(c.admission(sid) + c.admission(sid))
                first, second = await c.answer(), await c.answer()
                assert first[0] == second[0] == b"HTTP/1.1 202 "
                assert orjson.loads(first[2])["promptId"] != orjson.loads(second[2])["promptId"]


async def test_a_refusal_that_closes_its_connection_closes_it(scripted):
    model = scripted([{"sleep": 30}], then="demo")
    with trio.fail_after(30):
        async with served(model, Settings(limits=Limits(max_pending_prompts=1))) as s:
            sid = await s.session()
            async with s.connection() as c:
                await c.stream.send_all(c.admission(sid))
                assert (await c.answer())[0] == b"HTTP/1.1 202 "
                refused, tasks = await spawned_while(lambda: c.stream.send_all(c.admission(sid)))
                status, headers, body = await c.answer()
                assert status == b"HTTP/1.1 503 " and orjson.loads(body)["code"] == "prompt_queue_full"
                assert headers[b"connection"] == b"close" and not [n for n in tasks if "hypercorn" in n]
                assert await c.closed()


async def test_the_request_that_reaches_keep_alive_max_requests_is_hypercorns_and_closes():
    with trio.fail_after(30):
        async with served(max_requests=3) as s:
            sid = await s.session()
            async with s.connection() as c:
                for n in range(3):
                    async def admit():
                        await c.stream.send_all(c.admission(sid))
                        return await c.answer()

                    (status, headers, _), tasks = await spawned_while(admit)
                    assert status == b"HTTP/1.1 202 "
                    by_hypercorn = [t for t in tasks if "hypercorn" in t] != []
                    if n < 2:
                        assert not by_hypercorn and b"connection" not in headers
                    else:
                        assert by_hypercorn and headers[b"connection"] == b"close"
                assert await c.closed()


async def test_an_inline_answer_gets_its_access_line(caplog):
    caplog.set_level(logging.INFO, logger="trellis.access")
    with trio.fail_after(30):
        async with served() as s:
            sid = await s.session()
            async with s.connection() as c:
                await c.stream.send_all(c.admission(sid))
                assert (await c.answer())[0] == b"HTTP/1.1 202 "
    [line] = [r for r in caplog.records if r.name == "trellis.access" and r.path.endswith("/prompt")]
    assert line.getMessage().startswith(f"POST /session/{sid}/prompt 202 ")
    assert line.status == 202 and line.client == "127.0.0.1" and line.query == []


async def test_without_an_inline_answer_every_request_is_hypercorns():
    with trio.fail_after(30):
        async with served(inline=False) as s:
            sid = await s.session()
            async with s.connection() as c:
                async def admit():
                    await c.stream.send_all(c.admission(sid))
                    return await c.answer()

                (status, _, _), tasks = await spawned_while(admit)
                assert status == b"HTTP/1.1 202 " and [n for n in tasks if "hypercorn" in n]


async def test_a_body_read_apart_then_a_pipelined_request_go_to_hypercorn_in_order():
    with trio.fail_after(30):
        async with served() as s:
            sid = await s.session()
            async with s.connection() as c:
                request = c.admission(sid)
                await c.stream.send_all(request[:-len(PROMPT)])
                await trio.sleep(0.05)
                health = b"GET /health HTTP/1.1\r\nHost: %s\r\n\r\n" % c.host
                await c.stream.send_all(request[-len(PROMPT):] + health)  # more than the body: not ours
                first, second = await c.answer(), await c.answer()
                assert first[0] == b"HTTP/1.1 202 " and orjson.loads(first[2])["promptId"]
                assert second[0] == b"HTTP/1.1 200 " and orjson.loads(second[2]) == {"status": "ok"}


async def test_an_inline_answer_that_raises_is_answered_500_as_quart_answers_a_route_that_raises(caplog):
    async def raises(scope: dict, body: bytes) -> None:
        raise RuntimeError("a fault in the inline answer")

    with trio.fail_after(30):
        async with served(inline=raises) as s:
            sid = await s.session()
            async with s.connection() as c:
                await c.stream.send_all(c.admission(sid))
                status, headers, body = await c.answer()
                assert status == b"HTTP/1.1 500 " and headers[b"connection"] == b"close"
                assert orjson.loads(body)["code"] == "http_error" and await c.closed()
    [logged] = [r for r in caplog.records if r.name == "trellis.connections" and r.exc_info]
    assert "a fault in the inline answer" in str(logged.exc_info[1])
