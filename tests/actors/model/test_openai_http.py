"""The openai provider's HTTP path: the SSE line splitter, the direct client's wire, and the full client with a proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import h11
import httpx
import pytest
import trio

from actors.model.base import ChatMessage, ChatRequest, Finish, ModelError, TextDelta
from actors.model.openai import OpenAIConfig, OpenAIModel, _data_payloads, _Proxied
from transport.fake_openai import FakeOpenAI

KEY = "sk-test-SECRET-0123456789"
HELLO = ChatRequest((ChatMessage("user", "hi"),))


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk


class Pieces:
    """A body that hands over the given pieces one per ``receive``, as the direct client's response does."""

    complete = False

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    async def receive(self) -> bytes:
        await trio.lowlevel.checkpoint()
        return self.chunks.pop(0) if self.chunks else b""


async def payloads(chunks: list[bytes]) -> list[bytes]:
    direct = [p async for p in _data_payloads(Pieces(chunks))]  # type: ignore[arg-type]
    proxied = [p async for p in _data_payloads(_Proxied(httpx.Response(200, stream=Chunks(chunks))))]
    assert direct == proxied
    return direct


async def test_lines_cut_across_chunks_in_any_line_ending_give_each_payload_once():
    with trio.fail_after(5):
        got = await payloads([b'data: {"a"', b':1}\r\n\r\n: a comment\nevent: x\nid: 3\n',
                              b'data:{"b":2}\r', b'\rdata: [DONE]'])
    assert got == [b'{"a":1}', b'{"b":2}', b"[DONE]"]


async def test_a_body_without_data_lines_gives_nothing():
    with trio.fail_after(5):
        assert await payloads([b": keep-alive\n\n", b"retry: 10\n"]) == []


async def test_empty_chunks_from_httpx_do_not_end_the_proxied_body():
    with trio.fail_after(5):
        body = _Proxied(httpx.Response(200, stream=Chunks([b"", b"data: 1\n", b"", b"data: 2\n"])))
        assert [p async for p in _data_payloads(body)] == [b"1", b"2"]


async def test_the_proxied_body_is_decoded_within_the_direct_paths_bound():
    """httpx decodes a read whole: a gzip bomb through a proxy became hundreds of MiB at once. Now the raw
    bytes are decoded here, by the bound the direct path keeps (MAX_DECODED), and a gzipped body still reads."""
    import gzip

    from actors.content_coding import MAX_DECODED

    plain = gzip.compress(b'data: {"a":1}\n\ndata: [DONE]\n')
    with trio.fail_after(10):
        body = _Proxied(httpx.Response(200, headers={"content-encoding": "gzip"}, stream=Chunks([plain])))
        assert [p async for p in _data_payloads(body)] == [b'{"a":1}', b"[DONE]"]
    bomb = gzip.compress(b"\0" * (MAX_DECODED + 2**20), compresslevel=9)  # about 130 KB on the wire
    with trio.fail_after(30):
        body = _Proxied(httpx.Response(200, headers={"content-encoding": "gzip"}, stream=Chunks([bomb])))
        with pytest.raises(httpx.DecodingError, match="decompresses to more than"):
            await body.receive()


def test_a_proxy_in_the_environment_sends_requests_through_the_full_client(monkeypatch):
    from actors.model.http import Transport
    from actors.model.openai import _proxied

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert not _proxied("https://api.example.com/v1/chat/completions")
    direct = OpenAIModel(OpenAIConfig(base_url="https://api.example.com/v1", api_key="k", model="m"))
    assert isinstance(direct._transport, Transport) and direct._client is None
    assert direct._transport._ssl_context is None  # an https base URL pays for TLS only when first used
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert _proxied("https://api.example.com/v1/chat/completions")
    assert not _proxied("https://localhost:8080/v1/chat/completions")
    assert not _proxied("http://api.example.com/v1/chat/completions")  # only https is proxied
    proxied = OpenAIModel(OpenAIConfig(base_url="https://api.example.com/v1", api_key="k", model="m"))
    assert proxied._transport is None and isinstance(proxied._client, httpx.AsyncClient)


# ----------------------------------------------------------------- against servers


@asynccontextmanager
async def fake(*responses: Any, client: httpx.AsyncClient | None = None) -> AsyncIterator[tuple[FakeOpenAI, OpenAIModel]]:
    server = FakeOpenAI(responses)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.serve)
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, model="m", read_timeout=2.0), client=client)
        try:
            yield server, model
        finally:
            await model.aclose()
            nursery.cancel_scope.cancel()


async def collect(model: OpenAIModel) -> list[Any]:
    async with model.stream(HELLO) as stream:
        return [item async for item in stream]


@pytest.mark.parametrize("shared", [False, True], ids=["direct", "full-client"])
async def test_both_paths_stream_and_map_errors_alike(shared: bool) -> None:
    client = httpx.AsyncClient() if shared else None
    with trio.fail_after(5):
        async with fake([{"text": "a"}], {"status": 429, "headers": {"Retry-After": "7"}},
                        {"status": 400, "body": {"error": {"message": f"bad key {KEY}"}}},
                        [{"text": "b"}, {"cut": True}], client=client) as (_, model):
            assert await collect(model) == [TextDelta("a"), Finish("stop")]
            errors = []
            for _ in range(3):
                with pytest.raises(ModelError) as info:
                    await collect(model)
                errors.append(info.value)
    if client is not None:
        await client.aclose()
    assert [(e.code, e.committed, e.retry_after) for e in errors] == [
        ("rate_limited", False, 7.0), ("http_400", False, None), ("stream_interrupted", True, None)]
    assert "bad key ***" in errors[1].message and KEY not in errors[1].message


async def test_the_direct_path_sends_the_head_httpx_sent_and_keeps_the_connection() -> None:
    heads: list[bytes] = []
    accepted = 0
    body = b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'

    async def serve(stream: trio.SocketStream) -> None:
        nonlocal accepted
        accepted += 1
        conn = h11.Connection(h11.SERVER)
        while True:
            while (event := conn.next_event()) is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                if conn.their_state is h11.IDLE:  # a request's first read
                    heads.append(data.split(b"\r\n\r\n")[0])
                conn.receive_data(data)
            if type(event) is h11.EndOfMessage:
                await stream.send_all(
                    conn.send(h11.Response(status_code=200, headers=[("Transfer-Encoding", "chunked")]))
                    + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
                conn.start_next_cycle()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            model = OpenAIModel(OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, model="m"))
            for _ in range(2):
                assert await collect(model) == [TextDelta("x"), Finish("stop")]
            await model.aclose()
            nursery.cancel_scope.cancel()
    content = model.request_content(HELLO)
    expected = httpx.Request("POST", f"http://127.0.0.1:{port}/v1/chat/completions", content=content, headers={
        "Content-Type": "application/json", "Accept": "text/event-stream", "Authorization": f"Bearer {KEY}"})
    wire = b"POST /v1/chat/completions HTTP/1.1\r\n" + b"\r\n".join(b"%s: %s" % kv for kv in expected.headers.raw)
    assert heads == [wire, wire] and accepted == 1


async def test_a_key_that_cannot_be_sent_is_a_connection_error_that_does_not_show_it() -> None:
    bad = "sk-bad\r\nX-Injected: 1"
    model = OpenAIModel(OpenAIConfig(base_url="http://127.0.0.1:9/v1", api_key=bad, model="m"))
    with trio.fail_after(5):
        for _ in range(2):  # every call, not only the first
            with pytest.raises(ModelError) as info:
                await collect(model)
            assert info.value.code == "connection_error" and "sk-bad" not in info.value.message
    await model.aclose()
