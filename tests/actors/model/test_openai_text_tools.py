"""The openai provider's tool offer (``tool_choice``) and ``textToolCalls``, against the loopback fake."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from actors.model.base import ChatMessage, ChatRequest, Finish, TextDelta, ToolCall, ToolSpec
from actors.model.openai import OpenAIConfig, OpenAIModel
from transport.fake_openai import FakeOpenAI

LIMIT = 5
SHELL_SPEC = ToolSpec("shell", "run a command", {"type": "object", "properties": {"command": {"type": "string"}}})
WITH_TOOLS = ChatRequest((ChatMessage("user", "list the files"),), (SHELL_SPEC,))
WITHOUT_TOOLS = ChatRequest((ChatMessage("user", "hi"),))
CALL = '{"name": "shell", "arguments": {"command": "ls"}}'


@asynccontextmanager
async def running(*responses: Any, **config: Any) -> AsyncIterator[tuple[FakeOpenAI, OpenAIModel]]:
    fake = FakeOpenAI(responses)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        model = OpenAIModel(OpenAIConfig(base_url=url, model="m", read_timeout=2.0, **config))
        try:
            yield fake, model
        finally:
            await model.aclose()
            nursery.cancel_scope.cancel()


async def collect(model: OpenAIModel, request: ChatRequest) -> list[Any]:
    async with model.stream(request) as stream:
        return [item async for item in stream]


def texts(items: list[Any]) -> str:
    return "".join(i.text for i in items if isinstance(i, TextDelta))


def calls(items: list[Any]) -> list[ToolCall]:
    return [i for i in items if isinstance(i, ToolCall)]


# ----------------------------------------------------------------- tool_choice


async def test_tool_choice_auto_is_sent_when_tools_are_offered_and_not_otherwise() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": "a"}], [{"text": "b"}]) as (fake, model):
            await collect(model, WITH_TOOLS)
            await collect(model, WITHOUT_TOOLS)
    offered, plain = (r.body for r in fake.requests)
    assert offered["tool_choice"] == "auto" and offered["tools"][0]["function"]["name"] == "shell"
    assert "tool_choice" not in plain and "tools" not in plain


# ----------------------------------------------------------------- textToolCalls


async def test_hermes_call_split_across_chunks_becomes_a_tool_call_and_leaves_the_text() -> None:
    script = [{"text": "Checking. <tool_"}, {"text": 'call>\n{"name": "shell", "argu'},
              {"text": 'ments": {"command": "ls"}}\n</tool_call>'}]
    with trio.fail_after(LIMIT):
        async with running(script, text_tool_calls="hermes") as (_, model):
            items = await collect(model, WITH_TOOLS)
    assert texts(items) == "Checking. "
    [call] = calls(items)
    assert (call.name, call.arguments) == ("shell", {"command": "ls"})
    assert call.id.startswith("call_text_")
    assert items[-1] == Finish("tool_calls")  # a call, so the turn loop runs it whatever the server said


async def test_json_fenced_and_bare_calls_split_across_chunks() -> None:
    fenced = [{"text": "I'll list them.\n``"}, {"text": "`json\n" + CALL[:20]}, {"text": CALL[20:] + "\n```"}]
    bare = [{"text": CALL[:7]}, {"text": CALL[7:]}]
    with trio.fail_after(LIMIT):
        async with running(fenced, bare, text_tool_calls="json") as (_, model):
            first = await collect(model, WITH_TOOLS)
            second = await collect(model, WITH_TOOLS)
    assert texts(first) == "I'll list them.\n"
    assert texts(second) == ""
    for items in (first, second):
        assert [(c.name, c.arguments) for c in calls(items)] == [("shell", {"command": "ls"})]
        assert items[-1] == Finish("tool_calls")
    assert calls(first)[0].id != calls(second)[0].id  # unique across a turn's streams


async def test_a_chunk_ending_in_blanks_where_a_json_call_may_begin_is_no_error() -> None:
    """A streamed chunk ending in indentation at a line start: held until what follows decides (it was an
    IndexError that ended the turn ``internal_error``)."""
    indented = [{"text": "I'll list them.\n  "}, {"text": CALL + "\nDone."}]
    only_blanks = [{"text": "Nothing to run.\n\t "}]
    with trio.fail_after(LIMIT):
        async with running(indented, only_blanks, text_tool_calls="json") as (_, model):
            first = await collect(model, WITH_TOOLS)
            second = await collect(model, WITH_TOOLS)
    assert texts(first) == "I'll list them.\nDone."
    assert [(c.name, c.arguments) for c in calls(first)] == [("shell", {"command": "ls"})]
    assert first[-1] == Finish("tool_calls")
    assert texts(second) == "Nothing to run.\n\t " and calls(second) == []


@pytest.mark.parametrize("style, text", [
    ("json", '{"name": "shell", "arguments": {"command": "ls"}'),  # a brace short
    ("json", '{"name": "delete_everything", "arguments": {}}'),  # not an offered tool
    ("hermes", '<tool_call>{"name": "shell", "arguments": "not json"}</tool_call>'),
])
async def test_a_malformed_text_call_stays_text(style: str, text: str) -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": text[:9]}, {"text": text[9:]}], text_tool_calls=style) as (_, model):
            items = await collect(model, WITH_TOOLS)
    assert texts(items) == text
    assert calls(items) == []
    assert items[-1] == Finish("stop")


async def test_text_calls_are_left_alone_when_off_or_when_no_tools_were_offered() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": CALL}], text_tool_calls="off") as (_, off):
            left = await collect(off, WITH_TOOLS)
        async with running([{"text": CALL}], text_tool_calls="json") as (_, on):
            untooled = await collect(on, WITHOUT_TOOLS)
    for items in (left, untooled):
        assert texts(items) == CALL and calls(items) == []


async def test_structured_calls_and_text_calls_both_come_through() -> None:
    script = [{"tool_call": {"id": "c1", "name": "shell", "arguments": {"command": "pwd"}}}, {"text": CALL}]
    with trio.fail_after(LIMIT):
        async with running(script, text_tool_calls="json") as (_, model):
            items = await collect(model, WITH_TOOLS)
    assert [c.arguments for c in calls(items)] == [{"command": "pwd"}, {"command": "ls"}]


# ----------------------------------------------------------------- settings


def test_the_setting_is_read_and_a_bad_value_names_its_key() -> None:
    assert OpenAIConfig.from_sources({}, {"textToolCalls": "hermes"}).text_tool_calls == "hermes"
    assert OpenAIConfig.from_sources({}, {}).text_tool_calls == "off"
    assert OpenAIConfig.from_sources({}, {"textToolCalls": "json"}, text_tool_calls="off").text_tool_calls == "off"
    for bad in ("xml", True, 1):
        with pytest.raises(ValueError, match=r'model\.textToolCalls: must be one of \["off", "hermes", "json"\]'):
            OpenAIConfig.from_sources({}, {"textToolCalls": bad})
    with pytest.raises(ValueError):
        OpenAIConfig(text_tool_calls="yaml")
