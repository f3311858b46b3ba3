"""Red team, fifth round: what a hostile model server could still make of the daemon with responses that
carry no text (/tmp/redteam5, findings 5, 5b and 5c).

- 5: one SSE line of some ten million empty choices (``{"choices":[{},{},...]}``, 30 MiB, within the line
  bound) took the daemon from 75 MB to 1.8 GB and held the event loop for 15 s: orjson made a dict of each
  and the chunk loop walked them all, while only text counted toward a response's budget. Now a chunk whose
  separators allow more than ``MAX_CHUNK_VALUES`` values is refused before it is parsed, and one with more
  than ``MAX_CHOICES`` choices before they are read.
- 5b: chunks without text (``{"delta":{"role":"assistant"}}``) streamed without end were read for as long as
  the server sent them (239 MiB in 20 s, the turn still running). Now every byte of a response counts
  against ``max_response_bytes`` (``MAX_RESPONSE_BYTES``).
- 5c: ``HTTP/1.1 100 Continue`` heads without end were each skipped (re-slicing the read buffer after each),
  and the call never ended. Now at most ``MAX_INTERIM`` are skipped.

The openai provider runs against hostile loopback servers in this process (real HTTP on port 0); the last
test runs the real daemon. Bounds are asserted by what was read or parsed, not by time or memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest
import trio

from actors.model import openai
from actors.model.base import ModelError, TextDelta
from actors.model.h1 import MAX_INTERIM, ProtocolError, ResponseParser
from actors.model.openai import MAX_CHOICES, MAX_CHUNK_VALUES, OpenAIConfig, OpenAIModel, _data_payloads, _Proxied
from actors.model.sse import BodyTooLong
from tests.actors.model.test_openai import HELLO, KEY, collect
from tests.actors.model.test_openai_http import Chunks, Pieces
from tests.canned_site import read_request
from tests.security.test_red_team_round3_model import daemon_on, turn, turn_error

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
ANSWER = b'data: {"choices":[{"index":0,"delta":{"content":"done"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
BYTES = 2**20  # max_response_bytes of the client tests
OVERSHOOT = 64  # an endless server gives up after this many byte budgets, so the old code ends too
Send = Callable[[bytes], Awaitable[None]]


class Hostile:
    """A loopback model server: the first chat request is answered by ``first`` (given a send that counts what
    got out, in :attr:`sent`), every later one with a short answer."""

    def __init__(self, first: Callable[[Send], Awaitable[None]]) -> None:
        self.first = first
        self.requests = 0
        self.sent = 0

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        async with trio.open_nursery() as nursery:
            task_status.started(f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/v1")
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, stream: trio.SocketStream) -> None:
        if (request := await read_request(stream)) is None:
            return
        head, body = request
        self.requests += 1

        async def send(data: bytes) -> None:
            await stream.send_all(data)
            self.sent += len(data)

        try:
            if self.requests > 1:
                await stream.send_all(SSE_HEAD + ANSWER)
            else:
                await self.first(send)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client left
        finally:
            await stream.aclose()


async def refused(first: Callable[[Send], Awaitable[None]], **config: Any) -> tuple[ModelError, list[Any], Hostile]:
    """The error the first call ends with, what it passed on before, and the server; the next call works."""
    server = Hostile(first)
    items: list[Any] = []
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.serve)
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, model="m", read_timeout=10.0, **config))
        try:
            with pytest.raises(ModelError) as info:
                async with model.stream(HELLO) as stream:
                    async for item in stream:
                        items.append(item)
            assert [i for i in await collect(model) if type(i) is TextDelta] == [TextDelta("done")]
        finally:
            await model.aclose()
            nursery.cancel_scope.cancel()
    return info.value, items, server


# ----------------------------------------------------------------- 5: a chunk of millions of values


async def test_a_chunk_of_millions_of_empty_choices_is_refused_before_it_is_parsed(monkeypatch) -> None:
    count = 2 * MAX_CHUNK_VALUES  # 6 MiB of "{},", within the line bound

    async def first(send: Send) -> None:
        await send(SSE_HEAD + b'data: {"choices":[' + b"{}," * (count - 1) + b"{}]}\n\n" + ANSWER)

    parsed: list[int] = []
    loads = orjson.loads

    def spy(data: Any) -> Any:
        parsed.append(len(data))
        return loads(data)

    monkeypatch.setattr(openai.orjson, "loads", spy)
    with trio.fail_after(60):
        error, items, _ = await refused(first)
    assert (error.code, error.committed) == ("response_too_large", True)
    # Counted by separators: each "{}," is two (its "{" and its ","), so the count overestimates.
    assert f"a stream chunk of up to {2 * count + 3:,} JSON values (at most {MAX_CHUNK_VALUES:,} are parsed)" \
        in error.message, error.message
    assert items == []
    # The line never reached the parser: only the next call's chunks did.
    assert parsed and max(parsed) < 1024, parsed


@pytest.mark.parametrize("count", [MAX_CHOICES + 1, 100_000])  # 2.6 MB, within the value bound
async def test_a_chunk_with_more_choices_than_are_read_is_refused(count: int) -> None:
    choice = b'{"delta":{"content":"x"}}'

    async def first(send: Send) -> None:
        await send(SSE_HEAD + b'data: {"choices":[' + b",".join([choice] * count) + b"]}\n\n" + ANSWER)

    with trio.fail_after(60):
        error, items, _ = await refused(first)
    assert (error.code, error.committed) == ("response_too_large", True)
    assert f"the model server sent a chunk with {count:,} choices (at most {MAX_CHOICES} are read)" in error.message
    assert items == []  # refused whole: not one of its choices was passed on


async def test_choices_up_to_the_bound_are_read_as_before() -> None:
    choices = b",".join(b'{"delta":{"content":"%d"}}' % n for n in range(MAX_CHOICES))

    async def first(send: Send) -> None:
        await send(SSE_HEAD + b'data: {"choices":[' + choices + b"]}\n\ndata: [DONE]\n\n")

    server = Hostile(first)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.serve)
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, model="m"))
        with trio.fail_after(10):
            items = await collect(model)
        await model.aclose()
        nursery.cancel_scope.cancel()
    assert [i.text for i in items if type(i) is TextDelta] == [str(n) for n in range(MAX_CHOICES)]


# ----------------------------------------------------------------- 5b: a stream without end and without text


ENDLESS = {
    "role chunks": b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
    "empty choices": b'data: {"choices":[]}\n\n',
    "comments": b": keep-alive\n\n",
}


@pytest.mark.parametrize("kind", ENDLESS)
async def test_a_stream_of_chunks_without_text_ends_at_the_response_byte_budget(kind: str) -> None:
    block = ENDLESS[kind] * (65536 // len(ENDLESS[kind]))

    async def first(send: Send) -> None:
        await send(SSE_HEAD)
        for _ in range(OVERSHOOT * BYTES // len(block)):
            await send(block)
        await send(ANSWER)

    with trio.fail_after(120):
        error, items, server = await refused(first, max_response_bytes=BYTES)
    assert (error.code, error.committed) == ("response_too_large", True)
    assert f"the model's response ran past {BYTES:,} bytes of event stream" in error.message, error.message
    assert items == []
    # The client left at the budget: what got out past it is what the sockets' buffers took (some 150 KiB here).
    assert server.sent < 8 * BYTES, server.sent


class Endless:
    """A body (as the direct client's response) that never ends; counts what was handed over."""

    complete = False

    def __init__(self, piece: bytes) -> None:
        self.piece = piece
        self.given = 0

    async def receive(self) -> bytes:
        await trio.lowlevel.checkpoint()
        self.given += len(self.piece)
        return self.piece


class EndlessChunks(httpx.AsyncByteStream):
    def __init__(self, piece: bytes) -> None:
        self.piece = piece
        self.given = 0

    async def __aiter__(self):
        while True:
            self.given += len(self.piece)
            yield self.piece


@pytest.mark.parametrize("path", ["direct", "proxied"])
async def test_the_splitter_reads_no_further_than_the_body_bound(path: str) -> None:
    piece = b'data: {"choices":[{"delta":{}}]}\n\n' * 1000
    source: Any = Endless(piece) if path == "direct" else EndlessChunks(piece)
    body = source if path == "direct" else _Proxied(httpx.Response(200, stream=source))
    with trio.fail_after(30), pytest.raises(BodyTooLong) as info:
        async for _ in _data_payloads(body, 65536, 100_000):
            pass
    assert info.value.limit == 100_000
    assert source.given <= 100_000 + len(piece)


async def test_a_body_within_the_bound_is_read_whole() -> None:
    lines = [b"data: %d\n" % n for n in range(100)]
    size = len(b"".join(lines))
    with trio.fail_after(10):
        assert len([p async for p in _data_payloads(Pieces(lines), 65536, size)]) == 100  # type: ignore[arg-type]
        assert len([p async for p in _data_payloads(_Proxied(httpx.Response(200, stream=Chunks(lines))),
                                                    65536, size)]) == 100


# ----------------------------------------------------------------- 5c: interim heads without end


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
FINAL = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def test_the_parser_skips_at_most_max_interim_heads_of_each_response() -> None:
    parser = ResponseParser()
    for _ in range(2):  # each response on a kept-alive connection may have its own
        parser.receive(CONTINUE * MAX_INTERIM + FINAL)
        head = parser.head()
        assert head is not None and head.status_code == 200
        assert parser.body() == b"ok" and parser.done
        parser.start_next_cycle()
    parser.receive(CONTINUE * 100_000 + FINAL)
    with pytest.raises(ProtocolError, match=f"more than {MAX_INTERIM} interim \\(1xx\\) responses"):
        parser.head()
    # It stopped at the one past the bound, not after skipping the rest.
    assert len(parser._buf) == (100_000 - MAX_INTERIM - 1) * len(CONTINUE) + len(FINAL)


async def interim_without_end(send: Send) -> None:
    for _ in range(OVERSHOOT):  # 64 × 2,000 heads, then the answer, so the old client ends too
        await send(CONTINUE * 2000)
    await send(SSE_HEAD + ANSWER)


async def test_interim_heads_without_end_end_the_call_naming_the_bound() -> None:
    with trio.fail_after(60):
        error, items, server = await refused(interim_without_end)
    assert (error.code, error.committed) == ("connection_error", False)
    assert f"more than {MAX_INTERIM} interim (1xx) responses" in error.message, error.message
    assert items == []
    assert server.sent < 8 * 2000 * len(CONTINUE), server.sent  # the client left after its first read or so


async def test_the_daemons_turn_ends_with_the_interim_bound_and_the_session_goes_on(nursery, tmp_path) -> None:
    url = await nursery.start(Hostile(interim_without_end).serve)
    with trio.fail_after(90):
        async with daemon_on(url, tmp_path) as (_, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            first = await turn(client, sid, "hi", timeout=60)
            error = await turn_error(client, sid)
            second = await turn(client, sid, "again")
            transcript = (await client.get(f"/session/{sid}/transcript")).text
    assert first["state"] == "error" and error["code"] == "connection_error", (first, error)
    assert f"more than {MAX_INTERIM} interim (1xx) responses" in error["message"], error
    assert second["state"] == "completed" and "done" in transcript
