"""The tools of both surfaces as listed: titles, annotations, output schemas the answers really match."""

from __future__ import annotations

from typing import Any

import trio

from actors import CountingIds, load_script, open_daemon
from tests.transport.mcp.schemas import problems, strict
from transport.mcp.outputs import RUN_FIELDS, RUN_STATUS
from transport.mcp.progress import ToolContext
from transport.mcp.tools import parent_tools, signal_tools

HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
EXPECTED = {  # (readOnly, destructive, idempotent, openWorld)
    "start": (False, False, False, True),
    "status": (True, False, True, False),
    "stop": (False, True, True, False),
    "list": (True, False, True, False),
    "await_resume": (True, False, True, False),
    "goal_reached": (False, False, False, False),
    "need_help": (False, False, False, False),
}
WEDGED = {"responses": [{"delay": 10_000, "steps": [{"text": "late"}]}], "then": "error"}


async def test_every_tool_of_both_surfaces_has_a_title_and_every_hint(tmp_path):
    async with open_daemon(model=load_script(WEDGED), ids=CountingIds(), workspace=str(tmp_path)) as daemon:
        registry = daemon.subagents
        registry.base_url = "http://127.0.0.1:9"
        run = await registry.start({"name": "w", "brief": "think"})
        listed = [t.describe() for t in [*parent_tools(registry).values(), *signal_tools(registry, run).values()]]
        await registry.stop("w")
    assert sorted(t["name"] for t in listed) == sorted(EXPECTED)
    for tool in listed:
        assert tool["title"] and tool["annotations"]["title"] == tool["title"]
        assert tuple(tool["annotations"][h] for h in HINTS) == EXPECTED[tool["name"]], tool["name"]
    assert [t["name"] for t in listed if t["annotations"]["destructiveHint"]] == ["stop"]


async def test_every_structured_answer_matches_its_output_schema(tmp_path, autojump_clock):
    async with open_daemon(model=load_script(WEDGED), ids=CountingIds(), workspace=str(tmp_path)) as daemon:
        registry = daemon.subagents
        registry.base_url = "http://127.0.0.1:9"
        tools = parent_tools(registry)
        context = ToolContext()
        outputs: list[tuple[str, Any]] = []

        async def call(tool: str, **arguments: Any) -> None:
            output = await tools[tool].handler(arguments, context)
            assert not output.is_error, output.text
            outputs.append((tool, output.structured))

        await call("start", name="w", brief="think", goal="an answer", report_file="w.report")
        await trio.sleep(2)
        await call("status", name="w")
        await call("list")
        await call("await_resume", name="w", timeout_s=1)  # underway
        await call("stop", name="w")
        await call("status", name="w")
        await call("list")
        await call("await_resume", name="w")  # ended
    for name, structured in outputs:
        schema = tools[name].output_schema
        assert schema is not None and schema["type"] == "object", name
        assert problems(strict(schema), structured) == [], (name, structured)
    assert {name for name, _ in outputs} == set(tools)  # every parent tool was answered


def test_the_run_fields_cover_the_status_with_its_optional_fields():
    # reportError and outputTail appear only sometimes: declared, not required.
    assert {"reportError", "outputTail"} <= set(RUN_FIELDS)
    sample = {"name": "a", "state": "idle", "turn": 1, "maxTurns": 1, "endReason": "error", "lastEventAgeS": 0.5,
              "ended": True, "runner": "command", "goal": None, "goalReachedSelfReported": False, "question": None,
              "reportFile": None, "done": "", "reportError": "disk full", "outputTail": "boom"}
    assert problems(strict(RUN_STATUS), sample) == []
    assert problems(RUN_STATUS, {**sample, "endReason": "bored"}) != []
    assert problems(RUN_STATUS, {**sample, "state": "asleep"}) != []
