"""The openai provider's HTTP path: the SSE line splitter, and the direct transport unless a proxy is set."""

from __future__ import annotations

import httpx
import trio

from actors.model.openai import _data_payloads


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk


async def payloads(chunks: list[bytes]) -> list[bytes]:
    response = httpx.Response(200, stream=Chunks(chunks))
    return [p async for p in _data_payloads(response)]


async def test_lines_cut_across_chunks_in_any_line_ending_give_each_payload_once():
    with trio.fail_after(5):
        got = await payloads([b'data: {"a"', b':1}\r\n\r\n: a comment\nevent: x\nid: 3\n',
                              b'data:{"b":2}\r', b'\rdata: [DONE]'])
    assert got == [b'{"a":1}', b'{"b":2}', b"[DONE]"]


async def test_a_body_without_data_lines_gives_nothing():
    with trio.fail_after(5):
        assert await payloads([b": keep-alive\n\n", b"retry: 10\n"]) == []


def test_a_proxy_in_the_environment_sends_requests_through_the_full_client(monkeypatch):
    from actors.model.http import Transport
    from actors.model.openai import OpenAIConfig, OpenAIModel, _proxied

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
