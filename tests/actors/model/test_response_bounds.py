"""What one model response may make the daemon hold (actors/model/openai.py, sse.py, tool_calls.py,
http.py): text, thought and tool-call arguments are bounded together, so are the calls and one SSE line;
tool-call arguments nesting too deep are kept as their text. The openai provider runs against the
loopback fake server (real HTTP on port 0)."""

from __future__ import annotations

import json
import zlib
from typing import Any

import orjson
import pytest
import trio

from actors.model.base import ChatMessage, ModelError, TextDelta, ToolCall
from actors.model.http import MAX_DECODED, _Decoder
from actors.model.openai import MAX_RESPONSE_TOOL_CALLS, message_to_wire
from actors.model.text_tools import parse_call
from actors.model.tool_calls import (
    MAX_ARGUMENT_DEPTH,
    ToolCallAccumulator,
    arguments_problem,
    encode_json,
    text_depth,
    value_depth,
)
from tests.actors.model.test_openai import HELLO, LIMIT, collect, running

BUDGET = 10_000  # max_response_chars of these tests


async def refusal(script: list[Any], **config: Any) -> tuple[ModelError, list[Any], Any]:
    """The error the stream ends with, the items passed on before it, and the fake; the next call works."""
    items: list[Any] = []
    async with running(script, max_response_chars=BUDGET, **config) as (fake, model):
        with pytest.raises(ModelError) as info:
            async with model.stream(HELLO) as stream:
                async for item in stream:
                    items.append(item)
        # The call is over: the model answers the next one on a fresh connection.
        assert [i for i in await collect(model) if type(i) is TextDelta] == [TextDelta("ok")]
    return info.value, items, fake


@pytest.mark.parametrize("key", ["text", "thought"])
async def test_text_or_thought_past_the_budget_ends_the_call_response_too_large(key: str) -> None:
    script = [{key: "x" * 1000} for _ in range(50)]
    with trio.fail_after(LIMIT):
        error, items, _ = await refusal(script)
    assert (error.code, error.committed) == ("response_too_large", True)
    assert "10,000 characters of text, thought and tool-call arguments" in error.message
    assert sum(len(i.text) for i in items) <= BUDGET  # nothing past the budget was passed on


async def test_tool_call_arguments_count_against_the_same_budget() -> None:
    endless = [{"text": "x" * 4000}, {"tool_call": {"name": "shell", "arguments": "a" * 7000, "split": 7}}]
    with trio.fail_after(LIMIT):
        error, items, _ = await refusal(endless)
    assert error.code == "response_too_large" and "10,000 characters" in error.message
    assert not [i for i in items if type(i) is ToolCall]


async def test_more_calls_than_one_response_may_hold_end_the_call() -> None:
    many = [{"tool_call": {"id": f"c{n}", "name": "shell", "arguments": "{}"}}
            for n in range(MAX_RESPONSE_TOOL_CALLS + 1)]
    with trio.fail_after(LIMIT):
        error, _, _ = await refusal(many)
    assert error.code == "response_too_large" and f"{MAX_RESPONSE_TOOL_CALLS} tool calls" in error.message


async def test_a_stream_line_that_never_ends_is_bounded() -> None:
    # One data: line streamed piece by piece without a line end: held until it passes 8 bytes a character.
    endless = [{"raw": 'data: {"choices": [{"delta": {"content": "'}, *({"raw": "y" * 8000} for _ in range(20))]
    with trio.fail_after(LIMIT):
        error, items, _ = await refusal(endless)
    assert error.code == "response_too_large" and "80,000 bytes in one stream line" in error.message
    assert items == []


async def test_a_response_within_the_budget_is_whole() -> None:
    script = [{"text": "x" * 5000}, {"thought": "t" * 2000}, {"tool_call": {"name": "shell", "arguments": "b" * 2000}}]
    with trio.fail_after(LIMIT):
        async with running(script, max_response_chars=BUDGET) as (_, model):
            items = await collect(model)
    assert [i.arguments for i in items if type(i) is ToolCall] == ["b" * 2000]


def test_nested_codings_cannot_decompress_a_read_past_the_bound() -> None:
    bomb = zlib.compress(zlib.compress(b"\0" * (MAX_DECODED + 1), 9), 9)  # deflate inside deflate
    with pytest.raises(Exception, match="decompresses to more than"):
        _Decoder(["deflate", "deflate"]).decode(bomb, True)
    assert _Decoder(["deflate"]).decode(zlib.compress(b"data: {}\n\n"), True) == b"data: {}\n\n"


# ----------------------------------------------------------------- nesting


def nested(depth: int) -> str:
    return '{"todos": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 300, 1024, 5000])
def test_streamed_arguments_nesting_too_deep_stay_text_that_every_encoder_takes(depth: int) -> None:
    raw = nested(depth)
    calls = ToolCallAccumulator()
    calls.add({"index": 0, "id": "c1", "function": {"name": "todo_write", "arguments": raw}})
    [call] = calls.calls()
    assert call.arguments == raw
    assert arguments_problem(call.arguments) == (
        f"arguments nest {depth:,} levels deep, more than the limit of {MAX_ARGUMENT_DEPTH}: send them flatter")
    # The history's next request encodes it, as the transcript does.
    wire = message_to_wire(ChatMessage("assistant", "", (call,)))
    assert orjson.loads(orjson.dumps(wire))["tool_calls"][0]["function"]["arguments"] == raw


def test_arguments_at_the_limit_are_parsed_and_pass() -> None:
    raw = nested(MAX_ARGUMENT_DEPTH)
    calls = ToolCallAccumulator()
    calls.add({"index": 0, "function": {"name": "todo_write", "arguments": raw}})
    [call] = calls.calls()
    assert value_depth(call.arguments) == MAX_ARGUMENT_DEPTH and arguments_problem(call.arguments) is None


def test_object_arguments_nesting_too_deep_become_their_json_text() -> None:
    deep = orjson.loads(nested(400))  # as a server sends arguments as an object (LiteLLM)
    calls = ToolCallAccumulator()
    calls.add({"index": 0, "function": {"name": "todo_write", "arguments": deep}})
    [call] = calls.calls()
    assert isinstance(call.arguments, str) and json.loads(call.arguments) == deep
    assert "400 levels deep" in (arguments_problem(call.arguments) or "")


def test_a_text_tool_call_nesting_too_deep_keeps_its_arguments_as_text() -> None:
    name, arguments = parse_call('{"name": "todo_write", "arguments": ' + nested(300) + "}", ["todo_write"]) or ("", 0)
    assert name == "todo_write" and isinstance(arguments, str) and text_depth(arguments) == 300


def test_a_deep_value_already_in_a_history_still_encodes() -> None:
    # A call kept before the bound (a restored transcript, the scripted model): the request is still built.
    deep = orjson.loads(nested(300))
    wire = message_to_wire(ChatMessage("assistant", "", (ToolCall("c1", "todo_write", deep),)))
    assert json.loads(wire["tool_calls"][0]["function"]["arguments"]) == deep


@pytest.mark.parametrize("value", [{}, [], {"a": [1, 2.5, {"b": None, "c": 'x"y\u00e9'}], "d": True}, "s", 3])
def test_encode_json_writes_what_orjson_writes(value: Any) -> None:
    assert encode_json(value) == orjson.dumps(value).decode()


def test_brackets_inside_strings_do_not_count() -> None:
    assert text_depth('{"a": "[[[[{{{{", "b": ["\\"]]]"]}') == 2

