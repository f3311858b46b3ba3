"""The openai provider against the loopback fake server (real HTTP on port 0, no mocks)."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio

from actors.model.base import (
    ChatMessage,
    ChatRequest,
    ContextWindowExceeded,
    Finish,
    ModelError,
    TextDelta,
    ThoughtDelta,
    ToolCall,
    ToolSpec,
    Usage,
)
from actors.model.openai import OpenAIConfig, OpenAIModel
from transport.fake_openai import FakeOpenAI

KEY = "sk-test-SECRET-0123456789"
LIMIT = 4  # seconds per test
HELLO = ChatRequest((ChatMessage("user", "hi"),))


@asynccontextmanager
async def running(*responses: Any, **config: Any) -> AsyncIterator[tuple[FakeOpenAI, OpenAIModel]]:
    fake = FakeOpenAI(responses)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        config.setdefault("read_timeout", 2.0)
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY, model="test-model", **config))
        try:
            yield fake, model
        finally:
            await model.aclose()
            nursery.cancel_scope.cancel()


async def collect(model: OpenAIModel, request: ChatRequest = HELLO) -> list[Any]:
    async with model.stream(request) as stream:
        return [item async for item in stream]


async def error_of(model: OpenAIModel, request: ChatRequest = HELLO) -> ModelError:
    with pytest.raises(ModelError) as info:
        await collect(model, request)
    return info.value


# ----------------------------------------------------------------- happy paths


async def test_text_thought_and_usage() -> None:
    with trio.fail_after(LIMIT):
        script = [{"thought": "thinking"}, {"text": "Hel"}, {"text": "lo"},
                  {"usage": {"prompt_tokens": 10, "completion_tokens": 5}}]
        async with running(script) as (_, model):
            items = await collect(model)
    assert items == [ThoughtDelta("thinking"), TextDelta("Hel"), TextDelta("lo"), Usage(10, 5, 15), Finish("stop")]


async def test_cached_tokens_come_from_prompt_tokens_details_when_the_server_reports_them() -> None:
    with trio.fail_after(LIMIT):
        reported = [{"text": "a"}, {"usage": {"prompt_tokens": 100, "completion_tokens": 5,
                                              "prompt_tokens_details": {"cached_tokens": 64}}}]
        silent = [{"text": "b"}, {"usage": {"prompt_tokens": 100, "completion_tokens": 5,
                                            "prompt_tokens_details": None}}]
        async with running(reported, silent) as (_, model):
            first = [i for i in await collect(model) if type(i) is Usage]
            second = [i for i in await collect(model) if type(i) is Usage]
    assert first == [Usage(100, 5, 105, 64)]
    assert second == [Usage(100, 5, 105, None)]  # nothing said of caching is not a claimed 0


TODOS = {"todos": [{"id": "1", "content": "write tests", "status": "in_progress"}]}
PATH = {"path": "a.txt"}
EXPECTED = [ToolCall("call_a", "todo_write", TODOS), ToolCall("call_b", "read_file", PATH)]


def calls(**options: Any) -> list[dict[str, Any]]:
    return [
        {"tool_call": {"name": "todo_write", "arguments": TODOS, "id": "call_a", **options}},
        {"tool_call": {"name": "read_file", "arguments": PATH, "id": "call_b", **options}},
    ]


QUIRKS = {
    "standard split fragments with index": calls(),
    "no index, whole call in one chunk": calls(index=None, split=1),
    "no index, split fragments": calls(index=None, split=4),
    "finish_reason stop": [*calls(), {"finish": "stop"}],
    "arguments as an object": calls(object=True),
    "parallel calls all at index 0": calls(index=0, split=5),
    "usage chunk and no [DONE]": {"steps": [*calls(), {"usage": {"prompt_tokens": 3}}], "done": False},
    "ollama: no index, one chunk, finish stop": [*calls(index=None, split=1), {"finish": "stop"}],
}


@pytest.mark.parametrize("script", QUIRKS.values(), ids=QUIRKS.keys())
async def test_tool_call_quirks_parse_alike(script: Any) -> None:
    with trio.fail_after(LIMIT):
        async with running(script) as (_, model):
            items = await collect(model)
    assert [i for i in items if isinstance(i, ToolCall)] == EXPECTED
    assert items[-1] == Finish("tool_calls")


async def test_arguments_that_are_not_json_pass_through_raw() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"tool_call": {"name": "x", "arguments": '{"a": 1', "id": "c1"}}]) as (_, model):
            items = await collect(model)
    assert ToolCall("c1", "x", '{"a": 1') in items


async def test_request_shape_and_tool_round_trip() -> None:
    tools = (ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),)
    history = (
        ChatMessage("system", "be brief"),
        ChatMessage("user", "read a.txt"),
        ChatMessage("assistant", "", (ToolCall("call_1", "read_file", {"path": "a.txt"}),)),
        ChatMessage("tool", "contents", tool_call_id="call_1", name="read_file"),
    )
    with trio.fail_after(LIMIT):
        async with running([{"text": "done"}], max_tokens=64) as (fake, model):
            await collect(model, ChatRequest(history, tools))
            await collect(model)  # the fallback answers "ok"
    first, second = fake.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == f"Bearer {KEY}"
    body = first.body
    assert body["model"] == "test-model"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 64
    assert body["tools"] == [{"type": "function", "function": {
        "name": "read_file", "description": "Read a file", "parameters": tools[0].parameters}}]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read a.txt"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"a.txt"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "contents"},
    ]
    assert "tools" not in second.body


def test_the_request_content_is_the_request_body_encoded_byte_for_byte() -> None:
    model = OpenAIModel(OpenAIConfig(base_url="http://127.0.0.1:9/v1", api_key=KEY, model="test-model"))
    tools = (ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),)
    system = ChatMessage("system", "be brief")
    history: tuple[ChatMessage, ...] = (system, ChatMessage("user", "read a.txt"))
    for request in (ChatRequest(history, tools), ChatRequest(history, (), model="other", max_tokens=7),
                    ChatRequest((*history, ChatMessage("assistant", "", (ToolCall("c1", "read_file", {"path": "a"}),)),
                                 ChatMessage("tool", "contents", tool_call_id="c1", name="read_file")), tools),
                    ChatRequest(history[:1], tools, max_tokens=3)):
        assert model.request_content(request) == orjson.dumps(model.request_body(request))


# ----------------------------------------------------------------- errors


async def test_server_error_before_commit() -> None:
    with trio.fail_after(LIMIT):
        async with running({"status": 500, "body": {"error": {"message": "boom"}}}) as (_, model):
            exc = await error_of(model)
    assert (exc.code, exc.committed) == ("server_error", False)
    assert "boom" in exc.message


async def test_rate_limited_carries_retry_after() -> None:
    with trio.fail_after(LIMIT):
        async with running({"status": 429, "headers": {"Retry-After": "7"}}) as (_, model):
            exc = await error_of(model)
    assert (exc.code, exc.committed, exc.retry_after) == ("rate_limited", False, 7.0)


async def test_other_4xx_is_http_status() -> None:
    with trio.fail_after(LIMIT):
        async with running({"status": 400, "body": "bad request"}) as (_, model):
            exc = await error_of(model)
    assert (exc.code, exc.committed) == ("http_400", False)


async def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = OpenAIModel(OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, connect_timeout=1))
    with trio.fail_after(LIMIT):
        exc = await error_of(model)
        await model.aclose()
    assert (exc.code, exc.committed) == ("connection_error", False)


async def test_no_headers_in_time_is_an_uncommitted_timeout() -> None:
    with trio.fail_after(LIMIT):
        async with running({"steps": [{"text": "late"}], "delay": None}, read_timeout=0.2) as (fake, model):
            exc = await error_of(model)
    assert (exc.code, exc.committed) == ("timeout", False)


async def test_stall_mid_stream_is_a_committed_timeout() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": "a"}, {"stall": None}], read_timeout=0.2) as (_, model):
            exc = await error_of(model)
    assert (exc.code, exc.committed) == ("timeout", True)


async def test_cut_mid_stream_is_interrupted() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": "a"}, {"cut": True}]) as (_, model):
            seen: list[Any] = []
            with pytest.raises(ModelError) as info:
                async with model.stream(HELLO) as stream:
                    async for item in stream:
                        seen.append(item)
    assert seen == [TextDelta("a")]
    assert (info.value.code, info.value.committed) == ("stream_interrupted", True)


async def test_malformed_chunk() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": "a"}, {"raw": "data: {not json\n\n"}]) as (_, model):
            exc = await error_of(model)
    assert (exc.code, exc.committed) == ("malformed_stream", True)


async def test_retries_before_commit_then_succeeds() -> None:
    script = [
        {"status": 503, "headers": {"Retry-After": "0"}},
        {"status": 429, "headers": {"Retry-After": "0.05"}},
        [{"text": "third time"}],
    ]
    with trio.fail_after(LIMIT):
        async with running(*script, max_retries=2) as (fake, model):
            items = await collect(model)
    assert items[0] == TextDelta("third time")
    assert len(fake.requests) == 3


async def test_retries_give_up_with_the_last_error() -> None:
    with trio.fail_after(LIMIT):
        script = [{"status": 429, "headers": {"Retry-After": "0"}}] * 2
        async with running(*script, max_retries=1) as (fake, model):
            exc = await error_of(model)
    assert (exc.code, exc.retry_after, len(fake.requests)) == ("rate_limited", 0.0, 2)


async def test_context_window_refusal_sends_nothing() -> None:
    big = ChatRequest((ChatMessage("user", "x" * 4000),))
    with trio.fail_after(LIMIT):
        async with running(context_window=500) as (fake, model):
            with pytest.raises(ContextWindowExceeded):
                await collect(model, big)
            with pytest.raises(ContextWindowExceeded):  # max_tokens counts too
                await collect(model, ChatRequest(HELLO.messages, max_tokens=1000))
            await trio.sleep(0.05)
    assert fake.requests == []


# ----------------------------------------------------------------- closing early


async def test_cancel_mid_stream_closes_upstream() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": "a"}, {"stall": None}]) as (fake, model):
            seen: list[Any] = []
            with trio.move_on_after(0.2) as scope:
                async with model.stream(HELLO) as stream:
                    async for item in stream:
                        seen.append(item)
            assert scope.cancelled_caught and seen == [TextDelta("a")]
            await fake.disconnected.wait()
    assert fake.disconnects == 1


async def test_leaving_the_block_early_closes_upstream() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": "a"}, {"stall": 30}, {"text": "b"}]) as (fake, model):
            async with model.stream(HELLO) as stream:
                async for item in stream:
                    break
            await fake.disconnected.wait()
            assert await collect(model) == [TextDelta("ok"), Finish("stop")]  # the model is still usable


# ----------------------------------------------------------------- the key


async def test_key_never_leaks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"status": 401, "body": {"error": {"message": f"Incorrect API key provided: {KEY}"}}}
    script = [echo, {"status": 500}, [{"text": "a"}, {"cut": True}], [{"raw": "data: nope\n\n"}]]
    errors: list[BaseException] = []
    with trio.fail_after(LIMIT):
        async with running(*script) as (fake, model):
            for _ in script:
                errors.append(await error_of(model))
            ok = await collect(model)
        assert ok[0] == TextDelta("ok")
    assert [e.code for e in errors] == ["http_401", "server_error", "stream_interrupted", "malformed_stream"]
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in fake.requests)
    texts = [str(e) for e in errors] + [repr(e) for e in errors] + [e.message for e in errors]
    texts += [repr(model.config), str(model.config), repr(model)]
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    assert caplog.records  # the check below is not vacuous
    assert not [t for t in texts if KEY in t]


def test_config_from_env() -> None:
    env = {"OPENAI_BASE_URL": "http://localhost:11434/v1", "OPENAI_API_KEY": KEY, "OPENAI_MODEL": "llama3"}
    config = OpenAIConfig.from_env(env, model=None, max_retries=2)
    assert (config.base_url, config.api_key, config.model, config.max_retries) == (
        "http://localhost:11434/v1", KEY, "llama3", 2)
    default = OpenAIConfig.from_env({}, model="m")
    assert (default.base_url, default.api_key, default.model) == ("https://api.openai.com/v1", None, "m")
    assert KEY not in repr(config)


@pytest.mark.parametrize("chunk, problem", [
    ({"choices": "abc"}, "choices is not an array"),
    ({"choices": [7]}, "choices[0] is not an object"),
    ({"choices": [{"delta": "hi"}]}, "choices[0].delta is not an object"),
    ({"choices": [{"delta": {"content": 123}}]}, "choices[0].delta.content is not a string"),
    ({"choices": [{"delta": {"content": ["x"]}}]}, "choices[0].delta.content is not a string or an array of objects"),
    ({"choices": [{"delta": {"reasoning_content": ["x"]}}]}, "choices[0].delta.reasoning_content is not a string"),
    ({"choices": [{"delta": {}, "finish_reason": 1}]}, "choices[0].finish_reason is not a string"),
    ({"choices": [{"delta": {"tool_calls": "x"}}]}, "choices[0].delta.tool_calls is not an array"),
    ({"choices": [{"delta": {"tool_calls": [1]}}]}, "choices[0].delta.tool_calls[0] is not an object"),
    ({"choices": [{"delta": {"tool_calls": [{"index": [0]}]}}]}, "choices[0].delta.tool_calls[0].index is not an integer"),
    ({"choices": [{"delta": {"tool_calls": [{"id": 5}]}}]}, "choices[0].delta.tool_calls[0].id is not a string"),
    ({"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]},
     "choices[0].delta.tool_calls[0].function is not an object"),
    ({"choices": [{"delta": {"tool_calls": [{"function": {"name": {"x": 1}}}]}}]},
     "choices[0].delta.tool_calls[0].function.name is not a string"),
])
async def test_a_chunk_of_the_wrong_shape_is_a_malformed_stream_naming_the_part(chunk, problem) -> None:
    raw = "data: " + orjson.dumps(chunk).decode() + "\n\n"
    with trio.fail_after(LIMIT):
        async with running([{"text": "a"}, {"raw": raw}]) as (_, model):
            exc = await error_of(model)
    assert (exc.code, exc.committed) == ("malformed_stream", True)
    assert exc.message.startswith(problem + ": "), exc.message


async def test_content_as_parts_is_read_as_text_and_thought() -> None:
    parts = [{"type": "thinking", "thinking": [{"type": "text", "text": "weighing"}]},
             {"type": "text", "text": "Hello"}, {"type": "image_url", "image_url": {"url": "x"}}]
    raw = "data: " + orjson.dumps({"choices": [{"delta": {"content": parts}}]}).decode() + "\n\n"
    with trio.fail_after(LIMIT):
        async with running([{"raw": raw}, {"text": " there"}]) as (_, model):
            items = await collect(model)
    assert [i for i in items if isinstance(i, (TextDelta, ThoughtDelta))] == [
        ThoughtDelta("weighing"), TextDelta("Hello"), TextDelta(" there")]

