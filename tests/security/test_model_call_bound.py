"""A model server that sends one byte just within the read timeout, again and again, held a call (and its turn)
open for as long as it liked: every read waited at most ``model.readTimeout`` (120 s), and nothing bounded the
call as a whole. Only a cancel ended it.

Now one call — sending, retries, the answer's head and every read of its stream — runs within
``model.requestTimeout`` (600 s by default); past it the call ends with ``timeout`` naming the bound, and the
session takes the next prompt as usual.

Hostile loopback servers in this process (real HTTP on port 0) on a virtual clock (autojump: a drip every 119
virtual seconds costs no real time), then the real daemon with a bound of a fraction of a second. Each drip
server gives up after ``DRIPS`` bytes and answers, so before the fix the call ended well, and each test failed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from actors.model.base import ModelError, TextDelta
from actors.model.openai import DEFAULT_REQUEST_TIMEOUT, OpenAIConfig, OpenAIModel
from tests.actors.model.test_openai import HELLO, KEY, collect
from tests.conftest import daemon_process
from tests.security.test_red_team_round3_model import turn, turn_error
from tests.security.test_red_team_round5_model import ANSWER, SSE_HEAD, Hostile, Send

READ = 120.0  # model.readTimeout's default
DRIP = 119.0  # just within it
DRIPS = 20  # then the server answers: 2,380 s in all, past the bound


def drip_body(every: float = DRIP, drips: int = DRIPS) -> Callable[[Send], Awaitable[None]]:
    """A 200 and its stream's head at once, then a comment line a byte at a time, then the answer."""

    async def first(send: Send) -> None:
        await send(SSE_HEAD)
        for _ in range(drips):
            await trio.sleep(every)
            await send(b":")
        await send(b"\n\n" + ANSWER)

    return first


async def drip_head(send: Send) -> None:
    """The answer's head a byte at a time: the call never gets as far as a stream."""
    await send(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    for _ in range(DRIPS):
        await trio.sleep(DRIP)
        await send(b"a")
    await send(b"\r\n" + SSE_HEAD[len(b"HTTP/1.1 200 OK\r\n"):] + ANSWER)


async def bounded_call(first: Callable[[Send], Awaitable[None]], path: str,
                       **config: Any) -> tuple[ModelError, list[Any], float]:
    """The error the first call ends with, what it passed on, and how long it took; the next call works."""
    server = Hostile(first)
    items: list[Any] = []
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.serve)
        client = httpx.AsyncClient() if path == "proxied" else None  # the full client's path, as with a proxy
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, model="m", read_timeout=READ, **config),
                            client=client)
        try:
            started = trio.current_time()
            with pytest.raises(ModelError) as info:
                async with model.stream(HELLO) as stream:
                    async for item in stream:
                        items.append(item)
            took = trio.current_time() - started
            assert [i for i in await collect(model) if type(i) is TextDelta] == [TextDelta("done")]
        finally:
            await model.aclose()
            if client is not None:
                await client.aclose()
            nursery.cancel_scope.cancel()
    return info.value, items, took


@pytest.mark.parametrize("path", ["direct", "proxied"])
async def test_a_stream_dripping_within_the_read_timeout_ends_at_the_request_timeout(
        path: str, autojump_clock: trio.testing.MockClock) -> None:
    error, items, took = await bounded_call(drip_body(), path)
    assert (error.code, error.committed) == ("timeout", True)
    assert error.message.startswith(
        f"the model call ran past {DEFAULT_REQUEST_TIMEOUT:g} s, the most one call may take "
        "(model.requestTimeout), so it was ended there (mid-stream"), error.message
    assert KEY not in error.message
    assert items == []
    assert DEFAULT_REQUEST_TIMEOUT <= took < DEFAULT_REQUEST_TIMEOUT + 1, took


async def test_a_configured_bound_is_kept(autojump_clock: trio.testing.MockClock) -> None:
    error, _, took = await bounded_call(drip_body(), "direct", request_timeout=300.0)
    assert error.code == "timeout" and "ran past 300 s" in error.message and "model.requestTimeout" in error.message
    assert 300 <= took < 301, took


async def test_a_head_dripping_within_the_read_timeout_ends_before_the_commit_point(
        autojump_clock: trio.testing.MockClock) -> None:
    error, items, took = await bounded_call(drip_head, "direct")
    assert (error.code, error.committed) == ("timeout", False)
    assert "(model.requestTimeout), so it was ended there (before a response" in error.message, error.message
    assert items == []
    assert DEFAULT_REQUEST_TIMEOUT <= took < DEFAULT_REQUEST_TIMEOUT + 1, took


async def test_retries_count_toward_the_bound(autojump_clock: trio.testing.MockClock) -> None:
    """A server that answers 429 with a long Retry-After, again and again: the waits are within the call."""
    calls = 0

    async def rate_limited(send: Send) -> None:
        nonlocal calls
        calls += 1
        await send(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 29\r\nContent-Length: 0\r\n"
                   b"Connection: close\r\n\r\n")

    class Always(Hostile):  # every request is the first
        async def _handle(self, stream: trio.SocketStream) -> None:
            self.requests = 0
            await super()._handle(stream)

    server = Always(rate_limited)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.serve)
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, model="m", read_timeout=READ,
                                         request_timeout=100.0, max_retries=50))
        started = trio.current_time()
        with pytest.raises(ModelError) as info:
            await collect(model)
        took = trio.current_time() - started
        await model.aclose()
        nursery.cancel_scope.cancel()
    assert (info.value.code, info.value.committed) == ("timeout", False), info.value
    assert "ran past 100 s" in info.value.message
    assert 100 <= took < 101 and calls == 4, (took, calls)  # at 0, 29, 58 and 87 s


async def test_a_call_within_the_bound_is_as_before(autojump_clock: trio.testing.MockClock) -> None:
    error, _, _ = await bounded_call(drip_body(every=10.0, drips=3), "direct", request_timeout=20.0)
    assert "ran past 20 s" in error.message  # 30 s of drips: past it
    server = Hostile(drip_body(every=10.0, drips=3))
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.serve)
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, model="m", request_timeout=40.0))
        items = await collect(model)  # 30 s of drips: within it
        await model.aclose()
        nursery.cancel_scope.cancel()
    assert [i for i in items if type(i) is TextDelta] == [TextDelta("done")]


# ----------------------------------------------------------------- the daemon


@pytest.mark.parametrize("given_by", ["settings", "flag"])
async def test_the_daemons_turn_ends_naming_the_bound_and_the_session_goes_on(nursery, tmp_path: Path,
                                                                             given_by: str) -> None:
    url = await nursery.start(Hostile(drip_body(every=0.05, drips=400)).serve)  # 20 s of drips
    (tmp_path / "work").mkdir()
    settings = tmp_path / "settings.json"
    bound = {"requestTimeout": 1.5} if given_by == "settings" else {"requestTimeout": 500}  # the flag wins
    settings.write_text(json.dumps({"approvalMode": "yolo", "model": bound}))
    flag = () if given_by == "settings" else ("--model-request-timeout", "1.5")
    with trio.fail_after(90):
        async with daemon_process("--model", "openai", "--openai-base-url", url, "--openai-model", "m",
                                  "--workspace", str(tmp_path / "work"), "--settings", str(settings), *flag,
                                  state_dir=tmp_path / "state") as daemon:
            async with daemon.client(daemon.token()) as client:
                sid = (await client.post("/session", json={})).json()["sessionId"]
                first = await turn(client, sid, "hi", timeout=10)
                error = await turn_error(client, sid)
                second = await turn(client, sid, "again")
                transcript = (await client.get(f"/session/{sid}/transcript")).text
    assert first["state"] == "error" and error["code"] == "timeout", (first, error)
    assert "the model call ran past 1.5 s, the most one call may take (model.requestTimeout)" in error["message"], \
        error
    assert second["state"] == "completed" and "done" in transcript
