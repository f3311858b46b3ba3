"""The session actor's shell: its mailbox, its nursery, its work loop; the rest is its parts.

A session is one conversation with its prompt FIFO, its background work and
its events. This shell builds its parts once — the conversation, the
publisher, the authorizer, mid-turn input, the hooks, the context keeper, the
work chain (:class:`~.ports.TurnPorts`) — and runs two tasks under the
session's nursery besides the FIFO and the background manager: the mailbox
loop, which answers control messages one at a time (cancel, status, lifecycle
events, permission votes), and the work loop, which runs one work item at a
time — a foreground prompt from the FIFO, or an automatic turn — each inside a
cancel scope the shell owns. The FIFO starts with its first message and the
work loop with the first work (a prompt admitted, an automatic item posted, or
at once for SessionStart hooks and restored prompts), both in the session's
nursery and context: an idle session runs only its mailbox loop and the
background manager. What a cancel or an exit means is the work item's
state machine's to decide (:mod:`.work_item`); the shell applies it: whatever
way a work item ends, it publishes its terminal event, settles it with the
FIFO, and releases the automatic queue that waited for it.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
import secrets
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from .. import wire
from .._actor import ActorGone, ActorRef, LazyActorRef, MailboxFull, Reply, open_mailbox, serve_mailbox
from ..background.automatic import AutomaticItem
from ..background.manager import BackgroundManager
from ..checkpoints import CheckpointRefused, Checkpoints
from ..events import EventBus
from ..guard import TodoStopGuard
from ..mcp_client.config import merge_servers
from ..mcp_client.server import McpServers
from ..model import ChatMessage, ModelError
from ..permission_rules import RuleLists
from ..process.sandbox import make_home, remove_home
from ..runtime import Runtime
from ..storage import replay
from ..storage.writer import JournalWriter
from ..tools.paths import scope_for
from ..weak import weakly
from . import commands
from . import fifo as f
from . import turn_log
from .authorizer import Authorizer
from .chain import WorkChain
from .context import ContextKeeper
from .conversation import Conversation
from .drains import MidTurnInput
from .hook_events import SessionHooks
from .hooks import hook_files
from .images import prompt_images
from .messages import (
    NOT_REPLACING, AddMcpServers, AddTools, Cancel, ChangeCwd, GetStatus, KillTask, LendClientServices, LendDrainSource, Load,
    PendingPermissions, PermissionEnded, ReleaseQueuedPromptWait, Rewind, SessionMessage, SessionRecord, SetApprovalMode,
    SetModel, SetTitle, Snapshot, TurnOffGuard, Vote, PermissionRules, EditPermissionRule, ExplainPermission, CheckpointCall,
)
from .outcomes import only_cancelled
from .permissions import UnknownOption
from .persistence import INTERRUPTED, RecordSaver, ReplayWriter, end_interrupted, restore_conversation
from .ports import TurnPorts
from .publisher import Publisher
from .services import SessionServices
from .suggestions import suggest_followups
from .system_prompt import PromptOverrides, SystemPrompt
from .title import title_from_prompt
from .transcript import TranscriptError, message_from_dict, message_to_dict
from .turn import Turn
from .turn_state import TurnState
from .usage import UsageMeter
from .work_item import CancelOutcome, Phase, WorkItem

log = logging.getLogger("trellis.session")

_NOT_MADE = object()  # a session's checkpoint keeper before it is first needed


class Wakeup:
    """A level-triggered wake-up: ``set`` any number of times, ``wait`` consumes it."""

    __slots__ = ("_flag", "_lot")

    def __init__(self) -> None:
        self._flag = False
        self._lot: trio.lowlevel.ParkingLot | None = None  # made by the first wait (an idle session has none)

    def set(self) -> None:
        self._flag = True
        if self._lot is not None:
            self._lot.unpark_all()

    @property
    def pending(self) -> bool:
        """Set, and not yet consumed by a ``wait``."""
        return self._flag

    async def wait(self) -> None:
        while not self._flag:
            if self._lot is None:
                self._lot = trio.lowlevel.ParkingLot()
            await self._lot.park()
        self._flag = False


class Session:
    """The session actor. Start it with ``await nursery.start(session.run)``."""

    # Slots: from 30 attributes on, an instance's values no longer fit CPython's shared-key layout and it gets
    # a dict of its own, 1.3 KiB more in every session. "__dict__": white-box tests replace a method on one.
    __slots__ = (
        "runtime", "session_id", "cwd", "title", "created_at", "bus", "publisher", "conversation", "tools",
        "authorizer", "work", "_scope", "_wake", "_nursery", "fifo", "fifo_ref", "mid_turn", "usage", "sandbox",
        "_homes", "hooks", "background", "timers_to_restore", "chain", "services", "system_prompt", "context",
        "records", "mcp", "ports", "ref", "_checkpoints", "shutdown_reason", "interrupted_code", "_context",
        "_work_started", "_current_cwd", "__dict__", "__weakref__",
    )

    def __init__(self, runtime: Runtime, session_id: str, cwd: str, *, created_at: int | None = None,
                 history: list[ChatMessage] | None = None,
                 approval_mode: str | None = None, model_name: str | None = None,
                 prompt_overrides: PromptOverrides | None = None, mcp_servers: tuple[Any, ...] = (),
                 title: str | None = None, permissions: RuleLists | None = None) -> None:
        self.runtime = runtime
        settings = runtime.settings

        # One closure each for what several parts read (a closure costs some 150 bytes in every session).
        # What the parts are given refers to the session weakly (actors.weak): a closed session is then freed
        # by reference counting, not left as a cycle for the collector.
        me = weakref.ref(self)

        def current_cwd() -> str:
            session = me()
            return session.cwd if session is not None else cwd

        def current_nursery() -> trio.Nursery | None:
            session = me()
            return session._nursery if session is not None else None

        self._current_cwd = current_cwd

        # Set by the daemon's graceful shutdown ("daemon_shutdown") before it closes the session: no new
        # work item starts (queued prompts stay queued), and ``session_closed`` gives this reason.
        self.shutdown_reason: str | None = None
        # How a restore ends the prompt that was running when its previous host stopped (:meth:`restore`):
        # "daemon_restarted", or "node_lost" when another node of a cluster took the session over.
        self.interrupted_code = "daemon_restarted"
        self.session_id = session_id
        self.cwd = cwd
        self.title = title  # what listings show; kept in the session record
        self.created_at = created_at if created_at is not None else runtime.clock_ms()
        self.bus = EventBus(settings.limits.event_ring_size, clock_ms=runtime.clock_ms,
                            replay_bytes=settings.limits.replay_bytes,
                            max_queued_bytes=settings.limits.subscriber_queue_bytes,
                            max_subscribers=settings.limits.max_subscribers)
        store = runtime.store
        # A folded turn goes on disk.
        self.bus.on_turn_compacted = ReplayWriter(store, session_id, self.bus, current_nursery).turn_folded
        self.publisher = Publisher(session_id, self.bus, runtime.telemetry)
        self.conversation = conversation = Conversation(runtime.transcript(session_id), history or ())
        self.tools = runtime.make_tools()
        self.authorizer = Authorizer(session_id, self.bus, runtime.ids, mode=approval_mode or settings.approval_mode,
                                     grace_seconds=settings.limits.client_grace_seconds, nursery=current_nursery,
                                     rules=settings.permission_rules, session_rules=permissions,
                                     rules_changed=weakly(self._permission_rules_changed))
        authorizer = self.authorizer
        self.work = work = WorkItem()
        self._scope: trio.CancelScope | None = None  # the running work item's
        self._cancelled_at: int | None = None  # when a cancel reached the running work item (clock_ms)
        self._wake = Wakeup()
        self._work_started = False  # the work loop starts with the session's first work (_wake_work)
        self._nursery: trio.Nursery | None = None
        self._context: contextvars.Context | None = None  # the session's own, where its later tasks start
        # One journal for the FIFO and the timers (@wakeups, cron jobs), appended in the order things happen.
        journal = JournalWriter(store, session_id) if store is not None else None
        self.fifo = f.PromptFifo(
            session_id, self.bus, runtime.ids,
            max_pending=settings.limits.max_pending_prompts, max_mid_turn=settings.limits.max_mid_turn_messages,
            wake_session=weakly(self._wake_work), cancel_running=weakly(self._cancel_prompt), now_ms=runtime.clock_ms,
            queue_released=weakly(self._queue_released, False), handed_over=self.work.hand_over,
            journal=journal, admitted=weakly(self._prompt_admitted), telemetry=runtime.telemetry,
        )
        self.fifo_ref: ActorRef[f.FifoMessage] | None = None
        self.mid_turn = MidTurnInput(lambda: getattr(me(), "fifo_ref", None), weakly(self._tell_fifo))
        self.usage = UsageMeter(self.fifo, self.publisher.update, runtime.clock_ms, runtime.telemetry)
        # Its commands see the files its unsandboxed hooks run read-only (a hook runs them as the user), and
        # have a home of their own; its stdio MCP servers another, which no command can write (a command
        # could otherwise plant ~/.gitconfig there and run code with a server's secrets). Both are made
        # here and deleted when the actor ends.
        hooks_config = settings.hook_config
        self.sandbox = runtime.sandbox.protecting(lambda cwd: hook_files(hooks_config, cwd))
        self._homes: str | None = None  # <state>/homes/<session>: commands/ and servers/ in it
        servers_sandbox = self.sandbox
        if self.sandbox.active:
            self._homes = make_home(runtime.state_dir, session_id)
            for name in ("commands", "servers"):
                os.mkdir(os.path.join(self._homes, name), 0o700)
            self.sandbox = self.sandbox.with_home(os.path.join(self._homes, "commands"))
            servers_sandbox = servers_sandbox.with_home(os.path.join(self._homes, "servers"))
        self.hooks = SessionHooks(hooks_config, self.publisher, runner=runtime.hook_runner, sandbox=self.sandbox,
                                  vouched=runtime.vouched_hook_files, cwd=current_cwd,
                                  mode=lambda: authorizer.mode,
                                  transcript_path=lambda: conversation.transcript.path)
        self.background = BackgroundManager(
            session_id, runtime.ids, publish=self.bus.publish, wake=weakly(self._wake_if_idle), now=runtime.now,
            sandbox=self.sandbox,
            journal=journal.append_then_sync if journal is not None else None,
        )
        self.fifo.snapshot_extra = self.background.timer_records  # a compacted journal keeps the timers
        self.timers_to_restore: list[dict[str, Any]] = []  # set by restore(), started by run()
        self.chain = WorkChain(TodoStopGuard(enabled=settings.guard_enabled), self.background)
        self.background.related = weakly(self.chain.is_related)
        self.services = SessionServices(self.authorizer, self.background, runtime, self.hooks, self.sandbox,
                                        self.publisher)
        described = runtime.described_machine
        self.system_prompt = SystemPrompt(settings, prompt_overrides or PromptOverrides(),
                                          cwd=current_cwd if described is None else
                                          lambda: described.path(current_cwd()),
                                          today=runtime.today, tool_names=self.tools.names,
                                          machine=(None, runtime.sandbox.kind == "bwrap") if described is None
                                          else (described.os, described.sandboxed),
                                          plan_mode=lambda: authorizer.mode == "plan")
        self.context = ContextKeeper(session_id, self.conversation, runtime.provider, model_name=model_name,
                                     system_prompt=self.system_prompt, tools=self.tools, usage=self.usage,
                                     guard=self.chain.guard)
        self.records = RecordSaver(store, session_id, weakly(self.record))  # after a change, off the loop in the daemon
        # Its MCP servers (actors.mcp_client): the settings' and a client's, started with the session's actors.
        self.mcp = McpServers(session_id, self.tools, cwd=current_cwd, sandbox=servers_sandbox,
                              publish=self.publisher.notice,
                              current_prompt=lambda: work.prompt_id if work.running else None)
        self.mcp.add(merge_servers(settings.mcp_server_configs, mcp_servers))
        self.ports = TurnPorts(
            session_id=session_id, conversation=self.conversation, publisher=self.publisher,
            authorizer=self.authorizer, mid_turn=self.mid_turn, chain=self.chain, context=self.context,
            usage=self.usage, tools=self.tools, hooks=self.hooks, services=self.services, settings=settings,
            cwd=current_cwd, save_record=self.records.save, before_change=weakly(self._before_change),
        )
        self.ref: ActorRef[SessionMessage] | None = None
        self._checkpoints: Checkpoints | None | object = _NOT_MADE  # see checkpoints

    @property
    def checkpoints(self) -> Checkpoints | None:
        """Its cwd's files at each user turn (actors.checkpoints; None: no state directory, or turned off).

        Made when first asked for (a user turn, a checkpoint call): an idle session never is.
        """
        keeper = self._checkpoints
        if keeper is _NOT_MADE:
            keeper = self._checkpoints = self._make_checkpoints()
        return keeper  # type: ignore[return-value]

    def _make_checkpoints(self) -> Checkpoints | None:
        runtime = self.runtime
        if runtime.make_checkpoints is not None:
            return runtime.make_checkpoints(self.session_id)
        store = runtime.checkpoint_store
        if store is None:
            return None
        settings = runtime.settings
        return Checkpoints(
            store, self.session_id, cwd=self._current_cwd, scope=lambda cwd: scope_for(cwd, runtime),
            notice=self.publisher.notice, clock_ms=runtime.clock_ms, new_id=lambda: f"ck-{secrets.token_hex(8)}",
            max_file_bytes=settings.checkpoint_max_file_bytes, max_session_bytes=settings.checkpoint_max_session_bytes)

    # ------------------------------------------------------------- actor

    async def run(self, *, task_status: trio.TaskStatus[Session] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"session:{self.session_id}", self.runtime.settings.limits.mailbox_size)
        self.ref = ref
        close_reason = "closed"
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._context = contextvars.copy_context()
                # The FIFO starts with its first message, the work loop with the first work (a prompt admitted,
                # an automatic item): an idle session runs neither (each costs a task, the FIFO a mailbox too).
                self.fifo_ref = LazyActorRef(f"fifo:{self.session_id}", f.MAILBOX_SIZE, weakly(self._start_fifo))
                await nursery.start(self.background.run)
                if self.timers_to_restore:
                    await self.background.restore_timers(self.timers_to_restore)
                    self.timers_to_restore = []
                self.mcp.start(nursery)
                if self._wake.pending or self.hooks.config.session_start or self.fifo.queue.entries:
                    self._start_work_loop()  # work at once: SessionStart hooks, prompts restored from the journal
                task_status.started(self)
                await serve_mailbox(inbox, self._handle, self.records)  # a marked record: written after
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            close_reason = "daemon_shutdown" if only_cancelled(exc) else "crashed"
            raise
        finally:
            self.authorizer.broker.cancel_all()
            if close_reason == "closed" and self.shutdown_reason is not None:
                close_reason = self.shutdown_reason
            elif close_reason == "closed":
                # Deleted, not shut down: its queued prompts end here, and the journal says so,
                # or a later attach would restore and run them.
                self.fifo.abandon_queued()
            await self.hooks.session_end(close_reason)
            self.bus.close_with("session_closed", wire.session_closed(self.session_id, close_reason))
            if self.runtime.store is not None:
                self.runtime.store.close(self.session_id)
            if self._homes is not None:  # the homes last as long as this actor
                remove_home(self._homes)
            self.context.release()

    def restore(self) -> None:
        """Take the conversation from the transcript and the FIFO from the journal (after a restart).

        Called once, before the session runs and after the daemon's observers saw
        it, so they see the replayed events too. Raises ``TranscriptError`` or
        ``StorageError`` for files it cannot read; nothing runs then.
        """
        store = self.runtime.store
        journalled = store.journal_read(self.session_id) if store is not None else []
        restore_conversation(self.conversation, self.publisher, store)
        self.fifo.journal_count(len(journalled))
        code = self.interrupted_code
        replayed = replay(journalled)
        for prompt_id in self.fifo.restore(replayed, code, INTERRUPTED[code]):
            end_interrupted(self.publisher, self.conversation.transcript, prompt_id, code)
        self.timers_to_restore = replayed.timers  # started with the session's background actors

    def _handle(self, message: SessionMessage) -> None:
        match message:
            case Cancel(reply):
                reply.send(self._cancel(None).accepted)
            case GetStatus(reply):
                reply.send(self.status())
            case Load(reply):
                self._invalidate()
                try:
                    reply.send(restore_conversation(self.conversation, self.publisher, self.runtime.store))
                except (TranscriptError, OSError) as exc:  # a bad file must not take the actor down
                    reply.send(f"transcript unreadable: {exc}")
            case SetApprovalMode(mode, reply):
                reply.send(self._set_approval_mode(mode))
            case SetModel(model, reply):
                self.context.use_model(model)  # no new work chain
                self.records.mark()
                self.publisher.event("model_switched", wire.model_switched(self.session_id, model))
                reply.send(model)
            case ChangeCwd(cwd, reply):
                self.cwd = cwd
                self.hooks.moved_to(cwd)
                self._invalidate()
                self.records.mark()
                reply.send(cwd)
            case CheckpointCall():
                self._checkpoint_call(message)
            case Rewind(turn, reply):
                try:
                    reply.send(self._rewind(turn))
                except OSError as exc:
                    reply.send(f"transcript not rewritten: {exc.strerror or exc}")
            case Snapshot(reply):
                self._invalidate()
                reply.send(list(self.conversation.history))
            case ReleaseQueuedPromptWait(reply):
                reply.send(self._queue_released())
            case Vote(request_id, outcome, option_id, reply):
                try:
                    reply.send(self.authorizer.broker.vote(request_id, outcome, option_id))
                except UnknownOption as exc:
                    reply.send(str(exc))
            case SessionRecord(reply):
                reply.send(self.record())
            case PendingPermissions(reply):
                reply.send(self.authorizer.broker.pending_ids)
            case PermissionEnded(request_id, reply):
                reply.send(self.authorizer.broker.ended(request_id))
            case PermissionRules(reply):
                reply.send(self.authorizer.listed_rules())
            case EditPermissionRule(effect, rule, add, reply):
                try:
                    edit = self.authorizer.add_rule if add else self.authorizer.remove_rule
                    reply.send(edit(effect, rule))
                except ValueError as exc:  # RuleError: the handle checked it; a bad message changes nothing
                    reply.send(str(exc))
            case ExplainPermission(tool, arguments, reply):
                known = self.tools.get(tool)
                if known is None:
                    reply.send(f"no tool {tool!r} in this session")
                else:
                    asks = getattr(known, "kind", "other") if getattr(known, "asks_permission", False) else None
                    reply.send(self.authorizer.explain(tool, arguments, self.cwd, asks=asks))
            case SetTitle(title, reply):
                if self._set_title(title, only_if_untitled=False):
                    self.records.mark()
                reply.send(self.title)
            case KillTask(task_id, reply):
                assert self._nursery is not None
                self._nursery.start_soon(self._kill_task, task_id, reply)
            case AddTools(tools, reply):
                try:
                    for tool in tools:
                        self.tools.register(tool)
                except Exception as exc:  # a tool refused (a name taken, a bad schema): the caller's error
                    reply.send(f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc))
                else:
                    reply.send(None)
            case AddMcpServers(servers, reply):
                reply.send(self.mcp.add(servers))
            case TurnOffGuard(reply):
                if self.work.phase is not Phase.IDLE or self.fifo.statistics()["pendingCount"]:
                    reply.send("the Todo Stop Guard is chosen before a session's first prompt")
                else:
                    self.chain.guard.enabled = False
                    reply.send(None)
            case LendDrainSource(source, replacing, reply):
                lent = replacing is NOT_REPLACING or self.mid_turn.source is replacing
                if lent:
                    self.mid_turn.source = source
                reply.send(lent)
            case LendClientServices(services, replacing, reply):
                lent = replacing is NOT_REPLACING or self.services.client is replacing
                if lent:
                    self.services.client = services
                reply.send(lent)
            case _:
                raise TypeError(f"Session cannot handle {message!r}")

    async def _kill_task(self, task_id: str, reply: Reply[bool]) -> None:
        try:
            reply.send(await self.background.kill(task_id))
        finally:
            reply.close()  # the session closed mid-kill: the asker hears it at once (a no-op once answered)

    # ------------------------------------------------------------- tasks started later

    def _start_in_session(self, async_fn: Any, *args: Any, name: str | None = None) -> None:
        """Start a task in the session's nursery and in the session's own context, whichever task asks.

        A task keeps the context it was started in: started from a handle's caller (an HTTP request), it
        would keep that request's objects as long as the session lives. :class:`ActorGone` once the
        session's nursery has closed.
        """
        if self._nursery is None or self._context is None:
            raise ActorGone(f"session {self.session_id} is not running")
        try:
            self._context.run(self._nursery.start_soon, async_fn, *args, name=name)
        except RuntimeError:  # the nursery is closed to new tasks: the session has ended
            raise ActorGone(f"session {self.session_id} has stopped") from None

    def _start_fifo(self, inbox: trio.MemoryReceiveChannel[f.FifoMessage]) -> None:
        self._start_in_session(self.fifo.serve, inbox)

    def _start_work_loop(self) -> None:
        if self._work_started:
            return
        try:
            self._start_in_session(self._work_loop, name=f"work:{self.session_id}")
        except ActorGone:
            return  # not running yet (run starts it when work is due), or ended: no work starts then
        self._work_started = True

    def _wake_work(self) -> None:
        """Wake the work loop, starting it on the session's first work."""
        self._wake.set()
        self._start_work_loop()

    # ------------------------------------------------------------- work

    async def _work_loop(self) -> None:
        """One work item at a time: a queued prompt first, else an automatic item the chain allows."""
        assert self.fifo_ref is not None
        await self.hooks.session_start(resumed=bool(self.conversation))
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
            if self.chain.queued_prompt_priority and self.mid_turn.source is None:
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
        if not self.work.running:
            self._wake_work()

    @asynccontextmanager
    async def work_item(self, prompt_id: str, kind: str) -> AsyncIterator[trio.CancelScope]:
        """Own the cancel scope of one work item; its exit is where it settles (:mod:`.work_item`).

        Leaving by cancellation suspends the guard chain (every cancellation path, by
        construction), and every exit — completion, error, cancellation — releases the
        automatic items that waited for this work.
        """
        scope = trio.CancelScope()
        self._cancelled_at = None
        if self.work.begin(prompt_id, kind):
            scope.cancel()  # cancelled between the hand-over and now: it ends as it begins
            self._cancelled_at = self.runtime.clock_ms()
        self._scope = scope
        try:
            self.mcp.release(prompt_id)  # notices about MCP servers that did not start, once (see McpServers)
            with scope:
                yield scope
        finally:
            self._scope = None
            if self.work.settle(cancelled=scope.cancelled_caught):
                self.chain.guard.suspend()
            late = self.mid_turn.take_late()
            if late is not None and self._nursery is not None:
                self._nursery.start_soon(self.mid_turn.restore_late, late)
            self._wake.set()

    async def run_prompt(self, entry: f.PendingPrompt) -> None:
        prompt_id = entry.prompt_id
        self.chain.prepare_for_prompt(trusted_retry=entry.is_trusted_retry, plan=self.authorizer.mode == "plan")
        self.publisher.update(wire.text_update("user_message_chunk", entry.text), prompt_id, entry.client_id)
        user_text = None if entry.is_trusted_retry and self.conversation.awaiting_answer() else entry.text
        # Usually titled at admission (_prompt_admitted); not a prompt restored from the journal or
        # admitted by another node of a cluster.
        if self._set_title(title_from_prompt(entry.text), only_if_untitled=True) and self._nursery is not None:
            self.records.save_soon(self._nursery)
        state = TurnState(prompt_id, foreground=True, images=prompt_images(entry.body))
        # A user turn's checkpoint (not a slash command's: it adds no turn), before its first model call.
        checkpoint = self.checkpoints is not None and user_text is not None and commands.parse(user_text) is None
        mark = len(self.conversation.history)  # the turn's messages come after it
        if checkpoint:
            await self.checkpoints.turn_started(prompt_id, self.conversation.turn_texts)
        stop_reason, error = await self._run_turn(state, "prompt", user_text, "prompt")
        ended = "error" if error else ("cancelled" if stop_reason == "cancelled" else "completed")
        await self._tell_fifo(f.Settle(prompt_id, ended, stop_reason=stop_reason,
                                       error=self._error_message(error) if error else None))
        if checkpoint:  # the tree as the turn left it (the next work item waits for it)
            conversation = self.conversation
            await self.checkpoints.turn_ended(prompt_id, lambda: conversation.turn_message_since(mark),
                                              conversation.turn_texts, processes_live=self.background.processes_live)
        if stop_reason == "end_turn":
            await suggest_followups(self.ports, prompt_id, queued_count=self._queued_count,
                                    work_item=self.work_item)

    async def _queued_count(self) -> int:
        assert self.fifo_ref is not None
        return (await self.fifo_ref.ask(f.Statistics))["queuedCount"]

    async def run_automatic(self, item: AutomaticItem) -> None:
        """An automatic turn: a notification, @wakeup or cron fire, run while no prompt waits."""
        prompt_id = self.runtime.ids.new("auto")
        self.chain.prepare_for_automatic_turn(item, plan=self.authorizer.mode == "plan")
        text = item.prompt_text()  # what the model reads
        if item.is_notification:  # shown as qwen serve shows it: a notice about the item, not the user's message
            self.publisher.update(wire.background_notification_update(item.text, item.background_task()), prompt_id)
        else:
            meta = {"source": item.source, "taskId": item.task_id}
            self.publisher.update(wire.text_update("user_message_chunk", text, meta), prompt_id)
        await self._tell_fifo(f.SetActive(True, prompt_id))
        try:
            await self._run_turn(TurnState(prompt_id, foreground=False), "automatic", text, "automatic")
        finally:
            await self._tell_fifo(f.SetActive(False))
        if self.checkpoints is not None:
            # the tree as the session left it (changes outside are judged by it)
            await self.checkpoints.settled(processes_live=self.background.processes_live)

    async def _run_turn(self, state: TurnState, kind: str, user_text: str | None,
                        origin: str) -> tuple[str | None, Exception | None]:
        """Run one turn in its work item; publish its terminal event. Returns (stop reason, error)."""
        prompt_id = state.prompt_id
        turn = Turn(self.ports, state)
        stop_reason: str | None = None
        error: Exception | None = None
        started = turn_log.turn_started(self.session_id, prompt_id, kind)
        started_ms = self.runtime.clock_ms()
        try:
            async with self.work_item(prompt_id, kind) as scope:
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
            self.publisher.event("turn_complete", wire.turn_complete(self.session_id, prompt_id, "cancelled",
                                                                     state.usage.summary()), prompt_id)
            if kind == "prompt":
                self.fifo.settle_on_close(prompt_id)
            turn_log.turn_ended(self.session_id, prompt_id, kind, "cancelled", None, state.usage, started)
            raise
        cancelled = None
        if scope.cancelled_caught:
            stop_reason = "cancelled"
            cancelled_at = self._cancelled_at if self._cancelled_at is not None else self.runtime.clock_ms()
            cancelled = wire.prompt_cancelled(cancelled_at, started_ms)
        if error is not None:
            code = error.code if isinstance(error, ModelError) else "internal_error"
            self.publisher.event("turn_error", wire.turn_error(self.session_id, prompt_id, self._error_message(error),
                                                               code, state.usage.summary()), prompt_id)
        else:
            stop_reason = stop_reason or "end_turn"
            self.publisher.event("turn_complete", wire.turn_complete(self.session_id, prompt_id, stop_reason,
                                                                     state.usage.summary(), state.token_limit,
                                                                     state.hook_stop_reason, cancelled), prompt_id)
        turn_log.turn_ended(self.session_id, prompt_id, kind, stop_reason if error is None else "error",
                            (error.code if isinstance(error, ModelError) else "internal_error") if error else None,
                            state.usage, started)
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

    def _cancel(self, prompt_id: str | None) -> CancelOutcome:
        """A user's cancel (``prompt_id`` None) or the FIFO's abort of a handed-over prompt (:mod:`.work_item`)."""
        outcome = self.work.cancel(prompt_id)
        if outcome is CancelOutcome.CANCEL_SCOPE and self._scope is not None:
            if self._cancelled_at is None:
                self._cancelled_at = self.runtime.clock_ms()  # the first cancel's moment (turn_complete says it)
            self._scope.cancel()
        return outcome

    def _cancel_prompt(self, prompt_id: str) -> None:
        self._cancel(prompt_id)

    def _queue_released(self) -> bool:
        """The last queued prompt was aborted: a chain that yielded to it ends; queues go on."""
        released = self.chain.release_queued_prompt_wait(turn_running=self.work.running)
        if released:
            self._wake.set()
        return released

    # ------------------------------------------------------------- lifecycle

    def _set_approval_mode(self, mode: str) -> str:
        previous = self.authorizer.mode
        if not self.authorizer.set_mode(mode):  # the handle validates; a bad message must not crash the actor
            return self.authorizer.mode
        self.records.mark()
        if mode == "plan":
            self._invalidate()  # the guard is forced off in Plan; leaving Plan does not revive it
        self.publisher.update(wire.mode_update(mode))
        # qwen serve's event for the same change, whoever made it: qwen's Web Shell reads only this one.
        self.publisher.event("approval_mode_changed", wire.approval_mode_changed(self.session_id, previous, mode))
        return mode

    def _prompt_admitted(self, text: str) -> None:
        """The FIFO admitted a prompt (in its handler): an untitled session takes its first line, listed as
        soon as the prompt's 202 is."""
        if self._set_title(title_from_prompt(text), only_if_untitled=True) and self._nursery is not None:
            self.records.save_soon(self._nursery)

    def _permission_rules_changed(self) -> None:
        """The session's own rules changed (an "always" answer in a turn, or a client's edit): kept in its
        record, so a restored session keeps them."""
        if self._nursery is not None:
            self.records.save_soon(self._nursery)

    def _set_title(self, title: str | None, *, only_if_untitled: bool) -> bool:
        """Change the title (published as ``session_info_update``, and as qwen serve's ``session_metadata_updated``
        for qwen's Web Shell); whether it changed."""
        if title == self.title or (only_if_untitled and self.title is not None):
            return False
        self.title = title
        self.publisher.update(wire.session_info_update(title, self.runtime.clock_ms()))
        self.publisher.event("session_metadata_updated",
                             wire.session_metadata_updated(self.session_id, title, automatic=only_if_untitled))
        return True

    def _invalidate(self) -> None:
        self.chain.invalidate(turn_running=self.work.running)
        self._wake.set()  # automatic work the old chain held back may run now

    def _rewind(self, turn: int) -> int | str:
        if self.work.running or (self.checkpoints is not None and self.checkpoints.restoring):
            return "the session is busy; cancel the running work first"
        kept = self.conversation.rewind(turn)
        if isinstance(kept, int):
            self._invalidate()
            self._rewound(turn, kept, None)
        return kept

    def _rewound(self, turn: int, kept: int, undo_id: str | None) -> None:
        # Every client shows the conversation: each of them (and a later replay) must drop the turns too.
        self.publisher.event("conversation_rewound", wire.conversation_rewound(self.session_id, turn, kept, undo_id))

    # ------------------------------------------------------------- checkpoints

    async def _before_change(self) -> None:
        if self.checkpoints is not None:
            await self.checkpoints.before_change()

    def _conversation_port(self) -> _ConversationPort:
        return _ConversationPort(self.conversation, lambda: self.work.running, self._invalidate)

    def _checkpoint_call(self, call: CheckpointCall) -> None:
        """Run a checkpoint operation in a task of the session's (it walks and writes files off the loop); the
        reply is its result or a ``CheckpointRefused``."""
        keeper = self.checkpoints
        if keeper is None or self._nursery is None:
            call.reply.send(CheckpointRefused("checkpoints_unavailable",
                                              "this daemon keeps no checkpoints (no state directory, or "
                                              "checkpoints.enabled is false)"))
            return
        if call.op in ("rewind", "undo") and self.work.running:
            call.reply.send(CheckpointRefused("session_busy", "the session is busy; cancel the running work first"))
            return
        self._nursery.start_soon(self._checkpoint_task, keeper, call)

    async def _checkpoint_task(self, keeper: Checkpoints, call: CheckpointCall) -> None:
        try:
            if call.op == "list":
                result: Any = await keeper.listing(self.conversation.turn_texts())
            elif call.op == "diff":
                result = await keeper.diff(call.turn or 0, self.conversation.turn_texts())
            elif call.op == "rewind":
                result = await keeper.rewind(call.turn or 0, call.force, self._conversation_port())
            else:
                result = await keeper.undo(call.undo_id or "", call.force, self._conversation_port())
        except CheckpointRefused as exc:
            result = exc
        except Exception as exc:  # a bad store (StorageError, a mangled log) must not take the session down
            log.warning("checkpoint %s of session %s failed: %r", call.op, self.session_id, exc)
            result = CheckpointRefused("storage_unavailable", f"the checkpoint store failed: {exc}")
        except BaseException:
            call.reply.close()  # the session is closing: the asker hears ActorGone
            raise
        else:
            if call.op == "rewind":
                self._rewound(call.turn or 0, result["historyLength"], result.get("undoId"))
            elif call.op == "undo":
                self.publisher.event("rewind_undone", wire.rewind_undone(
                    self.session_id, call.undo_id or "", result["historyLength"], result["undoId"]))
        call.reply.send(result)

    # ------------------------------------------------------------- what it says of itself

    def record(self) -> dict[str, Any]:
        """The session record (kept by the store; a restore starts from it)."""
        return {
            "sessionId": self.session_id, "cwd": self.cwd, "approvalMode": self.authorizer.mode,
            "model": self.context.model_name, "createdAt": self.created_at, "updatedAt": self.runtime.clock_ms(),
            "eventEpoch": self.bus.epoch,  # a cluster's next owner keeps it (a single daemon starts a new one)
            "title": self.title,
            **({"permissions": self.authorizer.listed_rules()["session"]} if self.authorizer.session_rules else {}),
            **self.system_prompt.overrides.to_record()}

    def work_counts(self) -> dict[str, Any]:
        """Its state and prompt counts, the one source of ``GET /session`` and ``GET /session/:id/status``.

        ``queuedCount``: prompts waiting, the running one not among them. ``pendingCount`` (qwen's) counts the
        running prompt too. ``state`` is ``running`` while any work runs (an automatic turn included).
        """
        stats = self.fifo.statistics()
        return {"state": "running" if self.work.running else "idle", "queuedCount": stats["queuedCount"],
                "pendingCount": stats["pendingCount"], "midTurnQueued": stats["midTurnQueued"]}

    def summary(self) -> dict[str, Any]:
        """What ``GET /session`` lists of it."""
        ring = self.bus.ring
        return {"cwd": self.cwd, "title": self.title, "createdAt": self.created_at,
                "updatedAt": ring[-1].ts_ms if ring else self.created_at, **self.work_counts()}

    def is_idle(self) -> bool:
        """Nothing running and nothing the session would start now (prompts or runnable automatic items)."""
        return not self.work.running and not self.fifo.statistics()["pendingCount"] \
            and self.chain.select_automatic() is None

    def status(self) -> dict[str, Any]:
        """``GET /session/:id/status``: its work, events, guard, background tasks, usage and context."""
        work = self.work
        running = work.running
        return {
            "sessionId": self.session_id,
            "workspaceCwd": self.cwd,
            "title": self.title,
            "displayName": self.title,  # qwen serve's name for it, which qwen's Web Shell reads
            **self.work_counts(),
            "activeWorkState": work.kind if running else "idle",
            "hasActivePrompt": running and work.kind == "prompt",
            "currentPromptId": work.prompt_id if running else None,
            "approvalMode": self.authorizer.mode,
            "model": self.context.model_name,  # the /model override only, as qwen's
            "modelName": self.context.model_in_use,
            "lastEventId": self.bus.last_event_id,
            "eventEpoch": self.bus.epoch,
            "subscribers": self.bus.subscriber_count,
            "historyLength": len(self.conversation),
            "backgroundTasks": self.background.status(),
            "automaticQueue": len(self.background.queue),
            "pendingPermissions": self.authorizer.broker.pending_ids,
            "todoStopGuard": self.chain.guard.summary(),
            "queuedPromptPriority": self.chain.queued_prompt_priority,
            "sandbox": self.runtime.sandbox.kind,  # what model-run commands of this session run in
            "usage": self.usage.summary(),  # model calls and tokens since the session began, by source
            "context": self.context.status(),  # the window, the last request's estimate and its calibration
        }


class _ConversationPort:
    """What a checkpoint restore does to the session's conversation (actors.checkpoints.ConversationPort), on
    the loop: ``changed`` is the session's own reaction to a conversation replaced under it."""

    def __init__(self, conversation: Any, busy: Callable[[], bool], changed: Callable[[], None]) -> None:
        self._conversation = conversation
        self.busy = busy
        self._changed = changed

    def turn_texts(self) -> list[str]:
        return self._conversation.turn_texts()

    def dump(self) -> list[dict[str, Any]]:
        return [message_to_dict(m) for m in self._conversation.history]

    def rewind(self, turn: int) -> int | str:
        kept = self._conversation.rewind(turn)
        if isinstance(kept, int):
            self._changed()
        return kept

    def replace(self, messages: list[dict[str, Any]]) -> int:
        self._conversation.replace([message_from_dict(d, "a checkpoint's undo entry") for d in messages])
        self._changed()
        return len(self._conversation)


__all__ = ["Session"]
