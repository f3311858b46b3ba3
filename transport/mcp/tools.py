"""The tools of the two MCP surfaces.

``/mcp`` (the parent): ``start``, ``status``, ``stop``, ``list``, ``await_resume``.
``/signal/mcp/<token>`` (one run's subagent): ``goal_reached`` and
``need_help`` and nothing else, bound to the run the token resolved to —
reporting on a run can never become starting one, and no argument names a run.

Every tool has a ``title`` and ``annotations`` (hints a client may show or act
on: ``stop`` is the destructive one); every parent tool returns
``structuredContent`` matching its ``outputSchema`` (``outputs.py``). The
signal tools return text only. ``await_resume`` sends progress while it waits
when the call carries a progress token (and the answer can be a stream).
"""

from __future__ import annotations

from typing import Any

from actors.subagents import SELF_REPORTED, StartError, SubagentRegistry, SubagentRun, UnknownRun, status_text
from actors.subagents.registry import MAX_TURNS_LIMIT
from actors.subagents.signal_tools import GOAL_REACHED_DESCRIPTION, GOAL_REACHED_SCHEMA, NEED_HELP_DESCRIPTION, \
    NEED_HELP_SCHEMA

from .outputs import AWAIT_OUTPUT, LIST_OUTPUT, RUN_STATUS, START_OUTPUT
from .progress import ToolContext, with_heartbeat
from .protocol import McpTool, ToolOutput

MAX_AWAIT = 240.0  # under the official client's 300 s read timeout
DEFAULT_AWAIT = 30.0
PROGRESS_EVERY = 5.0  # seconds between await_resume's progress notifications (read at each call)


def annotations(title: str, *, read_only: bool, destructive: bool = False, idempotent: bool = False,
                open_world: bool = False) -> dict[str, Any]:
    """MCP tool annotations, every hint spelled out (the spec's defaults assume the worst: destructive,
    open-world). ``title`` is repeated here for 2025-03-26 clients, which know no top-level one."""
    return {"title": title, "readOnlyHint": read_only, "destructiveHint": destructive,
            "idempotentHint": idempotent, "openWorldHint": open_world}


NAME = {"type": "string", "minLength": 1, "maxLength": 64}
PATH_MAX = 4096  # Linux's PATH_MAX: a longer path names no file, and must not be quoted back whole
START_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {**NAME, "description": "the run's name (letters, digits, '.', '_', '-')"},
        "brief": {"type": "string", "minLength": 1, "description": "what the subagent should do"},
        "goal": {"type": "string", "minLength": 1,
                 "description": "optional: later turns re-prompt toward it until goal_reached or the cap"},
        "max_turns": {"type": "integer", "minimum": 1, "maximum": MAX_TURNS_LIMIT,
                      "description": "turns at most when there is a goal (default 5)"},
        "report_file": {"type": "string", "minLength": 1, "maxLength": PATH_MAX,
                        "description": "a file every stop of the done message is appended to"},
        "cwd": {"type": "string", "minLength": 1, "maxLength": PATH_MAX, "description": "the run's working directory"},
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
NO_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": False}


def parent_tools(registry: SubagentRegistry) -> dict[str, McpTool]:
    """The ``/mcp`` tools over ``registry``."""

    def unknown(name: str) -> ToolOutput:
        names = [s["name"] for s in registry.list()]
        known = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "") or "none"
        return ToolOutput(f"no run named {name!r} (runs: {known})", is_error=True)

    async def start(args: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            run = await registry.start(args)
        except StartError as exc:
            return ToolOutput(f"start refused: {exc}", is_error=True)
        goal = f" toward its goal, at most {run.max_turns} turn(s)" if run.spec.goal else " (no goal: one turn)"
        return ToolOutput(f"Started subagent run {run.name!r} on the {run.spec.runner} runner{goal}.",
                          structured={"name": run.name, "runner": run.spec.runner, "maxTurns": run.max_turns,
                                      "configFile": str(run.config_path)})

    async def status(args: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            answer = registry.status(args["name"])
        except UnknownRun:
            return unknown(args["name"])
        return ToolOutput(status_text(answer), structured=answer)

    async def stop(args: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            answer = await registry.stop(args["name"])
        except UnknownRun:
            return unknown(args["name"])
        return ToolOutput(status_text(answer), structured=answer)

    async def list_runs(args: dict[str, Any], context: ToolContext) -> ToolOutput:
        runs = [{k: v for k, v in s.items() if k != "done"} for s in registry.list()]
        lines = [f"{r['name']}: {r['state']}, turn {r['turn']} of {r['maxTurns']}, end reason "
                 f"{r['endReason'] or 'none yet'}" + (f" ({SELF_REPORTED})" if r["endReason"] == "goal_reached" else "")
                 for r in runs]
        return ToolOutput("\n".join(lines) or "no runs", structured={"runs": runs})

    async def await_resume(args: dict[str, Any], context: ToolContext) -> ToolOutput:
        name, timeout = args["name"], float(args.get("timeout_s", DEFAULT_AWAIT))
        try:
            registry.get(name)
        except UnknownRun:
            return unknown(name)

        async def wait() -> dict[str, Any] | None:
            try:
                return await registry.await_resume(name, timeout)
            except UnknownRun:  # forgotten meanwhile (only ended runs are)
                return None

        async def beat(elapsed: float) -> None:
            try:
                s = registry.status(name)
            except UnknownRun:
                return
            votes = s.get("waitingForVote") or []
            waiting = (f"; waiting for {len(votes)} permission vote(s) in session {s['childSessionId']}"
                       if votes else "")
            await context.progress.report(
                round(elapsed, 3), total=timeout,
                message=f"run {name!r}: {s['state']}, turn {s['turn']} of {s['maxTurns']}{waiting}; "
                        f"last event {s['lastEventAgeS']:.0f} s ago; waited {elapsed:.0f} of {timeout:.0f} s")

        # Progress only when it can reach the client: otherwise the heartbeat would be work for nothing.
        answer = await (with_heartbeat(wait, beat, PROGRESS_EVERY) if context.progress.enabled else wait())
        if answer is None:
            return unknown(name)
        return ToolOutput(f"{answer['outcome']}: {status_text(answer)}", structured=answer)

    tools = [
        McpTool("start", "Start a subagent run: a brief, optionally a goal it is re-prompted toward (up to "
                         "max_turns, default 5), an optional report file, a runner (session or command).",
                START_SCHEMA, start, START_OUTPUT, "Start a subagent run",
                # It spawns an agent that runs commands and may reach the network: an open world.
                annotations("Start a subagent run", read_only=False, open_world=True)),
        McpTool("status", "A run's state, turn N of M, the age of its last event and its end reason "
                          f"(goal_reached is {SELF_REPORTED}).", NAME_ONLY, status, RUN_STATUS,
                "Subagent run status", annotations("Subagent run status", read_only=True, idempotent=True)),
        McpTool("stop", "Stop a run: its turn is cancelled, its process group killed, its token revoked.",
                NAME_ONLY, stop, RUN_STATUS, "Stop a subagent run",
                # Work in flight is killed and cannot be resumed; stopping a stopped run changes nothing.
                annotations("Stop a subagent run", read_only=False, destructive=True, idempotent=True)),
        McpTool("list", "Every run with its state, turn N of M and end reason.", NO_ARGUMENTS, list_runs,
                LIST_OUTPUT, "List subagent runs",
                annotations("List subagent runs", read_only=True, idempotent=True)),
        McpTool("await_resume", "Wait (timeout_s, default 30, at most 240) until a run ends or needs help; "
                                "outcome ended, needs_help, or underway.", AWAIT_SCHEMA, await_resume,
                AWAIT_OUTPUT, "Wait for a subagent run",
                annotations("Wait for a subagent run", read_only=True, idempotent=True)),
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

    async def goal_reached(args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return await send("goal_reached", args)

    async def need_help(args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return await send("need_help", args)

    # Each signal is recorded (a later one adds a line; the first decides the end reason) and ends the
    # run after its turn: not read-only, not idempotent, but nothing is destroyed, and nothing outside
    # the daemon is touched.
    return {
        "goal_reached": McpTool("goal_reached", GOAL_REACHED_DESCRIPTION, GOAL_REACHED_SCHEMA, goal_reached,
                                title="Report the goal reached",
                                annotations=annotations("Report the goal reached", read_only=False)),
        "need_help": McpTool("need_help", NEED_HELP_DESCRIPTION, NEED_HELP_SCHEMA, need_help,
                             title="Ask the parent for help",
                             annotations=annotations("Ask the parent for help", read_only=False)),
    }
