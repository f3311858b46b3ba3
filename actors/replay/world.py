"""The world a replay acts on: one daemon (replaced on restart), its sessions, the labels.

Actions (``actions.py``) change the world only through this object, so what a
replay can do is visible in one place: open and close the daemon, open
sessions with the trace observing their event bus, map the scenario's labels
to real session, prompt, background-task, client and subagent-run ids, and run
the few helper tasks a timeline needs (fake background completions at a virtual
time, a slow bridge's late drain answers) in the world's own nursery. Each
daemon's subagent registry gets a signal URL that nothing listens on and an
in-process signal endpoint (``subagents.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import attrs
import trio

from .. import CountingIds, Daemon, SessionHandle, Settings, open_daemon
from ..model import ChatRequest, ContextWindowExceeded, ModelError, ScriptedModel
from ..subagents import SubagentRun
from .subagents import BASE_URL, SignalEndpoint
from .trace import Trace

# Virtual wall-clock time: the daemon's ``now()`` (cron, wakeups) is this instant plus virtual seconds.
# Half a minute before a minute boundary, so a ``* * * * *`` cron job first fires at t = 30.
EPOCH = datetime(2026, 11, 30, 12, 0, 30, tzinfo=timezone.utc)


class RecordingModel:
    """The scenario's scripted model, recording each request in the trace before playing it.

    ``whose()`` names the work item calling (session label, gen, prompt id), so invariants can
    follow each session's conversation.
    """

    name = "scripted"

    def __init__(self, inner: ScriptedModel, trace: Trace,
                 whose: Callable[[], tuple[str | None, int | None, str | None]] = lambda: (None, None, None)) -> None:
        self.inner = inner
        self.trace = trace
        self.whose = whose

    @contextlib.asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[Any]:
        record = self.trace.model_call(request, *self.whose())
        opened = False
        try:
            async with self.inner.stream(request) as stream:
                opened = True
                yield stream
        except (ModelError, ContextWindowExceeded) as exc:
            if not opened:  # refused before a stream existed: nothing was committed
                record["refused"] = getattr(exc, "code", "context_window_exceeded")
            raise

    def __getattr__(self, name: str) -> Any:  # calls, remaining, context_window, ...
        return getattr(self.inner, name)


def virtual_clock_ms() -> int:
    """The daemon's timestamps in a replay: virtual milliseconds since the run began."""
    return int(round(trio.current_time() * 1000))


def virtual_now() -> datetime:
    """The daemon's wall clock in a replay: :data:`EPOCH` plus the virtual time."""
    return EPOCH + timedelta(seconds=trio.current_time())


@attrs.define
class SessionSlot:
    """A session as the scenario knows it: by label; ``gen`` counts its incarnations (restarts)."""

    label: str
    session_id: str
    handle: SessionHandle
    gen: int = 1
    clients: dict[str, Any] = attrs.field(factory=dict)  # client label -> open Subscription


@attrs.define
class BackgroundSlot:
    """A background task the timeline started (``background``, ``wakeup``, ``cron``), by label."""

    label: str
    session: str
    task_id: str
    manager: Any  # the BackgroundManager of the session incarnation that owns it


class World:
    """Everything a timeline action may touch. Enter it with ``async with`` in the driver task."""

    def __init__(self, settings: Settings, model: ScriptedModel, trace: Trace, state_dir: Path, *,
                 hook_runner: Any = None, tool_results: dict[str, dict[str, Any]] | None = None) -> None:
        self.settings = settings
        self.tool_results = tool_results or {}  # tool calls answered from a record (a recording's scenario)
        self.hook_runner = hook_runner
        self.trace = trace
        self.model = RecordingModel(model, trace, self._caller)
        self.ids = CountingIds()  # shared across restarts, so ids never repeat
        # Side by side, as a daemon's would be: a session never works inside the state directory.
        self.state_dir = state_dir / "state"
        self.workspace = state_dir / "workspace"
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.sessions: dict[str, SessionSlot] = {}
        self.prompts: dict[str, str] = {}  # prompt label -> prompt id
        self.background: dict[str, BackgroundSlot] = {}
        self.subagents: dict[str, SubagentRun] = {}  # run label (= its name) -> the run
        self.signal_urls: dict[str, str] = {}  # run label -> the URL from its MCP config file
        self.daemon_generation = 0
        self.pending = 0  # helper tasks whose effect is still to come (the replay has not settled)
        self._daemon: Daemon | None = None
        self._stack = contextlib.AsyncExitStack()
        self._helpers: trio.Nursery | None = None
        self._outer = contextlib.AsyncExitStack()  # holds the helpers' nursery
        self._naming: tuple[str, int] | None = None  # the label of the session being opened
        self._watched: list[tuple[str, int, Any]] = []  # (label, gen, session) of every session opened
        self._by_id: dict[str, tuple[str, int, Any]] = {}  # session id -> its latest incarnation
        self._guard_last: dict[tuple[str, int], dict[str, Any]] = {}
        self.cursors: dict[str, Any] = {}  # cursor client label -> its CursorClient (cursors.py)

    # ------------------------------------------------------------- the daemon

    @property
    def daemon(self) -> Daemon:
        assert self._daemon is not None, "the daemon is not running"
        return self._daemon

    async def start_daemon(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        # No checkpoints (actors.checkpoints): their schedule points would move the seeded schedules, and the
        # golden traces are the sessions' own.
        settings = attrs.evolve(self.settings, checkpoints_enabled=False)
        self._daemon = await self._stack.enter_async_context(open_daemon(
            settings, model=self.model, ids=self.ids, clock_ms=virtual_clock_ms, now=virtual_now,
            state_dir=self.state_dir, workspace=str(self.workspace), hook_runner=self.hook_runner,
            tools=self._answering_tools(settings),
        ))
        self._daemon.session_observers.append(self._observe_new_session)
        registry = self._daemon.subagents
        registry.base_url = BASE_URL  # no HTTP server in a replay: signal calls are served in process
        registry.signal_client = SignalEndpoint(registry, self.trace)
        self.daemon_generation += 1

    def _answering_tools(self, settings: Settings) -> Any:
        if not self.tool_results:
            return None  # the daemon's own tools
        from .recorded_tools import answering_tools
        return answering_tools(settings, self.tool_results, self.later)

    async def stop_daemon(self) -> None:
        """Close the daemon and every session under it (they publish ``session_closed``)."""
        self._daemon = None
        await self._stack.aclose()

    async def __aenter__(self) -> World:
        self._outer = contextlib.AsyncExitStack()
        await self._outer.__aenter__()
        try:
            self._helpers = await self._outer.enter_async_context(trio.open_nursery())
            await self.start_daemon()
        except BaseException as exc:
            if self._helpers is not None:
                self._helpers.cancel_scope.cancel()
            if not await self._outer.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        outer = self._outer
        async with outer:  # the helpers' nursery closes last, whatever stopping the daemon raised
            assert self._helpers is not None
            try:
                await self.stop_daemon()
            finally:
                self._helpers.cancel_scope.cancel()  # fake completions and late answers still to come: dropped
        return False

    # ------------------------------------------------------------- helper tasks

    def later(self, when: float, effect: Callable[[], Awaitable[None] | None]) -> None:
        """Run ``effect`` at virtual time ``when`` (now, if that has passed); the replay waits for it."""
        assert self._helpers is not None
        self.pending += 1

        async def run() -> None:
            try:
                await trio.sleep_until(when)
                result = effect()
                if result is not None:
                    await result
            finally:
                self.pending -= 1

        self._helpers.start_soon(run)

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any, name: str | None = None) -> None:
        """Run a helper task that does not hold the replay open (a cursor client's reader)."""
        assert self._helpers is not None
        self._helpers.start_soon(fn, *args, name=name)

    # ------------------------------------------------------------- sessions

    def _observe_new_session(self, session: Any) -> None:
        """Record every event of a new session from its first one (runs before it publishes anything),
        and each change of its guard state (noticed at its next event, or after a timeline step)."""
        label, gen = self._naming if self._naming is not None else (session.session_id, 1)
        trace = self.trace
        watched = (label, gen, session)
        self._watched.append(watched)
        self._by_id[session.session_id] = watched

        def observe(event: Any) -> None:
            trace.event(label, gen, event)
            self._note_guard(*watched)

        session.bus.observers.append(observe)

    def _note_guard(self, label: str, gen: int, session: Any) -> None:
        now = {**session.chain.guard.summary(), "queuedPromptPriority": session.chain.queued_prompt_priority}
        last = self._guard_last.get((label, gen))
        if last is None:
            self._guard_last[(label, gen)] = now  # the initial state: recorded only as it changes
            return
        changed = {k: v for k, v in now.items() if last.get(k) != v}
        if changed:
            self._guard_last[(label, gen)] = now
            self.trace.guard(label, gen, changed)

    def _caller(self) -> tuple[str | None, int | None, str | None]:
        """The session (label, gen) and work item whose task is calling: a session's model calls run
        in its work loop task, ``work:<session id>`` (or in a task under it)."""
        task: Any = trio.lowlevel.current_task()
        while task is not None:
            if task.name.startswith("work:") and task.name[5:] in self._by_id:
                label, gen, session = self._by_id[task.name[5:]]
                return label, gen, session.work.prompt_id if session.work.running else None
            nursery = task.parent_nursery
            task = nursery.parent_task if nursery is not None else None
        return None, None, None

    def note_guard_changes(self) -> None:
        """Record guard changes no event has shown yet (the runner calls this after each step)."""
        for watched in self._watched:
            self._note_guard(*watched)

    async def open_session(self, label: str, session_id: str | None = None, *, gen: int = 1,
                           title: str | None = None) -> SessionSlot:
        """Start (or re-start, after a restart) a session; it is observed from its first event."""
        self._naming = (label, gen)
        try:
            handle, _ = await self.daemon.create_session(session_id=session_id, title=title)
        finally:
            self._naming = None
        slot = SessionSlot(label, handle.session_id, handle, gen)
        self.sessions[label] = slot
        return slot

    async def fork_session(self, source: str, label: str) -> SessionSlot:
        """A new session with a copy of ``source``'s conversation (observed from its first event)."""
        self._naming = (label, 1)
        try:
            handle = await self.daemon.fork_session(self.sessions[source].session_id)
        finally:
            self._naming = None
        slot = SessionSlot(label, handle.session_id, handle)
        self.sessions[label] = slot
        return slot

    async def start_subagent(self, label: str, arguments: dict[str, Any]) -> SubagentRun:
        """Start a subagent run named ``label`` (its child session is observed as ``label`` too)."""
        self._naming = (label, 1)  # the child session is created before ``start`` returns
        try:
            run = await self.daemon.subagents.start({"name": label, **arguments}, cwd=str(self.workspace))
        finally:
            self._naming = None
        self.subagents[label] = run
        return run

    def session(self, label: str) -> SessionHandle:
        return self.sessions[label].handle

    def live_sessions(self) -> list[SessionSlot]:
        return [s for s in self.sessions.values() if not s.handle._session.bus.closed]

    def is_quiet(self) -> bool:
        """No live session has work left, no subagent run is underway, no helper task has an effect
        to come and every connected cursor client has read what it was sent (asked only while every
        task is blocked)."""
        return self.pending == 0 and all(run.ended.is_set() for run in self.subagents.values()) and all(
            check(slot.handle._session) for slot in self.live_sessions() for check in QUIET_CHECKS) and all(
            client.caught_up for client in self.cursors.values())


def no_work(session: Any) -> bool:
    """Nothing running, nothing in the prompt FIFO, no automatic item the session would start."""
    return session.is_idle()


def no_scheduled_wakeup(session: Any) -> bool:
    """No @wakeup is still to fire (it would start an automatic turn). Recurring cron jobs never
    end, so they do not hold a replay open: a scenario that wants a fire waits for it with a step."""
    return not session.background.registry.live("wakeup")


# What "the session has settled" means: every check must pass.
QUIET_CHECKS: list[Callable[[Any], bool]] = [no_work, no_scheduled_wakeup]
