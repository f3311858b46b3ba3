"""The built-in ``todo_write`` tool and the strict reading of its result.

A successful result's display is the envelope ``{"type": "todo_list",
"todos": [...]}``. :func:`parse_todo_envelope` is the only way the session reads
todos back: no arguments, no JSON strings, no partial items.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from .tools import ToolContext, ToolResult

STATUSES = ("pending", "in_progress", "completed")
TODO_WRITE = "todo_write"


@attrs.frozen
class Todo:
    id: str
    content: str
    status: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "content": self.content, "status": self.status}


def _parse_items(items: Any, where: str) -> list[Todo] | str:
    if not isinstance(items, list):
        return f"{where} must be an array"
    todos: list[Todo] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            return f"{at} must be an object"
        extra = set(item) - {"id", "content", "status"}
        if extra:
            return f"{at} has unknown field(s) {sorted(extra)}"
        for key in ("id", "content", "status"):
            if not isinstance(item.get(key), str):
                return f"{at}.{key} must be a string"
        if item["status"] not in STATUSES:
            return f"{at}.status must be one of {list(STATUSES)}"
        if item["id"] in seen:
            return f"{at}.id {item['id']!r} is used twice"
        seen.add(item["id"])
        todos.append(Todo(item["id"], item["content"], item["status"]))
    return todos


def parse_todo_envelope(display: Any) -> list[Todo] | None:
    """The todos of a strict ``{type: 'todo_list', todos: [...]}`` envelope, else ``None``.

    ``type`` must be ``todo_list`` and every item must be a complete todo; other
    top-level keys (the reference tool adds ``changes``) are ignored. Whether a
    result is *trusted* is decided by the session from the tool that produced it.
    """
    if not isinstance(display, dict) or display.get("type") != "todo_list":
        return None
    parsed = _parse_items(display.get("todos"), "todos")
    return parsed if isinstance(parsed, list) else None


def unfinished_count(todos: list[Todo]) -> int:
    return sum(1 for t in todos if t.status != "completed")


class TodoWriteTool:
    """Replace the session's todo list (the built-in, trusted ``todo_write``)."""

    name = TODO_WRITE
    kind = "think"
    builtin = True
    description = (
        "Create or replace the todo list for the current task. Send the whole list each time; "
        "mark exactly one item in_progress while you work on it and completed when it is done."
    )
    parameters = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "content": {"type": "string"},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["id", "content", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["todos"],
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        # The shape was checked against ``parameters``; an id used twice is what a schema cannot refuse.
        parsed = _parse_items(arguments["todos"], "todos")
        if isinstance(parsed, str):
            return ToolResult.failure(parsed)
        items = [t.to_dict() for t in parsed]
        left = unfinished_count(parsed)
        content = json.dumps(items) + (
            f"\n<system-reminder>{left} todo item(s) remain unfinished.</system-reminder>" if left else ""
        )
        return ToolResult(content=content, display={"type": "todo_list", "todos": items})
