"""The model-callable tools for background work: shells, monitors, wakeups, cron.

Their arguments arrive matching their ``parameters`` (the registry checks them first, see
:mod:`actors.session.tool_arguments`); a tool refuses only what a schema cannot say.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..process import Sandbox
from ..session.tool_arguments import NOT_BLANK
from ..session.tools import ToolContext, ToolResult
from . import monitor as m
from . import shell as sh
from .client_shell import run_in_client_terminal, terminal_of
from .manager import BackgroundLimit, BackgroundManager
from .scheduler import ScheduleError

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0


TASK_ID_SCHEMA = {"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"],
                  "additionalProperties": False}


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
            "command": {"type": "string", "pattern": NOT_BLANK},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT,
                        "description": "seconds (foreground only)"},
            "run_in_background": {"type": "boolean"},
            "description": {"type": "string"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        command = arguments["command"]
        timeout = arguments.get("timeout", DEFAULT_TIMEOUT)
        background = arguments.get("run_in_background", False)
        assert context.services is not None
        denied = await context.services.authorize(context, title=command, kind="execute", raw_input=arguments)
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
            return await run_in_client_terminal(terminal, context, command, float(timeout), tool_name=self.name)
        return await self._foreground(command, context.cwd, float(timeout), _manager(context).sandbox)

    async def _foreground(self, command: str, cwd: str, timeout: float, sandbox: Sandbox) -> ToolResult:
        import trio

        output = sh.OutputBuffer()
        process = sh.ShellProcess(command, cwd, output, sandbox=sandbox)
        kills = sandbox.disk.kills if sandbox.disk is not None else 0
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
        note = (f"[{lost:,} bytes of output dropped: a shell keeps its last {sh.OUTPUT_LIMIT // 1024:,} KiB]\n"
                if lost else "")
        if code is None:
            return ToolResult(f"{note}{text}\n[timed out after {timeout:g} s; the command was killed]",
                              {"exitCode": None, "timedOut": True}, error=f"timed out after {timeout:g} s")
        stopped = sandbox.disk.stopped_since(kills) if sandbox.disk is not None else None
        if stopped is not None:  # the disk reserve: say why, not only "exit code 137"
            return ToolResult(f"{note}{text}\n[exit code {code}; {stopped}]", {"exitCode": code},
                              error=stopped)
        result = f"{note}{text}\n[exit code {code}]"
        return ToolResult(result, {"exitCode": code}, error=None if code == 0 else f"exit code {code}")


class ShellOutputTool(_Base):
    name = "shell_output"
    kind = "read"
    description = "Read a background shell's output that is new since the last read, with its status and exit code."
    parameters = TASK_ID_SCHEMA

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        task_id = arguments["task_id"]
        read = _manager(context).read_output(task_id)
        if read is None:
            return ToolResult.failure(f"no background shell {task_id!r}")
        item, text, lost = read
        head = f"status: {item.state}" + (f", exit code {item.exit_code}" if item.exit_code is not None else "")
        note = (f"\n[{lost:,} bytes were dropped before this read: a background shell keeps its newest "
                f"{sh.OUTPUT_LIMIT // 1024:,} KiB of output, and a session's shells "
                f"{sh.SESSION_OUTPUT_LIMIT // (1024 * 1024):,} MiB together]" if lost else "")
        return ToolResult(f"{head}{note}\n{text}", {"status": item.state, "exitCode": item.exit_code,
                                                     "output": text})


class KillTaskTool(_Base):
    name = "kill_task"
    kind = "execute"
    description = "Stop a background task: a shell (its whole process group), a monitor, a wakeup or a cron job."
    parameters = TASK_ID_SCHEMA

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        task_id = arguments["task_id"]
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
        # Exactly one of command and task_id (null is as good as absent): the tool checks that.
        "properties": {"command": {"type": ["string", "null"], "minLength": 1},
                       "task_id": {"type": ["string", "null"]},
                       "timeout": {"type": "number", "exclusiveMinimum": 0}, "description": {"type": "string"}},
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        command, follow = arguments.get("command"), arguments.get("task_id")
        if (command is None) == (follow is None):
            return ToolResult.failure("give exactly one of command or task_id")
        timeout = arguments.get("timeout", m.DEFAULT_TIMEOUT)
        assert context.services is not None
        if command is not None:
            denied = await context.services.authorize(context, title=command, kind="execute",
                                                      raw_input=arguments)
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
        # One of delay and at (null is as good as absent): the scheduler checks that, and at's form.
        "properties": {"delay": {"type": ["number", "null"], "minimum": 0},
                       "at": {"type": ["string", "null"]},
                       "note": {"type": "string", "pattern": NOT_BLANK}},
        "required": ["note"],
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        note, delay, at = arguments["note"], arguments.get("delay"), arguments.get("at")
        when = None
        if at is not None:
            try:
                when = datetime.fromisoformat(at)
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
        "properties": {"schedule": {"type": "string", "pattern": NOT_BLANK},
                       "prompt": {"type": "string", "pattern": NOT_BLANK}, "recurring": {"type": "boolean"}},
        "required": ["schedule", "prompt"],
        "additionalProperties": False,
    }

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        schedule, prompt, recurring = arguments["schedule"], arguments["prompt"], arguments.get("recurring", True)
        try:
            item = await _manager(context).create_cron(schedule, prompt, recurring)
        except (ScheduleError, BackgroundLimit) as exc:
            return ToolResult.failure(str(exc))
        return ToolResult(f"Cron job {item.task_id} created.", {"taskId": item.task_id})


class CronDeleteTool(_Base):
    name = "cron_delete"
    kind = "other"
    description = "Delete a cron job by its task id."
    parameters = TASK_ID_SCHEMA

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        task_id = arguments["task_id"]
        manager = _manager(context)
        item = manager.registry.get(task_id)
        if item is None or item.kind != "cron" or not await manager.kill(task_id):
            return ToolResult.failure(f"no live cron job {task_id!r}")
        return ToolResult(f"Deleted {task_id}.", {"taskId": task_id})


BACKGROUND_TOOLS = (ShellTool, ShellOutputTool, KillTaskTool, MonitorTool, ScheduleWakeupTool, CronCreateTool,
                    CronDeleteTool)
