"""The model-callable background tools (actors/background/tools.py), each driven through ``execute``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.background.manager import BackgroundManager
from actors.background.tools import (
    BACKGROUND_TOOLS,
    CronCreateTool,
    CronDeleteTool,
    KillTaskTool,
    MonitorTool,
    ScheduleWakeupTool,
    ShellOutputTool,
    ShellTool,
)
from actors.ids import CountingIds
from actors.session.tools import ToolContext, ToolRegistry, ToolResult

BASE = datetime(2025, 3, 1, 0, 0, 30, tzinfo=timezone.utc)


def virtual_now() -> datetime:
    return BASE + timedelta(seconds=trio.current_time())


class FakeServices:
    """The session's side of a tool call: its background manager and a permission decision."""

    def __init__(self, background: BackgroundManager, deny: str | None = None) -> None:
        self.background = background
        self.deny = deny
        self.asked: list[tuple[str, str]] = []

    async def authorize(self, context: ToolContext, *, title: str, kind: str, raw_input: Any) -> str | None:
        self.asked.append((title, kind))
        return self.deny


class Env:
    def __init__(self, services: FakeServices, cwd: Path, events: list[dict[str, Any]]) -> None:
        self.services = services
        self.manager = services.background
        self.cwd = cwd
        self.events = events
        self.context = ToolContext("sess-1", str(cwd), "prompt-1", "call-1", services)

    async def call(self, tool: Any, arguments: Any) -> ToolResult:
        """As a session calls it: its arguments checked against its schema first."""
        instance = tool()
        return await ToolRegistry([instance]).execute(instance, self.context, arguments)

    def nothing_started(self) -> bool:
        return list(self.manager.registry) == [] and len(self.manager.queue) == 0


@asynccontextmanager
async def open_env(cwd: Path, deny: str | None = None) -> AsyncIterator[Env]:
    events: list[dict[str, Any]] = []
    manager = BackgroundManager("sess-1", CountingIds(), publish=lambda _n, d: events.append(d),
                                wake=lambda: None, now=virtual_now)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield Env(FakeServices(manager, deny), cwd, events)
        nursery.cancel_scope.cancel()


async def wait_until(predicate: Callable[[], bool], step: float = 0.01) -> None:
    while not predicate():
        await trio.sleep(step)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_tool_surface() -> None:
    names = [t.name for t in BACKGROUND_TOOLS]
    assert names == ["shell", "shell_output", "kill_task", "monitor", "schedule_wakeup", "cron_create",
                     "cron_delete"]
    for tool in BACKGROUND_TOOLS:
        assert tool.builtin and tool.description and tool.parameters["type"] == "object"


# ------------------------------------------------------------------ argument validation

INVALID: list[tuple[Any, Any, str]] = [
    (ShellTool, "ls", 'arguments: expected object, got "ls"'),
    (ShellTool, {}, "arguments.command: required"),
    (ShellTool, {"command": "   "}, 'arguments.command: expected a string that is not blank, got "   "'),
    (ShellTool, {"command": 5}, "arguments.command: expected string, got 5"),
    (ShellTool, {"command": "ls", "cwd": "/"}, 'arguments: unexpected property "cwd"'),
    (ShellTool, {"command": "ls", "timeout": 0}, "arguments.timeout: expected more than 0, got 0"),
    (ShellTool, {"command": "ls", "timeout": -1}, "arguments.timeout: expected more than 0, got -1"),
    (ShellTool, {"command": "ls", "timeout": 601}, "arguments.timeout: expected at most 600, got 601"),
    (ShellTool, {"command": "ls", "timeout": "10"}, 'arguments.timeout: expected number, got "10"'),
    (ShellTool, {"command": "ls", "timeout": True}, "arguments.timeout: expected number, got true"),
    (ShellTool, {"command": "ls", "run_in_background": "yes"},
     'arguments.run_in_background: expected boolean, got "yes"'),
    (ShellOutputTool, None, "arguments: expected object, got null"),
    (ShellOutputTool, {}, "arguments.task_id: required"),
    (ShellOutputTool, {"task_id": 3}, "arguments.task_id: expected string, got 3"),
    (ShellOutputTool, {"task_id": "shell-1", "n": 1}, 'arguments: unexpected property "n"'),
    (ShellOutputTool, {"task_id": "shell-404"}, "no background shell 'shell-404'"),
    (KillTaskTool, [], "arguments: expected object, got []"),
    (KillTaskTool, {}, "arguments.task_id: required"),
    (KillTaskTool, {"task_id": "shell-404"}, "no live background task 'shell-404'"),
    (KillTaskTool, {"task_id": "x", "signal": 9}, 'arguments: unexpected property "signal"'),
    (MonitorTool, "x", 'arguments: expected object, got "x"'),
    (MonitorTool, {}, "exactly one of command or task_id"),
    (MonitorTool, {"command": "ls", "task_id": "shell-1"}, "exactly one of command or task_id"),
    (MonitorTool, {"command": 7}, "arguments.command: expected string or null, got 7"),
    (MonitorTool, {"task_id": ["shell-1"]}, 'arguments.task_id: expected string or null, got ["shell-1"]'),
    (MonitorTool, {"command": "ls", "timeout": 0}, "arguments.timeout: expected more than 0, got 0"),
    (MonitorTool, {"command": "ls", "timeout": "5"}, 'arguments.timeout: expected number, got "5"'),
    (MonitorTool, {"task_id": "shell-404"}, "no running background shell 'shell-404'"),
    (MonitorTool, {"command": "ls", "every": 1}, 'arguments: unexpected property "every"'),
    (ScheduleWakeupTool, 1, "arguments: expected object, got 1"),
    (ScheduleWakeupTool, {"delay": 5}, "arguments.note: required"),
    (ScheduleWakeupTool, {"delay": 5, "note": " "}, 'arguments.note: expected a string that is not blank, got " "'),
    (ScheduleWakeupTool, {"delay": -1, "note": "x"}, "arguments.delay: expected at least 0, got -1"),
    (ScheduleWakeupTool, {"delay": "5", "note": "x"}, 'arguments.delay: expected number or null, got "5"'),
    (ScheduleWakeupTool, {"delay": True, "note": "x"}, "arguments.delay: expected number or null, got true"),
    (ScheduleWakeupTool, {"note": "x"}, "exactly one of delay"),
    (ScheduleWakeupTool, {"note": "x", "delay": 5, "at": "2025-03-01T01:00:00+00:00"}, "exactly one of delay"),
    (ScheduleWakeupTool, {"note": "x", "at": "tomorrow"}, "ISO 8601 time with a UTC offset"),
    (ScheduleWakeupTool, {"note": "x", "at": 1700000000}, "arguments.at: expected string or null, got 1700000000"),
    (ScheduleWakeupTool, {"note": "x", "at": "2025-03-01T01:00:00"}, "ISO 8601 time with a UTC offset"),
    (ScheduleWakeupTool, {"note": "x", "delay": 1, "repeat": True}, 'arguments: unexpected property "repeat"'),
    (CronCreateTool, "* * * * *", 'arguments: expected object, got "* * * * *"'),
    (CronCreateTool, {"schedule": "* * * * *"}, "arguments.prompt: required"),
    (CronCreateTool, {"schedule": "* * * * *", "prompt": ""},
     'arguments.prompt: expected a string that is not blank, got ""'),
    (CronCreateTool, {"schedule": "* * * * *", "prompt": "p", "recurring": "no"},
     'arguments.recurring: expected boolean, got "no"'),
    (CronCreateTool, {"prompt": "p"}, "arguments.schedule: required"),
    (CronCreateTool, {"schedule": "* * * *", "prompt": "p"}, "must have 5 fields"),
    (CronCreateTool, {"schedule": "0 0 * * * *", "prompt": "p"}, "must have 5 fields"),
    (CronCreateTool, {"schedule": "99 * * * *", "prompt": "p"}, "not a valid cron expression"),
    (CronCreateTool, {"schedule": "* * * * *", "prompt": "p", "tz": "UTC"}, 'arguments: unexpected property "tz"'),
    (CronDeleteTool, (), "arguments: expected object, got []"),
    (CronDeleteTool, {}, "arguments.task_id: required"),
    (CronDeleteTool, {"task_id": "cron-404"}, "no live cron job 'cron-404'"),
    (CronDeleteTool, {"task_id": "cron-1", "x": 1}, 'arguments: unexpected property "x"'),
]


@pytest.mark.parametrize("tool, arguments, message", INVALID,
                         ids=[f"{t.name}-{i}" for i, (t, _a, _m) in enumerate(INVALID)])
async def test_invalid_arguments(tool: Any, arguments: Any, message: str, tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            result = await env.call(tool, arguments)
            assert result.error is not None and message in result.error
            assert result.content.startswith("Error: ") and message in result.content
            assert env.nothing_started()
            assert env.services.asked == []  # refused before asking anyone


async def test_cron_delete_refuses_a_task_that_is_not_a_cron_job(autojump_clock: trio.abc.Clock,
                                                                  tmp_path: Path) -> None:
    with trio.fail_after(10_000):
        async with open_env(tmp_path) as env:
            made = await env.call(ScheduleWakeupTool, {"delay": 60, "note": "x"})
            result = await env.call(CronDeleteTool, {"task_id": made.display["taskId"]})
            assert result.error == f"no live cron job {made.display['taskId']!r}"
            assert env.manager.registry.get(made.display["taskId"]).live  # the wakeup is untouched


# ------------------------------------------------------------------ shell


async def test_foreground_shell_success(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            result = await env.call(ShellTool, {"command": "echo hello; pwd", "description": "greet"})
            assert env.services.asked == [("echo hello; pwd", "execute")]
            assert list(env.manager.registry) == []  # foreground runs are not background tasks
    assert result.error is None
    assert result.display == {"exitCode": 0}
    assert result.content == f"hello\n{tmp_path}\n\n[exit code 0]"


async def test_foreground_shell_nonzero_exit(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            result = await env.call(ShellTool, {"command": "echo oops >&2; exit 7"})
    assert result.error == "exit code 7"
    assert result.display == {"exitCode": 7}
    assert "oops" in result.content and "[exit code 7]" in result.content


async def test_foreground_timeout_kills_the_command(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    command = f"echo started; sleep 30 & echo $! > {pidfile}; echo $$ >> {pidfile}; wait"
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            start = trio.current_time()
            result = await env.call(ShellTool, {"command": command, "timeout": 0.3})
            elapsed = trio.current_time() - start
            pids = [int(p) for p in pidfile.read_text().split()]
            await wait_until(lambda: not any(alive(p) for p in pids))
    assert 0.3 <= elapsed < 2.0
    assert result.error == "timed out after 0.3 s"
    assert result.display == {"exitCode": None, "timedOut": True}
    assert "started" in result.content and "the command was killed" in result.content


async def test_run_in_background_returns_a_task_id_at_once(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            start = trio.current_time()
            result = await env.call(ShellTool, {"command": "sleep 30", "run_in_background": True})
            assert trio.current_time() - start < 1.0
            assert result.error is None
            task_id = result.display["taskId"]
            assert task_id in result.content
            item = env.manager.registry.get(task_id)
            assert item is not None and item.kind == "shell" and item.live
            assert env.manager.registry.live("shell") == [item]


async def test_shell_output_returns_only_new_output(tmp_path: Path) -> None:
    gate = tmp_path / "go"
    command = f"echo first; while [ ! -e {gate} ]; do sleep 0.01; done; echo second; exit 4"
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            started = await env.call(ShellTool, {"command": command, "run_in_background": True})
            task_id = started.display["taskId"]
            await wait_until(lambda: any(e.get("status") == "output" for e in env.events))
            first = await env.call(ShellOutputTool, {"task_id": task_id})
            gate.touch()
            await wait_until(lambda: not env.manager.registry.get(task_id).live)
            second = await env.call(ShellOutputTool, {"task_id": task_id})
            third = await env.call(ShellOutputTool, {"task_id": task_id})
    assert first.error is None
    assert first.display == {"status": "running", "exitCode": None, "output": "first\n"}
    assert first.content == "status: running\nfirst\n"
    assert second.display == {"status": "failed", "exitCode": 4, "output": "second\n"}
    assert second.content.startswith("status: failed, exit code 4\n")
    assert third.display["output"] == ""


async def test_incremental_reads_lose_no_line_and_repeat_none(tmp_path: Path) -> None:
    command = "i=1; while [ $i -le 400 ]; do echo line-$i; [ $((i % 40)) -eq 0 ] && sleep 0.03; i=$((i+1)); done"
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            task_id = (await env.call(ShellTool, {"command": command, "run_in_background": True})).display["taskId"]
            collected = []
            reads = 0
            while True:
                result = await env.call(ShellOutputTool, {"task_id": task_id})
                collected.append(result.display["output"])
                reads += 1
                if result.display["status"] != "running":
                    break
                await trio.sleep(0.01)
    assert reads > 2
    assert "".join(collected).splitlines() == [f"line-{i}" for i in range(1, 401)]


async def test_output_past_the_bounds_is_dropped_oldest_first_and_the_read_says_how_many_bytes(tmp_path: Path) -> None:
    size = 3 * 1024 * 1024 - 3  # whole "\U0001F600\n" lines: 4-byte characters, counted in bytes
    command = f"yes \U0001F600 | head -c {size}"
    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            task_id = (await env.call(ShellTool, {"command": command, "run_in_background": True})).display["taskId"]
            await wait_until(lambda: not env.manager.registry.get(task_id).live)
            background = await env.call(ShellOutputTool, {"task_id": task_id})
            foreground = await env.call(ShellTool, {"command": command})
    kept = len(background.display["output"].encode())
    assert 0 < kept <= 1024 * 1024
    assert background.content.startswith(
        f"status: completed, exit code 0\n[{size - kept:,} bytes were dropped before this read: a background shell "
        f"keeps its newest 1,024 KiB of output, and a session's shells 16 MiB together]\n")
    head, _, rest = foreground.content.partition("\n")
    assert head.startswith("[") and head.endswith(" bytes of output dropped: a shell keeps its last 1,024 KiB]")
    dropped = int(head[1:].split(" ")[0].replace(",", ""))
    assert dropped + len(rest.removesuffix("\n[exit code 0]").encode()) == size


async def test_kill_task(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            task_id = (await env.call(ShellTool, {"command": "sleep 30", "run_in_background": True})).display["taskId"]
            result = await env.call(KillTaskTool, {"task_id": task_id})
            assert result.error is None and task_id in result.content
            item = env.manager.registry.get(task_id)
            await wait_until(lambda: not item.live)
            assert item.state == "killed"
            again = await env.call(KillTaskTool, {"task_id": task_id})
            assert again.error == f"no live background task {task_id!r}"
            out = await env.call(ShellOutputTool, {"task_id": task_id})
            assert out.display["status"] == "killed"


@pytest.mark.parametrize("arguments", [
    {"command": "touch marker"},
    {"command": "touch marker", "run_in_background": True},
])
async def test_denial_prevents_execution(arguments: dict[str, Any], tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_env(tmp_path, deny="plan mode: commands are not executed") as env:
            result = await env.call(ShellTool, arguments)
            await trio.sleep(0.2)
            assert env.nothing_started()
    assert result.error == "plan mode: commands are not executed"
    assert env.services.asked == [("touch marker", "execute")]
    assert not (tmp_path / "marker").exists()


async def test_denial_prevents_a_command_monitor(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_env(tmp_path, deny="denied by the user") as env:
            result = await env.call(MonitorTool, {"command": "touch marker"})
            await trio.sleep(0.2)
            assert env.nothing_started()
    assert result.error == "denied by the user"
    assert not (tmp_path / "marker").exists()


async def test_monitor_tool_runs_a_command(tmp_path: Path) -> None:
    with trio.fail_after(5):
        async with open_env(tmp_path) as env:
            result = await env.call(MonitorTool, {"command": "echo watched", "timeout": 5})
            assert result.error is None
            item = env.manager.registry.get(result.display["taskId"])
            await wait_until(lambda: not item.live)
            queued = [i for i in env.manager.queue.items if i.task_id == item.task_id]
    assert len(queued) == 1 and queued[0].text.startswith("watched\n")
    assert "stream ended (the command exited)" in queued[0].text


# ------------------------------------------------------------------ wakeups and cron


async def test_schedule_wakeup_with_delay(autojump_clock: trio.abc.Clock, tmp_path: Path) -> None:
    with trio.fail_after(10_000):
        async with open_env(tmp_path) as env:
            start = trio.current_time()
            result = await env.call(ScheduleWakeupTool, {"delay": 120, "note": "look at CI"})
            assert result.error is None
            task_id = result.display["taskId"]
            assert env.manager.registry.get(task_id).state == "scheduled"
            await trio.sleep(119)
            assert len(env.manager.queue) == 0
            await trio.sleep(1.5)
            queued = env.manager.queue.items
            fired_at = env.manager.registry.get(task_id).ended_at
    assert len(queued) == 1 and queued[0].source == "wakeup" and queued[0].task_id == task_id
    assert "look at CI" in queued[0].text
    assert fired_at == pytest.approx(start + 120)


async def test_schedule_wakeup_at(autojump_clock: trio.abc.Clock, tmp_path: Path) -> None:
    with trio.fail_after(10_000):
        async with open_env(tmp_path) as env:
            start = trio.current_time()
            at = (virtual_now() + timedelta(minutes=5)).astimezone(timezone(timedelta(hours=2))).isoformat()
            result = await env.call(ScheduleWakeupTool, {"at": at, "note": "five minutes"})
            assert result.error is None
            await trio.sleep(3600)
            item = env.manager.registry.get(result.display["taskId"])
    assert item.state == "fired"
    assert item.ended_at == pytest.approx(start + 300)
    assert [i.source for i in env.manager.queue.items] == ["wakeup"]


async def test_cron_create_and_delete(autojump_clock: trio.abc.Clock, tmp_path: Path) -> None:
    with trio.fail_after(100_000):
        async with open_env(tmp_path) as env:
            result = await env.call(CronCreateTool, {"schedule": "*/10 * * * *", "prompt": "status report"})
            assert result.error is None
            task_id = result.display["taskId"]
            item = env.manager.registry.get(task_id)
            assert item.kind == "cron" and item.live
            await trio.sleep(35 * 60)  # fires at :10, :20, :30
            queued = env.manager.queue.items
            assert len(queued) == 1 and queued[0].coalesced == 2 and queued[0].text == "status report"
            deleted = await env.call(CronDeleteTool, {"task_id": task_id})
            assert deleted.error is None and task_id in deleted.content
            assert item.state == "cancelled" and not item.live
            assert env.manager.queue.queued_task_ids() == frozenset()
            await trio.sleep(3600)
            assert len(env.manager.queue) == 0
            again = await env.call(CronDeleteTool, {"task_id": task_id})
            assert again.error == f"no live cron job {task_id!r}"


async def test_cron_create_refuses_a_bad_schedule(autojump_clock: trio.abc.Clock, tmp_path: Path) -> None:
    with trio.fail_after(10_000):
        async with open_env(tmp_path) as env:
            result = await env.call(CronCreateTool, {"schedule": "every day", "prompt": "p"})
            assert result.error is not None and "5 fields" in result.error
            assert env.nothing_started()


async def test_one_shot_cron(autojump_clock: trio.abc.Clock, tmp_path: Path) -> None:
    with trio.fail_after(100_000):
        async with open_env(tmp_path) as env:
            result = await env.call(CronCreateTool, {"schedule": "@hourly", "prompt": "once", "recurring": False})
            await trio.sleep(5 * 3600)
            item = env.manager.registry.get(result.display["taskId"])
            assert item.state == "fired"
            assert [i.text for i in env.manager.queue.items] == ["once"]


async def test_a_delay_beyond_the_calendar_is_refused_not_raised(autojump_clock: trio.abc.Clock,
                                                                 tmp_path: Path) -> None:
    """A model can send any JSON number; an absurd delay must come back as a tool error, not crash the turn."""
    with trio.fail_after(10_000):
        async with open_env(tmp_path) as env:
            result = await env.call(ScheduleWakeupTool, {"delay": 1e12, "note": "far away"})
            assert result.error is not None
            assert env.manager.registry.live() == []


@pytest.mark.parametrize("tool, arguments", [
    (ShellTool, {"command": "echo hi", "run_in_background": True}),
    (MonitorTool, {"command": "echo hi"}),
])
async def test_a_start_failure_leaves_no_live_task(tool: Any, arguments: dict[str, Any], tmp_path: Path) -> None:
    """A command that cannot start (its working directory is gone) is an error, not a ghost live task."""
    with trio.fail_after(5):
        async with open_env(tmp_path / "gone") as env:
            result = await env.call(tool, arguments)
            assert result.error is not None
            assert env.manager.registry.live() == []
            assert env.manager.snapshot().ids == frozenset()
