"""The text tool-call parser on its own: both styles, every chunking, and what stays text."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.model.base import ToolCall
from actors.model.text_tools import MAX_CALL_CHARS, TextToolCalls, json_object_end, parse_call

TOOLS = ("shell", "todo_write")
SHELL = '{"name": "shell", "arguments": {"command": "ls -la"}}'


def run(style: str, chunks: list[str], tools: tuple[str, ...] = TOOLS) -> tuple[list[str], list[ToolCall]]:
    """Feed ``chunks``; what was shown after each one (the last entry: after finish), and the calls."""
    ids = itertools.count(1)
    parser = TextToolCalls(style, tools, lambda: f"t{next(ids)}")
    shown = [parser.feed(chunk) for chunk in chunks]
    shown.append(parser.finish())
    return shown, parser.calls


def every_split(text: str) -> list[list[str]]:
    """``text`` cut into two chunks at every position, and into one-character chunks."""
    return [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text)]


def shell_call(arguments: dict | None = None) -> ToolCall:
    return ToolCall("t1", "shell", arguments if arguments is not None else {"command": "ls -la"})


# ----------------------------------------------------------------- hermes


@pytest.mark.parametrize("chunks", every_split(f"Let me look.\n<tool_call>\n{SHELL}\n</tool_call>\nDone."))
def test_hermes_call_is_taken_out_of_the_text_however_it_is_chunked(chunks: list[str]) -> None:
    shown, calls = run("hermes", chunks)
    assert "".join(shown) == "Let me look.\n\nDone."
    assert calls == [shell_call()]


def test_hermes_text_before_the_tag_is_shown_at_once_and_only_a_possible_tag_is_held() -> None:
    ids = itertools.count(1)
    parser = TextToolCalls("hermes", TOOLS, lambda: f"t{next(ids)}")
    assert parser.feed("a < b, so ") == "a < b, so "
    assert parser.feed("<tool") == ""  # may open a call
    assert parser.feed("box>") == "<toolbox>"  # it did not
    assert parser.feed("<tool_call>{\"name\": \"shell\"") == ""
    assert parser.feed(', "arguments": {"command": "ls -la"}}</tool_call>') == ""
    assert parser.finish() == ""
    assert parser.calls == [shell_call()]


def test_hermes_several_calls_in_order() -> None:
    text = (f"<tool_call>{SHELL}</tool_call><tool_call>"
            '{"name": "todo_write", "arguments": {"todos": []}}</tool_call>')
    shown, calls = run("hermes", [text])
    assert "".join(shown) == ""
    assert [(c.id, c.name) for c in calls] == [("t1", "shell"), ("t2", "todo_write")]


def test_hermes_call_left_unclosed_at_the_end_of_the_stream_still_counts() -> None:
    shown, calls = run("hermes", [f"<tool_call>\n{SHELL}\n"])
    assert "".join(shown) == ""
    assert calls == [shell_call()]


@pytest.mark.parametrize("text", [
    "<tool_call>{\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}</tool_call>",  # a brace short
    "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",  # not an offered tool
    "<tool_call>not json at all</tool_call>",
    f"<tool_call>{SHELL} and then some words</tool_call>",
    "<tool_call>{\"name\": \"shell\", \"arguments\": [1, 2]}</tool_call>",  # arguments not an object
    "<tool_call>{\"name\": \"shell\", \"arguments\": {}, \"extra\": 1}</tool_call>",
    f"<tool_call>{SHELL}",  # ... followed below by more text: never closed
])
def test_hermes_malformed_calls_stay_text_exactly(text: str) -> None:
    for chunks in ([text + " after"], every_split(text + " after")[len(text) // 2]):
        shown, calls = run("hermes", chunks)
        assert calls == []
        assert "".join(shown) == text + " after"


# ----------------------------------------------------------------- json


FENCED = f"Running it now.\n```json\n{SHELL}\n```\nThat was it."


@pytest.mark.parametrize("chunks", every_split(FENCED))
def test_json_fenced_call_is_taken_out_however_it_is_chunked(chunks: list[str]) -> None:
    shown, calls = run("json", chunks)
    assert "".join(shown) == "Running it now.\n\nThat was it."
    assert calls == [shell_call()]


@pytest.mark.parametrize("chunks", every_split(f"{SHELL}\nAnd a word after."))
def test_json_bare_call_on_its_own_line(chunks: list[str]) -> None:
    shown, calls = run("json", chunks)
    assert "".join(shown) == "And a word after."
    assert calls == [shell_call()]


def test_json_the_whole_message_being_a_call_leaves_no_text() -> None:
    for text in (SHELL, f"  {SHELL}  ", f"```\n{SHELL}\n```", f"```json\n{SHELL}"):
        shown, calls = run("json", [text])
        assert "".join(shown).strip() == "", text
        assert calls == [shell_call()], text


def test_json_accepts_parameters_and_stringified_arguments() -> None:
    as_parameters = '{"name": "shell", "parameters": {"command": "ls -la"}}'
    as_string = '{"name": "shell", "arguments": "{\\"command\\": \\"ls -la\\"}"}'
    without = '{"name": "shell"}'
    assert run("json", [as_parameters])[1] == [shell_call()]
    assert run("json", [as_string])[1] == [shell_call()]
    assert run("json", [without])[1] == [shell_call({})]


def test_json_plain_text_is_not_held_back() -> None:
    ids = itertools.count(1)
    parser = TextToolCalls("json", TOOLS, lambda: f"t{next(ids)}")
    assert parser.feed("The set {1, 2} is small") == "The set {1, 2} is small"  # mid-line: never a call
    assert parser.feed(".\nNext line, ") == ".\nNext line, "
    assert parser.feed("and `code` too.\n") == "and `code` too.\n"
    assert parser.feed("{\"name\": ") == ""  # a line that starts with a brace may be a call
    assert parser.feed("\"not_a_tool\"}\nok") == "{\"name\": \"not_a_tool\"}\nok"
    assert parser.finish() == ""
    assert parser.calls == []


@pytest.mark.parametrize("text", [
    '{"name": "nope", "arguments": {}}',
    '{"name": "shell", "arguments": {"command": "ls"}',  # never closed
    '{"name": "shell", "arguments": {"command": "ls"}} trailing words on the line',
    '{"name": "shell", "arguments": {"command": "ls"}, "name2": "x"}',
    '{"name": "shell", "arguments": {}, "parameters": {}}',
    "```python\nprint({'name': 'shell'})\n```",
    '```json\n{"name": "shell", "arguments": {}} stray\n```',
    "```json\n[1, 2, 3]\n```",
    "{ not json }",
])
def test_json_malformed_or_foreign_objects_stay_text_exactly(text: str) -> None:
    for chunks in ([text], list(text)):
        shown, calls = run("json", chunks)
        assert calls == [], text
        assert "".join(shown) == text


def test_an_unbalanced_brace_is_released_once_it_cannot_be_a_call() -> None:
    ids = itertools.count(1)
    parser = TextToolCalls("json", TOOLS, lambda: f"t{next(ids)}")
    assert parser.feed("{\n") == ""
    big = "x" * (MAX_CALL_CHARS + 1)
    assert parser.feed(big) == "{\n" + big  # held no longer than the bound
    assert parser.finish() == ""


def test_off_is_not_a_parser_style() -> None:
    with pytest.raises(ValueError, match="hermes"):
        TextToolCalls("off", TOOLS, lambda: "x")


# ----------------------------------------------------------------- helpers


def test_parse_call_and_json_object_end() -> None:
    assert parse_call(SHELL, TOOLS) == ("shell", {"command": "ls -la"})
    assert parse_call(SHELL, ("todo_write",)) is None
    assert parse_call('"shell"', TOOLS) is None
    text = 'x{"a": "}{\\"", "b": {"c": 1}}y'
    assert json_object_end(text, 1) == len(text) - 1
    assert json_object_end('{"a": 1', 0) is None


# ----------------------------------------------------------------- any chunking, any text


def test_json_a_chunk_ending_in_blanks_at_a_line_start_waits_for_what_follows() -> None:
    # The chunk ends in indentation right where a call could begin: nothing to decide yet, nothing to index.
    for chunks in (["Let me run it.\n  "], ["Let me run it.\n", "  "], ["Let me run it.\n\t ", f" {SHELL}\nok"],
                   ["  ", SHELL]):
        shown, calls = run("json", chunks)
        assert calls == ([shell_call()] if SHELL in "".join(chunks) else []), chunks
    assert run("json", ["Let me run it.\n  "]) == (["Let me run it.\n", "  "], [])


NAMES = st.sampled_from([*TOOLS, "nope"])  # "nope" is not offered: its calls stay text
JSON_STRINGS = st.lists(st.sampled_from(list('ab {}[]"\\\n\t`<>/_:,') + ["</tool_call>", "```"]),
                        max_size=8).map("".join)
ARGUMENTS = st.dictionaries(st.sampled_from(["command", "todos", "x", "a b"]),
                            st.none() | st.integers(-5, 5) | JSON_STRINGS | st.lists(JSON_STRINGS, max_size=2),
                            max_size=3)
BLANKS = st.sampled_from(["", " ", "  ", "\t", "\n", " \n", "\n\n", "\r\n", "  \n  "])


@st.composite
def call_object(draw: Any) -> str:
    """A tool-call object as a model writes it: ``arguments`` (or ``parameters``, or a JSON string), any spacing."""
    name, arguments = draw(NAMES), draw(ARGUMENTS)
    key = draw(st.sampled_from(["arguments", "arguments", "parameters", "string", "none"]))
    value: dict[str, Any] = {"name": name}
    if key == "string":
        value["arguments"] = json.dumps(arguments)
    elif key != "none":
        value[key] = arguments
    return json.dumps(value, indent=draw(st.sampled_from([None, None, 2])),
                      separators=draw(st.sampled_from([None, (",", ":")])))


@st.composite
def segment(draw: Any) -> str:
    kind = draw(st.sampled_from(["prose", "prose", "hermes", "bare", "fenced", "partial", "blanks", "broken"]))
    if kind == "prose":
        return "".join(draw(st.lists(st.sampled_from(list("ab .,:\n\t<>{}`/_") + ["tool_call", "json"]),
                                     max_size=16)))
    if kind == "blanks":
        return draw(BLANKS)
    if kind == "partial":  # what may still open a call, or looks like it
        return draw(st.sampled_from(["<", "<tool", "<tool_call", "<tool_call>", "</tool_call>", "</tool_c", "```",
                                     "``", "```json", "```js", "```python\n", "{", "{\"name\": ", "\n{", "\n  {",
                                     "\n```\n", "<tool_call>\n{"]))
    obj = draw(call_object())
    if kind == "broken":
        obj = obj[: draw(st.integers(0, len(obj)))]
    if kind in ("hermes", "broken"):
        close = draw(st.sampled_from(["</tool_call>", "</tool_call>", "</tool_call>", "", "</tool_c"]))
        return f"<tool_call>{draw(BLANKS)}{obj}{draw(BLANKS)}{close}"
    if kind == "bare":
        indent, trailing = draw(st.sampled_from(["", "  ", "\t"])), draw(st.sampled_from(["", " ", "\t", " \r"]))
        return f"\n{indent}{obj}{trailing}\n"
    fence = draw(st.sampled_from(["```json", "```", "``` json ", "```JSON"]))
    return f"\n{fence}\n{draw(BLANKS)}{obj}{draw(BLANKS)}\n```{draw(BLANKS)}"


MESSAGES = st.lists(segment(), max_size=6).map("".join)


def parsed(style: str, chunks: list[str]) -> tuple[str, list[ToolCall]]:
    shown, calls = run(style, chunks)
    return "".join(shown), calls


@settings(max_examples=150, derandomize=True, database=None, deadline=None)
@given(text=MESSAGES)
def test_any_message_split_at_any_point_parses_as_the_whole_message(text: str) -> None:
    """Never raises; every two-chunk split (and one-character chunks) finds the calls the whole text has,
    and shows the same text."""
    for style in ("hermes", "json"):
        whole = parsed(style, [text])
        for i in range(len(text) + 1):
            assert parsed(style, [text[:i], text[i:]]) == whole, (style, i)
        assert parsed(style, list(text)) == whole, style


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(text=MESSAGES, cuts=st.lists(st.integers(0, 10_000), max_size=8), style=st.sampled_from(["hermes", "json"]))
def test_any_message_cut_into_many_chunks_parses_as_the_whole_message(text: str, cuts: list[int],
                                                                      style: str) -> None:
    points = sorted({c % (len(text) + 1) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    assert parsed(style, chunks) == parsed(style, [text])
