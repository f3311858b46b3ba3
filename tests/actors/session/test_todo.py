"""The built-in todo_write tool and the strict envelope reader (actors/session/todo.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors.session.todo import STATUSES, Todo, TodoWriteTool, parse_todo_envelope, unfinished_count
from actors.session.tools import ToolContext, ToolRegistry, ToolResult

CTX = ToolContext(session_id="s-1", cwd="/tmp", prompt_id="prompt-1", tool_call_id="call_1")

TODOS = [
    {"id": "1", "content": "Understand", "status": "completed"},
    {"id": "2", "content": "Do the work", "status": "in_progress"},
    {"id": "3", "content": "Report", "status": "pending"},
]


async def run(arguments: Any) -> ToolResult:
    """As a session calls it: its arguments checked against its schema first."""
    tool = TodoWriteTool()
    return await ToolRegistry([tool]).execute(tool, CTX, arguments)


# ----------------------------------------------------------------- execute


async def test_success_returns_the_todo_list_envelope() -> None:
    result = await run({"todos": TODOS})
    assert result.error is None
    assert result.display == {"type": "todo_list", "todos": TODOS}
    assert result.content.startswith(json.dumps(TODOS))
    assert "2 todo item(s) remain unfinished" in result.content
    assert parse_todo_envelope(result.display) == [Todo(**t) for t in TODOS]


async def test_success_with_everything_completed_has_no_reminder() -> None:
    done = [{"id": "a", "content": "x", "status": "completed"}]
    result = await run({"todos": done})
    assert result.error is None
    assert result.content == json.dumps(done)
    assert result.display == {"type": "todo_list", "todos": done}


async def test_empty_list_is_a_success() -> None:
    result = await run({"todos": []})
    assert result.error is None
    assert result.display == {"type": "todo_list", "todos": []}
    assert parse_todo_envelope(result.display) == []


async def test_display_is_a_copy_not_the_arguments() -> None:
    todos = [dict(t) for t in TODOS]
    result = await run({"todos": todos})
    todos[0]["status"] = "pending"
    assert result.display["todos"][0]["status"] == "completed"


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ("not an object", "object"),
        ([{"todos": TODOS}], "object"),
        (None, "object"),
        ({"todos": TODOS, "merge": True}, "merge"),
        ({}, "arguments.todos: required"),
        ({"todos": "[]"}, 'arguments.todos: expected array, got "[]"'),
        ({"todos": ["x"]}, 'arguments.todos[0]: expected object, got "x"'),
        ({"todos": [{"id": "1", "content": "c", "status": "done"}]}, "todos[0].status"),
        ({"todos": [{"id": "1", "content": "c", "status": "COMPLETED"}]}, "todos[0].status"),
        ({"todos": [{"id": "1", "status": "pending"}]}, "todos[0].content"),
        ({"todos": [{"content": "c", "status": "pending"}]}, "todos[0].id"),
        ({"todos": [{"id": "1", "content": "c"}]}, "todos[0].status"),
        ({"todos": [{"id": 1, "content": "c", "status": "pending"}]}, "todos[0].id"),
        ({"todos": [{"id": "1", "content": "c", "status": "pending", "priority": "high"}]}, "priority"),
        ({"todos": [TODOS[0], {"id": "1", "content": "again", "status": "pending"}]}, "todos[1].id"),
    ],
)
async def test_failures_return_an_error_result_with_a_string_display(arguments: Any, needle: str) -> None:
    result = await run(arguments)
    assert result.error is not None
    assert isinstance(result.display, str)
    assert needle in result.error
    assert result.content.startswith("Error: ")
    assert parse_todo_envelope(result.display) is None


async def test_duplicate_ids_are_named() -> None:
    result = await run({"todos": [TODOS[0], {"id": "1", "content": "again", "status": "pending"}]})
    assert result.error is not None and "used twice" in result.error


def test_tool_declares_itself_built_in() -> None:
    tool = TodoWriteTool()
    assert tool.name == "todo_write" and tool.builtin is True
    registry = ToolRegistry([tool])
    [spec] = registry.specs()
    assert spec.name == "todo_write"
    assert spec.parameters["properties"]["todos"]["items"]["properties"]["status"]["enum"] == list(STATUSES)


def test_unfinished_count() -> None:
    assert unfinished_count([Todo(**t) for t in TODOS]) == 2
    assert unfinished_count([]) == 0


# ----------------------------------------------------------------- the strict envelope


def test_envelope_accepts_the_strict_form() -> None:
    todos = parse_todo_envelope({"type": "todo_list", "todos": TODOS})
    assert todos == [Todo("1", "Understand", "completed"), Todo("2", "Do the work", "in_progress"),
                     Todo("3", "Report", "pending")]


@pytest.mark.parametrize(
    "display",
    [
        {"todos": TODOS},  # the raw arguments
        json.dumps({"type": "todo_list", "todos": TODOS}),  # a JSON string of it
        {"type": "todos", "todos": TODOS},  # wrong type
        {"type": "TODO_LIST", "todos": TODOS},
        {"type": "todo_list"},  # no todos
        {"type": "todo_list", "todos": "[]"},
        {"type": "todo_list", "todos": [{"id": "1", "content": "c"}]},  # partial item
        {"type": "todo_list", "todos": [{"id": "1", "status": "pending"}]},
        {"type": "todo_list", "todos": [{"id": "1", "content": "c", "status": "pending", "extra": 1}]},
        {"type": "todo_list", "todos": [{"id": "1", "content": "c", "status": "blocked"}]},
        {"type": "todo_list", "todos": [TODOS[0], TODOS[0]]},  # duplicate ids
        [{"type": "todo_list", "todos": TODOS}],
        "Error: arguments must be an object",
        None,
    ],
)
def test_envelope_rejects_anything_looser(display: Any) -> None:
    assert parse_todo_envelope(display) is None


def test_envelope_may_carry_extra_top_level_fields_like_the_reference_tool() -> None:
    """qwen-code's envelope also carries ``changes``/``planId``; strictness is about ``type`` and ``todos``.

    Trust comes from *which* tool produced the result (the built-in, at top level), which the
    session checks; the envelope check is about the shape of the todos.
    """
    parsed = parse_todo_envelope({"type": "todo_list", "todos": TODOS, "changes": {"added": 1}})
    assert parsed is not None and len(parsed) == len(TODOS)
