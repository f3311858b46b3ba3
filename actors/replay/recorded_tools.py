"""Tool calls answered from a record instead of running: a recording's (:mod:`.playback`) or a scenario's
``tool_results`` (:mod:`.world`).

The call asks again for the permissions it asked for (so the permission request and its vote happen
again), publishes the progress it published, and returns its result after its duration. The session's
own tools (:data:`SESSION_TOOLS`) always run: their effect is the session's state.
"""

from __future__ import annotations

from typing import Any

import trio

from ..runtime import default_tools
from ..session.tools import ToolRegistry, ToolResult
from ..settings import Settings

# Tools whose effect is the session's own state: they run for real in a replay (and their results are compared).
SESSION_TOOLS = frozenset({"todo_write", "schedule_wakeup", "cron_create", "cron_delete"})


async def answer_recorded(context: Any, data: dict[str, Any], localize: Any = lambda v: v,
                          started_work: Any = None) -> ToolResult:
    """A tool call answered from its record (a recording's ``tool`` entry, a scenario's ``tool_results``):
    the permissions it asked for asked again, its progress published, its result after its duration."""
    started = trio.current_time()
    if "t" in data:  # a recording's: never earlier than it began then
        started = max(started, data["t"] - data.get("duration", 0))
        await trio.sleep_until(started)
    for ask in data.get("asks", []):
        await trio.sleep_until(started + ask.get("dt", 0))
        # PermissionCancelled propagates as it did (the vote or the cancel is replayed too).
        await context.services.authorize(context, **localize(ask["request"]))
    for update in data.get("updates", []):
        await trio.sleep_until(started + update.get("dt", 0))
        context.services.publish_update(localize(update["update"]), context.prompt_id)
    if started_work is not None:
        started_work()
    await trio.sleep_until(started + data.get("duration", 0))
    if "raised" in data:
        raise RuntimeError(f"recorded: {data['raised']}: {data.get('message')}")
    r = localize(data["result"])
    return ToolResult(r["content"], r.get("display"), r.get("error"), tuple(r.get("locations") or ()),
                      tuple(r.get("acpContent") or ()))


class AnsweringRegistry(ToolRegistry):
    """A scenario's tools: calls listed in its ``tool_results`` (by tool call id) are answered from there;
    the rest run. Background work an answered call started (its ``background``: ``{kind, label, events:
    [{at, status, text?, truncated?, state?, exitCode?}], notification?}``) is tracked in the session as
    work run elsewhere, its events at their virtual times (``{taskId}`` in a text is the task's id)."""

    def __init__(self, tools: list[Any], answers: dict[str, dict[str, Any]], later: Any = None) -> None:
        super().__init__(tools)
        self.answers = answers
        self.later = later  # World.later: run an effect at a virtual time, the replay waiting for it

    async def execute(self, tool: Any, context: Any, arguments: Any) -> ToolResult:
        data = self.answers.get(context.tool_call_id)
        if data is None or (tool.name in SESSION_TOOLS and tool.builtin):
            return await super().execute(tool, context, arguments)
        started: list[str] = []  # the ids of the tasks it started: "{taskId}" in its result names the first

        def localize(value: Any) -> Any:
            return _replace_cwd(value, context.cwd, started[0] if started else None)

        return await answer_recorded(context, data, localize,
                                     lambda: self._background(context, data.get("background", []), started))

    def _background(self, context: Any, tasks: list[dict[str, Any]], started: list[str]) -> None:
        manager = context.services.background
        for task in tasks:
            item = manager.track(task.get("kind", "shell"), task.get("label", ""))
            started.append(item.task_id)
            for event in task.get("events", []):
                self.later(event.get("at", 0), _effect(manager, item, event, task.get("notification")))


def _effect(manager: Any, item: Any, event: dict[str, Any], notification: str | None) -> Any:
    def run() -> None:
        if event.get("status") == "output":
            manager.report_output(item.task_id, event.get("text", ""), truncated=event.get("truncated"))
        elif event.get("status") == "finished":
            text = (notification or "").replace("{taskId}", item.task_id)
            manager.finish(item.task_id, state=event.get("state", "completed"), text=text,
                           exit_code=event.get("exitCode"), notify=notification is not None)
    return run


def answering_tools(settings: Settings, answers: dict[str, dict[str, Any]], later: Any = None) -> Any:
    def make() -> ToolRegistry:
        return AnsweringRegistry(list(default_tools(settings)), answers, later)
    return make


def _replace_cwd(value: Any, cwd: str, task_id: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _replace_cwd(v, cwd, task_id) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_cwd(v, cwd, task_id) for v in value]
    if isinstance(value, str):
        value = value.replace("$CWD", cwd)
        return value.replace("{taskId}", task_id) if task_id is not None else value
    return value


