"""The prompt FIFO actor: the shell around :mod:`.prompt_queue`, which holds the queue and its transitions.

It answers the one question the Todo Stop Guard's stop path asks of it —
``drain`` — with ``{messages, items, hasQueuedPrompt}``, where
``hasQueuedPrompt`` is true only when a complete prompt is queued and not
aborted. Everything it changes it publishes, in qwen-code's event shapes.
It also keeps the books of :mod:`.usage`: each model call on its prompt's turn
record and in the session's cumulative ledger, both journalled.

The transitions are :class:`~.prompt_queue.PromptQueue`'s (pure: see its
table); this actor does the I/O around them: it serves the mailbox, reads the
clock, journals (a fail-closed transition's record before it commits the
change, the others' after), publishes, logs and calls the session back —
applying each :class:`~.prompt_queue.Step`'s effects in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import trio

from .. import wire
from .._actor import ActorRef, Reply, open_mailbox, serve_mailbox
from ..events import EventBus
from ..ids import IdSource
from ..model import Usage
from ..storage import DAEMON_RESTARTED, RESTARTED_MESSAGE, Replayed
from ..storage.writer import JournalWriter
from ..telemetry import Telemetry
from .prompt_queue import (
    MAX_DRAIN_ITEMS,
    TURN_RECORDS_KEPT,
    CancelRunning,
    PromptAdmitted,
    DrainResult,
    HandedOver,
    Proposal,
    PromptQueue,
    Publish,
    QueueFull,
    QueueReleased,
    Record,
    Step,
    Wake,
)
from .prompt_records import MidTurnItem, PendingPrompt, TurnState
from .usage import UsageLedger

__all__ = [
    "MAX_DRAIN_ITEMS", "TURN_RECORDS_KEPT", "Abort", "Admit", "Admitted", "Drain", "DrainResult", "FifoMessage",
    "GetTurn", "ListPending", "MidTurnItem", "PendingPrompt", "PostMidTurn", "PromptFifo", "QueueFull",
    "RestoreMidTurn", "SetActive", "Settle", "Statistics", "StorageUnavailable", "TakeInbox", "TakeNext",
]

log = logging.getLogger("trellis.fifo")

MAILBOX_SIZE = 64

T = TypeVar("T")


@attrs.frozen
class Admitted:
    prompt_id: str
    last_event_id: int
    event_epoch: str


@attrs.frozen
class StorageUnavailable:
    """The journal could not take a change (an admission, a mid-turn message taken back): nothing changed."""

    reason: str


# ----------------------------------------------------------------- messages


@attrs.frozen
class Admit:
    body: wire.PromptBody
    client_id: str | None
    reply: Reply[Admitted | QueueFull | StorageUnavailable]


@attrs.frozen
class TakeInbox:
    """Prompts another node admitted for this session (cluster mode): ``take()`` moves them into the
    journal (atomically, fenced) and returns their ``admitted`` records, which join the queue in that order."""

    take: Callable[[], list[dict[str, Any]]]
    reply: Reply[int]


@attrs.frozen
class Abort:
    prompt_id: str
    reply: Reply[bool]


@attrs.frozen
class TakeNext:
    reply: Reply[PendingPrompt | None]


@attrs.frozen
class Settle:
    prompt_id: str
    state: TurnState
    stop_reason: str | None = None
    error: str | None = None


@attrs.frozen
class SetActive:
    """The session started (True) or finished (False) a piece of work; mid-turn input needs one. ``prompt_id``:
    the work's (an automatic turn's), under which the mid-turn input it takes is published."""

    active: bool
    prompt_id: str | None = None


@attrs.frozen
class PostMidTurn:
    text: str
    message_id: str | None
    reply: Reply[dict[str, Any]]
    client_id: str | None = None  # X-Qwen-Client-Id: the originatorClientId of its pending_prompt_* events


@attrs.frozen
class RemoveMidTurn:
    """Take back a mid-turn message no turn has taken yet; the reply says whether it was still waiting (or
    that the journal refused the removal: it stays)."""

    message_id: str
    reply: Reply[bool | StorageUnavailable]


@attrs.frozen
class ListMidTurn:
    reply: Reply[dict[str, Any]]


@attrs.frozen
class RestoreMidTurn:
    """Mid-turn messages a late drain answer brought back after their turn ended."""

    messages: tuple[str, ...]


@attrs.frozen
class Drain:
    watch_queued_prompt: bool
    reply: Reply[DrainResult]


@attrs.frozen
class ListPending:
    reply: Reply[list[dict[str, Any]]]


@attrs.frozen
class GetTurn:
    prompt_id: str  # or "current"
    reply: Reply[dict[str, Any] | None]


@attrs.frozen
class Statistics:
    reply: Reply[dict[str, Any]]


FifoMessage = (Admit | TakeInbox | Abort | TakeNext | Settle | SetActive | PostMidTurn | RemoveMidTurn | ListMidTurn
               | Drain | RestoreMidTurn | ListPending | GetTurn | Statistics)


class PromptFifo:
    """Pending prompts in admission order; the session takes them one at a time."""

    def __init__(
        self,
        session_id: str,
        bus: EventBus,
        ids: IdSource,
        *,
        max_pending: int,
        max_mid_turn: int,
        wake_session: Callable[[], None],
        cancel_running: Callable[[str], None],
        now_ms: Callable[[], int],
        queue_released: Callable[[], None] = lambda: None,
        handed_over: Callable[[str], None] = lambda _: None,
        journal: JournalWriter | None = None,
        admitted: Callable[[str], None] = lambda _: None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.session_id = session_id
        self._telemetry = telemetry or Telemetry.NONE  # prompts admitted and refused
        self._bus = bus
        self._wake_session = wake_session
        self._cancel_running = cancel_running
        self._queue_released = queue_released
        self._handed_over = handed_over
        self._admitted = admitted  # a prompt is in the queue (the session titles itself from its first)
        self._now_ms = now_ms
        self._queue = PromptQueue(session_id, max_pending=max_pending, max_mid_turn=max_mid_turn, new_id=ids.new)
        self._journal = journal
        # Records others keep in the same journal (the session's timers), for a compacted one.
        self.snapshot_extra: Callable[[], list[dict[str, Any]]] = list
        self.ref: ActorRef[FifoMessage] | None = None

    @property
    def queue(self) -> PromptQueue:
        """The queue's state and transitions (pure; this actor applies what they return)."""
        return self._queue

    @property
    def usage(self) -> UsageLedger:
        """The session's model calls, cumulative and journalled (``status.usage``)."""
        return self._queue.usage

    @usage.setter
    def usage(self, ledger: UsageLedger) -> None:
        self._queue.usage = ledger

    async def run(self, *, task_status: trio.TaskStatus[ActorRef[FifoMessage]] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"fifo:{self.session_id}", MAILBOX_SIZE)
        self.ref = ref
        task_status.started(ref)
        await self.serve(inbox)

    async def serve(self, inbox: trio.MemoryReceiveChannel[FifoMessage]) -> None:
        """Serve a mailbox made elsewhere (a session starts its FIFO with the first message: LazyActorRef)."""
        # Where the store syncs off the event loop, a message's records are synced after its handler (and the
        # messages that arrived meanwhile: an admission's sync takes the start it woke the session to ask for),
        # before its replies go (a 202 still waits for its admission to be durable); the loop runs on meanwhile.
        # Nothing to sync (most messages; a store that syncs inline): no commit, no checkpoint.
        await serve_mailbox(inbox, self.handle, self._journal)

    # The handler is synchronous on purpose: one message at a time, no await mid-change.
    def handle(self, message: FifoMessage) -> None:
        journal = self._journal
        if journal is None:
            self._handle(message)
            return
        with journal.deferring():
            self._handle(message)
            journal.compact_if_due(self._snapshot)  # after the change: the snapshot includes it

    def _handle(self, message: FifoMessage) -> None:
        queue = self._queue
        match message:
            case Admit(body, client_id, reply):
                reply.send(self._admit(body, client_id))
            case TakeInbox(take, reply):
                reply.send(self._take_inbox(take))
            case Abort(prompt_id, reply):
                reply.send(self._abort(prompt_id))
            case TakeNext(reply):
                reply.send(self._take())
            case Settle(prompt_id, state, stop_reason, error):
                self._settle(prompt_id, state, stop_reason, error)
            case SetActive(active, prompt_id):
                self._apply(queue.set_active(active, self._now_ms(), prompt_id))
            case PostMidTurn(text, message_id, reply, client_id):
                reply.send(self._post_mid_turn(text, message_id, client_id))
            case RemoveMidTurn(message_id, reply):
                reply.send(self._remove_mid_turn(message_id))
            case ListMidTurn(reply):
                reply.send(queue.mid_turn_listing())
            case Drain(watch, reply):
                reply.send(self._drain(watch))
            case RestoreMidTurn(messages):
                self._apply(queue.restore_mid_turn(messages, self._now_ms()))
            case ListPending(reply):
                reply.send(queue.pending())
            case GetTurn(prompt_id, reply):
                reply.send(queue.turn(prompt_id))
            case Statistics(reply):
                reply.send(queue.statistics())
            case _:
                raise TypeError(f"PromptFifo cannot handle {message!r}")

    # ------------------------------------------------------------- transitions, applied

    def _admit(self, body: wire.PromptBody, client_id: str | None) -> Admitted | QueueFull | StorageUnavailable:
        last_event_id = self._bus.last_event_id  # before anything this prompt publishes
        planned = self._queue.admit(body, client_id, self._now_ms())
        if isinstance(planned, Step):
            full = self._apply(planned)
            log.warning("prompt refused session=%s reason=prompt_queue_full pending=%d limit=%d", self.session_id,
                        full.pending_count, full.limit,
                        extra={"session": self.session_id, "reason": "prompt_queue_full",
                               "pending": full.pending_count, "limit": full.limit})
            self._telemetry.prompt_refused("prompt_queue_full")
            return full
        try:  # durable before anything changes: the 202 is a promise
            entry = self._durable_then_commit(planned)
        except OSError as exc:
            log.warning("prompt refused session=%s reason=storage_unavailable: %s", self.session_id, exc,
                        extra={"session": self.session_id, "reason": "storage_unavailable"})
            self._telemetry.prompt_refused("storage_unavailable")
            return StorageUnavailable(str(exc))
        self._telemetry.prompt_admitted()
        return Admitted(entry.prompt_id, last_event_id, self._bus.epoch)

    def _take_inbox(self, take: Callable[[], list[dict[str, Any]]]) -> int:
        # Taken inside this handler, so the journal's order and the queue's are the same one.
        try:
            records = take()
        except OSError as exc:  # they stay in the inbox: the next wake, or the next owner, takes them
            log.warning("session %s: prompts admitted elsewhere not taken yet: %s", self.session_id, exc)
            return 0
        return self._apply(self._queue.take_inbox(records, self._now_ms()))

    def _abort(self, prompt_id: str) -> bool:
        planned = self._queue.abort(prompt_id, self._now_ms())
        if isinstance(planned, Step):  # unknown, aborted already, or running (cancelled, not journalled)
            return self._apply(planned)
        try:  # fail closed: an abort the journal lost would run the prompt after a restart
            return self._durable_then_commit(planned)
        except OSError as exc:
            log.error("session %s: abort of %s refused: %s", self.session_id, prompt_id, exc)
            return False

    def _take(self) -> PendingPrompt | None:
        planned = self._queue.take(self._now_ms())
        if isinstance(planned, Step):  # nothing queued
            return self._apply(planned)
        try:  # fail closed: a start the journal lost would run the prompt (and its tools) again after a restart
            return self._durable_then_commit(planned)
        except OSError as exc:
            log.error("session %s: %s stays queued: %s", self.session_id, planned.change.prompt_id, exc)
            return None

    def _settle(self, prompt_id: str, state: TurnState, stop_reason: str | None, error: str | None) -> None:
        # One reading: the journal and the live record must agree after a restart.
        self._apply(self._queue.settle(prompt_id, state, stop_reason, error, self._now_ms()))

    def _post_mid_turn(self, text: str, message_id: str | None, client_id: str | None = None) -> dict[str, Any]:
        planned = self._queue.post_mid_turn(text, message_id, client_id, self._now_ms())
        if isinstance(planned, Step):  # refused: idle, or full
            return self._apply(planned)
        try:
            return self._durable_then_commit(planned)
        except OSError:
            return {"accepted": False, "reason": "storage_unavailable"}

    def _remove_mid_turn(self, message_id: str) -> bool | StorageUnavailable:
        planned = self._queue.remove_mid_turn(message_id, self._now_ms())
        if isinstance(planned, Step):  # not waiting (unknown, or taken already)
            return self._apply(planned)
        try:  # fail closed: a removal the journal lost would put the message in a turn after a restart
            return self._durable_then_commit(planned)
        except OSError as exc:
            log.error("session %s: mid-turn message %s not removed: %s", self.session_id, message_id, exc)
            return StorageUnavailable(str(exc))

    def _drain(self, watch_queued_prompt: bool) -> DrainResult:
        return self._apply(self._queue.drain(watch_queued_prompt))

    def record_usage(self, prompt_id: str, source: str, usage: Usage | None) -> None:
        """One model call of ``prompt_id`` ended: counted for the session, on the turn record (a
        prompt's; an automatic turn has none) and in the journal, so a restart keeps both.

        A synchronous call from the session (see :class:`~actors.session.usage.UsageMeter`).
        """
        self._apply(self._queue.record_usage(prompt_id, source, usage))
        if self._journal is not None:
            self._journal.compact_if_due(self._snapshot)

    @property
    def has_queued_prompt(self) -> bool:
        """A complete prompt is queued and not aborted."""
        return self._queue.has_queued_prompt

    def statistics(self) -> dict[str, Any]:
        return self._queue.statistics()

    def restore(self, replayed: Replayed, code: str = DAEMON_RESTARTED,
                message: str = RESTARTED_MESSAGE) -> list[str]:
        """Take over what a previous daemon journalled (before :meth:`run`); returns the interrupted prompt ids.

        Queued prompts keep their order and ids and run as usual. Interrupted
        ones (running when the daemon died) end ``code`` (``daemon_restarted``;
        ``node_lost`` when another node of a cluster takes the session over) —
        journalled here, so a second restart does not end them again — and never run again.
        """
        return self._apply(self._queue.restore(replayed, self._now_ms(), code, message))

    def abandon_queued(self) -> None:
        """The session is deleted: every queued prompt ends ``cancelled``, journalled and published."""
        self._apply(self._queue.abandon_queued(self._now_ms()))

    def settle_on_close(self, prompt_id: str) -> None:
        """The session closes under a running prompt: journal and record it ``cancelled`` now.

        Called from the session's exit path, where the FIFO's mailbox may be gone
        already; synchronous, like every transition here.
        """
        self._apply(self._queue.settle_on_close(prompt_id, self._now_ms()))

    # ------------------------------------------------------------- effects

    def _durable_then_commit(self, proposal: Proposal[T]) -> T:
        """Journal ``proposal``'s record, then make its change; ``OSError`` (nothing changed) if the journal
        cannot make the record durable."""
        self._write(proposal.record)
        return self._apply(self._queue.commit(proposal))

    def _apply(self, step: Step[T]) -> T:
        """Emit what a transition returned, in its order; its answer."""
        for effect in step.effects:
            kind = type(effect)
            if kind is Publish:
                self._bus.publish(effect.name, effect.payload, effect.prompt_id,  # type: ignore[union-attr]
                                  effect.originator)  # type: ignore[union-attr]
            elif kind is Record:
                self._write_after(effect.record, durable=effect.durable)  # type: ignore[union-attr]
            elif kind is Wake:
                self._wake_session()
            elif kind is CancelRunning:
                self._cancel_running(effect.prompt_id)  # type: ignore[union-attr]
            elif kind is HandedOver:
                self._handed_over(effect.prompt_id)  # type: ignore[union-attr]
            elif kind is QueueReleased:
                self._queue_released()
            elif kind is PromptAdmitted:
                self._admitted(effect.text)  # type: ignore[union-attr]
            else:
                raise TypeError(f"PromptFifo cannot apply {effect!r}")
        return step.answer

    # ------------------------------------------------------------- the journal

    def _write(self, record: dict[str, Any], *, durable: bool = True) -> None:
        """Journal ``record`` before the change it describes; ``OSError`` when it cannot be made durable."""
        if self._journal is not None:
            self._journal.append(record, durable=durable)

    def _write_after(self, record: dict[str, Any], *, durable: bool = True) -> None:
        """Journal a change that goes ahead either way (a failed write is logged; a restart may redo it)."""
        try:
            self._write(record, durable=durable)
        except OSError as exc:
            log.error("session %s: %s", self.session_id, exc)

    def _snapshot(self) -> list[dict[str, Any]]:
        """The journal compacted to what a restart needs: live prompts, waiting input, kept turn records."""
        return self._queue.snapshot(self.snapshot_extra())

    def journal_count(self, existing: int) -> None:
        """How many records the journal already holds (so compaction comes when it should)."""
        if self._journal is not None:
            self._journal.existing(existing)
