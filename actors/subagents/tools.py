"""The ``agent`` tool: a session starts a subagent run as its background work.

``agent`` starts a run as background work of kind ``agent``: the run's end
arrives in the calling session as a terminal notification, and while it is
live it is part of the Todo Stop Guard's background baseline like a shell.
Starting one is asked for as a shell command is (kind ``execute``: ``plan``
refuses, ``default`` and ``auto-edit`` ask, ``yolo`` does not), in one request
that also covers the ``report_file`` when one is given; and a child session
never runs in a more permissive approval mode than the calling session had
when it started the run (:func:`.runners.stricter`), nor with fewer of its
permission rules (:meth:`~actors.session.authorizer.Authorizer.for_child`).

The child session's own tools, ``goal_reached`` and ``need_help``, are
:mod:`.signal_tools`.
"""

from __future__ import annotations

import shlex
from typing import Any

import attrs
import trio

from ..session.tools import ToolContext, ToolResult
from ..tools.paths import PathRefused, location, scope_of
from .registry import StartError, registry_for

# The registry checks these arguments (``SubagentRegistry.check``: ``start`` has other callers, and a
# name's form, a brief's length, a report file's place are its rules); this schema says their shape, and
# that null is as good as absent for goal and report_file (as the registry takes them).
AGENT_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "a name for the run (letters, digits, '.', '_', '-')"},
        "brief": {"type": "string", "description": "what the subagent should do"},
        "goal": {"type": ["string", "null"], "description": "optional: re-prompt toward this until reported reached"},
        "max_turns": {"type": "integer", "minimum": 1, "maximum": 50,
                      "description": "turns at most, with a goal (default 5)"},
        "report_file": {"type": ["string", "null"], "description": "optional file the done message is appended to"},
        "runner": {"type": "string", "enum": ["session", "command"]},
    },
    "required": ["name", "brief"],
    "additionalProperties": False,
}


class _RunStopper:
    """Lets ``kill_task`` stop an agent item: it answers an actor ``ask`` by stopping the run."""

    def __init__(self, registry: Any, run: Any) -> None:
        self._registry = registry
        self._run = run  # this run, not its name: names are daemon-wide, and one may be reused once it ended

    async def ask(self, make: Any, timeout: float = 10.0) -> bool:
        with trio.move_on_after(timeout):  # the stop is asked for at once; settling may take a little longer
            await self._registry.stop_run(self._run)
        return True


def notification_text(run: Any) -> str:
    """The terminal notification of an agent item: the end reason spelled out, then the done message."""
    from .texts import END_LABELS

    status = run.status()
    head = (f"Subagent run {run.name!r} ended at turn {status['turn']} of {status['maxTurns']}: "
            f"{END_LABELS[status['endReason']]}.")
    if status.get("question"):
        head += f"\nIt asks: {status['question']}"
    if status.get("reportFile"):
        head += f"\nReport file: {status['reportFile']}"
    return f"{head}\n{status['done']}"


BRIEF_SHOWN = 300  # characters of the brief in the permission request's title (all of it is in its rawInput)


def start_title(spec: Any, template: str | None, report: str | None = None) -> str:
    """What the permission request to start a run says: its name, what runs it, its brief (shortened)."""
    from .. import wire

    if spec.runner == "command":
        try:
            program = shlex.split(template or "")[0]
        except (ValueError, IndexError):
            program = "?"
        runner = f"the command runner ({program})"
    else:
        runner = "a child session"
    title = f"agent {spec.name}: start {runner} with the brief “{wire.shorten(spec.brief, BRIEF_SHOWN)}”"
    if report is not None:
        title += f", and append its done message to {report}"
    return title


ITEM_STATES = {"no_goal": "completed", "goal_reached": "completed", "need_help": "failed", "turn_cap": "failed",
               "stopped": "killed", "error": "failed"}


def child_permissions(services: Any, cwd: str, child_cwd: str) -> Any:
    """The rules of the session lending ``services`` that a child session in ``child_cwd`` takes (``None``: no
    session's, as a test's bare services)."""
    take = getattr(services, "child_permissions", None)
    return take(cwd, child_cwd) if take is not None else None


class AgentTool:
    """Start a subagent run as background work of kind ``agent``."""

    name = "agent"
    builtin = True
    kind = "other"
    asks_permission = True  # it calls services.authorize itself
    description = (
        "Start a subagent run in the background with a brief (and optionally a goal it is re-prompted toward, "
        "up to max_turns). It runs on its own; its end arrives as a task notification saying how it ended "
        "(goal_reached is the subagent's own claim). Stop it with kill_task. Starting one is asked for as a "
        "shell command is (refused in plan mode), and the subagent never gets a more permissive approval mode "
        "than this session's."
    )
    parameters = AGENT_SCHEMA

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        from ..background.manager import BackgroundLimit

        registry = registry_for(context.services)
        if registry is None or context.services is None:
            return ToolResult.failure("subagents are not available in this daemon")
        services = context.services
        try:
            # Refused before the user is asked about it (the session's share of live runs included).
            spec = registry.check(arguments, context.cwd, caller=context.session_id)
        except StartError as exc:
            return ToolResult.failure(str(exc))
        name, brief = spec.name, spec.brief

        async def approve_report(path: Any) -> str | None:
            # A report file the subagent names is a file the daemon writes on its behalf: asked as write_file
            # is, on its own (a PreToolUse hook's answer to the agent call does not carry over to it).
            shown = scope_of(context).shown(str(path))
            return await services.authorize(
                attrs.evolve(context, permission=None), title=f"agent {name}: append to {shown} (the subagent "
                f"names it as its report)", kind="edit", raw_input={"report_file": shown},
                details={"locations": [location(str(path))]})

        # One request to start the run, as a shell command is asked for (kind execute), and covering the
        # report_file when there is one: the daemon appending to it (kind edit) asks in the same modes, and
        # what allows a command allows a file's write. A user's "always reject" of edits still refuses it.
        report = arguments.get("report_file")
        details: dict[str, Any] | None = None
        shown_report = None
        if report is not None:
            try:
                real = scope_of(context).resolve_report(report)
            except PathRefused as exc:
                return ToolResult.failure(str(exc))
            if "edit" in getattr(services, "always_denied", ()):
                return ToolResult.failure(f"report_file {report}: the user denied such calls for the rest of this "
                                          "session; no run was started")
            refused = services.refused_by_rule("write_file", {"path": str(real)}, context.cwd) \
                if hasattr(services, "refused_by_rule") else None
            if refused is not None:  # a deny rule on edits covers the file the daemon appends to for it
                return ToolResult.failure(f"report_file {report}: {refused}; no run was started")
            shown_report = scope_of(context).shown(str(real))
            details = {"locations": [location(str(real))]}
        template = registry.config.command_template
        denied = await services.authorize(context, title=start_title(spec, template, shown_report), kind="execute",
                                          raw_input=arguments, details=details)
        if denied is not None:
            return ToolResult.failure(f"{denied}; no run was started")
        # The calling session's mode and rules now, as it starts the run: its child session never gets a laxer
        # mode, and takes its rules (the settings' and its own, its "always" answers) as its own.
        parent_mode = getattr(services, "approval_mode", None)
        try:
            permissions = child_permissions(services, context.cwd, spec.cwd) if spec.runner == "session" else None
        except ValueError as exc:  # RuleError: a rule the child could not be given; it must not start without it
            return ToolResult.failure(f"{exc}; no run was started")
        manager = services.background
        try:
            item = manager.track("agent", f"{name}: {brief}"[:200])
        except BackgroundLimit as exc:
            return ToolResult.failure(str(exc))

        def on_end(run: Any) -> None:
            manager.finish(item.task_id, state=ITEM_STATES.get(run.end_reason, "failed"),
                           text=notification_text(run))

        try:
            run = await registry.start(arguments, cwd=context.cwd, on_end=on_end, approve_report=approve_report,
                                       parent_mode=parent_mode, sandbox=getattr(services, "sandbox", None),
                                       permissions=permissions, caller=context.session_id)
        except StartError as exc:
            manager.finish(item.task_id, state="failed", text=str(exc), notify=False)
            return ToolResult.failure(str(exc))
        except BaseException:
            manager.finish(item.task_id, state="failed", text="the run was not started", notify=False)
            raise
        item.actor = _RunStopper(registry, run)
        return ToolResult(
            f"Subagent run {run.name!r} started in the background as task {item.task_id} "
            f"({run.spec.runner} runner, at most {run.max_turns} turn(s)). Its end arrives as a task notification.",
            {"taskId": item.task_id, "name": run.name, "maxTurns": run.max_turns},
        )
