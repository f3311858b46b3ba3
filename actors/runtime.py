"""What every actor of one daemon shares: settings, the model, ids, clocks, storage."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from . import wire
from .ids import IdSource
from .model import ModelProvider
from .process.sandbox import NO_SANDBOX, Sandbox
from .session.todo import TodoWriteTool
from .session.tools import ToolRegistry
from .settings import Settings
from .storage import SessionStore
from .telemetry import Telemetry


class InvalidCwd(ValueError):
    """A working directory that is not an existing directory, or that lies in the state directory."""


def default_tools(settings: Settings | None = None) -> ToolRegistry:
    """The built-in tools; ``web_fetch`` only when ``settings`` enable it (``tools.enableWebFetch``)."""
    from .background.tools import BACKGROUND_TOOLS
    from .subagents.tools import AgentTool
    from .tools import builtin_tools

    return ToolRegistry([TodoWriteTool(), *(tool() for tool in BACKGROUND_TOOLS), AgentTool(),
                         *builtin_tools(settings)])


def local_now() -> datetime:
    return datetime.now().astimezone()


_today: tuple[float, str] = (0.0, "")  # (valid until, the local date): see local_today


def local_today() -> str:
    """Today's local date (ISO), as ``local_now()`` would give it.

    Asked for every model request (the system prompt names the date), and the
    local time costs a look at the time zone each time: the answer is kept for
    a minute at most, and never past the next local midnight.
    """
    global _today
    until, today = _today
    now = time.time()
    if now >= until:
        local = datetime.fromtimestamp(now).astimezone()
        midnight = (local.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)).timestamp()
        today = local.date().isoformat()
        _today = (min(midnight, now + 60.0), today)
    return today


@attrs.frozen
class MachineDescription:
    """What the system prompt says of the machine in place of this one's: a replay gives the recorded
    machine's, so its model requests, and the token estimates that count them, are the recorded ones."""

    os: str
    sandboxed: bool  # whether it says commands run in a sandbox
    path: Callable[[str], str] = str  # a working directory as the prompt names it


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
    # Journals and session records (None: nothing survives the daemon, as without a state_dir).
    store: SessionStore | None = None
    # Where sessions keep their checkpoints (actors.checkpoints.Store; None: no checkpoints).
    checkpoint_store: Any = None
    # A session's checkpoint keeper by its id, in place of one on checkpoint_store (a replay answers the
    # recorded restores); None: the real one.
    make_checkpoints: Callable[[str], Any] | None = None
    # How model-run commands (shells, monitors, command subagents) are started.
    sandbox: Sandbox = NO_SANDBOX
    # What the system prompt says of the machine; None: this machine's own.
    described_machine: MachineDescription | None = None
    # What the unsandboxed hooks' files were when the user vouched for them, by cwd (session.hooks.HookFiles):
    # the daemon's, so a later session in a cwd inherits it rather than vouching for what is on disk now.
    vouched_hook_files: dict[str, Any] = attrs.field(factory=dict)
    # The daemon's metrics (actors.telemetry.Telemetry): its own Prometheus registry, read by GET /metrics.
    telemetry: Telemetry = attrs.field(factory=Telemetry)

    def today(self) -> str:
        """The local date (ISO) by :attr:`now`: kept briefly for the default clock (:func:`local_today`)."""
        return local_today() if self.now is local_now else self.now().date().isoformat()

    def transcript(self, session_id: str) -> Any:
        """A session's transcript: from the store, or one that keeps nothing when there is none."""
        if self.store is not None:
            return self.store.transcript(session_id)
        from .session.transcript import Transcript

        return Transcript(None, session_id)

    def resolve_cwd(self, cwd: str | None) -> str:
        """A session's working directory, the same way at create and at a change of cwd.

        A relative path is taken from the workspace; symlinks are resolved; it
        must be an existing directory, and it must not lie inside the state
        directory (transcripts and the token file are not a place to work in,
        and the sandbox hides them). It need not lie under the workspace: whoever
        holds the daemon's token chooses where a session works.
        A NUL character, which no path can hold, is refused as well.
        """
        if cwd is not None and "\x00" in cwd:
            raise InvalidCwd(wire.nul_in_path("cwd"))
        try:
            path = os.path.realpath(os.path.join(self.workspace, cwd or "."))
        except ValueError as exc:  # a name the file system cannot encode (a lone surrogate, say)
            raise InvalidCwd(f"cwd {wire.excerpt(cwd)} is not a usable path: {exc}") from None
        if not os.path.isdir(path):
            raise InvalidCwd(f"{path} is not a directory")
        if self.state_dir is not None:
            state = os.path.realpath(self.state_dir)
            if path == state or path.startswith(state.rstrip("/") + "/"):
                raise InvalidCwd(f"{path} lies inside the state directory {state}")
        return path
