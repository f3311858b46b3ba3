"""A built-in tool's arguments are checked once, against its declared schema, before it runs
(actors/session/tool_arguments.py, ToolRegistry.execute): a call that misses the schema is the
tool's failure, naming the JSON path of each problem, the tool never runs, and the turn goes on."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import trio
from jsonschema import Draft202012Validator

from actors import CountingIds, Settings, ToolResult, load_script, open_daemon
from actors.runtime import default_tools
from actors.session.tools import ToolContext, ToolRegistry
from actors.subagents.signal_tools import GOAL_REACHED_SCHEMA, NEED_HELP_SCHEMA

from tests.actors.session.guard.harness import run_prompt

# For every built-in tool: a call it takes, then one with a wrong-typed argument and one with an
# unknown or a missing argument, each with the problem it is refused with. A shell or monitor call
# that ran would leave ``ran`` in the cwd; a write_file or edit that ran would change a file.
CASES: dict[str, tuple[dict[str, Any], tuple[dict[str, Any], str], tuple[dict[str, Any], str]]] = {
    "todo_write": (
        {"todos": [{"id": "1", "content": "c", "status": "pending"}]},
        ({"todos": [{"id": 1, "content": "c", "status": "pending"}]}, "arguments.todos[0].id: expected string, got 1"),
        ({"todos": [{"id": "1", "content": "c"}]}, "arguments.todos[0].status: required"),
    ),
    "shell": (
        {"command": "true"},
        ({"command": "touch ran", "timeout": "10"}, 'arguments.timeout: expected number, got "10"'),
        ({"command": "touch ran", "cwd": "/"}, 'arguments: unexpected property "cwd"'),
    ),
    "shell_output": (
        {"task_id": "shell-1"},
        ({"task_id": 3}, "arguments.task_id: expected string, got 3"),
        ({}, "arguments.task_id: required"),
    ),
    "kill_task": (
        {"task_id": "shell-1"},
        ({"task_id": ["shell-1"]}, 'arguments.task_id: expected string, got ["shell-1"]'),
        ({"task_id": "shell-1", "signal": 9}, 'arguments: unexpected property "signal"'),
    ),
    "monitor": (
        {"command": "true"},
        ({"command": "touch ran", "timeout": "5"}, 'arguments.timeout: expected number, got "5"'),
        ({"command": "touch ran", "every": 1}, 'arguments: unexpected property "every"'),
    ),
    "schedule_wakeup": (
        {"delay": 60, "note": "x"},
        ({"delay": "60", "note": "x"}, 'arguments.delay: expected number or null, got "60"'),
        ({"delay": 60}, "arguments.note: required"),
    ),
    "cron_create": (
        {"schedule": "* * * * *", "prompt": "p"},
        ({"schedule": "* * * * *", "prompt": "p", "recurring": "no"},
         'arguments.recurring: expected boolean, got "no"'),
        ({"schedule": "* * * * *"}, "arguments.prompt: required"),
    ),
    "cron_delete": (
        {"task_id": "cron-1"},
        ({"task_id": 1}, "arguments.task_id: expected string, got 1"),
        ({"task_id": "cron-1", "x": 1}, 'arguments: unexpected property "x"'),
    ),
    "agent": (
        {"name": "a", "brief": "b"},
        ({"name": "a", "brief": "b", "max_turns": "5"}, 'arguments.max_turns: expected integer, got "5"'),
        ({"name": "a"}, "arguments.brief: required"),
    ),
    "read_file": (
        {"path": "a.txt"},
        ({"path": "a.txt", "offset": "3"}, 'arguments.offset: expected integer, got "3"'),
        ({"path": "a.txt", "lines": 1}, 'arguments: unexpected property "lines"'),
    ),
    "write_file": (
        {"path": "new.txt", "content": "x"},
        ({"path": "new.txt", "content": 5}, "arguments.content: expected string, got 5"),
        ({"path": "new.txt"}, "arguments.content: required"),
    ),
    "edit": (
        {"path": "a.txt", "old_string": "a", "new_string": "b"},
        ({"path": "a.txt", "old_string": "a", "new_string": "b", "replace_all": "yes"},
         'arguments.replace_all: expected boolean, got "yes"'),
        ({"path": "a.txt", "old_string": "a"}, "arguments.new_string: required"),
    ),
    "glob": (
        {"pattern": "*"},
        ({"pattern": 5}, "arguments.pattern: expected string, got 5"),
        ({"pattern": "*", "depth": 2}, 'arguments: unexpected property "depth"'),
    ),
    "grep": (
        {"pattern": "x"},
        ({"pattern": "x", "case_insensitive": "yes"}, 'arguments.case_insensitive: expected boolean, got "yes"'),
        ({"path": "."}, "arguments.pattern: required"),
    ),
    "web_fetch": (
        {"url": "http://127.0.0.1:9/"},
        ({"url": ["http://127.0.0.1:9/"]}, 'arguments.url: expected string, got ["http://127.0.0.1:9/"]'),
        ({"url": "http://127.0.0.1:9/", "headers": {}}, 'arguments: unexpected property "headers"'),
    ),
}
ALL_SETTINGS = Settings(web_fetch=True)  # every built-in offered


def builtins() -> ToolRegistry:
    return default_tools(ALL_SETTINGS)


def spy_on(registry: ToolRegistry, *, run: bool = True) -> dict[str, list[Any]]:
    """Record each tool's ``execute`` calls by name; ``run=False``: answer "ran" instead of running it."""
    calls: dict[str, list[Any]] = {}
    for tool in registry:
        seen = calls.setdefault(tool.name, [])
        real = tool.execute

        async def execute(context: Any, arguments: Any, real: Any = real, seen: list[Any] = seen) -> ToolResult:
            seen.append(arguments)
            return await real(context, arguments) if run else ToolResult("ran")

        tool.execute = execute  # type: ignore[method-assign]
    return calls


def tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def test_every_builtin_tool_has_its_cases() -> None:
    assert {tool.name for tool in builtins() if tool.builtin} == set(CASES)


def test_every_builtin_schema_is_a_valid_draft_2020_12_schema() -> None:
    for tool in builtins():
        Draft202012Validator.check_schema(tool.parameters)
        assert tool.parameters["type"] == "object", tool.name
    for schema in (GOAL_REACHED_SCHEMA, NEED_HELP_SCHEMA):  # the signal tools' (their endpoint checks them)
        Draft202012Validator.check_schema(schema)


# ----------------------------------------------------------------- through a session's turn


@pytest.mark.parametrize("name", sorted(CASES))
async def test_bad_arguments_are_the_tools_failure_naming_the_path_and_it_never_runs(name: str,
                                                                                      tmp_path: Path) -> None:
    _, (wrong, wrong_problem), (odd, odd_problem) = CASES[name]
    (tmp_path / "a.txt").write_text("a\n")
    before = tree(tmp_path)
    registry = builtins()
    calls = spy_on(registry)
    model = load_script({"responses": [
        [{"tool_call": {"id": "call-1", "name": name, "arguments": wrong}},
         {"tool_call": {"id": "call-2", "name": name, "arguments": odd}}],
        [{"text": "done"}],
    ]})
    with trio.fail_after(30):
        async with open_daemon(Settings(approval_mode="yolo", web_fetch=True), model=model, ids=CountingIds(),
                               tools=lambda: registry, workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session(str(tmp_path))
            run = await run_prompt(session)
    assert run.stop_reason == "end_turn" and len(model.calls) == 2  # the model read the failures; the turn went on
    results = [m.content for m in model.calls[1].messages if m.role == "tool"]
    assert len(results) == 2
    assert results[0].startswith(f"Error: {name}: {wrong_problem}"), results[0]
    assert results[1].startswith(f"Error: {name}: {odd_problem}"), results[1]
    assert calls[name] == []  # neither call reached the tool
    assert tree(tmp_path) == before  # nothing written, no command run
    if name != "todo_write":  # clients see each call fail with the same text (todo_write's calls are not shown)
        failed = [e.update for e in run.events if e.update and e.update.get("status") == "failed"]
        assert [u["content"][0]["content"]["text"] for u in failed] == results


# ----------------------------------------------------------------- the registry's check


async def execute(registry: ToolRegistry, name: str, arguments: Any) -> ToolResult:
    tool = registry.get(name)
    assert tool is not None
    return await registry.execute(tool, ToolContext("sess-1", "/nowhere", "prompt-1", "call-1"), arguments)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_call_the_tool_takes_passes_the_check(name: str) -> None:
    registry = builtins()
    calls = spy_on(registry, run=False)
    result = await execute(registry, name, CASES[name][0])
    assert result.content == "ran" and calls[name] == [CASES[name][0]]


# Calls the tools took before their schemas were checked, and still do: null where a tool read it as
# absent, 10.0 where it read an integer, strings that are empty or blank where nothing refused them.
STILL_VALID = [
    ("read_file", {"path": "a.txt", "offset": 10.0, "limit": 5}),
    ("grep", {"pattern": "x", "glob": None}),
    ("monitor", {"command": None, "task_id": "shell-1", "timeout": 0.5, "description": "follow"}),
    ("monitor", {"task_id": ""}),
    ("monitor", {"command": "tail -f log", "task_id": None}),
    ("schedule_wakeup", {"delay": None, "at": "2025-03-01T01:00:00+00:00", "note": "x"}),
    ("schedule_wakeup", {"delay": 0, "at": None, "note": "x"}),
    ("shell", {"command": "ls", "timeout": 600, "run_in_background": False, "description": "list"}),
    ("agent", {"name": "a", "brief": "b", "goal": None, "report_file": None, "max_turns": 50, "runner": "command"}),
    ("edit", {"path": "a.txt", "old_string": "", "new_string": "", "replace_all": True}),  # the tool says why not
    ("write_file", {"path": "a.txt", "content": ""}),
    ("todo_write", {"todos": []}),
    ("shell_output", {"task_id": ""}),
]


@pytest.mark.parametrize("name, arguments", STILL_VALID)
async def test_calls_the_tools_took_still_reach_them(name: str, arguments: dict[str, Any]) -> None:
    registry = builtins()
    calls = spy_on(registry, run=False)
    assert (await execute(registry, name, arguments)).content == "ran"
    assert calls[name] == [arguments]


# Calls the tools refused by hand, still refused (by the schema now): (tool, arguments, the problem).
STILL_REFUSED = [
    ("read_file", {"path": "a.txt", "offset": 0}, "arguments.offset: expected at least 1, got 0"),
    ("read_file", {"path": "a.txt", "limit": 2.5}, "arguments.limit: expected integer, got 2.5"),
    ("read_file", {"path": "a.txt", "offset": True}, "arguments.offset: expected integer, got true"),
    ("read_file", {"path": ""}, 'arguments.path: expected a non-empty string, got ""'),
    ("read_file", {"path": None}, "arguments.path: expected string, got null"),
    ("glob", {"pattern": "*", "path": ""}, 'arguments.path: expected a non-empty string, got ""'),
    ("grep", {"pattern": "x", "glob": ""}, 'arguments.glob: expected a non-empty string, got ""'),
    ("grep", {"pattern": "x", "case_insensitive": None}, "arguments.case_insensitive: expected boolean, got null"),
    ("write_file", {"path": "a.txt", "content": None}, "arguments.content: expected string, got null"),
    ("web_fetch", {"url": ""}, 'arguments.url: expected a non-empty string, got ""'),
    ("shell", {"command": " \n\t"}, 'arguments.command: expected a string that is not blank, got " \\n\\t"'),
    ("shell", {"command": "ls", "timeout": 0}, "arguments.timeout: expected more than 0, got 0"),
    ("shell", {"command": "ls", "timeout": 600.5}, "arguments.timeout: expected at most 600, got 600.5"),
    ("shell", {"command": "ls", "timeout": math.nan}, "arguments.timeout: expected a finite number, got NaN"),
    ("shell", {"command": "ls", "timeout": None}, "arguments.timeout: expected number, got null"),
    ("monitor", {"command": "", "task_id": None}, 'arguments.command: expected a non-empty string, got ""'),
    ("monitor", {"command": "ls", "timeout": -1}, "arguments.timeout: expected more than 0, got -1"),
    ("schedule_wakeup", {"delay": -1, "note": "x"}, "arguments.delay: expected at least 0, got -1"),
    ("schedule_wakeup", {"delay": 1, "note": None}, "arguments.note: expected string, got null"),
    ("schedule_wakeup", {"at": 1700000000, "note": "x"}, "arguments.at: expected string or null, got 1700000000"),
    ("cron_create", {"schedule": " ", "prompt": "p"}, 'arguments.schedule: expected a string that is not blank'),
    ("cron_create", {"schedule": "* * * * *", "prompt": "p", "recurring": None},
     "arguments.recurring: expected boolean, got null"),
    ("todo_write", {"todos": [{"id": "1", "content": "c", "status": "done"}]},
     'arguments.todos[0].status: expected one of "pending", "in_progress", "completed", got "done"'),
    ("todo_write", {"todos": [{"id": "1", "content": "c", "status": "pending", "priority": "high"}]},
     'arguments.todos[0]: unexpected property "priority"'),
    ("agent", {"name": "a", "brief": "b", "runner": "shell"},
     'arguments.runner: expected one of "session", "command", got "shell"'),
    ("agent", {"name": "a", "brief": "b", "max_turns": 51}, "arguments.max_turns: expected at most 50, got 51"),
    ("agent", {"name": "a", "brief": "b", "cwd": "/"}, 'arguments: unexpected property "cwd"'),
    ("shell_output", None, "arguments: expected object, got null"),
    ("kill_task", ["shell-1"], 'arguments: expected object, got ["shell-1"]'),
]


@pytest.mark.parametrize("name, arguments, problem", STILL_REFUSED)
async def test_calls_the_tools_refused_are_still_refused_by_path(name: str, arguments: Any, problem: str) -> None:
    registry = builtins()
    calls = spy_on(registry, run=False)
    result = await execute(registry, name, arguments)
    assert result.error is not None and result.error.startswith(f"{name}: {problem}"), result.error
    assert result.content == f"Error: {result.error}"
    assert calls[name] == []


# ----------------------------------------------------------------- the messages


class Edits:
    """A built-in with nested arguments, to see the paths the problems name."""

    name, kind, builtin = "multi_edit", "edit", True
    description = "edits"
    parameters = {
        "type": "object",
        "properties": {
            "edits": {"type": "array", "maxItems": 3, "items": {
                "type": "object",
                "properties": {"old_string": {"type": "string"}, "new_string": {"type": "string"}},
                "required": ["old_string", "new_string"],
                "additionalProperties": False,
            }},
            "odd key": {"type": "integer"},
        },
        "required": ["edits"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.ran = 0

    async def execute(self, context: Any, arguments: Any) -> ToolResult:
        self.ran += 1
        return ToolResult("ran")


async def check(tool: Any, arguments: Any) -> str | None:
    registry = ToolRegistry([tool])
    return (await execute(registry, tool.name, arguments)).error


async def test_each_problem_is_named_by_its_path_and_all_are_told_at_once() -> None:
    tool = Edits()
    error = await check(tool, {"edits": [{"old_string": "a", "new_string": "b"}, {"new_string": "c", "x": 1}],
                               "odd key": "1", "extra": True, "more": None})
    assert error == ('multi_edit: arguments.edits[1].old_string: required; '
                     'arguments.edits[1]: unexpected property "x" (expected only old_string, new_string); '
                     'arguments["odd key"]: expected integer, got "1"; '
                     'arguments: unexpected properties "extra", "more" (expected only edits, odd key)')
    assert tool.ran == 0


async def test_a_long_value_is_quoted_short_and_many_problems_are_counted() -> None:
    tool = Edits()
    error = await check(tool, {"edits": "x" * 500})
    assert error == f'multi_edit: arguments.edits: expected array, got "{"x" * 58}…'
    error = await check(tool, {"edits": [{"old_string": i, "new_string": i} for i in range(6)]})  # 13 problems
    assert error is not None and error.endswith("; and 3 more") and error.count("; ") == 10
    error = await check(tool, {"edits": [{"old_string": "a", "new_string": "b"}] * 4})
    assert error == "multi_edit: arguments.edits: expected at most 3 items, got 4"
    assert tool.ran == 0


async def test_a_number_json_does_not_have_is_refused_wherever_it_is() -> None:
    tool = Edits()
    error = await check(tool, {"edits": [], "odd key": math.inf})
    assert error == "multi_edit: arguments[\"odd key\"]: expected a finite number, got Infinity; " \
                    "arguments[\"odd key\"]: expected integer, got Infinity"
    assert tool.ran == 0


async def test_a_tool_that_is_not_built_in_checks_its_own_arguments() -> None:
    """A discovered or MCP tool's schema is its server's, and that server checks it."""
    tool = Edits()
    tool.builtin = False
    assert await check(tool, {"edits": 5}) is None and tool.ran == 1


async def test_a_tool_replaced_under_its_name_is_checked_against_its_own_schema() -> None:
    registry = ToolRegistry([Edits()])
    shadow = Edits()
    shadow.builtin = False
    registry.replace(shadow)
    assert (await execute(registry, "multi_edit", {"edits": 5})).content == "ran"
    builtin = Edits()
    registry.replace(builtin)
    assert (await execute(registry, "multi_edit", {"edits": 5})).error == \
        "multi_edit: arguments.edits: expected array, got 5"
    assert builtin.ran == 0
