"""The tools of the two MCP surfaces.

``/mcp`` (the parent): ``start``, ``status``, ``stop``, ``list``, ``await_resume``.
``/signal/mcp/<token>`` (one run's subagent): ``goal_reached`` and
``need_help`` and nothing else, bound to the run the token resolved to —
reporting on a run can never become starting one, and no argument names a run.
"""

from __future__ import annotations

from typing import Any

from actors.subagents import SELF_REPORTED, StartError, SubagentRegistry, SubagentRun, UnknownRun, status_text
from actors.subagents.registry import MAX_TURNS_LIMIT
from actors.subagents.tools import GOAL_REACHED_DESCRIPTION, GOAL_REACHED_SCHEMA, NEED_HELP_DESCRIPTION, \
    NEED_HELP_SCHEMA

from .protocol import McpTool, ToolOutput

MAX_AWAIT = 240.0  # under the official client's 300 s read timeout
DEFAULT_AWAIT = 30.0

NAME = {"type": "string", "minLength": 1, "maxLength": 64}
START_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {**NAME, "description": "the run's name (letters, digits, '.', '_', '-')"},
        "brief": {"type": "string", "minLength": 1, "description": "what the subagent should do"},
        "goal": {"type": "string", "minLength": 1,
                 "description": "optional: later turns re-prompt toward it until goal_reached or the cap"},
        "max_turns": {"type": "integer", "minimum": 1, "maximum": MAX_TURNS_LIMIT,
                      "description": "turns at most when there is a goal (default 5)"},
        "report_file": {"type": "string", "minLength": 1,
                        "description": "a file every stop of the done message is appended to"},
        "cwd": {"type": "string", "minLength": 1, "description": "the run's working directory"},
        "runner": {"type": "string", "enum": ["session", "command"]},
    },
    "required": ["name", "brief"],
    "additionalProperties": False,
}
NAME_ONLY = {"type": "object", "properties": {"name": NAME}, "required": ["name"], "additionalProperties": False}
AWAIT_SCHEMA = {
    "type": "object",
    "properties": {"name": NAME, "timeout_s": {"type": "number", "minimum": 0, "maximum": MAX_AWAIT}},
    "required": ["name"],
    "additionalProperties": False,
}
STATUS_OUTPUT = {
    "type": "object",
    "properties": {
        "state": {"type": "string", "enum": ["starting", "running", "idle", "needs_help"]},
        "turn": {"type": "integer"},
        "maxTurns": {"type": "integer"},
        "endReason": {"type": ["string", "null"],
                      "enum": ["no_goal", "goal_reached", "need_help", "turn_cap", "stopped", "error", None]},
        "lastEventAgeS": {"type": "number"},
    },
    "required": ["state", "turn", "maxTurns", "endReason", "lastEventAgeS"],
}


def parent_tools(registry: SubagentRegistry) -> dict[str, McpTool]:
    """The ``/mcp`` tools over ``registry``."""

    async def start(args: dict[str, Any]) -> ToolOutput:
        try:
            run = await registry.start(args)
        except StartError as exc:
            return ToolOutput(f"start refused: {exc}", is_error=True)
        goal = f" toward its goal, at most {run.max_turns} turn(s)" if run.spec.goal else " (no goal: one turn)"
        return ToolOutput(f"Started subagent run {run.name!r} on the {run.spec.runner} runner{goal}.",
                          structured={"name": run.name, "runner": run.spec.runner, "maxTurns": run.max_turns,
                                      "configFile": str(run.config_path)})

    async def status(args: dict[str, Any]) -> ToolOutput:
        try:
            answer = registry.status(args["name"])
        except UnknownRun:
            return ToolOutput(f"no run named {args['name']!r}", is_error=True)
        return ToolOutput(status_text(answer), structured=answer)

    async def stop(args: dict[str, Any]) -> ToolOutput:
        try:
            answer = await registry.stop(args["name"])
        except UnknownRun:
            return ToolOutput(f"no run named {args['name']!r}", is_error=True)
        return ToolOutput(status_text(answer), structured=answer)

    async def list_runs(args: dict[str, Any]) -> ToolOutput:
        runs = [{k: v for k, v in s.items() if k != "done"} for s in registry.list()]
        lines = [f"{r['name']}: {r['state']}, turn {r['turn']} of {r['maxTurns']}, end reason "
                 f"{r['endReason'] or 'none yet'}" + (f" ({SELF_REPORTED})" if r["endReason"] == "goal_reached" else "")
                 for r in runs]
        return ToolOutput("\n".join(lines) or "no runs", structured={"runs": runs})

    async def await_resume(args: dict[str, Any]) -> ToolOutput:
        try:
            answer = await registry.await_resume(args["name"], float(args.get("timeout_s", DEFAULT_AWAIT)))
        except UnknownRun:
            return ToolOutput(f"no run named {args['name']!r}", is_error=True)
        return ToolOutput(f"{answer['outcome']}: {status_text(answer)}", structured=answer)

    tools = [
        McpTool("start", "Start a subagent run: a brief, optionally a goal it is re-prompted toward (up to "
                         "max_turns, default 5), an optional report file, a runner (session or command).",
                START_SCHEMA, start),
        McpTool("status", "A run's state, turn N of M, the age of its last event and its end reason "
                          f"(goal_reached is {SELF_REPORTED}).", NAME_ONLY, status, STATUS_OUTPUT),
        McpTool("stop", "Stop a run: its turn is cancelled, its process group killed, its token revoked.",
                NAME_ONLY, stop),
        McpTool("list", "Every run with its state, turn N of M and end reason.",
                {"type": "object", "properties": {}, "additionalProperties": False}, list_runs),
        McpTool("await_resume", "Wait (timeout_s, default 30, at most 240) until a run ends or needs help; "
                                "outcome ended, needs_help, or underway.", AWAIT_SCHEMA, await_resume),
    ]
    return {tool.name: tool for tool in tools}


def signal_tools(registry: SubagentRegistry, run: SubagentRun) -> dict[str, McpTool]:
    """The ``/signal/mcp/<token>`` tools, bound to the one run the token resolved to."""

    async def send(kind: str, args: dict[str, Any]) -> ToolOutput:
        answer = await registry.signal(run, kind, args)
        if answer is None:
            return ToolOutput("this run has ended; nothing was recorded", is_error=True)
        is_error, text = answer
        return ToolOutput(text, is_error=is_error)

    async def goal_reached(args: dict[str, Any]) -> ToolOutput:
        return await send("goal_reached", args)

    async def need_help(args: dict[str, Any]) -> ToolOutput:
        return await send("need_help", args)

    return {
        "goal_reached": McpTool("goal_reached", GOAL_REACHED_DESCRIPTION, GOAL_REACHED_SCHEMA, goal_reached),
        "need_help": McpTool("need_help", NEED_HELP_DESCRIPTION, NEED_HELP_SCHEMA, need_help),
    }
