"""The prompt FIFO actor: admission, queued/running prompts, aborts, mid-turn input, drain.

It answers the one question the Todo Stop Guard's stop path asks of it —
``drain`` — with ``{messages, items, hasQueuedPrompt}``, where
``hasQueuedPrompt`` is true only when a complete prompt is queued and not
aborted. Everything it changes it publishes, in qwen-code's event shapes.
It also keeps the books of :mod:`.usage`: each model call on its prompt's turn
record and in the session's cumulative ledger, both journalled.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import logging

import attrs
import trio

from .. import wire
from .._actor import ActorRef, Reply, open_mailbox, serve_mailbox
from ..events import EventBus
from ..storage import DAEMON_RESTARTED, RESTARTED_MESSAGE, Replayed
from ..storage.writer import JournalWriter
from ..ids import IdSource
from ..model import Usage
from .prompt_records import MidTurnItem, PendingPrompt, TurnRecord, TurnState, admitted_record
from .usage import UsageLedger

log = logging.getLogger("trellis.fifo")

MAX_DRAIN_ITEMS = 10
TURN_RECORDS_KEPT = 256


@attrs.frozen
class DrainResult:
    messages: tuple[str, ...]
    items: tuple[MidTurnItem, ...]
    has_queued_prompt: bool

    def to_wire(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "items": [i.to_wire() for i in self.items],
                "hasQueuedPrompt": self.has_queued_prompt}


@attrs.frozen
class Admitted:
    prompt_id: str
    last_event_id: int
    event_epoch: str


@attrs.frozen
class QueueFull:
    limit: int
    pending_count: int


@attrs.frozen
class StorageUnavailable:
    """The journal could not take the admission: nothing was admitted."""

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
    """The session started (True) or finished (False) a piece of work; mid-turn input needs one."""

    active: bool


@attrs.frozen
class PostMidTurn:
    text: str
    message_id: str | None
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


FifoMessage = (Admit | TakeInbox | Abort | TakeNext | Settle | SetActive | PostMidTurn | Drain | RestoreMidTurn | ListPending
               | GetTurn | Statistics)


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
    ) -> None:
        self.session_id = session_id
        self._bus = bus
        self._ids = ids
        self._max_pending = max_pending
        self._max_mid_turn = max_mid_turn
        self._wake_session = wake_session
        self._cancel_running = cancel_running
        self._queue_released = queue_released
        self._handed_over = handed_over
        self._now_ms = now_ms
        self._entries: list[PendingPrompt] = []
        self._mid_turn: deque[MidTurnItem] = deque()
        self._turns: OrderedDict[str, TurnRecord] = OrderedDict()
        self._active = False
        self._journal = journal
        # Records others keep in the same journal (the session's timers), for a compacted one.
        self.snapshot_extra: Callable[[], list[dict[str, Any]]] = list
        self.usage = UsageLedger()  # the session's model calls, cumulative and journalled (status.usage)
        self.ref: ActorRef[FifoMessage] | None = None

    async def run(self, *, task_status: trio.TaskStatus[ActorRef[FifoMessage]] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"fifo:{self.session_id}", 64)
        self.ref = ref
        task_status.started(ref)
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
        match message:
            case Admit(body, client_id, reply):
                reply.send(self._admit(body, client_id))
            case TakeInbox(take, reply):
                reply.send(self._take_inbox(take))
            case Abort(prompt_id, reply):
                reply.send(self._abort(prompt_id))
            case TakeNext(reply):
                reply.send(self._take_next())
            case Settle(prompt_id, state, stop_reason, error):
                self._settle(prompt_id, state, stop_reason, error)
            case SetActive(active):
                self._active = active
                if not active:
                    self._promote_leftover_mid_turn()  # input an automatic turn never took runs next
            case PostMidTurn(text, message_id, reply):
                reply.send(self._post_mid_turn(text, message_id))
            case Drain(watch, reply):
                reply.send(self._drain(watch))
            case RestoreMidTurn(messages):
                for text in messages:
                    item = MidTurnItem(self._ids.new("msg"), text)
                    self._write_after({"op": "mid_turn", "messageId": item.message_id, "text": text})
                    self._mid_turn.append(item)
                if not self._active:
                    self._promote_leftover_mid_turn()
            case ListPending(reply):
                reply.send([e.to_wire() for e in self._entries])
            case GetTurn(prompt_id, reply):
                reply.send(self._turn(prompt_id))
            case Statistics(reply):
                reply.send(self.statistics())
            case _:
                raise TypeError(f"PromptFifo cannot handle {message!r}")

    # ------------------------------------------------------------- transitions

    def _admit(self, body: wire.PromptBody, client_id: str | None) -> Admitted | QueueFull | StorageUnavailable:
        if len(self._entries) >= self._max_pending:
            log.warning("prompt refused session=%s reason=prompt_queue_full pending=%d limit=%d", self.session_id,
                        len(self._entries), self._max_pending,
                        extra={"session": self.session_id, "reason": "prompt_queue_full",
                               "pending": len(self._entries), "limit": self._max_pending})
            return QueueFull(self._max_pending, len(self._entries))
        last_event_id = self._bus.last_event_id  # before anything this prompt publishes
        entry = PendingPrompt(self._ids.new("prompt"), body, body.text, self._now_ms(), client_id)
        entry.waited = self._active or bool(self._entries)
        try:  # durable before anything changes: the 202 is a promise
            self._write(admitted_record(entry))
        except OSError as exc:
            log.warning("prompt refused session=%s reason=storage_unavailable: %s", self.session_id, exc,
                        extra={"session": self.session_id, "reason": "storage_unavailable"})
            return StorageUnavailable(str(exc))
        self._entries.append(entry)
        self._record(TurnRecord(entry.prompt_id, "queued", entry.text, entry.queued_at))
        if entry.waited:
            self._bus.publish("pending_prompt_added",
                              wire.pending_prompt_added(self.session_id, entry.prompt_id, entry.text, entry.queued_at),
                              entry.prompt_id)
        self._wake_session()
        return Admitted(entry.prompt_id, last_event_id, self._bus.epoch)

    def _take_inbox(self, take: Callable[[], list[dict[str, Any]]]) -> int:
        # Taken inside this handler, so the journal's order and the queue's are the same one.
        try:
            records = take()
        except OSError as exc:  # they stay in the inbox: the next wake, or the next owner, takes them
            log.warning("session %s: prompts admitted elsewhere not taken yet: %s", self.session_id, exc)
            return 0
        known = {e.prompt_id for e in self._entries}
        for r in records:
            if r.get("promptId") in known or not isinstance(r.get("promptId"), str):
                continue
            body = wire.structure(r["body"], wire.PromptBody)
            entry = PendingPrompt(r["promptId"], body, r.get("text", body.text), r.get("queuedAt") or self._now_ms(),
                                  r.get("clientId"))
            entry.waited = self._active or bool(self._entries)
            self._entries.append(entry)
            self._record(TurnRecord(entry.prompt_id, "queued", entry.text, entry.queued_at))
            if entry.waited:
                self._bus.publish("pending_prompt_added",
                                  wire.pending_prompt_added(self.session_id, entry.prompt_id, entry.text,
                                                            entry.queued_at), entry.prompt_id)
        if records:
            self._wake_session()
        return len(records)

    def _abort(self, prompt_id: str) -> bool:
        entry = next((e for e in self._entries if e.prompt_id == prompt_id and not e.aborted), None)
        if entry is None:
            return False
        if entry.state == "queued":
            try:  # fail closed: an abort the journal lost would run the prompt after a restart
                self._write({"op": "aborted", "promptId": prompt_id})
            except OSError as exc:
                log.error("session %s: abort of %s refused: %s", self.session_id, prompt_id, exc)
                return False
            entry.aborted = True
            self._entries.remove(entry)
            self._bus.publish("pending_prompt_completed",
                              wire.pending_prompt_completed(self.session_id, prompt_id, "removed"), prompt_id)
            self._bus.publish("turn_complete", wire.turn_complete(self.session_id, prompt_id, "cancelled"), prompt_id)
            self._update(prompt_id, state="cancelled", stop_reason="cancelled", ended_at=self._now_ms())
            if not self.has_queued_prompt:
                self._queue_released()  # a chain that yielded to the queue must not wait for it
        else:
            entry.aborted = True
            self._cancel_running(prompt_id)
        return True

    def _take_next(self) -> PendingPrompt | None:
        entry = next((e for e in self._entries if e.state == "queued"), None)
        if entry is None:
            return None
        started_at = self._now_ms()
        try:  # fail closed: a start the journal lost would run the prompt (and its tools) again after a restart
            self._write({"op": "started", "promptId": entry.prompt_id, "startedAt": started_at})
        except OSError as exc:
            log.error("session %s: %s stays queued: %s", self.session_id, entry.prompt_id, exc)
            return None
        entry.state = "running"
        entry.started_at = started_at
        self._active = True
        self._handed_over(entry.prompt_id)  # from now on a cancel must reach it, even before it begins
        self._update(entry.prompt_id, state="running", started_at=entry.started_at)
        if entry.waited:
            self._bus.publish("pending_prompt_started",
                              wire.pending_prompt_started(self.session_id, entry.prompt_id, entry.text), entry.prompt_id)
        return entry

    def _settle(self, prompt_id: str, state: TurnState, stop_reason: str | None, error: str | None) -> None:
        ended = self._now_ms()  # one reading: the journal and the live record must agree after a restart
        # Written, not fsynced: it survives the daemon being killed, and the journal's next sync (the next
        # admission or start) makes it durable. A power cut before that only makes a restart report the turn
        # interrupted (daemon_restarted), as its transcript, never fsynced, may have lost its end too.
        self._write_after({"op": "ended", "promptId": prompt_id, "state": state, "stopReason": stop_reason,
                           "error": error, "endedAt": ended}, durable=False)
        entry = next((e for e in self._entries if e.prompt_id == prompt_id), None)
        if entry is not None:
            self._entries.remove(entry)
            if entry.waited:
                self._bus.publish("pending_prompt_completed",
                                  wire.pending_prompt_completed(self.session_id, prompt_id, "completed"), prompt_id)
        self._update(prompt_id, state=state, stop_reason=stop_reason, error=error, ended_at=ended)
        self._active = False
        self._promote_leftover_mid_turn()

    def _promote_leftover_mid_turn(self) -> None:
        """Mid-turn input that no tool boundary took runs as the next turn of its own."""
        if not self._mid_turn:
            return
        items = list(self._mid_turn)
        self._mid_turn.clear()
        text = "\n".join(i.text for i in items)
        body = wire.PromptBody(prompt=[wire.TextBlock(type="text", text=text)])
        entry = PendingPrompt(self._ids.new("prompt"), body, text, self._now_ms(), waited=True)
        self._write_after({"op": "promoted", "promptId": entry.prompt_id, "text": text, "queuedAt": entry.queued_at,
                           "messageIds": [i.message_id for i in items]})
        self._entries.insert(0, entry)
        self._record(TurnRecord(entry.prompt_id, "queued", text, entry.queued_at))
        self._bus.publish("pending_prompt_added",
                          wire.pending_prompt_added(self.session_id, entry.prompt_id, text, entry.queued_at),
                          entry.prompt_id)
        self._wake_session()

    def _post_mid_turn(self, text: str, message_id: str | None) -> dict[str, Any]:
        if not self._active:
            return {"accepted": False, "reason": "session_idle"}
        if len(self._mid_turn) >= self._max_mid_turn:
            return {"accepted": False, "reason": "queue_full"}
        item = MidTurnItem(message_id or self._ids.new("msg"), text)
        try:
            self._write({"op": "mid_turn", "messageId": item.message_id, "text": text})
        except OSError:
            return {"accepted": False, "reason": "storage_unavailable"}
        self._mid_turn.append(item)
        return {"accepted": True, "messageId": item.message_id}

    def _drain(self, watch_queued_prompt: bool) -> DrainResult:
        items = []
        while self._mid_turn and len(items) < MAX_DRAIN_ITEMS:
            items.append(self._mid_turn.popleft())
        if items:
            self._write_after({"op": "drained", "messageIds": [i.message_id for i in items]})
            self._bus.publish("mid_turn_message_injected",
                              wire.mid_turn_message_injected(self.session_id, [i.to_wire() for i in items]))
        return DrainResult(tuple(i.text for i in items), tuple(items),
                           watch_queued_prompt and self.has_queued_prompt)

    def record_usage(self, prompt_id: str, source: str, usage: Usage | None) -> None:
        """One model call of ``prompt_id`` ended: counted for the session, on the turn record (a
        prompt's; an automatic turn has none) and in the journal, so a restart keeps both.

        A synchronous call from the session (see :class:`~actors.session.usage.UsageMeter`).
        """
        call = UsageLedger.of_call(source, usage)
        self.usage.add(call)
        record = self._turns.get(prompt_id)
        if record is not None:
            if record.usage is None:
                record.usage = UsageLedger()
            record.usage.add(call)
        # Accounting, not a promise: written (it survives the daemon being killed), not fsynced per call.
        self._write_after({"op": "usage", "promptId": prompt_id, "usage": call.to_wire()}, durable=False)
        if self._journal is not None:
            self._journal.compact_if_due(self._snapshot)

    @property
    def has_queued_prompt(self) -> bool:
        """A complete prompt is queued and not aborted."""
        return any(e.state == "queued" and not e.aborted for e in self._entries)

    def _turn(self, prompt_id: str) -> dict[str, Any] | None:
        if prompt_id == "current":
            running = next((e for e in self._entries if e.state == "running"), None)
            if running is None:
                return None
            prompt_id = running.prompt_id
        record = self._turns.get(prompt_id)
        return record.to_wire() if record else None

    def statistics(self) -> dict[str, Any]:
        running = next((e.prompt_id for e in self._entries if e.state == "running"), None)
        return {"pendingCount": len(self._entries), "currentPromptId": running,
                "queuedCount": sum(1 for e in self._entries if e.state == "queued"),
                "midTurnQueued": len(self._mid_turn), "hasQueuedPrompt": self.has_queued_prompt}

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
        live = {e.prompt_id for e in self._entries}
        out: list[dict[str, Any]] = [{"op": "turn", "record": t.to_wire()} for t in self._turns.values()
                                     if t.prompt_id not in live]
        for e in self._entries:
            out.append(admitted_record(e))
            if e.state == "running":
                out.append({"op": "started", "promptId": e.prompt_id, "startedAt": e.started_at})
                record = self._turns.get(e.prompt_id)
                if record is not None and record.usage is not None:  # the running turn's calls so far
                    out.append({"op": "usage", "promptId": e.prompt_id, "usage": record.usage.to_wire()})
        out += [{"op": "mid_turn", "messageId": i.message_id, "text": i.text} for i in self._mid_turn]
        out += self.snapshot_extra()
        # Last: it sets the session's cumulative figures, the "usage" records above included.
        out.append({"op": "session_usage", "usage": self.usage.to_wire()})
        return out

    def journal_count(self, existing: int) -> None:
        """How many records the journal already holds (so compaction comes when it should)."""
        if self._journal is not None:
            self._journal.existing(existing)

    def restore(self, replayed: Replayed, code: str = DAEMON_RESTARTED,
                message: str = RESTARTED_MESSAGE) -> list[str]:
        """Take over what a previous daemon journalled (before :meth:`run`); returns the interrupted prompt ids.

        Queued prompts keep their order and ids and run as usual. Interrupted
        ones (running when the daemon died) end ``code`` (``daemon_restarted``;
        ``node_lost`` when another node of a cluster takes the session over) —
        journalled here, so a second restart does not end them again — and never run again.
        """
        for turn in replayed.turns.values():
            self._record(TurnRecord.from_wire(turn))
        self.usage = UsageLedger.from_wire(replayed.usage)
        for r in replayed.queued:
            if "body" in r:
                body = wire.structure(r["body"], wire.PromptBody)
            else:  # promoted mid-turn input
                body = wire.PromptBody(prompt=[wire.TextBlock(type="text", text=r.get("text", ""))])
            self._entries.append(PendingPrompt(r["promptId"], body, r.get("text", body.text), r.get("queuedAt") or 0,
                                               r.get("clientId"), waited=True))
        self._mid_turn.extend(MidTurnItem(m["messageId"], m["text"]) for m in replayed.mid_turn)
        for prompt_id in replayed.interrupted:
            ended = self._now_ms()
            self._write_after({"op": "ended", "promptId": prompt_id, "state": "error", "error": message,
                               "errorCode": code, "endedAt": ended})
            self._update(prompt_id, state="error", error=message, error_code=code,
                         ended_at=ended)
        self._promote_leftover_mid_turn()  # the turn it was meant for is gone: it runs next, on its own
        return list(replayed.interrupted)

    def abandon_queued(self) -> None:
        """The session is deleted: every queued prompt ends ``cancelled``, journalled and published."""
        for entry in [e for e in self._entries if e.state == "queued"]:
            self._write_after({"op": "aborted", "promptId": entry.prompt_id})
            self._entries.remove(entry)
            self._bus.publish("pending_prompt_completed",
                              wire.pending_prompt_completed(self.session_id, entry.prompt_id, "removed"),
                              entry.prompt_id)
            self._bus.publish("turn_complete", wire.turn_complete(self.session_id, entry.prompt_id, "cancelled"),
                              entry.prompt_id)
            self._update(entry.prompt_id, state="cancelled", stop_reason="cancelled", ended_at=self._now_ms())
        if self._mid_turn:
            self._write_after({"op": "drained", "messageIds": [i.message_id for i in self._mid_turn]})
            self._mid_turn.clear()

    def settle_on_close(self, prompt_id: str) -> None:
        """The session closes under a running prompt: journal and record it ``cancelled`` now.

        Called from the session's exit path, where the FIFO's mailbox may be gone
        already; synchronous, like every transition here.
        """
        entry = next((e for e in self._entries if e.prompt_id == prompt_id), None)
        if entry is None or entry.state != "running":
            return
        ended = self._now_ms()
        self._write_after({"op": "ended", "promptId": prompt_id, "state": "cancelled", "stopReason": "cancelled",
                           "endedAt": ended})
        self._entries.remove(entry)
        self._update(prompt_id, state="cancelled", stop_reason="cancelled", ended_at=ended)

    # ------------------------------------------------------------- turn records

    def _record(self, record: TurnRecord) -> None:
        self._turns[record.prompt_id] = record
        while len(self._turns) > TURN_RECORDS_KEPT:
            self._turns.popitem(last=False)

    def _update(self, prompt_id: str, **changes: Any) -> None:
        record = self._turns.get(prompt_id)
        if record is not None:
            for key, value in changes.items():
                if value is not None:
                    setattr(record, key, value)
