"""What every actor of one daemon shares: settings, the model, ids, clocks, storage."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from . import wire
from .ids import IdSource
from .model import ModelProvider
from .session.todo import TodoWriteTool
from .session.tools import ToolRegistry
from .settings import Settings


def default_tools() -> ToolRegistry:
    from .background.tools import BACKGROUND_TOOLS
    from .subagents.tools import AgentTool

    return ToolRegistry([TodoWriteTool(), *(tool() for tool in BACKGROUND_TOOLS), AgentTool()])


def local_now() -> datetime:
    return datetime.now().astimezone()


@attrs.frozen(kw_only=True)
class Runtime:
    settings: Settings
    provider: ModelProvider
    ids: IdSource = attrs.field(factory=IdSource)
    state_dir: Path | None = None
    workspace: str = "."
    clock_ms: Callable[[], int] = wire.wall_clock_ms
    make_tools: Callable[[], ToolRegistry] = default_tools
    now: Callable[[], datetime] = local_now  # wall-clock time for cron and wakeups
    # Starts one hook command: (hook, stdin bytes, cwd) -> (exit, stdout, stderr) or a failure text.
    # None runs it as a real subprocess; replays script it instead.
    hook_runner: Callable[..., Any] | None = None
    # Daemon-wide services tools may reach through their session (the subagent registry, say);
    # filled in by open_daemon once the daemon exists.
    services: dict[str, Any] = attrs.field(factory=dict)
