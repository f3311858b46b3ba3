"""The world a replay acts on: one daemon (replaced on restart), its sessions, the labels.

Actions (``actions.py``) change the world only through this object, so what a
replay can do is visible in one place: open and close the daemon, open
sessions with the trace observing their event bus, and map the scenario's
labels to real session and prompt ids.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from .. import CountingIds, Daemon, SessionHandle, Settings, open_daemon
from ..model import ChatRequest, ScriptedModel
from .trace import Trace


class RecordingModel:
    """The scenario's scripted model, recording each request in the trace before playing it."""

    name = "scripted"

    def __init__(self, inner: ScriptedModel, trace: Trace) -> None:
        self.inner = inner
        self.trace = trace

    def stream(self, request: ChatRequest) -> Any:
        self.trace.model_call(request)
        return self.inner.stream(request)

    def __getattr__(self, name: str) -> Any:  # calls, remaining, context_window, ...
        return getattr(self.inner, name)


def virtual_clock_ms() -> int:
    """The daemon's timestamps in a replay: virtual milliseconds since the run began."""
    return int(round(trio.current_time() * 1000))


@attrs.define
class SessionSlot:
    """A session as the scenario knows it: by label; ``gen`` counts its incarnations (restarts)."""

    label: str
    session_id: str
    handle: SessionHandle
    gen: int = 1


class World:
    """Everything a timeline action may touch. Enter it with ``async with`` in the driver task."""

    def __init__(self, settings: Settings, model: ScriptedModel, trace: Trace, state_dir: Path) -> None:
        self.settings = settings
        self.trace = trace
        self.model = RecordingModel(model, trace)
        self.ids = CountingIds()  # shared across restarts, so ids never repeat
        self.state_dir = state_dir
        self.workspace = state_dir / "workspace"
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.sessions: dict[str, SessionSlot] = {}
        self.prompts: dict[str, str] = {}  # prompt label -> prompt id
        self.daemon_generation = 0
        self._daemon: Daemon | None = None
        self._stack = contextlib.AsyncExitStack()
        self._naming: tuple[str, int] | None = None  # the label of the session being opened

    # ------------------------------------------------------------- the daemon

    @property
    def daemon(self) -> Daemon:
        assert self._daemon is not None, "the daemon is not running"
        return self._daemon

    async def start_daemon(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self._daemon = await self._stack.enter_async_context(open_daemon(
            self.settings, model=self.model, ids=self.ids, clock_ms=virtual_clock_ms,
            state_dir=self.state_dir, workspace=str(self.workspace),
        ))
        self._daemon.session_observers.append(self._observe_new_session)
        self.daemon_generation += 1

    async def stop_daemon(self) -> None:
        """Close the daemon and every session under it (they publish ``session_closed``)."""
        self._daemon = None
        await self._stack.aclose()

    async def __aenter__(self) -> World:
        await self.start_daemon()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_daemon()

    # ------------------------------------------------------------- sessions

    def _observe_new_session(self, session: Any) -> None:
        """Record every event of a new session from its first one (runs before it publishes anything)."""
        label, gen = self._naming if self._naming is not None else (session.session_id, 1)
        trace = self.trace
        session.bus.observers.append(lambda event: trace.event(label, gen, event))

    async def open_session(self, label: str, session_id: str | None = None, *, gen: int = 1) -> SessionSlot:
        """Start (or re-start, after a restart) a session; it is observed from its first event."""
        self._naming = (label, gen)
        try:
            handle, _ = await self.daemon.create_session(session_id=session_id)
        finally:
            self._naming = None
        slot = SessionSlot(label, handle.session_id, handle, gen)
        self.sessions[label] = slot
        return slot

    def session(self, label: str) -> SessionHandle:
        return self.sessions[label].handle

    def live_sessions(self) -> list[SessionSlot]:
        return [s for s in self.sessions.values() if not s.handle._session.bus.closed]

    def is_quiet(self) -> bool:
        """No live session has work left (asked only while every task is blocked)."""
        return all(check(slot.handle._session) for slot in self.live_sessions() for check in QUIET_CHECKS)


def no_work(session: Any) -> bool:
    """Nothing running, nothing in the prompt FIFO, no automatic item the session would start."""
    return session.is_idle()


# What "the session has settled" means: every check must pass.
QUIET_CHECKS: list[Callable[[Any], bool]] = [no_work]

