"""The scripted model (actors/model/scripted.py): script parsing, playback, errors, the demo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from actors.model import (
    ChatMessage,
    ChatRequest,
    ContextWindowExceeded,
    Finish,
    ModelError,
    ScriptedModel,
    ScriptError,
    TextDelta,
    ThoughtDelta,
    ToolCall,
    ToolSpec,
    Usage,
    load_script,
)
from actors.session.todo import TodoWriteTool
from actors.session.tools import ToolRegistry

TODO_TOOLS = ToolRegistry([TodoWriteTool()]).specs()


def request(text: str = "hi", *, tools: tuple[ToolSpec, ...] = (), purpose: str = "primary",
            history: tuple[ChatMessage, ...] = ()) -> ChatRequest:
    return ChatRequest(messages=(*history, ChatMessage("user", text)), tools=tools, purpose=purpose)


async def play(model: ScriptedModel, req: ChatRequest | None = None) -> list[Any]:
    items: list[Any] = []
    with trio.fail_after(60):
        async with model.stream(req or request()) as stream:
            async for item in stream:
                items.append(item)
    return items


# ----------------------------------------------------------------- loading


async def test_load_script_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"responses": [[{"text": "from a file"}]]}))
    model = load_script(path)
    assert model.remaining == 1
    assert await play(model) == [TextDelta("from a file")]
    model_from_str = load_script(str(path))
    assert await play(model_from_str) == [TextDelta("from a file")]


async def test_load_script_from_data() -> None:
    model = load_script({"responses": [[{"text": "a"}], {"steps": [{"text": "b"}]}]})
    assert model.remaining == 2
    assert await play(model) == [TextDelta("a")]
    assert await play(model) == [TextDelta("b")]
    assert model.remaining == 0
    bare_list = load_script([[{"text": "c"}]])  # a bare list is the responses
    assert await play(bare_list) == [TextDelta("c")]


BAD_SCRIPTS: list[tuple[Any, str, str]] = [
    # (document, JSON path after the source name, a word of the message)
    (3, "", "object"),
    ({"responses": [], "extra": 1}, "", "extra"),
    ({"then": "demo"}, ".responses", "list"),
    ({"responses": {"a": 1}}, ".responses", "list"),
    ({"responses": [], "then": "loop"}, ".then", "demo"),
    ({"responses": [[{"text": "ok"}], 7]}, ".responses[1]", "list of steps"),
    ({"responses": [{"steps": [], "pause": 1}]}, ".responses[0]", "pause"),
    ({"responses": [{"steps": {"text": "x"}}]}, ".responses[0].steps", "list"),
    ({"responses": [[{"text": "ok"}], [{"text": "a", "thought": "b"}]]}, ".responses[1].steps[0]", "exactly one key"),
    ({"responses": [[{"text": "ok"}], ["text"]]}, ".responses[1].steps[0]", "exactly one key"),
    ({"responses": [[{"text": "ok"}], [{"shout": "x"}]]}, ".responses[1].steps[0]", "unknown step 'shout'"),
    ({"responses": [[{"text": 3}]]}, ".responses[0].steps[0].text", "string"),
    ({"responses": [[{"thought": None}]]}, ".responses[0].steps[0].thought", "string"),
    ({"responses": [[{"tool_call": "todo_write"}]]}, ".responses[0].steps[0].tool_call", "object"),
    ({"responses": [[{"tool_call": {"name": "t", "args": {}}}]]}, ".responses[0].steps[0].tool_call", "args"),
    ({"responses": [[{"tool_call": {"arguments": {}}}]]}, ".responses[0].steps[0].tool_call.name", "string"),
    ({"responses": [[{"tool_call": {"name": "t", "id": 5}}]]}, ".responses[0].steps[0].tool_call.id", "string"),
    ({"responses": [[{"usage": 5}]]}, ".responses[0].steps[0].usage", "object"),
    ({"responses": [[{"usage": {"bogus_tokens": 1}}]]}, ".responses[0].steps[0].usage", "bogus_tokens"),
    ({"responses": [[{"sleep": -1}]]}, ".responses[0].steps[0].sleep", "non-negative"),
    ({"responses": [[{"sleep": "1"}]]}, ".responses[0].steps[0].sleep", "non-negative"),
    ({"responses": [[{"sleep": True}]]}, ".responses[0].steps[0].sleep", "non-negative"),
    ({"responses": [[{"fail": {"message": "x"}}]]}, ".responses[0].steps[0].fail", "code"),
    ({"responses": [[{"fail": {"code": 1}}]]}, ".responses[0].steps[0].fail.code", "string"),
    ({"responses": [[{"fail": {"code": "c", "message": 2}}]]}, ".responses[0].steps[0].fail.message", "string"),
    ({"responses": [[{"finish": 1}]]}, ".responses[0].steps[0].finish", "string"),
    ({"responses": [{"delay": -0.5}]}, ".responses[0].delay", "non-negative"),
    ({"responses": [{"delay": "soon"}]}, ".responses[0].delay", "non-negative"),
    ({"responses": [{"refuse": "no"}]}, ".responses[0].refuse", "code"),
    ({"responses": [{"refuse": {"code": 429}}]}, ".responses[0].refuse.code", "string"),
    ({"responses": [{"refuse": {"code": "c", "message": []}}]}, ".responses[0].refuse.message", "string"),
]


@pytest.mark.parametrize(("document", "path", "word"), BAD_SCRIPTS)
def test_bad_script_file_names_the_file_and_json_path(tmp_path: Path, document: Any, path: str, word: str) -> None:
    file = tmp_path / "script.json"
    file.write_text(json.dumps(document))
    with pytest.raises(ScriptError) as info:
        load_script(file)
    message = str(info.value)
    assert message.startswith(f"{file}{path}: "), message
    assert word in message


@pytest.mark.parametrize(("document", "path", "word"), BAD_SCRIPTS)
def test_bad_script_data_names_the_json_path(document: Any, path: str, word: str) -> None:
    with pytest.raises(ScriptError) as info:
        load_script(document)
    assert str(info.value).startswith(f"script{path}: ")
    assert word in str(info.value)


@pytest.mark.parametrize("value", ["abc", "5", True, 2.5])
def test_usage_counts_must_be_integers(value: Any) -> None:
    """Like every other scalar in a script, token counts are not coerced, and a bad one names its path."""
    with pytest.raises(ScriptError) as info:
        load_script({"responses": [[{"text": "ok"}], [{"usage": {"prompt_tokens": value}}]]})
    assert str(info.value).startswith("script.responses[1].steps[0].usage")


def test_missing_script_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ScriptError) as info:
        load_script(missing)
    assert str(info.value).startswith(f"{missing}: cannot read")


def test_invalid_json_script_names_the_file(tmp_path: Path) -> None:
    file = tmp_path / "script.json"
    file.write_text('{"responses": [')
    with pytest.raises(ScriptError) as info:
        load_script(file)
    assert str(info.value).startswith(f"{file}: invalid JSON")


def test_undecodable_script_file_names_the_file(tmp_path: Path) -> None:
    file = tmp_path / "script.json"
    file.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ScriptError) as info:
        load_script(file)
    assert str(file) in str(info.value)


# ----------------------------------------------------------------- playing


async def test_plays_text_thoughts_tool_calls_usage_and_finish() -> None:
    model = load_script({"responses": [[
        {"thought": "hmm"},
        {"text": "Planning. "},
        {"tool_call": {"name": "todo_write", "arguments": {"todos": []}}},
        {"tool_call": {"name": "shell", "arguments": {"cmd": "ls"}, "id": "explicit"}},
        {"tool_call": {"name": "noargs"}},
        {"usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
        {"finish": "tool_calls"},
    ]]})
    assert await play(model) == [
        ThoughtDelta("hmm"),
        TextDelta("Planning. "),
        ToolCall("call_1", "todo_write", {"todos": []}),
        ToolCall("explicit", "shell", {"cmd": "ls"}),
        ToolCall("call_2", "noargs", {}),
        Usage(10, 5, 15),
        Finish("tool_calls"),
    ]


async def test_every_call_is_recorded_in_order() -> None:
    model = load_script({"responses": [[{"text": "1"}], [{"text": "2"}]]})
    first, second = request("one"), request("two")
    await play(model, first)
    await play(model, second)
    assert model.calls == [first, second]


async def test_refuse_raises_before_the_stream_and_records_the_call() -> None:
    model = load_script({"responses": [{"refuse": {"code": "rate_limited", "message": "slow down"}}, [{"text": "ok"}]]})
    req = request()
    entered = False
    with pytest.raises(ModelError) as info:
        async with model.stream(req):
            entered = True
    assert not entered
    err = info.value
    assert (err.code, err.message, err.committed) == ("rate_limited", "slow down", False)
    assert model.calls == [req]
    assert await play(model) == [TextDelta("ok")]  # the refusal used up its response


async def test_refuse_without_message_has_a_default() -> None:
    model = load_script({"responses": [{"refuse": {"code": "overloaded"}}]})
    with pytest.raises(ModelError) as info:
        await play(model)
    assert info.value.code == "overloaded" and info.value.message and not info.value.committed


async def test_fail_raises_committed_while_iterating() -> None:
    model = load_script({"responses": [[{"text": "partial "}, {"fail": {"code": "stream_cut", "message": "gone"}},
                                        {"text": "never"}]]})
    items: list[Any] = []
    entered = False
    with pytest.raises(ModelError) as info:
        async with model.stream(request()) as stream:
            entered = True
            async for item in stream:
                items.append(item)
    assert entered
    assert items == [TextDelta("partial ")]
    assert (info.value.code, info.value.message, info.value.committed) == ("stream_cut", "gone", True)


async def test_delay_and_sleep_take_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    model = load_script({"responses": [{"delay": 1.5, "steps": [{"text": "a"}, {"sleep": 2}, {"text": "b"}]}]})
    start = trio.current_time()
    stamps: list[tuple[Any, float]] = []
    async with model.stream(request()) as stream:
        entered_at = trio.current_time() - start
        async for item in stream:
            stamps.append((item, trio.current_time() - start))
    assert entered_at == pytest.approx(1.5)
    assert stamps == [(TextDelta("a"), pytest.approx(1.5)), (TextDelta("b"), pytest.approx(3.5))]


async def test_delay_comes_before_a_refusal(autojump_clock: trio.testing.MockClock) -> None:
    model = load_script({"responses": [{"delay": 4, "refuse": {"code": "timeout"}}]})
    start = trio.current_time()
    with pytest.raises(ModelError):
        await play(model)
    assert trio.current_time() - start == pytest.approx(4)


async def test_exhausted_script_refuses() -> None:
    model = load_script({"responses": [[{"text": "only"}]]})
    await play(model)
    for _ in range(2):
        with pytest.raises(ModelError) as info:
            await play(model)
        assert info.value.code == "script_exhausted"
        assert info.value.committed is False
    assert len(model.calls) == 3


async def test_exhausted_script_goes_on_as_the_demo_with_then_demo() -> None:
    model = load_script({"responses": [[{"text": "scripted"}]], "then": "demo"})
    assert await play(model) == [TextDelta("scripted")]
    items = await play(model, request("Plan a picnic", tools=TODO_TOOLS))
    assert isinstance(items[-1], ToolCall) and items[-1].name == "todo_write"


async def test_extend_appends_responses() -> None:
    model = ScriptedModel(demo_after=False)
    model.extend([[{"text": "x"}]])
    assert model.remaining == 1
    assert await play(model) == [TextDelta("x")]
    with pytest.raises(ScriptError) as info:
        model.extend([[{"text": "ok"}], [{"bad": 1}]])
    assert str(info.value).startswith("responses[2].steps[0]")


# ----------------------------------------------------------------- the demo


async def run_demo(model: ScriptedModel, topic: str) -> list[tuple[str, list[dict[str, Any]] | None]]:
    """Drive the demo the way a session would: feed its calls and their results back."""
    history: tuple[ChatMessage, ...] = (ChatMessage("user", topic),)
    turns: list[tuple[str, list[dict[str, Any]] | None]] = []
    for _ in range(10):
        items = await play(model, ChatRequest(messages=history, tools=TODO_TOOLS))
        text = "".join(i.text for i in items if isinstance(i, TextDelta))
        calls = tuple(i for i in items if isinstance(i, ToolCall))
        assert len(calls) <= 1
        turns.append((text, [dict(t) for t in calls[0].arguments["todos"]] if calls else None))
        if not calls:
            break
        history = (*history, ChatMessage("assistant", text, tool_calls=calls),
                   ChatMessage("tool", "ok", tool_call_id=calls[0].id))
    return turns


async def test_demo_plans_three_todos_and_completes_them() -> None:
    turns = await run_demo(ScriptedModel(), "Plan a picnic")
    statuses = [[t["status"] for t in todos] if todos is not None else None for _, todos in turns]
    assert statuses == [
        ["in_progress", "pending", "pending"],
        ["completed", "in_progress", "pending"],
        ["completed", "completed", "in_progress"],
        ["completed", "completed", "completed"],
        None,
    ]
    plan = turns[0][1]
    assert plan is not None
    assert [t["id"] for t in plan] == ["1", "2", "3"]
    assert plan[0]["content"] == "Understand: Plan a picnic"
    assert turns[0][0] == "I'll plan this first. "
    assert turns[1][0] == "Done with: Understand: Plan a picnic. "
    assert turns[-1][0].startswith("All done.")
    assert "Plan a picnic" in turns[-1][0]


async def test_demo_is_deterministic() -> None:
    a, b = ScriptedModel(), ScriptedModel()
    assert await run_demo(a, "Same ask") == await run_demo(b, "Same ask")
    assert [m.tool_calls for m in a.calls[-1].messages] == [m.tool_calls for m in b.calls[-1].messages]


async def test_demo_plans_afresh_for_a_new_user_prompt() -> None:
    model = ScriptedModel()
    old_call = ToolCall("call_old", "todo_write", {"todos": [{"id": "1", "content": "x", "status": "pending"}]})
    history = (ChatMessage("user", "first"), ChatMessage("assistant", "", tool_calls=(old_call,)),
               ChatMessage("tool", "ok", tool_call_id="call_old"))
    items = await play(model, request("second", tools=TODO_TOOLS, history=history))
    [call] = [i for i in items if isinstance(i, ToolCall)]
    assert [t["status"] for t in call.arguments["todos"]] == ["in_progress", "pending", "pending"]
    assert call.arguments["todos"][0]["content"] == "Understand: second"


async def test_demo_without_the_todo_tool_just_answers() -> None:
    items = await play(ScriptedModel(), request("Plan a picnic"))
    assert [type(i) for i in items] == [TextDelta]
    assert items[0].text.startswith("All done.")


async def test_demo_summarises_for_compaction() -> None:
    items = await play(ScriptedModel(), request("x", purpose="compaction", tools=TODO_TOOLS))
    assert items == [TextDelta("Summary of the conversation so far.")]


# ----------------------------------------------------------------- context window


async def test_context_window_refusal_records_no_call() -> None:
    model = load_script({"responses": [[{"text": "fits"}]]})
    model.context_window = 20
    with pytest.raises(ContextWindowExceeded) as info:
        await play(model, request("x" * 400))
    assert info.value.window == 20 and info.value.needed > 20
    assert model.calls == []
    assert model.remaining == 1  # the response was not used up
    assert await play(model, request("short")) == [TextDelta("fits")]
    assert len(model.calls) == 1


def test_context_window_is_a_constructor_option() -> None:
    assert ScriptedModel(context_window=100).context_window == 100
    assert ScriptedModel().context_window is None
