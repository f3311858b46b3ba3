"""The daemon: the root of the actor tree, its settings, limits and session registry."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from . import wire
from .ids import IdSource
from .model import ModelProvider, ScriptedModel
from .process.sandbox import log_sandbox, resolve_sandbox
from .runtime import InvalidCwd, Runtime, default_tools, local_now
from .session.handle import SessionHandle
from .session.session import Session
from .session.tools import ToolRegistry
from .session.transcript import Transcript, TranscriptError, is_safe_session_id
from .settings import Settings
from .subagents.registry import SubagentRegistry

log = logging.getLogger("trellis.daemon")


class UnknownSession(LookupError):
    """No live session has that id (and, where it matters, none is on disk)."""


class TooManySessions(Exception):
    """The daemon already hosts its maximum number of sessions."""


class InvalidSessionId(ValueError):
    """A session id outside the safe alphabet (it becomes a file name)."""


class SessionStarting(Exception):
    """A session with that id is being started right now."""


class Daemon:
    """Owns sessions. Create it with :func:`open_daemon`."""

    def __init__(self, runtime: Runtime, nursery: trio.Nursery) -> None:
        self.runtime = runtime
        self._nursery = nursery
        self._sessions: dict[str, SessionHandle] = {}
        self._starting: set[str] = set()
        self._closed_events: dict[str, trio.Event] = {}
        self.closed = trio.Event()
        # Called with each new session before it publishes anything (replays record traces this way).
        self.session_observers: list[Any] = []
        # Subagent runs by name (set by open_daemon): see actors.subagents.
        self.subagents: Any = None

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    def sessions(self) -> list[SessionHandle]:
        return list(self._sessions.values())

    def get(self, session_id: str) -> SessionHandle:
        """The live session with this id, or :class:`UnknownSession`."""
        try:
            return self._sessions[session_id]
        except KeyError:
            raise UnknownSession(session_id) from None

    async def create_session(self, cwd: str | None = None, session_id: str | None = None) -> tuple[SessionHandle, bool]:
        """Start a session, or attach to the live one with ``session_id``; ``(handle, attached)``.

        An id that is not live but has a transcript on disk starts the session with that
        conversation restored (as ``load`` would), so one file never mixes two conversations.
        """
        if session_id is not None:
            if not is_safe_session_id(session_id):
                raise InvalidSessionId(session_id)
            if session_id in self._sessions:
                return self._sessions[session_id], True
            if Transcript(self.runtime.state_dir, session_id).exists:
                return await self.load_session(session_id, cwd), False
        return await self._start(session_id or self.runtime.ids.new("session"), cwd), False

    def resolve_cwd(self, cwd: str | None) -> str:
        """An absolute working directory (see :meth:`Runtime.resolve_cwd`)."""
        return self.runtime.resolve_cwd(cwd)

    async def load_session(self, session_id: str, cwd: str | None = None) -> SessionHandle:
        """Restore a session's conversation from disk, starting the session if it is not live."""
        if not is_safe_session_id(session_id):
            raise InvalidSessionId(session_id)
        handle = self._sessions.get(session_id)
        started = handle is None
        if handle is None:
            if not Transcript(self.runtime.state_dir, session_id).exists:
                raise UnknownSession(session_id)
            handle = await self._start(session_id, cwd)
        try:
            await handle.load()
        except TranscriptError:
            if started:  # don't leave an empty session on a file it could not read
                await self.close_session(session_id)
            raise
        return handle

    async def fork_session(self, source_id: str, session_id: str | None = None) -> SessionHandle:
        """A new session with a copy of ``source_id``'s conversation; neither keeps guard trust."""
        source = self.get(source_id)
        if session_id is not None:
            if not is_safe_session_id(session_id):
                raise InvalidSessionId(session_id)
            if session_id in self._sessions or Transcript(self.runtime.state_dir, session_id).exists:
                raise InvalidSessionId(f"{session_id} is taken")
        history = await source.snapshot()
        return await self._start(session_id or self.runtime.ids.new("session"), source.cwd, history)

    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        """A session's transcript from disk, live or not."""
        if not is_safe_session_id(session_id):
            raise InvalidSessionId(session_id)
        transcript = Transcript(self.runtime.state_dir, session_id)
        if not transcript.exists and session_id not in self._sessions:
            raise UnknownSession(session_id)
        return transcript.records()

    async def _start(self, session_id: str, cwd: str | None, history: list[Any] | None = None) -> SessionHandle:
        if len(self._sessions) + len(self._starting) >= self.settings.limits.max_sessions:
            raise TooManySessions(f"at most {self.settings.limits.max_sessions} sessions")
        if session_id in self._starting:
            raise SessionStarting(f"session {session_id} is already starting")
        path = self.resolve_cwd(cwd)
        self._starting.add(session_id)
        try:
            session = Session(self.runtime, session_id, path, history=history)
            for observe in self.session_observers:
                observe(session)
            closed = trio.Event()
            await self._nursery.start(self._supervise, session, closed)
            handle = SessionHandle(session)
            self._sessions[session_id] = handle
            self._closed_events[session_id] = closed
            return handle
        finally:
            self._starting.discard(session_id)

    async def _supervise(self, session: Session, closed: trio.Event, *, task_status: trio.TaskStatus[None]) -> None:
        """Run one session; a crash is contained to it and reported as its closing event."""
        try:
            await session.run(task_status=task_status)
        except Exception:
            log.exception("session %s crashed", session.session_id)
        finally:
            self._sessions.pop(session.session_id, None)
            self._closed_events.pop(session.session_id, None)
            closed.set()

    async def close_session(self, session_id: str) -> None:
        """Close a session and every actor under it; returns once they have all stopped."""
        handle = self.get(session_id)
        closed = self._closed_events[session_id]
        handle._ref.close()
        await closed.wait()

    def shutdown(self) -> None:
        self._nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_daemon(
    settings: Settings | None = None,
    *,
    model: ModelProvider | None = None,
    state_dir: str | Path | None = None,
    workspace: str | None = None,
    ids: IdSource | None = None,
    clock_ms: Any = None,
    tools: Any = None,
    now: Any = None,
    hook_runner: Any = None,
) -> AsyncIterator[Daemon]:
    """Run a daemon for the body of the ``async with``; its sessions end with it.

    Args:
        settings: daemon settings (defaults when omitted).
        model: the primary model; the scripted demo model when omitted.
        state_dir: where transcripts live; nothing is written when omitted.
        workspace: the default working directory of new sessions.
        ids, clock_ms: sources of ids and timestamps (deterministic replays pass their own).
        tools: a callable returning a fresh :class:`ToolRegistry` per session.
        now: wall-clock time for cron and wakeups (an aware ``datetime``); replays tie it to virtual time.
        hook_runner: starts one hook command (replays script hooks instead of running processes).

    Model-run commands run in the sandbox ``settings.sandbox`` asks for (see
    :mod:`actors.process.sandbox`); a required one that cannot run here raises
    :class:`SandboxUnavailable` before anything starts.
    """
    settings = settings or Settings()
    hidden = [p for p in (state_dir, settings.path) if p is not None]
    sandbox = resolve_sandbox(settings.sandbox, hidden)  # SandboxUnavailable when "bwrap" is required
    log_sandbox(sandbox)
    if state_dir is not None:
        Path(state_dir).mkdir(parents=True, exist_ok=True)  # exists before any command, so it can be hidden
    runtime = Runtime(
        settings=settings,
        provider=model or ScriptedModel(),
        ids=ids or IdSource(),
        state_dir=Path(state_dir) if state_dir is not None else None,
        workspace=os.path.abspath(workspace or os.getcwd()),
        clock_ms=clock_ms or wire.wall_clock_ms,
        make_tools=tools or default_tools,
        now=now or local_now,
        hook_runner=hook_runner,
        sandbox=sandbox,
    )
    subagents: SubagentRegistry | None = None
    try:
        async with trio.open_nursery() as nursery:
            daemon = Daemon(runtime, nursery)
            daemon.subagents = subagents = SubagentRegistry(daemon, nursery)
            try:
                yield daemon
            finally:
                daemon.closed.set()
                nursery.cancel_scope.cancel()
    finally:
        if subagents is not None:
            subagents.close()  # after the runs ended: tokens revoked, a temporary config directory removed
        aclose = getattr(runtime.provider, "aclose", None)
        if aclose is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await aclose()


__all__ = ["Daemon", "InvalidCwd", "InvalidSessionId", "SessionStarting", "TooManySessions", "ToolRegistry",
           "UnknownSession", "open_daemon"]
