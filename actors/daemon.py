"""The daemon: the root of the actor tree, its settings, limits and session registry."""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from . import checked, wire
from ._actor import ActorGone, Reply, reply_pair
from .ids import IdSource
from .model import ModelProvider, provider_from_settings
from .permission_rules import RuleLists
from .process.sandbox import clear_homes, log_sandbox, resolve_sandbox
from .runtime import InvalidCwd, MachineDescription, Runtime, default_tools, local_now
from .session.handle import SessionHandle
from .session.session import Session
from .session.system_prompt import PromptOverrides
from .session.tools import ToolRegistry
from .session.transcript import is_safe_session_id
from .settings import Settings
from .storage import LocalStore, StorageError, journals_of, records_of, replay
from .subagents.registry import SubagentRegistry

log = logging.getLogger("trellis.daemon")


class UnknownSession(LookupError):
    """No live session has that id (and, where it matters, none is on disk)."""


class TooManySessions(Exception):
    """The daemon already hosts its maximum number of sessions."""


class InvalidSessionId(ValueError):
    """A session id outside the safe alphabet (it becomes a file name)."""


class SessionStarting(Exception):
    """A session with that id is being started (or deleted) right now."""


class DeletionUnavailable(Exception):
    """This daemon cannot delete stored sessions: it has no state directory, or (cluster mode) its store is
    shared with other nodes."""


CHECKPOINT_SWEEP_GRACE = 3600.0  # seconds an unreached checkpoint object is spared (a walk may be using it)


class NotStartedHere(Exception):
    """A cluster node does not start this session now (another node owns it, or this one is draining);
    ``code`` names why (``session_elsewhere``, ``node_draining``). Retrying, maybe on another node, may work."""

    code = "not_started_here"


LISTING_STEP = 500  # live sessions summed up for GET /session between two checkpoints


class _Starting:
    """The task status a session's task reports its start through (:meth:`Daemon._start_in_own_context`):
    a one-shot reply (it lives as long as the session, so no Event), answered once started, closed if it
    ends before."""

    __slots__ = ("_reply",)

    def __init__(self, reply: Reply[None]) -> None:
        self._reply = reply

    def started(self, value: Any = None) -> None:
        self._reply.send(None)

    def ended(self) -> None:
        self._reply.close()  # a no-op once started


class Daemon:
    """Owns sessions. Create it with :func:`open_daemon`."""

    def __init__(self, runtime: Runtime, nursery: trio.Nursery) -> None:
        self.runtime = runtime
        self._nursery = nursery
        # The context sessions' tasks start in (see _start_in_own_context): open_daemon's, not a request's.
        self._context = contextvars.copy_context()
        self._sessions: dict[str, SessionHandle] = {}
        self._starting: set[str] = set()
        self._deleting: set[str] = set()
        self._sweeping = trio.Lock()
        self._sweep_due = False
        self._closed_events: dict[str, trio.Event] = {}
        self.closed = trio.Event()
        self.sessions_closed = 0  # since the daemon opened (the serve command's garbage-collection policy)
        # Called with each new session before it publishes anything (replays record traces this way).
        self.session_observers: list[Any] = []
        # Makes each new session's handle (a recorder's writes the client's calls: actors.replay.recorder).
        self.make_handle: Any = SessionHandle
        # Subagent runs by name (set by open_daemon): see actors.subagents.
        self.subagents: Any = None
        # Cluster mode (actors.cluster.node.ClusterNode): holds a session's lease before it starts here,
        # and gives it up when it ends. None: a single daemon.
        self.placement: Any = None
        # Shutdown (see shutdown_gracefully): set by open_daemon, the scope its caller's body runs in.
        self._host_scope: trio.CancelScope | None = None
        self._shutting_down = False
        self._forced = False
        self._wind_down_started = False
        self._stopped = trio.Event()
        # GET /metrics reads the live sessions' states, queues and subscribers when it is scraped.
        runtime.telemetry.watch(sessions=lambda: list(self._sessions.values()))

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

    async def create_session(self, cwd: str | None = None, session_id: str | None = None, *,
                             system_prompt: str | None = None, append_system_prompt: str | None = None,
                             mcp_servers: tuple[Any, ...] = (), title: str | None = None,
                             permissions: RuleLists | None = None) -> tuple[SessionHandle, bool]:
        """Start a session, or attach to the live one with ``session_id``; ``(handle, attached)``.

        An id that is not live but has a transcript on disk starts the session with that
        conversation restored (as ``load`` would), so one file never mixes two conversations.
        ``system_prompt`` replaces the base of the session's system prompt and
        ``append_system_prompt`` adds to it (:mod:`actors.session.system_prompt`); they
        are kept in its session record, a restored session keeps the ones it had unless
        given new ones, and attaching to a live session leaves its prompt as it is.
        ``mcp_servers`` (:class:`actors.mcp_client.ServerConfig`) are a client's, started
        beside the settings' ``mcpServers`` by a session this call starts. ``title`` (stripped; ``None``:
        leave it) names the session in listings: a new one starts with it, a restored or live one takes it.
        ``permissions``: the session's own permission rules, beside the settings'; a restored session keeps
        the ones its record has unless given new ones, and a live one keeps its own.
        """
        title = (title or "").strip() or None
        prompt = PromptOverrides(system_prompt, append_system_prompt)
        if session_id is not None:
            if not is_safe_session_id(session_id):
                raise InvalidSessionId(session_id)
            if session_id in self._sessions:
                handle = self._sessions[session_id]
                if title is not None:
                    await handle.set_title(title)
                return handle, True
            if self.restorable(session_id):
                return await self._start(session_id, cwd, restore=True, prompt=prompt,
                                         mcp_servers=mcp_servers, title=title, permissions=permissions), False
        return await self._start(session_id or self.runtime.ids.new("session"), cwd, prompt=prompt,
                                 mcp_servers=mcp_servers, title=title, permissions=permissions), False

    def resolve_cwd(self, cwd: str | None) -> str:
        """An absolute working directory (see :meth:`Runtime.resolve_cwd`)."""
        return self.runtime.resolve_cwd(cwd)

    def restorable(self, session_id: str) -> bool:
        """Whether the state directory holds a session ``session_id`` to restore (transcript, journal or record)."""
        store = self.runtime.store
        return store is not None and store.exists(session_id)

    async def load_session(self, session_id: str, cwd: str | None = None,
                           mcp_servers: tuple[Any, ...] = ()) -> SessionHandle:
        """Restore a session from disk, starting it if it is not live.

        A session that is not live comes back with its conversation, its queued
        prompts in their order (they run), its waiting mid-turn input, its turn
        records, and its cwd, approval mode and model name; a prompt it was
        running when the daemon died ends ``daemon_restarted`` and is not re-run.
        The Todo Stop Guard starts cleared (a restart clears trust). A live
        session reloads its conversation from the transcript. ``mcp_servers`` are a client's
        MCP servers: a live session starts those whose names it has no server of yet.
        """
        if not is_safe_session_id(session_id):
            raise InvalidSessionId(session_id)
        handle = self._sessions.get(session_id)
        if handle is None:
            if not self.restorable(session_id):
                raise UnknownSession(session_id)
            return await self._start(session_id, cwd, restore=True, mcp_servers=mcp_servers)
        await handle.add_mcp_servers(mcp_servers)
        await handle.load()
        return handle

    async def list_sessions(self) -> list[dict[str, Any]]:
        """Every session, newest first: the live ones and those restorable from the store (``GET /session``).

        The stored ones are read in a worker thread: each is a record and a journal to read (two files; in
        cluster mode a few round trips for each :data:`STORED_READ_BATCH` of them), and a state directory of
        thousands would otherwise hold the event loop for all of them. The live ones are summed up :data:`LISTING_STEP` to a loop step.
        """
        out: dict[str, dict[str, Any]] = {}
        for i, h in enumerate(self.sessions()):
            if i and i % LISTING_STEP == 0:
                await trio.lowlevel.checkpoint()  # thousands of summaries are not one step of the loop
            out[h.session_id] = {"sessionId": h.session_id, "live": True, "restorable": False, **h.summary()}
        store = self.runtime.store
        if store is not None:
            stored = await trio.to_thread.run_sync(partial(stored_summaries, store, frozenset(out)))
            out = stored | out  # a session restored meanwhile is listed live
        return sorted(out.values(), key=lambda s: (s.get("updatedAt") or 0), reverse=True)

    async def stored_cwds(self) -> set[str]:
        """The working directories of the stored session records, read in a worker thread."""
        store = self.runtime.store
        if store is None:
            return set()
        return await trio.to_thread.run_sync(partial(stored_cwds, store))

    async def fork_session(self, source_id: str, session_id: str | None = None) -> SessionHandle:
        """A new session with a copy of ``source_id``'s conversation; neither keeps guard trust."""
        source = self.get(source_id)
        if session_id is not None:
            if not is_safe_session_id(session_id):
                raise InvalidSessionId(session_id)
            if session_id in self._sessions or self.restorable(session_id):
                raise InvalidSessionId(f"{session_id} is taken")
        history = await source.snapshot()
        record = await source.record()
        return await self._start(session_id or self.runtime.ids.new("session"), record["cwd"], history,
                                 prompt=PromptOverrides.from_record(record), title=record.get("title"),
                                 permissions=_recorded_rules(record, source_id))

    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        """A session's transcript from disk, live or not."""
        if not is_safe_session_id(session_id):
            raise InvalidSessionId(session_id)
        transcript = self.runtime.transcript(session_id)
        if not transcript.exists and session_id not in self._sessions:
            raise UnknownSession(session_id)
        return transcript.records()

    async def _start(self, session_id: str, cwd: str | None, history: list[Any] | None = None, *,
                     restore: bool = False, prompt: PromptOverrides | None = None,
                     mcp_servers: tuple[Any, ...] = (), title: str | None = None,
                     permissions: RuleLists | None = None) -> SessionHandle:
        if len(self._sessions) + len(self._starting) >= self.settings.limits.max_sessions:
            log.warning("session refused reason=too_many_sessions limit=%d", self.settings.limits.max_sessions,
                        extra={"reason": "too_many_sessions", "limit": self.settings.limits.max_sessions})
            raise TooManySessions(f"at most {self.settings.limits.max_sessions} sessions")
        if session_id in self._starting:
            raise SessionStarting(f"session {session_id} is already starting")
        if session_id in self._deleting:
            raise SessionStarting(f"session {session_id} is being deleted")
        record = (self.runtime.store.record_read(session_id) if restore and self.runtime.store is not None
                  else None) or {}
        if cwd is None and record.get("cwd"):
            try:
                path = self.resolve_cwd(record["cwd"])  # where it worked before the restart
            except InvalidCwd as exc:
                log.warning("session %s: its cwd is gone (%s); it restarts in the workspace", session_id, exc)
                path = self.resolve_cwd(None)
        else:
            path = self.resolve_cwd(cwd)
        self._starting.add(session_id)
        placed = False
        try:
            if self.placement is not None:
                await self.placement.before_start(session_id, restore)  # SessionElsewhere, NodeDraining
                placed = True
            session = Session(self.runtime, session_id, path, history=history,
                              created_at=record.get("createdAt"), approval_mode=record.get("approvalMode"),
                              model_name=record.get("model"),
                              prompt_overrides=PromptOverrides.from_record(record).given(prompt),
                              mcp_servers=mcp_servers, title=title or record.get("title"),
                              permissions=permissions if permissions is not None
                              else _recorded_rules(record, session_id))
            for observe in self.session_observers:
                observe(session)
            if restore:
                session.restore()
            await session.records.write()  # StorageError when the state directory refuses it
            closed = trio.Event()
            await self._start_in_own_context(session, closed)
            handle = self.make_handle(session)
            self._sessions[session_id] = handle
            self._closed_events[session_id] = closed
            return handle
        except StorageError as exc:
            log.warning("session refused session=%s reason=storage_unavailable: %s", session_id, exc,
                        extra={"session": session_id, "reason": "storage_unavailable"})
            if placed:
                self.placement.start_failed(session_id)
            raise
        except BaseException:
            if placed and session_id not in self._sessions:
                self.placement.start_failed(session_id)
            raise
        finally:
            self._starting.discard(session_id)

    async def _start_in_own_context(self, session: Session, closed: trio.Event) -> None:
        """Start the session's task in the daemon's nursery and wait until it has started, as
        ``nursery.start`` would, but in the daemon's context rather than the caller's.

        A task copies the context of the task that spawns it, and every task a session starts copies its
        own: spawned from an HTTP request, the session would keep that request's objects (its context
        variables) as long as it lives, some 13 KiB a session. The wait is shielded: once spawned, the
        session either starts (and the caller registers it, then sees its cancellation) or ends first.
        """
        reply, pending = reply_pair()
        self._context.run(self._nursery.start_soon,
                          partial(self._supervise, session, closed, task_status=_Starting(reply)))
        with trio.CancelScope(shield=True):
            try:
                await pending.wait()
            except ActorGone:
                raise RuntimeError(f"session {session.session_id} ended before it started") from None

    async def _supervise(self, session: Session, closed: trio.Event, *, task_status: _Starting) -> None:
        """Run one session; a crash is contained to it and reported as its closing event."""
        try:
            await session.run(task_status=task_status)
        except Exception:
            log.exception("session %s crashed", session.session_id)
        finally:
            task_status.ended()  # the starter waits no longer, whether or not it started
            self._sessions.pop(session.session_id, None)
            self._closed_events.pop(session.session_id, None)
            self.sessions_closed += 1
            if self.placement is not None:
                self.placement.session_ended(session)
            closed.set()

    async def close_session(self, session_id: str) -> None:
        """Close a session and every actor under it; returns once they have all stopped."""
        handle = self.get(session_id)
        closed = self._closed_events[session_id]
        handle._ref.close()
        await closed.wait()

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session for good: closed first if it is live (as :meth:`close_session` closes it, so its
        running turn and queued prompts end), then its transcript, journal, record, replay and checkpoint
        log; ``False`` when there is no such session. Checkpoint objects no other session's log reaches go
        too, once unused for :data:`CHECKPOINT_SWEEP_GRACE` (:meth:`sweep_checkpoints`).

        While it is deleted, starting or restoring it is refused (:class:`SessionStarting`). Raises
        :class:`DeletionUnavailable` where this daemon cannot delete (no state directory, cluster mode).
        """
        if not is_safe_session_id(session_id):
            raise InvalidSessionId(session_id)
        store = self.runtime.store
        delete = getattr(store, "delete", None)
        if delete is None or self.placement is not None:
            raise DeletionUnavailable("this daemon keeps no sessions to delete" if store is None else
                                      "sessions cannot be deleted in cluster mode (their rows are shared "
                                      "by every node)")
        if session_id in self._starting or session_id in self._deleting:
            raise SessionStarting(f"session {session_id} is being started or deleted")
        self._deleting.add(session_id)
        try:
            if session_id in self._sessions:
                await self.close_session(session_id)
            elif not store.exists(session_id):
                return False
            store.close(session_id)  # on the loop: the open files are the loop's
            checkpoints = self.runtime.checkpoint_store

            def remove() -> None:
                delete(session_id)
                if checkpoints is not None:
                    checkpoints.delete_log(session_id)

            await trio.to_thread.run_sync(remove)
        finally:
            self._deleting.discard(session_id)
        log.info("session %s deleted", session_id, extra={"session_id": session_id})
        if checkpoints is not None and not self._sweep_due:
            self._nursery.start_soon(self._sweep_after_deletions, name="daemon:checkpoint-sweep")
            self._sweep_due = True  # one sweep after a batch of deletions, not one each
        return True

    def _may_be_stored(self, session_id: str) -> bool:
        """Whether ``session_id`` can name a stored session here: a state directory, not cluster mode (another
        node may hold its row: it is only renamed where it is live), a safe id."""
        return self.runtime.store is not None and self.placement is None and is_safe_session_id(session_id)

    def _live_or_moving(self, session_id: str) -> bool:
        return session_id in self._sessions or session_id in self._starting or session_id in self._deleting

    async def stored_record(self, session_id: str) -> dict[str, Any] | None:
        """The record of a session that is on disk and not live here (read in a worker thread); ``None`` when
        there is none such: no state directory, cluster mode, an unsafe id, a live or starting session, or
        nothing stored."""
        if not self._may_be_stored(session_id) or self._live_or_moving(session_id):
            return None
        store = self.runtime.store

        def read() -> dict[str, Any] | None:
            return (store.record_read(session_id) or {}) if store.exists(session_id) else None

        return await trio.to_thread.run_sync(read)

    async def retitle_stored(self, session_id: str, title: str | None) -> str | None:
        """Give a stored session (on disk, not live) a title (stripped; ``None`` or blank: none), kept in its
        record — its lists show it, and a restore (after a restart too) starts with it. The record's
        ``updatedAt`` becomes now, as a live session's title change writes it. Returns the title.

        Raises :class:`UnknownSession` where :meth:`stored_record` would find none, and
        :class:`SessionStarting` when the session is live, starting or being deleted. While the record is
        rewritten, starting or deleting the session is refused as :class:`SessionStarting` (a restore then
        reads the new title, never the old one over it).
        """
        title = (title or "").strip() or None
        if not self._may_be_stored(session_id):
            raise UnknownSession(session_id)
        if self._live_or_moving(session_id):
            raise SessionStarting(f"session {session_id} is being started or deleted")
        store = self.runtime.store
        now = self.runtime.clock_ms()
        self._starting.add(session_id)  # no restore or deletion reads or removes the record under this write

        def rewrite() -> bool:
            if not store.exists(session_id):
                return False
            record = store.record_read(session_id) or {"sessionId": session_id}
            store.record_write(session_id, {**record, "title": title, "updatedAt": now})
            return True

        try:
            with trio.CancelScope(shield=True):  # once begun, the write lands
                written = await trio.to_thread.run_sync(rewrite)
        finally:
            self._starting.discard(session_id)
        if not written:
            raise UnknownSession(session_id)
        log.info("stored session %s retitled", session_id, extra={"session_id": session_id})
        return title

    async def _sweep_after_deletions(self) -> None:
        self._sweep_due = False
        try:
            deleted, freed = await self.sweep_checkpoints()
        except StorageError as exc:
            log.warning("checkpoint objects not swept: %s", exc)
            return
        except Exception:  # a sweep's fault must not end the daemon's sessions with it
            log.exception("checkpoint objects not swept")
            return
        if deleted:
            log.info("checkpoint sweep deleted %d objects (%d bytes)", deleted, freed)

    async def sweep_checkpoints(self, grace_seconds: float = CHECKPOINT_SWEEP_GRACE) -> tuple[int, int]:
        """Delete the checkpoint objects no session's log reaches any more, in a worker thread, one sweep at
        a time; ``(objects, bytes)`` deleted."""
        checkpoints = self.runtime.checkpoint_store
        if checkpoints is None:
            return 0, 0
        async with self._sweeping:
            return await trio.to_thread.run_sync(partial(checkpoints.sweep, grace_seconds=grace_seconds),
                                                 abandon_on_cancel=True)  # a shutdown does not wait for it

    # ------------------------------------------------------------- shutdown

    @property
    def shutting_down(self) -> bool:
        """True once a shutdown began (graceful or forced): work is no longer admitted.

        The HTTP surface then answers every request that would start work 503
        ``shutting_down``; reads keep answering until the server closes.
        """
        return self._shutting_down

    @property
    def stopped(self) -> trio.Event:
        """Set once a graceful shutdown has closed every session (:meth:`shutdown_gracefully`)."""
        return self._stopped

    async def shutdown_gracefully(self, timeout: float | None = None) -> bool:
        """Stop in order; ``True`` once everything ended within ``timeout`` seconds.

        At once, before it first waits: admission stops (:attr:`shutting_down`),
        no session starts new work (queued prompts stay queued, and a restart
        finds them), every subagent run is told to stop, and every session is
        closed the way ``DELETE /session/:id`` closes one: its running turn ends
        with ``turn_complete`` ``cancelled`` (published and journaled), its
        background actors stop and kill their process groups, and its
        subscribers get ``session_closed`` (reason ``daemon_shutdown``), then the
        end of their stream. Transcripts are written as things happen, so nothing
        is left to flush. Then it waits for all that, up to ``timeout`` (default
        ``limits.shutdownSeconds``). The shutdown goes on in the daemon's own
        nursery when the caller stops waiting (``False``); what is left then is
        forced by :meth:`shutdown` or by leaving ``open_daemon``, whose exit runs
        this method too (shielded, bounded), also when its body is cancelled.
        Calling it again, or concurrently, waits for the same shutdown.
        """
        self._shutting_down = True
        if timeout is None:
            timeout = self.settings.limits.shutdown_seconds
        if not self._wind_down_started:
            self._wind_down_started = True
            runs = self._stop_runs()
            closing = [self._close_for_shutdown(handle) for handle in self.sessions()]
            try:
                self._nursery.start_soon(self._wind_down, runs, closing, name="daemon:shutdown")
            except RuntimeError:  # the daemon's nursery is gone already: nothing left to stop in order
                return self._stopped.is_set()
        with trio.move_on_after(timeout):
            await self._stopped.wait()
        return self._stopped.is_set()

    def _stop_runs(self) -> list[Any]:
        """Tell every live subagent run to stop (before any session closes, so each ends ``stopped``)."""
        from ._actor import ActorGone, MailboxFull
        from .subagents.run import Stop

        runs = []
        registry = self.subagents
        for status in registry.list() if registry is not None else ():
            run = registry.get(status["name"])
            if not run.ended.is_set() and run.ref is not None:
                runs.append(run)
                try:
                    run.ref.ask_nowait(Stop)
                except (ActorGone, MailboxFull):
                    pass  # it is ending already, or busy: the nursery's end stops it
        return runs

    def _close_for_shutdown(self, handle: SessionHandle) -> trio.Event | None:
        """Begin closing one session for the shutdown (synchronously); the event it sets once closed."""
        return self.close_for_handover(handle.session_id, "daemon_shutdown")

    def close_for_handover(self, session_id: str, reason: str) -> trio.Event | None:
        """Begin closing one session that goes on elsewhere (a shutdown, a lost lease): no new work starts,
        its queued prompts stay queued, ``session_closed`` gives ``reason``; the event it sets once closed."""
        handle = self._sessions.get(session_id)
        if handle is None:
            return None
        handle._session.shutdown_reason = reason
        handle._ref.close()
        return self._closed_events.get(session_id)

    def start_no_new_work(self, reason: str) -> None:
        """Every live session finishes what runs and starts nothing new (a cluster node handing over)."""
        for handle in self._sessions.values():
            handle._session.shutdown_reason = reason

    async def _wind_down(self, runs: list[Any], closing: list[trio.Event | None]) -> None:
        for closed in closing:
            if closed is not None:
                await closed.wait()
        while self._sessions or self._starting:  # started meanwhile (a subagent's, an embedder's)
            for handle in self.sessions():
                closed = self._close_for_shutdown(handle)
                if closed is not None:
                    await closed.wait()
            if self._starting:
                await trio.sleep(0.01)  # closed once it has started
        for run in runs:
            await run.ended.wait()
        self._stopped.set()

    def shutdown(self) -> None:
        """Stop at once (forced): cancel every actor and the body of ``async with open_daemon()``.

        Running turns still end with ``turn_complete`` ``cancelled`` on their way
        out and background actors kill their process groups, but nothing is
        waited for in order; :meth:`shutdown_gracefully` is the orderly way.
        """
        self._shutting_down = True
        self._forced = True
        self._nursery.cancel_scope.cancel()
        if self._host_scope is not None:
            self._host_scope.cancel()


# Stored sessions read at once by a listing: one read of their records and one of their journals (in cluster
# mode a round trip each, not two a session), and no more of their journals in memory together than this.
STORED_READ_BATCH = 500


def _batches(store: Any, session_ids: list[str]) -> list[list[str]]:
    # A store that reads one session at a time (files) gains nothing from a batch but its journals in memory.
    size = STORED_READ_BATCH if hasattr(store, "journals_read") else 1
    return [session_ids[i:i + size] for i in range(0, len(session_ids), size)]


def stored_summaries(store: Any, skip: frozenset[str] = frozenset()) -> dict[str, dict[str, Any]]:
    """What ``GET /session`` lists of each session in ``store`` but not in ``skip`` (blocking: the reads)."""
    out: dict[str, dict[str, Any]] = {}
    listed = [s for s in store.session_ids() if s not in skip and is_safe_session_id(s)]
    for batch in _batches(store, listed):
        records, journals = records_of(store, batch), journals_of(store, batch)
        for session_id in batch:
            record = records.get(session_id) or {}
            pending = replay(journals.get(session_id) or [])  # None: unreadable, so nothing pending it could promise
            out[session_id] = {
                "sessionId": session_id, "live": False, "restorable": True, "state": "stored",
                "cwd": record.get("cwd"), "title": record.get("title"),
                "createdAt": record.get("createdAt"), "updatedAt": record.get("updatedAt"),
                # As a live session counts them (Session.work_counts): what a restore would run, and
                # qwen's pendingCount adds the prompts it ends as interrupted.
                "queuedCount": len(pending.queued),
                "pendingCount": len(pending.queued) + len(pending.interrupted),
                "midTurnQueued": len(pending.mid_turn),
            }
    return out


def stored_cwds(store: Any) -> set[str]:
    """The ``cwd`` of every stored session record (blocking: the reads)."""
    cwds = set()
    for batch in _batches(store, store.session_ids()):
        for record in records_of(store, batch).values():
            cwd = (record or {}).get("cwd")
            if isinstance(cwd, str):
                cwds.add(cwd)
    return cwds


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
    store: Any = None,
    sync_in_thread: bool = False,
    described_machine: MachineDescription | None = None,
    make_checkpoints: Any = None,
    commands_run: bool = True,
) -> AsyncIterator[Daemon]:
    """Run a daemon for the body of the ``async with``; its sessions end with it.

    Args:
        settings: daemon settings (defaults when omitted).
        model: the primary model; when omitted, the one ``settings.model`` names, built as the daemon's command
            builds it (:func:`~actors.model.provider_from_settings`: the scripted demo model unless the
            provider is ``openai``).
        state_dir: where transcripts live; nothing is written when omitted.
        workspace: the default working directory of new sessions.
        ids, clock_ms: sources of ids and timestamps (deterministic replays pass their own).
        tools: a callable returning a fresh :class:`ToolRegistry` per session.
        now: wall-clock time for cron and wakeups (an aware ``datetime``); replays tie it to virtual time.
        hook_runner: starts one hook command (replays script hooks instead of running processes).
        store: where sessions are kept (a :class:`~actors.storage.SessionStore`); by default files under
            ``state_dir`` (a cluster passes its PostgreSQL store, :mod:`actors.cluster`).
        sync_in_thread: let the default store sync in a worker thread, off the event loop (a busy disk held
            single fsyncs for up to 1.27 s; see ``LocalStore.sync_in_thread``).
            The daemon's command does; under virtual time a thread would let the clock jump while it runs.
        described_machine: what the system prompt says of the machine instead of this one's (a replay
            gives the recorded machine's).
        make_checkpoints: a session's checkpoint keeper by its id, instead of one on the state directory's
            store (a replay's answers the recorded restores).
        commands_run: whether model-run commands really run (``False``: a replay answers them from the
            recording or the scenario); only then is the sandbox, or its absence, said at start.

    Model-run commands run in the sandbox ``settings.sandbox`` asks for (see
    :mod:`actors.process.sandbox`); a required one that cannot run here raises
    :class:`SandboxUnavailable` before anything starts.

    Leaving the body — normally, by an exception, or cancelled from outside —
    runs :meth:`Daemon.shutdown_gracefully` (shielded, within
    ``limits.shutdownSeconds``): running turns end ``turn_complete`` ``cancelled``,
    published and journaled, transcripts stay whole, background processes are
    killed. Whatever is still running after that bound is cancelled.
    :meth:`Daemon.shutdown` skips the orderly part.

    An exception of the body comes out as itself, not in an exception group (the daemon's nursery is
    its own business): ``except ValueError`` or ``except KeyboardInterrupt`` around the ``async with``
    catches it. A failure of the daemon's own tasks comes out as a group, with the body's exception in
    it if both failed.
    """
    settings = settings or Settings()
    # Built first: a model setting that cannot run (SettingsError) is refused before anything starts.
    provider = model if model is not None else provider_from_settings(settings)
    hidden = [p for p in (state_dir, settings.path) if p is not None]
    sandbox = resolve_sandbox(settings.sandbox, hidden)  # SandboxUnavailable when "bwrap" is required
    if commands_run:
        log_sandbox(sandbox)  # what protects the machine, said where it matters
    if state_dir is not None:
        Path(state_dir).mkdir(parents=True, exist_ok=True)  # exists before any command, so it can be hidden
        clear_homes(state_dir)  # homes a previous daemon left, before any session makes (or restores) its own
    runtime = Runtime(
        settings=settings,
        provider=provider,
        ids=ids or IdSource(),
        state_dir=Path(state_dir) if state_dir is not None else None,
        workspace=os.path.abspath(workspace or os.getcwd()),
        clock_ms=clock_ms or wire.wall_clock_ms,
        # The settings say whether web_fetch is offered; the built-ins are built once, each session copies them.
        make_tools=tools or default_tools(settings).copy,
        now=now or local_now,
        hook_runner=hook_runner,
        sandbox=sandbox,
        described_machine=described_machine,
        make_checkpoints=make_checkpoints,
        store=store if store is not None else
        LocalStore(state_dir, fsync=settings.journal_fsync, sync_in_thread=sync_in_thread)
        if state_dir is not None else None,
        checkpoint_store=_checkpoint_store(state_dir, settings),
    )
    subagents: SubagentRegistry | None = None
    body_error: BaseException | None = None
    escaping: BaseException | None = None
    try:
        try:
            async with trio.open_nursery() as host:
                # The actors live in a nursery shielded from cancellations of the caller's scope, so that
                # a cancelled body still ends them in order: graceful shutdown first, then the rest cancelled.
                nursery = await host.start(_actor_nursery)
                if sandbox.disk is not None:
                    sandbox.disk.attach(nursery)  # the disk reserve's watch, from the first command on
                daemon = Daemon(runtime, nursery)
                daemon._host_scope = host.cancel_scope
                daemon.subagents = subagents = SubagentRegistry(daemon, nursery)
                try:
                    yield daemon
                except BaseException as exc:
                    body_error = exc  # to tell it from the daemon's own failures below
                    raise
                finally:
                    daemon._shutting_down = True
                    if not daemon._forced:
                        with trio.CancelScope(shield=True):
                            if not await daemon.shutdown_gracefully():
                                log.warning("the daemon did not stop within %g s; the rest is cancelled",
                                            settings.limits.shutdown_seconds)
                    daemon.closed.set()
                    nursery.cancel_scope.cancel()  # whatever is left (nothing, unless the bound ran out)
        except BaseExceptionGroup as group:
            escaping = _escaping(group, body_error)
            if escaping is group:
                raise
        if escaping is not None:
            # Raised outside the except clause, so that the body's exception keeps its own context.
            raise escaping
    finally:
        if subagents is not None:
            subagents.close()  # after the runs ended: tokens revoked, a temporary config directory removed
        aclose = getattr(runtime.provider, "aclose", None)
        if aclose is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await aclose()


def _escaping(group: BaseExceptionGroup, body_error: BaseException | None) -> BaseException:
    """What leaves ``open_daemon`` for the group its host nursery raised (Trio's advice for a context
    manager hiding its nursery): the body's exception when it is the only one; a ``KeyboardInterrupt``
    when Ctrl-C is all there is (it may hit any task); otherwise the group, so that several failures
    all surface."""
    if len(group.exceptions) == 1 and body_error is not None and _same(group.exceptions[0], body_error):
        return body_error
    if group.split(KeyboardInterrupt)[1] is None:
        interrupt = KeyboardInterrupt()
        interrupt.__cause__ = group
        return interrupt
    return group


def _same(found: BaseException, raised: BaseException) -> bool:
    """Whether the nursery's ``found`` is ``raised``: the same object, or for a group the copy Trio made of it
    (a nursery rebuilds a group it passes on) with the same leaves."""
    if found is raised:
        return True
    return (isinstance(found, BaseExceptionGroup) and isinstance(raised, BaseExceptionGroup)
            and found.message == raised.message and len(found.exceptions) == len(raised.exceptions)
            and all(_same(a, b) for a, b in zip(found.exceptions, raised.exceptions)))


def _checkpoint_store(state_dir: str | Path | None, settings: Settings) -> Any:
    """Where sessions keep their checkpoints (``<state-dir>/checkpoints``); none without a state directory or
    with ``checkpoints.enabled`` false."""
    if state_dir is None or not settings.checkpoints_enabled:
        return None
    from .checkpoints import Store

    return Store(Path(state_dir) / "checkpoints", fsync=settings.journal_fsync == "always")


async def _actor_nursery(*, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED) -> None:
    """The daemon's nursery, shielded from outside cancellation; ``nursery.cancel_scope`` ends it."""
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as nursery:
            task_status.started(nursery)
            await trio.sleep_forever()


def _recorded_rules(record: dict[str, Any], session_id: str) -> RuleLists | None:
    """The session's own permission rules its record keeps; a record whose rules cannot be read loses them,
    with a warning, rather than the session."""
    if "permissions" not in record:
        return None
    try:
        return checked.structure(record["permissions"], RuleLists, "permissions")
    except checked.CheckError as exc:
        log.warning("session %s: its recorded permission rules are dropped: %s", session_id, exc)
        return None


__all__ = ["Daemon", "InvalidCwd", "InvalidSessionId", "NotStartedHere", "SessionStarting", "TooManySessions", "ToolRegistry",
           "UnknownSession", "open_daemon"]

