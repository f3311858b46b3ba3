"""The prompt queue as a pure state machine: what the FIFO holds, its transitions, and what each emits.

No I/O, no clock, no Trio, no logging, no event bus — the FIFO actor
(:class:`~actors.session.fifo.PromptFifo`) is its shell: it runs the mailbox,
reads the clock, calls a transition with the time (``now``, in milliseconds)
and applies what the transition returns, in order. Theory of operation:

* **Entries** are the pending prompts in the order they run: *queued* ones, and
  at most one *running* (the session takes the next prompt only once the last one
  settled: one work item at a time; the queue does not enforce it). An entry
  leaves the queue with exactly one terminal outcome: settled, aborted while
  queued, abandoned (the session is deleted) or settled on close.
* **Active**: the session runs a piece of work (a prompt it took, or an
  automatic turn). Only then is mid-turn input accepted; when the work ends,
  input no tool boundary drained is *promoted*: each message a prompt at the
  head, under its message id.
* **Turn records** of the last :data:`TURN_RECORDS_KEPT` prompts, and the
  session's cumulative **usage**.

What a transition returns: a :class:`Step` — the answer and its ``effects``,
plain data for the shell to apply in order: :class:`Record` (a journal record
written *after* the change; a failed write is only logged, the change stands;
``durable=False``: written, not synced), :class:`Publish` (an event for the
bus, its payload made by :mod:`actors.wire`), and the session's signals
:class:`Wake`, :class:`CancelRunning`, :class:`QueueReleased`,
:class:`HandedOver` and :class:`PromptAdmitted`.

**Fail-closed** transitions (marked ▲ below) return a :class:`Proposal`
instead when they would change something: the journal ``record`` that must be
durable *before* the change, and nothing changed yet. The shell appends it;
only if that worked does it call :meth:`PromptQueue.commit`, which makes the
change and returns its :class:`Step`. A proposal the journal refused is simply
dropped (the queue is as it was), and it is good only until the next transition.

Transitions (``-`` = emits nothing; "promote" = the promotion row, when mid-turn input waits):

=============================  ===========================  =========================================================
transition                     journal                      change; effects
=============================  ===========================  =========================================================
admit(body, client, now) ▲     admitted (before)            full (``max_pending`` entries): answer :class:`QueueFull`,
                                                            nothing else. Else: queued at the tail, turn record
                                                            queued; ``pending_prompt_added`` if it waited (the session
                                                            was active or entries were pending); PromptAdmitted; Wake
take_inbox(records, now)       - (the store's take wrote    each record not queued yet: queued at the tail, as admit
                               them)                        (no journal); Wake if there were records
abort(id, now) ▲ (queued)      aborted (before)             removed, turn cancelled; ``pending_prompt_completed``
                                                            (removed), ``turn_complete`` (cancelled); QueueReleased
                                                            when no queued prompt is left
abort(id) (running)            -                            marked aborted (a second abort is refused);
                                                            CancelRunning(id). Unknown or aborted: answer False
take(now) ▲                    started (before)             the first queued -> running, active; HandedOver(id);
                                                            ``pending_prompt_started`` if it waited. None queued:
                                                            answer None
settle(id, state, ..., now)    ended (after, not durable)   removed, turn record ends; ``pending_prompt_completed``
                                                            (completed) if it waited; idle; promote
set_active(active, now)        -                            active; going idle: promote
post_mid_turn(text, id) ▲      mid_turn (before)            an id known already (a retry): accepted again, no change,
                                                            or refused ``message_id_conflict`` (another text, or a
                                                            prompt's id); idle: refused ``session_idle``;
                                                            ``max_mid_turn`` waiting: refused ``queue_full``; else
                                                            appended (the client's id, or a fresh ``msg`` id);
                                                            ``pending_prompt_added`` under its id (qwen serve's)
remove_mid_turn(id) ▲          drained (before)             waiting: removed, ``pending_prompt_completed`` (removed),
                               (promoted: aborted)          answer True; promoted and queued: as abort; else
                                                            (unknown, or taken already): answer False
restore_mid_turn(texts, now)   mid_turn each (after)        appended under fresh ids (a late drain's answer brought
                                                            them back); idle: promote
drain(watch)                   drained (after)              the oldest :data:`MAX_DRAIN_ITEMS` waiting taken (their ids
                                                            settled); ``mid_turn_message_injected`` under the running
                                                            work's prompt id; answer
                                                            :class:`DrainResult`
(promote)                      promoted (after) each        each waiting message -> a queued prompt under its message
                                                            id (a fresh one if a prompt has it), in order, at the head
                                                            (their ids promoted); ``pending_prompt_added`` each; Wake
restore(replayed, now, code)   ended each interrupted       turns, usage, queued prompts and waiting input taken from
                               (after)                      the journal; the interrupted end ``error`` with ``code``;
                                                            promote
abandon_queued(now)            aborted each, drained        every queued one removed as by abort (same events, no
                               (after)                      QueueReleased); waiting input dropped
settle_on_close(id, now)       ended (after)                the running one removed, turn cancelled; no events
record_usage(id, src, usage)   usage (after, not durable)   the session's ledger and the turn record add the call
=============================  ===========================  =========================================================

Queries (no change): :meth:`~PromptQueue.snapshot` (the journal compacted to
what a restart needs), :meth:`~PromptQueue.statistics`,
:attr:`~PromptQueue.has_queued_prompt`, :meth:`~PromptQueue.pending`,
:meth:`~PromptQueue.turn`, :meth:`~PromptQueue.mid_turn_listing` (the waiting
input, and the ids of the last :data:`MID_TURN_IDS_KEPT` taken into a turn —
*settled* — or run as a prompt of their own — *promoted*: how a client that
sent one learns where it went).

Fresh ids come from ``new_id(prefix)`` (the session's ``IdSource.new``), asked
only when a transition creates something, so a refused admission draws none
and counted ids (replays, tests) stay what they were.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from .. import wire
from ..model.base import Usage
from .prompt_records import MidTurnItem, PendingPrompt, TurnRecord, TurnState, admitted_record
from .usage import UsageLedger

if TYPE_CHECKING:
    from ..storage.journal import Replayed

MAX_DRAIN_ITEMS = 10
TURN_RECORDS_KEPT = 256
MID_TURN_IDS_KEPT = 200  # settled and promoted mid-turn message ids, each (qwen serve keeps as many)

T = TypeVar("T")


# ----------------------------------------------------------------- answers


@attrs.frozen
class QueueFull:
    limit: int
    pending_count: int


@attrs.frozen
class DrainResult:
    messages: tuple[str, ...]
    items: tuple[MidTurnItem, ...]
    has_queued_prompt: bool

    def to_wire(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "items": [i.to_wire() for i in self.items],
                "hasQueuedPrompt": self.has_queued_prompt}


# ----------------------------------------------------------------- effects


@attrs.frozen
class Record:
    """Journal ``record`` after the change: a failed write is logged, the change stands (a restart may redo it).
    ``durable=False``: written, not synced (the journal's next sync makes it durable)."""

    record: dict[str, Any]
    durable: bool = True


@attrs.frozen
class Publish:
    """Publish an event on the session's bus."""

    name: str
    payload: dict[str, Any]
    prompt_id: str | None = None
    originator: str | None = None  # the envelope's originatorClientId: the client whose input it is about


@attrs.frozen
class Wake:
    """Wake the session: a prompt is queued."""


@attrs.frozen
class CancelRunning:
    """Cancel the running prompt ``prompt_id`` (its work item, or the one about to begin)."""

    prompt_id: str


@attrs.frozen
class QueueReleased:
    """No queued prompt is left after an abort: a chain that yielded to the queue must not wait for it."""


@attrs.frozen
class HandedOver:
    """``prompt_id`` now runs: from here on a cancel must reach it, even before its work item begins."""

    prompt_id: str


@attrs.frozen
class PromptAdmitted:
    """A client's prompt joined the queue (the session takes an untitled session's title from it)."""

    prompt_id: str
    text: str


Effect = Record | Publish | Wake | CancelRunning | QueueReleased | HandedOver | PromptAdmitted
WAKE = Wake()
QUEUE_RELEASED = QueueReleased()


@attrs.frozen
class Step(Generic[T]):
    """A transition's answer and what to emit, in order."""

    answer: T
    effects: tuple[Effect, ...] = ()


# ----------------------------------------------------------------- fail-closed changes


@attrs.frozen
class Admission:
    entry: PendingPrompt


@attrs.frozen
class Start:
    prompt_id: str
    started_at: int


@attrs.frozen
class Removal:
    """A queued prompt aborted."""

    prompt_id: str
    ended_at: int


@attrs.frozen
class MidTurnPost:
    item: MidTurnItem
    queued_at: int


@attrs.frozen
class MidTurnRemoval:
    message_id: str


Change = Admission | Start | Removal | MidTurnPost | MidTurnRemoval


@attrs.frozen
class Proposal(Generic[T]):
    """A change that happens only once ``record`` is durable: journal it first, then
    :meth:`PromptQueue.commit` it. Nothing has changed yet; a refused write drops it."""

    record: dict[str, Any]
    change: Change
    ticket: int  # the queue's transition count when proposed: good until the next transition


class StaleProposal(RuntimeError):
    """A proposal committed after another transition (or twice): the queue may no longer match it."""


# ----------------------------------------------------------------- the machine


class PromptQueue:
    """One session's pending prompts, mid-turn input, turn records and usage; pure transitions."""

    def __init__(self, session_id: str, *, max_pending: int, max_mid_turn: int,
                 new_id: Callable[[str], str]) -> None:
        self.session_id = session_id
        self.max_pending = max_pending
        self.max_mid_turn = max_mid_turn
        self._new_id = new_id
        self.entries: list[PendingPrompt] = []  # changed in place only (the shell lends it out as it is)
        # A list, not a deque: an empty deque holds a 64-slot block, in every idle session (at most
        # max_mid_turn wait here).
        self.mid_turn: list[MidTurnItem] = []
        self.settled_ids: list[str] = []  # the last MID_TURN_IDS_KEPT taken into a turn (lists, as above)
        self.promoted_ids: list[str] = []  # the last MID_TURN_IDS_KEPT run as a prompt of their own
        self.turns: OrderedDict[str, TurnRecord] = OrderedDict()
        self.active = False
        self.active_prompt_id: str | None = None  # the work running now (a prompt's or an automatic turn's id)
        self.usage = UsageLedger()  # the session's model calls, cumulative and journalled (status.usage)
        self._tick = 0  # transitions so far: a proposal is good until the next one

    # ------------------------------------------------------------- queries

    @property
    def has_queued_prompt(self) -> bool:
        """A complete prompt is queued and not aborted."""
        return any(e.state == "queued" and not e.aborted for e in self.entries)

    @property
    def running(self) -> PendingPrompt | None:
        return next((e for e in self.entries if e.state == "running"), None)

    def statistics(self) -> dict[str, Any]:
        running = self.running
        return {"pendingCount": len(self.entries), "currentPromptId": running.prompt_id if running else None,
                "queuedCount": sum(1 for e in self.entries if e.state == "queued"),
                "midTurnQueued": len(self.mid_turn), "hasQueuedPrompt": self.has_queued_prompt}

    def pending(self) -> list[dict[str, Any]]:
        return [e.to_wire() for e in self.entries]

    def mid_turn_listing(self) -> dict[str, Any]:
        """The waiting mid-turn input, and where the last ones went (``GET /session/:id/mid-turn-messages``)."""
        return {"messages": [i.waiting_wire() for i in self.mid_turn], "settledMessageIds": list(self.settled_ids),
                "promotedMessageIds": list(self.promoted_ids)}

    def turn(self, prompt_id: str) -> dict[str, Any] | None:
        """The turn record of ``prompt_id`` (``"current"``: the running prompt's), wire form."""
        if prompt_id == "current":
            running = self.running
            if running is None:
                return None
            prompt_id = running.prompt_id
        record = self.turns.get(prompt_id)
        return record.to_wire() if record else None

    def snapshot(self, extra: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
        """The journal compacted to what a restart needs: kept turn records, live prompts, waiting input,
        ``extra`` (records others keep in the same journal), and last the session's cumulative usage."""
        live = {e.prompt_id for e in self.entries}
        out: list[dict[str, Any]] = [{"op": "turn", "record": t.to_wire()} for t in self.turns.values()
                                     if t.prompt_id not in live]
        for e in self.entries:
            out.append(admitted_record(e))
            if e.state == "running":
                out.append({"op": "started", "promptId": e.prompt_id, "startedAt": e.started_at})
                record = self.turns.get(e.prompt_id)
                if record is not None and record.usage is not None:  # the running turn's calls so far
                    out.append({"op": "usage", "promptId": e.prompt_id, "usage": record.usage.to_wire()})
        out += [i.record() for i in self.mid_turn]
        out += extra
        # Last: it sets the session's cumulative figures, the "usage" records above included.
        out.append({"op": "session_usage", "usage": self.usage.to_wire()})
        return out

    # ------------------------------------------------------------- fail-closed transitions

    def admit(self, body: wire.PromptBody, client_id: str | None,
              now: int) -> Step[QueueFull] | Proposal[PendingPrompt]:
        self._tick += 1
        if len(self.entries) >= self.max_pending:
            return Step(QueueFull(self.max_pending, len(self.entries)))
        entry = PendingPrompt(self._fresh_prompt_id(), body, body.text, now, client_id)
        entry.waited = self.active or bool(self.entries)
        return self._propose(admitted_record(entry), Admission(entry))

    def abort(self, prompt_id: str, now: int) -> Step[bool] | Proposal[bool]:
        self._tick += 1
        entry = next((e for e in self.entries if e.prompt_id == prompt_id and not e.aborted), None)
        if entry is None:
            return Step(False)
        if entry.state == "queued":
            # Fail closed: an abort the journal lost would run the prompt after a restart.
            return self._propose({"op": "aborted", "promptId": prompt_id}, Removal(prompt_id, now))
        entry.aborted = True  # running: it ends when the session settles it
        return Step(True, (CancelRunning(prompt_id),))

    def take(self, now: int) -> Step[None] | Proposal[PendingPrompt]:
        self._tick += 1
        entry = next((e for e in self.entries if e.state == "queued"), None)
        if entry is None:
            return Step(None)
        # Fail closed: a start the journal lost would run the prompt (and its tools) again after a restart.
        return self._propose({"op": "started", "promptId": entry.prompt_id, "startedAt": now},
                             Start(entry.prompt_id, now))

    def post_mid_turn(self, text: str, message_id: str | None, client_id: str | None = None,
                      now: int = 0) -> Step[dict[str, Any]] | Proposal[dict[str, Any]]:
        self._tick += 1
        if message_id is not None:
            known = self._known_message(message_id, text)
            if known is not None:
                return Step(known)
        if not self.active:
            return Step({"accepted": False, "reason": "session_idle"})
        if len(self.mid_turn) >= self.max_mid_turn:
            return Step({"accepted": False, "reason": "queue_full"})
        item = MidTurnItem(message_id or self._new_id("msg"), text, client_id)
        return self._propose(item.record(), MidTurnPost(item, now))

    def remove_mid_turn(self, message_id: str, now: int = 0) -> Step[bool] | Proposal[bool]:
        if not any(i.message_id == message_id for i in self.mid_turn):
            if any(e.prompt_id == message_id and e.promoted and e.state == "queued" for e in self.entries):
                return self.abort(message_id, now)  # run as a prompt of its own, under its id: taken back
            self._tick += 1
            return Step(False)
        self._tick += 1
        # Fail closed: a removal the journal lost would put the message in a turn after a restart.
        return self._propose({"op": "drained", "messageIds": [message_id]}, MidTurnRemoval(message_id))

    def commit(self, proposal: Proposal[T]) -> Step[Any]:
        """Make the change of ``proposal``, whose record the journal now holds."""
        if proposal.ticket != self._tick:
            raise StaleProposal(f"{proposal.change!r} was proposed before another transition")
        self._tick += 1
        match proposal.change:
            case Admission(entry):
                self.entries.append(entry)
                self._record(TurnRecord(entry.prompt_id, "queued", entry.text, entry.queued_at))
                return Step(entry, (*self._added(entry), PromptAdmitted(entry.prompt_id, entry.text), WAKE))
            case Start(prompt_id, started_at):
                entry = self._entry(prompt_id)
                entry.state = "running"
                entry.started_at = started_at
                self.active = True
                self._update(prompt_id, state="running", started_at=started_at)
                effects: tuple[Effect, ...] = (HandedOver(prompt_id),)
                self.active_prompt_id = prompt_id
                if entry.waited:
                    effects += (Publish("pending_prompt_started",
                                        wire.pending_prompt_started(self.session_id, prompt_id, entry.text),
                                        prompt_id, entry.client_id),)
                return Step(entry, effects)
            case Removal(prompt_id, ended_at):
                entry = self._entry(prompt_id)
                entry.aborted = True
                self.entries.remove(entry)
                self._update(prompt_id, state="cancelled", stop_reason="cancelled", ended_at=ended_at)
                effects = self._removed(prompt_id, entry.client_id)
                if not self.has_queued_prompt:
                    effects += (QUEUE_RELEASED,)
                return Step(True, effects)
            case MidTurnPost(item, queued_at):
                self.mid_turn.append(item)
                # qwen serve's form: waiting input is a pending prompt under its message id, to every client.
                return Step({"accepted": True, "messageId": item.message_id},
                            (Publish("pending_prompt_added",
                                     wire.pending_prompt_added(self.session_id, item.message_id, item.text, queued_at),
                                     item.message_id, item.client_id),))
            case MidTurnRemoval(message_id):
                removed = next(i for i in self.mid_turn if i.message_id == message_id)
                self.mid_turn = [i for i in self.mid_turn if i.message_id != message_id]
                return Step(True, (Publish("pending_prompt_completed",
                                           wire.pending_prompt_completed(self.session_id, message_id, "removed"),
                                           message_id, removed.client_id),))
        raise TypeError(f"not a change: {proposal.change!r}")

    # ------------------------------------------------------------- transitions

    def take_inbox(self, records: list[dict[str, Any]], now: int) -> Step[int]:
        """Prompts another node admitted (their ``admitted`` records, journalled by the store's take)."""
        self._tick += 1
        known = {e.prompt_id for e in self.entries}
        effects: list[Effect] = []
        for r in records:
            prompt_id = r.get("promptId")
            if not isinstance(prompt_id, str) or prompt_id in known:
                continue
            known.add(prompt_id)
            body = wire.structure(r["body"], wire.PromptBody)
            entry = PendingPrompt(prompt_id, body, r.get("text", body.text), r.get("queuedAt") or now,
                                  r.get("clientId"))
            entry.waited = self.active or bool(self.entries)
            self.entries.append(entry)
            self._record(TurnRecord(prompt_id, "queued", entry.text, entry.queued_at))
            effects += self._added(entry)
        if records:
            effects.append(WAKE)
        return Step(len(records), tuple(effects))

    def settle(self, prompt_id: str, state: TurnState, stop_reason: str | None, error: str | None,
               now: int) -> Step[None]:
        self._tick += 1
        # Written, not fsynced: it survives the daemon being killed, and the journal's next sync (the next
        # admission or start) makes it durable. A power cut before that only makes a restart report the turn
        # interrupted (daemon_restarted), as its transcript, never fsynced, may have lost its end too.
        effects: list[Effect] = [Record({"op": "ended", "promptId": prompt_id, "state": state,
                                         "stopReason": stop_reason, "error": error, "endedAt": now}, durable=False)]
        entry = next((e for e in self.entries if e.prompt_id == prompt_id), None)
        if entry is not None:
            self.entries.remove(entry)
            if entry.waited:
                effects.append(Publish("pending_prompt_completed",
                                       wire.pending_prompt_completed(self.session_id, prompt_id, "completed"),
                                       prompt_id, entry.client_id))
        self._update(prompt_id, state=state, stop_reason=stop_reason, error=error, ended_at=now)
        self.active = False
        self.active_prompt_id = None
        effects += self._promote(now)
        return Step(None, tuple(effects))

    def set_active(self, active: bool, now: int, prompt_id: str | None = None) -> Step[None]:
        """The session started (True: ``prompt_id``'s, an automatic turn) or finished (False) a piece of work."""
        self._tick += 1
        self.active = active
        self.active_prompt_id = prompt_id if active else None
        # Input an automatic turn never took runs next.
        return Step(None, () if active else self._promote(now))

    def restore_mid_turn(self, messages: Iterable[str], now: int) -> Step[None]:
        """Mid-turn messages a late drain answer brought back after their turn ended."""
        self._tick += 1
        effects: list[Effect] = []
        for text in messages:
            item = MidTurnItem(self._new_id("msg"), text)
            effects.append(Record(item.record()))
            self.mid_turn.append(item)
        if not self.active:
            effects += self._promote(now)
        return Step(None, tuple(effects))

    def drain(self, watch_queued_prompt: bool) -> Step[DrainResult]:
        self._tick += 1
        items = self.mid_turn[:MAX_DRAIN_ITEMS]
        del self.mid_turn[:len(items)]
        _keep_last(self.settled_ids, [i.message_id for i in items])
        effects: tuple[Effect, ...] = ()
        if items:  # under the running turn's prompt id, as qwen serve publishes it
            effects = (Record({"op": "drained", "messageIds": [i.message_id for i in items]}),
                       Publish("mid_turn_message_injected",
                               wire.mid_turn_message_injected(self.session_id, [i.to_wire() for i in items]),
                               self.active_prompt_id))
        return Step(DrainResult(tuple(i.text for i in items), tuple(items),
                                watch_queued_prompt and self.has_queued_prompt), effects)

    def record_usage(self, prompt_id: str, source: str, usage: Usage | None) -> Step[None]:
        """One model call of ``prompt_id`` ended: counted for the session and on its turn record, if any."""
        self._tick += 1
        call = UsageLedger.of_call(source, usage)
        self.usage.add(call)
        record = self.turns.get(prompt_id)
        if record is not None:
            if record.usage is None:
                record.usage = UsageLedger()
            record.usage.add(call)
        # Accounting, not a promise: written (it survives the daemon being killed), not fsynced per call.
        return Step(None, (Record({"op": "usage", "promptId": prompt_id, "usage": call.to_wire()}, durable=False),))

    def restore(self, replayed: Replayed, now: int, code: str, message: str) -> Step[list[str]]:
        """Take over what a previous daemon journalled; answers the interrupted prompt ids (they end
        ``code`` and never run again)."""
        self._tick += 1
        for turn in replayed.turns.values():
            self._record(TurnRecord.from_wire(turn))
        self.usage = UsageLedger.from_wire(replayed.usage)
        for r in replayed.queued:
            if "body" in r:
                body = wire.structure(r["body"], wire.PromptBody)
            else:  # promoted mid-turn input
                body = wire.PromptBody(prompt=[wire.TextBlock(type="text", text=r.get("text", ""))])
            self.entries.append(PendingPrompt(r["promptId"], body, r.get("text", body.text), r.get("queuedAt") or 0,
                                              r.get("clientId"), waited=True, promoted="body" not in r))
        self.mid_turn.extend(MidTurnItem(m["messageId"], m["text"], m.get("clientId")) for m in replayed.mid_turn)
        effects: list[Effect] = []
        for prompt_id in replayed.interrupted:
            effects.append(Record({"op": "ended", "promptId": prompt_id, "state": "error", "error": message,
                                   "errorCode": code, "endedAt": now}))
            self._update(prompt_id, state="error", error=message, error_code=code, ended_at=now)
        effects += self._promote(now)  # the turn it was meant for is gone: it runs next, on its own
        return Step(list(replayed.interrupted), tuple(effects))

    def abandon_queued(self, now: int) -> Step[None]:
        """The session is deleted: every queued prompt ends ``cancelled``; waiting input is dropped."""
        self._tick += 1
        effects: list[Effect] = []
        for entry in [e for e in self.entries if e.state == "queued"]:
            effects.append(Record({"op": "aborted", "promptId": entry.prompt_id}))
            self.entries.remove(entry)
            effects += self._removed(entry.prompt_id, entry.client_id)
            self._update(entry.prompt_id, state="cancelled", stop_reason="cancelled", ended_at=now)
        if self.mid_turn:
            effects.append(Record({"op": "drained", "messageIds": [i.message_id for i in self.mid_turn]}))
            self.mid_turn.clear()
        return Step(None, tuple(effects))

    def settle_on_close(self, prompt_id: str, now: int) -> Step[None]:
        """The session closes under the running prompt ``prompt_id``: it ends ``cancelled``."""
        self._tick += 1
        entry = next((e for e in self.entries if e.prompt_id == prompt_id), None)
        if entry is None or entry.state != "running":
            return Step(None)
        self.entries.remove(entry)
        self._update(prompt_id, state="cancelled", stop_reason="cancelled", ended_at=now)
        return Step(None, (Record({"op": "ended", "promptId": prompt_id, "state": "cancelled",
                                   "stopReason": "cancelled", "endedAt": now}),))

    # ------------------------------------------------------------- helpers

    def _propose(self, record: dict[str, Any], change: Change) -> Proposal[Any]:
        return Proposal(record, change, self._tick)

    def _entry(self, prompt_id: str) -> PendingPrompt:
        return next(e for e in self.entries if e.prompt_id == prompt_id)

    def _promote(self, now: int) -> tuple[Effect, ...]:
        """Mid-turn input that no tool boundary took runs next, each message a prompt of its own under its
        message id (as qwen serve promotes it), in the order sent, ahead of the queue."""
        if not self.mid_turn:
            return ()
        items = list(self.mid_turn)
        self.mid_turn.clear()
        _keep_last(self.promoted_ids, [i.message_id for i in items])
        promoted = []
        for item in items:
            taken = self._prompt_id_taken(item.message_id) or any(p.prompt_id == item.message_id for p in promoted)
            prompt_id = self._fresh_prompt_id() if taken else item.message_id  # an id a prompt has: a fresh one
            body = wire.PromptBody(prompt=[wire.TextBlock(type="text", text=item.text)])
            promoted.append(PendingPrompt(prompt_id, body, item.text, now, item.client_id, waited=True,
                                          promoted=True))
        self.entries[:0] = promoted
        for entry in promoted:
            self._record(TurnRecord(entry.prompt_id, "queued", entry.text, now))
        # The journal puts each promoted record at the head: the last message's first keeps them in order.
        records = tuple(Record({"op": "promoted", "promptId": entry.prompt_id, "text": entry.text, "queuedAt": now,
                                "clientId": entry.client_id, "messageIds": [item.message_id]})
                        for entry, item in reversed(list(zip(promoted, items))))
        return (*records, *(e for entry in promoted for e in self._added(entry)), WAKE)

    def _known_message(self, message_id: str, text: str) -> dict[str, Any] | None:
        """The answer to a mid-turn message whose id is known already (a client's retry), else ``None``: the
        same message waiting or run as a prompt is accepted again, with no second copy; one taken into a turn
        too; another text under a waiting or promoted message's id, or a prompt's id, is refused."""
        waiting = next((i for i in self.mid_turn if i.message_id == message_id), None)
        if waiting is not None:
            same = waiting.text == text
        elif message_id in self.settled_ids:
            same = True
        elif message_id in self.promoted_ids:
            record = self.turns.get(message_id)
            same = record is None or record.prompt_text == text
        elif self._prompt_id_taken(message_id):
            same = False
        else:
            return None
        if same:
            return {"accepted": True, "messageId": message_id}
        return {"accepted": False, "reason": "message_id_conflict"}

    def _prompt_id_taken(self, prompt_id: str) -> bool:
        return prompt_id in self.turns or any(e.prompt_id == prompt_id for e in self.entries)

    def _fresh_prompt_id(self) -> str:
        """A new prompt id, never one a prompt has (a client's mid-turn message id may have become one)."""
        while True:
            prompt_id = self._new_id("prompt")
            if not self._prompt_id_taken(prompt_id):
                return prompt_id

    def _added(self, entry: PendingPrompt) -> tuple[Effect, ...]:
        if not entry.waited:  # nothing to wait behind: no pending_prompt_added
            return ()
        return (Publish("pending_prompt_added",
                        wire.pending_prompt_added(self.session_id, entry.prompt_id, entry.text, entry.queued_at),
                        entry.prompt_id, entry.client_id),)

    def _removed(self, prompt_id: str, client_id: str | None = None) -> tuple[Effect, ...]:
        return (Publish("pending_prompt_completed",
                        wire.pending_prompt_completed(self.session_id, prompt_id, "removed"), prompt_id, client_id),
                Publish("turn_complete", wire.turn_complete(self.session_id, prompt_id, "cancelled"), prompt_id))

    def _record(self, record: TurnRecord) -> None:
        self.turns[record.prompt_id] = record
        while len(self.turns) > TURN_RECORDS_KEPT:
            self.turns.popitem(last=False)

    def _update(self, prompt_id: str, **changes: Any) -> None:
        record = self.turns.get(prompt_id)
        if record is not None:
            for key, value in changes.items():
                if value is not None:
                    setattr(record, key, value)


def _keep_last(ids: list[str], more: list[str]) -> None:
    ids += more
    del ids[:-MID_TURN_IDS_KEPT]
