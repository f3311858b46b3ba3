"""The session actor: one conversation, its prompt FIFO, its background work, its events.

Besides the FIFO and the background manager, two tasks run under the
session's nursery: the mailbox loop, which answers control messages one at a
time (cancel, status, lifecycle events, permission votes), and the work loop,
which runs one work item at a time — a foreground prompt from the FIFO, or an
automatic turn — each inside a cancel scope the session owns. Whatever way a
work item ends, its exit path suspends the guard chain if it was cancelled,
publishes its terminal event, settles it with the FIFO and releases the
automatic queue that waited for it.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from .. import wire
from .._actor import ActorGone, ActorRef, MailboxFull, PendingReply, open_mailbox, serve_mailbox
from ..background.automatic import AutomaticItem
from ..background.manager import BackgroundManager
from ..events import EventBus
from ..guard import TodoStopGuard, is_continuation_prompt
from ..mcp_client.config import merge_servers
from ..mcp_client.server import McpServers
from ..model import ChatMessage, ModelError
from ..runtime import Runtime
from ..settings import APPROVAL_MODES
from ..storage.writer import JournalWriter
from . import fifo as f
from .chain import WorkChain
from .client import ClientServices
from .context import ContextKeeper
from .history import History
from .messages import (
    Cancel, ChangeCwd, GetStatus, Load, ReleaseQueuedPromptWait, Rewind, SessionMessage, SetApprovalMode, SetModel,
    Snapshot, Vote,
)
from .status import status_of
from . import persistence
from .persistence import RecordSaver, ReplayWriter
from . import drains, hook_events, turn_log
from .hooks import hook_files, hook_files_for
from ..process.sandbox import make_home, remove_home
from .outcomes import PermissionCancelled, only_cancelled
from .permissions import DEFAULT_OPTIONS, PermissionBroker, UnknownOption
from .system_prompt import PromptOverrides
from .images import prompt_images
from .tools import ToolContext
from .transcript import TranscriptError
from .turn import Turn
from .suggestions import suggest_followups
from .usage import UsageMeter

log = logging.getLogger("trellis.session")



@attrs.define
class Work:
    """The work item in progress: what it is and the cancel scope that ends it."""

    prompt_id: str
    scope: trio.CancelScope
    kind: str = "prompt"


class Wakeup:
    """A level-triggered wake-up: ``set`` any number of times, ``wait`` consumes it."""

    def __init__(self) -> None:
        self._flag = False
        self._lot = trio.lowlevel.ParkingLot()

    def set(self) -> None:
        self._flag = True
        self._lot.unpark_all()

    async def wait(self) -> None:
        while not self._flag:
            await self._lot.park()
        self._flag = False


class Session:
    """The session actor. Start it with ``await nursery.start(session.run)``."""

    # Set by the daemon's graceful shutdown ("daemon_shutdown") before it closes the session: no new
    # work item starts (queued prompts stay queued), and ``session_closed`` gives this reason.
    shutdown_reason: str | None = None
    # How a restore ends the prompt that was running when its previous host stopped (persistence.restore):
    # "daemon_restarted", or "node_lost" when another node of a cluster took the session over.
    interrupted_code: str = "daemon_restarted"

    def __init__(self, runtime: Runtime, session_id: str, cwd: str, *, created_at: int | None = None,
                 history: list[ChatMessage] | None = None,
                 approval_mode: str | None = None, model_name: str | None = None,
                 prompt_overrides: PromptOverrides | None = None, mcp_servers: tuple[Any, ...] = ()) -> None:
        self.runtime = runtime
        settings = runtime.settings
        self.session_id = session_id
        self.cwd = cwd
        self.created_at = created_at if created_at is not None else runtime.clock_ms()
        self.bus = EventBus(settings.limits.event_ring_size, clock_ms=runtime.clock_ms,
                            replay_bytes=settings.limits.replay_bytes,
                            max_queued_bytes=settings.limits.subscriber_queue_bytes)
        self.bus.on_turn_compacted = ReplayWriter(self, lambda: self._nursery).turn_folded  # a folded turn: on disk
        self.history = history or []  # a History (see the property)
        self.transcript = runtime.transcript(session_id)
        if history:
            self.transcript.rewrite(self.history)
        self.tools = runtime.make_tools()
        self.hooks = settings.hook_config
        self.start_context: list[tuple[str, str]] = []  # SessionStart hooks' context, for the next prompt
        self.approval_mode = approval_mode or settings.approval_mode
        self.model_name: str | None = model_name
        self.prompt_overrides = prompt_overrides or PromptOverrides()  # its own system-prompt layers
        self.system_message_kept: ChatMessage | None = None  # the last system message sent (system_prompt)
        self.current: Work | None = None
        self._aborted_before_start: str | None = None
        self._starting: str | None = None  # taken from the FIFO, work item not begun yet
        self._wake = Wakeup()
        self._nursery: trio.Nursery | None = None
        self._late_drain: PendingReply[f.DrainResult] | None = None
        # Where mid-turn input comes from: this daemon's FIFO, unless a bridge (an ACP client that
        # owns the real queue) installs its own source. It returns a PendingReply of a DrainResult.
        self.drain_source: Callable[[bool], PendingReply[f.DrainResult]] | None = None
        # What a bound editor lends the tools instead of local files and shells (.client); None: local.
        self.client_services: ClientServices | None = None
        store = runtime.store
        # One journal for the FIFO and the timers (@wakeups, cron jobs), appended in the order things happen.
        journal = JournalWriter(store, session_id) if store is not None else None
        self.fifo = f.PromptFifo(
            session_id, self.bus, runtime.ids,
            max_pending=settings.limits.max_pending_prompts, max_mid_turn=settings.limits.max_mid_turn_messages,
            wake_session=self._wake.set, cancel_running=self._cancel_prompt, now_ms=runtime.clock_ms,
            queue_released=self._queue_released, handed_over=self._handed_over,
            journal=journal,
        )
        self.fifo_ref: ActorRef[f.FifoMessage] | None = None
        self.usage = UsageMeter(self.fifo, self.publish_update, runtime.clock_ms)
        self.records = RecordSaver(self)  # the session record after a change, off the loop in the daemon
        self.context = ContextKeeper(self)  # its window, estimates, compaction and overflow handling
        self.ref: ActorRef[SessionMessage] | None = None
        self.permissions = PermissionBroker(session_id, self.bus, runtime.ids)
        self.bus.on_last_unsubscribe = self._clients_left
        self.always_allowed: set[str] = set()  # tool kinds the user allowed for the rest of the session
        self.always_denied: set[str] = set()  # ... or rejected for the rest of the session
        # What its unsandboxed hooks run, as the user vouched for it (a changed file: the hook does not run).
        self.hook_files = hook_files_for(runtime.vouched_hook_files, self.hooks, cwd)
        # Its commands see the files its unsandboxed hooks run read-only (a hook runs them as the user), and
        # have a home of their own; its stdio MCP servers another, which no command can write (a command
        # could otherwise plant ~/.gitconfig there and run code with a server's secrets). Both are made
        # here and deleted when the actor ends.
        self.sandbox = runtime.sandbox.protecting(lambda cwd: hook_files(self.hooks, cwd))
        self._homes: str | None = None  # <state>/homes/<session>: commands/ and servers/ in it
        servers_sandbox = self.sandbox
        if self.sandbox.active:
            self._homes = make_home(runtime.state_dir, session_id)
            for name in ("commands", "servers"):
                os.mkdir(os.path.join(self._homes, name), 0o700)
            self.sandbox = self.sandbox.with_home(os.path.join(self._homes, "commands"))
            servers_sandbox = servers_sandbox.with_home(os.path.join(self._homes, "servers"))
        self.background = BackgroundManager(
            session_id, runtime.ids, publish=self.bus.publish, wake=self._wake_if_idle, now=runtime.now,
            sandbox=self.sandbox,
            journal=journal.append_then_sync if journal is not None else None,
        )
        self.fifo.snapshot_extra = self.background.timer_records  # a compacted journal keeps the timers
        self.timers_to_restore: list[dict[str, Any]] = []  # set by persistence.restore, started by run()
        self.chain = WorkChain(TodoStopGuard(enabled=settings.guard_enabled), self.background)
        self.background.related = self.chain.is_related
        # Its MCP servers (actors.mcp_client): the settings' and a client's, started with the session's actors.
        self.mcp = McpServers(session_id, self.tools, cwd=lambda: self.cwd, sandbox=servers_sandbox,
                              publish=self.publish_notice,
                              current_prompt=lambda: self.current.prompt_id if self.current else None)
        self.mcp.add(merge_servers(settings.mcp_server_configs, mcp_servers))

    @property
    def provider(self) -> Any:
        return self.runtime.provider

    @property
    def files(self) -> Any:
        """The file tools' backend (``services.files``): the client's, if one lent it, else ``None`` (local)."""
        return self.client_services.files if self.client_services is not None else None

    @property
    def terminal(self) -> Any:
        """The foreground shell's terminal (``services.terminal``): the client's, else ``None`` (local)."""
        return self.client_services.terminal if self.client_services is not None else None

    # ------------------------------------------------------------- actor

    async def run(self, *, task_status: trio.TaskStatus[Session] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"session:{self.session_id}", self.runtime.settings.limits.mailbox_size)
        self.ref = ref
        close_reason = "closed"
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.fifo_ref = await nursery.start(self.fifo.run)
                await nursery.start(self.background.run)
                if self.timers_to_restore:
                    await self.background.restore_timers(self.timers_to_restore)
                    self.timers_to_restore = []
                self.mcp.start(nursery)
                nursery.start_soon(self._work_loop, name=f"work:{self.session_id}")
                task_status.started(self)
                await serve_mailbox(inbox, self._handle, self.records)  # a marked record: written after
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            close_reason = "daemon_shutdown" if only_cancelled(exc) else "crashed"
            raise
        finally:
            self.permissions.cancel_all()
            if close_reason == "closed" and self.shutdown_reason is not None:
                close_reason = self.shutdown_reason
            elif close_reason == "closed":
                # Deleted, not shut down: its queued prompts end here, and the journal says so,
                # or a later attach would restore and run them.
                self.fifo.abandon_queued()
            await hook_events.session_end(self, close_reason)
            self.bus.close_with("session_closed", wire.session_closed(self.session_id, close_reason))
            if self.runtime.store is not None:
                self.runtime.store.close(self.session_id)
            if self._homes is not None:  # the homes last as long as this actor
                remove_home(self._homes)

    def _handle(self, message: SessionMessage) -> None:
        match message:
            case Cancel(reply):
                reply.send(self._cancel_current())
            case GetStatus(reply):
                reply.send(self.status())
            case Load(reply):
                self._invalidate()
                try:
                    reply.send(persistence.restore_conversation(self))
                except (TranscriptError, OSError) as exc:  # a bad file must not take the actor down
                    reply.send(f"transcript unreadable: {exc}")
            case SetApprovalMode(mode, reply):
                reply.send(self._set_approval_mode(mode))
            case SetModel(model, reply):
                self.model_name = model  # no new work chain
                self.context.model_changed()
                self.records.mark()
                reply.send(model)
            case ChangeCwd(cwd, reply):
                self.cwd = cwd
                self.hook_files = hook_files_for(self.runtime.vouched_hook_files, self.hooks, cwd)
                self.hook_files.vouch_all(cwd)  # a cwd set through the API is the user's own doing
                self._invalidate()
                self.records.mark()
                reply.send(cwd)
            case Rewind(turn, reply):
                try:
                    reply.send(self._rewind(turn))
                except OSError as exc:
                    reply.send(f"transcript not rewritten: {exc.strerror or exc}")
            case Snapshot(reply):
                self._invalidate()
                reply.send(list(self.history))
            case ReleaseQueuedPromptWait(reply):
                reply.send(self._queue_released())
            case Vote(request_id, outcome, option_id, reply):
                try:
                    reply.send(self.permissions.vote(request_id, outcome, option_id))
                except UnknownOption as exc:
                    reply.send(str(exc))
            case _:
                raise TypeError(f"Session cannot handle {message!r}")

    # ------------------------------------------------------------- work

    async def _work_loop(self) -> None:
        """One work item at a time: a queued prompt first, else an automatic item the chain allows."""
        assert self.fifo_ref is not None
        await hook_events.session_start(self)
        await self.mcp.wait_settled()  # the first prompt sees the MCP servers' tools (or their absence)
        while True:
            if self.shutdown_reason is not None:
                await trio.sleep_forever()  # the daemon is shutting down: nothing new starts
            # No deadline: its own FIFO answers once the start is durable, however long the disk takes.
            entry = await self.fifo_ref.ask(f.TakeNext, math.inf)
            if entry is not None:
                await self.run_prompt(entry)
                continue
            if self.shutdown_reason is not None:
                continue
            if self.chain.queued_prompt_priority and self.drain_source is None:
                # Our own FIFO has no queued prompt: the one the chain yielded to is gone (aborted
                # while the drain's answer was on its way), so the priority it left must not stall us.
                self._queue_released()
            item = self.chain.select_automatic()
            if item is not None:
                await self.run_automatic(self.background.queue.take(item))
                continue
            await self._wake.wait()

    def _wake_if_idle(self) -> None:
        # Automatic items posted during foreground work wait for its exit (see work_item).
        if self.current is None:
            self._wake.set()

    @asynccontextmanager
    async def work_item(self, prompt_id: str, kind: str) -> AsyncIterator[Work]:
        """Own the cancel scope of one work item; its exit is where it settles.

        Leaving by cancellation suspends the guard chain (every cancellation path, by
        construction), and every exit — completion, error, cancellation — releases the
        automatic items that waited for this work.
        """
        work = Work(prompt_id, trio.CancelScope(), kind)
        self.current = work
        self.mcp.release(prompt_id)  # notices about MCP servers that did not start, once (see McpServers)
        self._starting = None
        if self._aborted_before_start == prompt_id:
            self._aborted_before_start = None
            self._cancel_current()
        try:
            with work.scope:
                yield work
            if work.scope.cancelled_caught:
                self.chain.guard.suspend()
        finally:
            self.current = None
            late, self._late_drain = self._late_drain, None
            if late is not None and self._nursery is not None:
                self._nursery.start_soon(self._restore_late_drain, late)
            self._wake.set()

    async def _restore_late_drain(self, pending: PendingReply[f.DrainResult]) -> None:
        await drains.restore_late_drain(self, pending)

    async def run_prompt(self, entry: f.PendingPrompt) -> None:
        prompt_id = entry.prompt_id
        self.chain.prepare_for_prompt(trusted_retry=entry.is_trusted_retry, plan=self.approval_mode == "plan")
        self.publish_update(wire.text_update("user_message_chunk", entry.text), prompt_id, entry.client_id)
        user_text = None if entry.is_trusted_retry and self._awaiting_answer() else entry.text
        stop_reason, error = await self._run_turn(prompt_id, "prompt", user_text, "prompt", prompt_images(entry.body))
        state = "error" if error else ("cancelled" if stop_reason == "cancelled" else "completed")
        await self._tell_fifo(f.Settle(prompt_id, state, stop_reason=stop_reason,
                                       error=self._error_message(error) if error else None))
        if stop_reason == "end_turn":
            await suggest_followups(self, prompt_id)

    async def run_automatic(self, item: AutomaticItem) -> None:
        """An automatic turn: a notification, @wakeup or cron fire, run while no prompt waits."""
        prompt_id = self.runtime.ids.new("auto")
        self.chain.prepare_for_automatic_turn(item, plan=self.approval_mode == "plan")
        text = item.prompt_text()
        meta = {"source": item.source, "taskId": item.task_id}
        self.publish_update(wire.text_update("user_message_chunk", text, meta), prompt_id)
        await self._tell_fifo(f.SetActive(True))
        try:
            await self._run_turn(prompt_id, "automatic", text, "automatic")
        finally:
            await self._tell_fifo(f.SetActive(False))

    async def _run_turn(self, prompt_id: str, kind: str, user_text: str | None,
                        origin: str, images: tuple = ()) -> tuple[str | None, Exception | None]:
        """Run one turn in its work item; publish its terminal event. Returns (stop reason, error)."""
        turn = Turn(self, prompt_id, foreground=kind == "prompt", images=images)
        stop_reason: str | None = None
        error: Exception | None = None
        started = turn_log.turn_started(self.session_id, prompt_id, kind)
        try:
            async with self.work_item(prompt_id, kind) as work:
                try:
                    stop_reason = await turn.run(user_text, origin)
                except ModelError as exc:
                    error = exc
                except Exception as exc:  # contained: the session goes on
                    log.exception("turn %s of session %s failed", prompt_id, self.session_id)
                    self.chain.guard.pause_for_trusted_retry()
                    error = exc
        except BaseException as exc:
            if not only_cancelled(exc):
                raise
            # The session itself is closing: the turn still gets its terminal event, and the journal
            # says so, or a restart would take the prompt for one the daemon died running. A tool that
            # runs a nursery (a shell reading its output) hands the cancellation out as a group of them.
            self.bus.publish("turn_complete", wire.turn_complete(self.session_id, prompt_id, "cancelled",
                                                                 turn.usage.summary()), prompt_id)
            if kind == "prompt":
                self.fifo.settle_on_close(prompt_id)
            turn_log.turn_ended(self.session_id, prompt_id, kind, "cancelled", None, turn.usage, started)
            raise
        if work.scope.cancelled_caught:
            stop_reason = "cancelled"
        if error is not None:
            code = error.code if isinstance(error, ModelError) else "internal_error"
            self.bus.publish("turn_error", wire.turn_error(self.session_id, prompt_id, self._error_message(error),
                                                           code, turn.usage.summary()), prompt_id)
        else:
            stop_reason = stop_reason or "end_turn"
            self.bus.publish("turn_complete", wire.turn_complete(self.session_id, prompt_id, stop_reason,
                                                                 turn.usage.summary(), turn.token_limit,
                                                                 turn.hook_stop_reason), prompt_id)
        turn_log.turn_ended(self.session_id, prompt_id, kind, stop_reason if error is None else "error",
                            (error.code if isinstance(error, ModelError) else "internal_error") if error else None,
                            turn.usage, started)
        return stop_reason, error

    @staticmethod
    def _error_message(error: Exception) -> str:
        return error.message if isinstance(error, ModelError) else f"internal error: {type(error).__name__}"

    async def _tell_fifo(self, message: f.FifoMessage) -> None:
        """Tell the FIFO something it must not miss, also from a cancelled exit path.

        Not a checkpoint while its mailbox has room (the usual case): the message is queued at once. Only a
        full mailbox is waited on, shielded, for at most 5 seconds.
        """
        assert self.fifo_ref is not None
        try:
            self.fifo_ref.tell_nowait(message)  # room in the mailbox (the usual case): no scope, no yield
            return
        except MailboxFull:
            pass
        except ActorGone:
            return  # the session is closing; the FIFO went first
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            try:
                await self.fifo_ref.tell(message)
            except ActorGone:
                pass

    def _awaiting_answer(self) -> bool:
        """The conversation ends with input the model has not answered yet."""
        return bool(self.history) and self.history[-1].role in ("user", "tool")

    def _cancel_current(self) -> bool:
        work = self.current
        if work is None:
            if self._starting is None:
                return False
            self._aborted_before_start = self._starting  # handed over, not begun: cancel it as it begins
            return True
        work.scope.cancel()
        return True

    def _handed_over(self, prompt_id: str) -> None:
        """The FIFO gave us this prompt; until its work item begins, cancels are remembered for it."""
        self._starting = prompt_id

    def _cancel_prompt(self, prompt_id: str) -> None:
        if self.current is not None and self.current.prompt_id == prompt_id:
            self._cancel_current()
        else:
            # The FIFO handed it over but its work item has not begun: cancel it as it begins.
            self._aborted_before_start = prompt_id

    def _queue_released(self) -> bool:
        """The last queued prompt was aborted: a chain that yielded to it ends; queues go on."""
        released = self.chain.release_queued_prompt_wait(turn_running=self.current is not None)
        if released:
            self._wake.set()
        return released

    # ------------------------------------------------------------- mid-turn input

    async def drain_mid_turn(self, watch_queued_prompt: bool = False) -> f.DrainResult:
        """Ask the FIFO for mid-turn input, within :data:`~.drains.DRAIN_DEADLINE` (:mod:`.drains`: a drain
        that misses it is kept, and its messages come with the next drain)."""
        return await drains.drain(self, watch_queued_prompt)

    # ------------------------------------------------------------- services lent to tools and turns

    async def authorize(self, context: ToolContext, *, title: str, kind: str, raw_input: Any,
                        plan_refuses: bool = True, details: dict[str, Any] | None = None,
                        rule: str | None = None, always_ask: str | None = None) -> str | None:
        """Apply the approval mode to one tool call; ask the client in ``default`` mode.

        ``details`` are more ACP tool-call fields for the request to show (an edit's diff ``content``,
        its ``locations``). An "always" answer is remembered for ``rule`` (an MCP tool's own
        name), else for ``kind``. ``always_ask`` (why) asks in every mode, ``yolo`` included, whatever
        a hook or an earlier "always" allowed, and offers no "always" answer: a write that can make
        code run later (under ``.git/``, a file a hook runs) is the user's call each time."""
        mode = self.approval_mode
        rule = rule or kind
        if mode == "plan" and plan_refuses:
            return "plan mode: execution is refused until the plan is approved"
        if rule in self.always_denied:  # a user's rule, as Claude's deny rules: a hook's allow does not lift it
            return "the user denied such calls for the rest of this session"
        if always_ask is None:
            if context.permission == "allow":  # a PreToolUse hook allowed it
                return None
            if context.permission != "ask" and (mode in ("auto-edit", "yolo") or rule in self.always_allowed):
                return None
        tool_call = {"toolCallId": context.tool_call_id, "status": "pending", "title": title, "kind": kind,
                     "rawInput": raw_input, **(details or {})}
        options = DEFAULT_OPTIONS
        if always_ask is not None:
            tool_call["title"] = f"{title} (asked in every mode: {always_ask})"
            options = tuple(o for o in DEFAULT_OPTIONS if o.kind in ("allow_once", "reject_once"))
        if self.bus.subscriber_count == 0 and self.bus.had_subscribers and self._nursery is not None:
            # The clients already left: the grace starts now. (A prompt admitted before anyone ever
            # subscribed still waits: its client may connect later and vote from the replay.)
            self._nursery.start_soon(self._cancel_permissions_after_grace)
        decision = await self.permissions.request(tool_call, options, prompt_id=context.prompt_id)
        if decision.outcome == "cancelled":
            raise PermissionCancelled(title)
        if not decision.allowed:
            if decision.option is not None and decision.option.kind == "reject_always":
                self.always_denied.add(rule)
            return "the user denied this call"
        if decision.option is not None and decision.option.kind == "allow_always":
            self.always_allowed.add(rule)
        return None

    def vouch_for(self, path: str) -> None:
        """A write to ``path`` the user approved: its hooks may run what it holds now (:class:`HookFiles`)."""
        self.hook_files.vouch(path)

    def publish_notice(self, text: str, prompt_id: str | None) -> None:
        """A discrete message from the daemon itself to the client (never merged with model text)."""
        self.publish_update(wire.text_update("agent_message_chunk", text,
                                             {"source": "daemon", "qwenDiscreteMessage": True}), prompt_id)

    # ------------------------------------------------------------- clients and lifecycle

    def _clients_left(self) -> None:
        """The last subscriber went away: pending permissions are cancelled unless one returns in time."""
        if self.permissions.pending_ids and self._nursery is not None:
            self._nursery.start_soon(self._cancel_permissions_after_grace)

    async def _cancel_permissions_after_grace(self) -> None:
        await trio.sleep(self.runtime.settings.limits.client_grace_seconds)
        if self.bus.subscriber_count == 0:
            self.permissions.cancel_all()  # a client that left approves nothing

    def _set_approval_mode(self, mode: str) -> str:
        if mode not in APPROVAL_MODES:  # the handle validates; a bad message must not crash the actor
            return self.approval_mode
        self.approval_mode = mode
        self.records.mark()
        if mode == "plan":
            self._invalidate()  # the guard is forced off in Plan; leaving Plan does not revive it
        self.publish_update(wire.mode_update(mode))
        return mode

    def _invalidate(self) -> None:
        self.chain.invalidate(turn_running=self.current is not None)
        self._wake.set()  # automatic work the old chain held back may run now

    def _rewind(self, turn: int) -> int | str:
        if self.current is not None:
            return "the session is busy; cancel the running work first"
        starts = [i for i, m in enumerate(self.history) if m.role == "user" and m.origin in ("prompt", None)
                  and not is_continuation_prompt(m.content)]
        if not 0 <= turn < len(starts):
            return f"turn must be from 0 to {len(starts) - 1}" if starts else "there is no user turn to rewind to"
        self.history = self.history[: starts[turn]]
        self.transcript.rewrite(self.history)
        self._invalidate()
        return len(self.history)

    # ------------------------------------------------------------- conversation

    @property
    def history(self) -> History:
        """The model-facing conversation; assigning a list (a compaction, a cut) makes a new :class:`History`."""
        return self._history

    @history.setter
    def history(self, messages: Iterable[ChatMessage]) -> None:
        self._history = History(messages)

    def append_message(self, message: ChatMessage) -> None:
        self.history.append(message)
        self.transcript.append(message)

    def close_dangling_tool_calls(self) -> None:
        """Answer tool calls that a cancellation left unanswered, so the conversation stays valid."""
        for answer in self.history.dangling_answers():
            self.append_message(answer)

    def publish_update(self, update: dict[str, Any], prompt_id: str | None = None,
                       originator: str | None = None) -> None:
        self.bus.publish("session_update", wire.session_update(self.session_id, update), prompt_id, originator)

    # ------------------------------------------------------------- status

    def is_idle(self) -> bool:
        """Nothing running and nothing the session would start now (prompts or runnable automatic items)."""
        return self.current is None and not self.fifo.statistics()["pendingCount"] \
            and self.chain.select_automatic() is None

    def status(self) -> dict[str, Any]:
        """``GET /session/:id/status`` (see :mod:`.status`)."""
        return status_of(self)
