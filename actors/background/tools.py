"""The model-callable tools for background work: shells, monitors, wakeups, cron."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..process import Sandbox
from ..session.tools import ToolContext, ToolResult
from . import monitor as m
from . import shell as sh
from .client_shell import run_in_client_terminal, terminal_of
from .manager import BackgroundLimit, BackgroundManager
from .scheduler import ScheduleError

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0


def _object(arguments: Any, allowed: set[str]) -> dict[str, Any] | str:
    if not isinstance(arguments, dict):
        return "arguments must be an object"
    extra = set(arguments) - allowed
    if extra:
        return f"unknown argument(s) {sorted(extra)}; expected {sorted(allowed)}"
    return arguments


TASK_ID_SCHEMA = {"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"],
                  "additionalProperties": False}


def _task_id(arguments: Any) -> str | ToolResult:
    """The ``task_id`` of a ``{task_id}`` call, or the failure to answer with."""
    args = _object(arguments, {"task_id"})
    if isinstance(args, str):
        return ToolResult.failure(args)
    task_id = args.get("task_id")
    if not isinstance(task_id, str):
        return ToolResult.failure("task_id must be a string")
    return task_id


def _manager(context: ToolContext) -> BackgroundManager:
    assert context.services is not None, "background tools need a session"
    return context.services.background


class _Base:
    builtin = True
    kind = "other"


class ShellTool(_Base):
    name = "shell"
    kind = "execute"
    asks_permission = True  # it calls services.authorize itself
    description = (
        "Run a shell command in the session's working directory. By default waits for it (timeout in seconds, "
        "default 120, at most 600). With run_in_background it returns a task id at once; read the output with "
        "shell_output and stop it with kill_task."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "timeout": {"type": "number", "description": "seconds (foreground only)"},
            "run_in_background": {"type": "boolean"},
            "description": {"type": "string"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        args = _object(arguments, {"command", "timeout", "run_in_background", "description"})
        if isinstance(args, str):
            return ToolResult.failure(args)
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolResult.failure("command must be a non-empty string")
        timeout = args.get("timeout", DEFAULT_TIMEOUT)
        if type(timeout) not in (int, float) or not 0 < timeout <= MAX_TIMEOUT:
            return ToolResult.failure(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}]")
        background = args.get("run_in_background", False)
        if not isinstance(background, bool):
            return ToolResult.failure("run_in_background must be a boolean")
        assert context.services is not None
        denied = await context.services.authorize(context, title=command, kind="execute", raw_input=args)
        if denied is not None:
            return ToolResult.failure(denied)
        if background:
            try:
                item = await _manager(context).start_shell(command, context.cwd)
            except BackgroundLimit as exc:
                return ToolResult.failure(str(exc))
            return ToolResult(f"Command running in background with ID: {item.task_id}. "
                              f"Read new output with shell_output; stop it with kill_task.",
                              {"taskId": item.task_id})
        terminal = terminal_of(context.services)
        if terminal is not None:  # the editor lent its terminal (ACP terminal/*): it runs there, unsandboxed
            return await run_in_client_terminal(terminal, context, command, float(timeout))
        return await self._foreground(command, context.cwd, float(timeout), _manager(context).sandbox)

    async def _foreground(self, command: str, cwd: str, timeout: float, sandbox: Sandbox) -> ToolResult:
        import trio

        output = sh.OutputBuffer()
        process = sh.ShellProcess(command, cwd, output, sandbox=sandbox)
        try:
            await process.start()
        except OSError as exc:
            return ToolResult.failure(f"cannot start the shell: {exc}")
        code: int | None = None
        try:
            with trio.move_on_after(timeout) as scope:
                code = await process.run()
            if scope.cancelled_caught:
                with trio.CancelScope(shield=True):
                    await process.terminate()
        finally:
            await process.kill_and_reap()
        text, lost = output.read_new()
        note = f"[{lost} characters of output dropped]\n" if lost else ""
        if code is None:
            return ToolResult(f"{note}{text}\n[timed out after {timeout:g} s; the command was killed]",
                              {"exitCode": None, "timedOut": True}, error=f"timed out after {timeout:g} s")
        result = f"{note}{text}\n[exit code {code}]"
        return ToolResult(result, {"exitCode": code}, error=None if code == 0 else f"exit code {code}")


class ShellOutputTool(_Base):
    name = "shell_output"
    kind = "read"
    description = "Read a background shell's output that is new since the last read, with its status and exit code."
    parameters = TASK_ID_SCHEMA

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        task_id = _task_id(arguments)
        if isinstance(task_id, ToolResult):
            return task_id
        read = _manager(context).read_output(task_id)
        if read is None:
            return ToolResult.failure(f"no background shell {task_id!r}")
        item, text, lost = read
        head = f"status: {item.state}" + (f", exit code {item.exit_code}" if item.exit_code is not None else "")
        note = f"\n[{lost} characters were dropped before this read]" if lost else ""
        return ToolResult(f"{head}{note}\n{text}", {"status": item.state, "exitCode": item.exit_code,
                                                     "output": text})


class KillTaskTool(_Base):
    name = "kill_task"
    kind = "execute"
    description = "Stop a background task: a shell (its whole process group), a monitor, a wakeup or a cron job."
    parameters = TASK_ID_SCHEMA

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        task_id = _task_id(arguments)
        if isinstance(task_id, ToolResult):
            return task_id
        if not await _manager(context).kill(task_id):
            return ToolResult.failure(f"no live background task {task_id!r}")
        return ToolResult(f"Stopped {task_id}.", {"taskId": task_id})


class MonitorTool(_Base):
    name = "monitor"
    kind = "execute"
    asks_permission = True
    description = (
        "Watch a command's output (or a background shell's, by task_id): new lines arrive as notifications, "
        "bursts merged, floods suppressed; it stops at its timeout (seconds, default 300) and says when the "
        "stream ended."
    )
    parameters = {
        "type": "object",
        "properties": {"command": {"type": "string"}, "task_id": {"type": "string"},
                       "timeout": {"type": "number"}, "description": {"type": "string"}},
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        args = _object(arguments, {"command", "task_id", "timeout", "description"})
        if isinstance(args, str):
            return ToolResult.failure(args)
        command, follow = args.get("command"), args.get("task_id")
        if (command is None) == (follow is None):
            return ToolResult.failure("give exactly one of command or task_id")
        if not isinstance(command or follow, str):
            return ToolResult.failure("command and task_id must be strings")
        timeout = args.get("timeout", m.DEFAULT_TIMEOUT)
        if type(timeout) not in (int, float) or timeout <= 0:
            return ToolResult.failure("timeout must be a positive number of seconds")
        assert context.services is not None
        if command is not None:
            denied = await context.services.authorize(context, title=command, kind="execute", raw_input=args)
            if denied is not None:
                return ToolResult.failure(denied)
        try:
            item = await _manager(context).start_monitor(command=command, follow=follow, cwd=context.cwd,
                                                         timeout=float(timeout))
        except (LookupError, BackgroundLimit, OSError) as exc:
            return ToolResult.failure(str(exc))
        return ToolResult(f"Monitor {item.task_id} started.", {"taskId": item.task_id})


class ScheduleWakeupTool(_Base):
    name = "schedule_wakeup"
    kind = "other"
    description = "Schedule an @wakeup: after `delay` seconds (or `at` an ISO 8601 time) you get `note` back."
    parameters = {
        "type": "object",
        "properties": {"delay": {"type": "number"}, "at": {"type": "string"}, "note": {"type": "string"}},
        "required": ["note"],
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        args = _object(arguments, {"delay", "at", "note"})
        if isinstance(args, str):
            return ToolResult.failure(args)
        note, delay, at = args.get("note"), args.get("delay"), args.get("at")
        if not isinstance(note, str) or not note.strip():
            return ToolResult.failure("note must be a non-empty string")
        if delay is not None and (type(delay) not in (int, float) or delay < 0):
            return ToolResult.failure("delay must be a non-negative number of seconds")
        when = None
        if at is not None:
            try:
                when = datetime.fromisoformat(at) if isinstance(at, str) else None
            except ValueError:
                when = None
            if when is None or when.tzinfo is None:
                return ToolResult.failure("at must be an ISO 8601 time with a UTC offset")
        try:
            item = await _manager(context).schedule_wakeup(delay=delay, at=when, note=note)
        except (ScheduleError, BackgroundLimit) as exc:
            return ToolResult.failure(str(exc))
        return ToolResult(f"Wakeup {item.task_id} scheduled.", {"taskId": item.task_id})


class CronCreateTool(_Base):
    name = "cron_create"
    kind = "other"
    description = "Schedule `prompt` on a 5-field cron schedule (minute hour day month weekday), once or recurring."
    parameters = {
        "type": "object",
        "properties": {"schedule": {"type": "string"}, "prompt": {"type": "string"},
                       "recurring": {"type": "boolean"}},
        "required": ["schedule", "prompt"],
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        args = _object(arguments, {"schedule", "prompt", "recurring"})
        if isinstance(args, str):
            return ToolResult.failure(args)
        prompt, recurring = args.get("prompt"), args.get("recurring", True)
        if not isinstance(prompt, str) or not prompt.strip():
            return ToolResult.failure("prompt must be a non-empty string")
        if not isinstance(recurring, bool):
            return ToolResult.failure("recurring must be a boolean")
        try:
            item = await _manager(context).create_cron(args.get("schedule"), prompt, recurring)  # type: ignore[arg-type]
        except (ScheduleError, BackgroundLimit) as exc:
            return ToolResult.failure(str(exc))
        return ToolResult(f"Cron job {item.task_id} created.", {"taskId": item.task_id})


class CronDeleteTool(_Base):
    name = "cron_delete"
    kind = "other"
    description = "Delete a cron job by its task id."
    parameters = TASK_ID_SCHEMA

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        task_id = _task_id(arguments)
        if isinstance(task_id, ToolResult):
            return task_id
        manager = _manager(context)
        item = manager.registry.get(task_id)
        if item is None or item.kind != "cron" or not await manager.kill(task_id):
            return ToolResult.failure(f"no live cron job {task_id!r}")
        return ToolResult(f"Deleted {task_id}.", {"taskId": task_id})


BACKGROUND_TOOLS = (ShellTool, ShellOutputTool, KillTaskTool, MonitorTool, ScheduleWakeupTool, CronCreateTool,
                    CronDeleteTool)
