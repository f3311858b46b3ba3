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

    def observe(self, slot: SessionSlot) -> None:
        """Record every event of this session incarnation's bus in the trace."""
        label, gen, trace = slot.label, slot.gen, self.trace
        slot.handle._session.bus.observers.append(lambda event: trace.event(label, gen, event))

    async def open_session(self, label: str, session_id: str | None = None, *, gen: int = 1) -> SessionSlot:
        """Start (or re-start, after a restart) a session and observe it before it publishes anything."""
        handle, _ = await self.daemon.create_session(session_id=session_id)
        slot = SessionSlot(label, handle.session_id, handle, gen)
        self.sessions[label] = slot
        self.observe(slot)
        return slot

    def session(self, label: str) -> SessionHandle:
        return self.sessions[label].handle

    def live_sessions(self) -> list[SessionSlot]:
        return [s for s in self.sessions.values() if not s.handle._session.bus.closed]

    def is_quiet(self) -> bool:
        """No live session has work left (asked only while every task is blocked)."""
        return all(check(slot.handle._session) for slot in self.live_sessions() for check in QUIET_CHECKS)


def no_prompt_work(session: Any) -> bool:
    """Nothing running, nothing in the prompt FIFO."""
    return session.current is None and not session.fifo.statistics()["pendingCount"]


# What "the session has settled" means: every check must pass. More kinds of work (an automatic
# queue, background actors) add a check here, e.g. ``QUIET_CHECKS.append(no_automatic_work)``.
QUIET_CHECKS: list[Callable[[Any], bool]] = [no_prompt_work]

