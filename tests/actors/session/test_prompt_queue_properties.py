"""The pure prompt queue (actors/session/prompt_queue.py) under hypothesis stateful testing: no Trio, no I/O.

The rules play the session and the FIFO's shell at random: admissions (some refused by the journal),
prompts another node admitted, aborts of queued, running and unknown prompts, the next prompt taken and
settled, automatic turns, mid-turn messages posted, drained and brought back late, model calls, restarts
from the journal, compactions of it. The machine keeps the journal the shell would write (a fail-closed
record only when its write "worked"), the events and the signals, and its own model of the queue.

Checked after every rule:

- the entries, their order and the waiting input are the model's; at most one prompt runs;
- ``hasQueuedPrompt`` is true exactly when a queued, not aborted prompt exists;
- admissions never fill the queue past ``max_pending`` (only promoted input and prompts admitted
  elsewhere can go past it), and an admission is refused exactly when it is full;
- posts never fill the waiting input past ``max_mid_turn`` (only a late drain's return can);
- a drain takes at most :data:`MAX_DRAIN_ITEMS`, the oldest first;
- a fail-closed transition whose journal write fails changes nothing (and emits nothing);
- every prompt has at most one terminal outcome, in the journal and in the events; once the session
  closes (``settle_on_close``, ``abandon_queued``) every prompt that entered has exactly one;
- a restart replays the journal through ``restore`` and finds the queue as it was (its running prompt
  interrupted, its waiting input promoted); a compacted journal replays to the same queue, turn records
  and usage as the full one.

Some rules (the model's own bookkeeping, checked as they go) only hold because the rules keep the
session's protocol: the next prompt is taken only between work items, an automatic turn starts only
when nothing is queued, ids are unique (client-chosen message ids too: two alike would be one after a
restart, as the journal keys waiting input by id).

CI runs it derandomized (the same examples every run, no example database), as the repo's other property
tests; ``TRELLIS_QUEUE_PROPERTY_EXAMPLES=5000`` makes a long random run.
``test_an_abort_that_changes_the_queue_before_its_record_is_durable_is_found`` shows it notices a
fail-closed transition that changes the queue before the shell has journalled its record.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from actors import wire
from actors.model.base import Usage
from actors.session.prompt_queue import (
    MAX_DRAIN_ITEMS,
    CancelRunning,
    DrainResult,
    HandedOver,
    Proposal,
    PromptQueue,
    Publish,
    QueueFull,
    PromptAdmitted,
    QueueReleased,
    Record,
    Step,
    Wake,
)
from actors.session.prompt_records import PendingPrompt, TurnRecord
from actors.session.usage import UsageLedger
from actors.storage import DAEMON_RESTARTED, RESTARTED_MESSAGE, replay

LONG_RUN = int(os.environ.get("TRELLIS_QUEUE_PROPERTY_EXAMPLES", "0"))
SID = "s-1"
MAX_PENDING = 3
MAX_MID_TURN = 12  # more than one drain's worth
TERMINAL_OPS = {"aborted", "ended"}
TEXTS = st.sampled_from(["a", "b", "hello", "line\nbreak", ""])
TURN_KEYS = ("promptId", "state", "promptText", "queuedAt", "startedAt", "stopReason", "error", "errorCode", "usage")


def body(text: str) -> wire.PromptBody:
    return wire.PromptBody(prompt=[wire.TextBlock(type="text", text=text)])


def turn_view(turn: dict[str, Any]) -> dict[str, Any]:
    """What of a turn record a journal keeps exactly (an abort's record has no end time)."""
    d = TurnRecord.from_wire(turn).to_wire()
    return {k: d.get(k) for k in TURN_KEYS}


class PromptQueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        counter = itertools.count(1)
        self.new_id = lambda prefix: f"{prefix}-{next(counter)}"
        self.clock = 1000
        self.q = self._queue()
        self.journal: list[dict[str, Any]] = []  # what the journal holds, as the shell would have written it
        self.written: list[dict[str, Any]] = []  # every record written, compactions aside
        self.events: list[Publish] = []
        self.signals: list[Any] = []
        # The model: entry ids in order (the running one first), where each came from, waiting input.
        self.entries: list[str] = []
        self.origin: dict[str, str] = {}  # prompt id -> admit | inbox | promoted
        self.running: str | None = None
        self.active = False  # the model's "the session runs a piece of work"
        self.automatic = False  # ... and it is an automatic turn
        self.mid: list[str] = []  # waiting message ids
        self.entered: list[str] = []  # every prompt that entered the queue
        self.client_ids = itertools.count(1)
        self.inbox_ids = itertools.count(1)
        self.last_drain: DrainResult | None = None  # what a late drain answer would bring back
        self.restored_waiting = 0  # messages a late drain brought back since the waiting input was last empty
        self.calls = UsageLedger()  # every model call recorded, summed
        self.reports_usage = True

    def _queue(self) -> PromptQueue:
        return PromptQueue(SID, max_pending=MAX_PENDING, max_mid_turn=MAX_MID_TURN, new_id=self.new_id)

    # ------------------------------------------------------------- the shell's part

    def now(self) -> int:
        self.clock += 7
        return self.clock

    def apply(self, step: Step[Any]) -> Any:
        for effect in step.effects:
            if isinstance(effect, Record):
                self.write(effect.record)
            elif isinstance(effect, Publish):
                self.events.append(effect)
            else:
                assert isinstance(effect, (Wake, CancelRunning, QueueReleased, HandedOver, PromptAdmitted)), effect
                self.signals.append(effect)
        return step.answer

    def write(self, record: dict[str, Any]) -> None:
        self.journal.append(record)
        self.written.append(record)

    def fingerprint(self) -> Any:
        q = self.q
        return (q.pending(), [(i.message_id, i.text) for i in q.mid_turn],
                {p: t.to_wire() for p, t in q.turns.items()}, q.active, q.usage.to_wire(), q.snapshot(),
                [(e.prompt_id, e.aborted, e.waited) for e in q.entries])

    def before(self) -> Any:
        """The queue and what was emitted, before a transition."""
        return self.fingerprint(), len(self.written), len(self.events), len(self.signals)

    def fail_closed(self, before: Any, planned: Step[Any] | Proposal[Any], write_fails: bool) -> tuple[bool, Any]:
        """(committed, answer): journal a proposal's record first; if that write fails, the proposal is
        dropped, and the queue must be as it was ``before`` the transition, nothing emitted."""
        if isinstance(planned, Step):
            return False, self.apply(planned)
        if write_fails:
            assert self.before() == before
            return False, None
        self.write(planned.record)
        return True, self.apply(self.q.commit(planned))

    def new_events(self, since: int) -> list[tuple[str, str | None]]:
        return [(e.name, e.prompt_id) for e in self.events[since:]]

    def promoted(self, events_before: int) -> None:
        """Model a promotion of the waiting input, if any (the queue just went idle): each message a prompt of
        its own, in the order sent, at the head, under its message id (qwen serve's promotion)."""
        if not self.mid:
            assert not self.q.mid_turn
            return
        heads = self.q.entries[:len(self.mid)]
        assert len(heads) == len(self.mid), "the waiting input was not promoted"
        for message_id, head in zip(self.mid, heads):
            assert message_id == "restored" or head.prompt_id == message_id  # restored: a fresh message id
            assert self.q.turns[head.prompt_id].state == "queued" and head.promoted
            self.origin[head.prompt_id] = "promoted"
            self.entered.append(head.prompt_id)
        self.entries[:0] = [h.prompt_id for h in heads]
        self.mid = []
        self.restored_waiting = 0
        added = [p for name, p in self.new_events(events_before) if name == "pending_prompt_added"]
        assert added[-len(heads):] == [h.prompt_id for h in heads]
        assert isinstance(self.signals[-1], Wake)

    @initialize(reports_usage=st.booleans())
    def model(self, reports_usage: bool) -> None:
        """The session's model reports usage on every call, or never (the scripted demo, some local servers).

        Not a mix: a compaction keeps a finished turn's usage only once a call reported tokens (what the
        turn record shows), so a finished turn whose calls reported none, and then a call (a suggestion)
        that did, counts fewer calls after a restart.
        """
        self.reports_usage = reports_usage

    # ------------------------------------------------------------- rules: prompts

    @rule(text=TEXTS, with_client=st.booleans(), write_fails=st.booleans())
    def admit(self, text: str, with_client: bool, write_fails: bool) -> None:
        full = len(self.q.entries) >= MAX_PENDING
        waits = self.q.active or bool(self.q.entries)
        client = f"client-{next(self.client_ids)}" if with_client else None
        before = self.before()
        events = len(self.events)
        planned = self.q.admit(body(text), client, self.now())
        if full:
            assert isinstance(planned, Step) and planned.answer == QueueFull(MAX_PENDING, len(self.q.entries))
            assert planned.effects == () and self.before() == before
            return
        assert isinstance(planned, Proposal) and planned.record["op"] == "admitted"
        committed, entry = self.fail_closed(before, planned, write_fails)
        if not committed:
            return
        assert isinstance(entry, PendingPrompt) and entry.waited == waits
        self.entries.append(entry.prompt_id)
        self.origin[entry.prompt_id] = "admit"
        self.entered.append(entry.prompt_id)
        assert self.new_events(events) == ([("pending_prompt_added", entry.prompt_id)] if waits else [])
        assert isinstance(self.signals[-1], Wake)

    @rule(count=st.integers(min_value=0, max_value=3))
    def take_inbox(self, count: int) -> None:
        """Prompts another node admitted: the store's take journals them, the queue takes them in."""
        records = []
        for _ in range(count):
            prompt_id = f"inbox-{next(self.inbox_ids)}"
            records.append({"op": "admitted", "promptId": prompt_id, "body": wire.unstructure(body(prompt_id)),
                            "text": prompt_id, "queuedAt": self.clock, "clientId": "elsewhere", "waited": True})
        for r in records:
            self.write(r)
        signals = len(self.signals)
        assert self.apply(self.q.take_inbox(records, self.now())) == count
        for r in records:
            self.entries.append(r["promptId"])
            self.origin[r["promptId"]] = "inbox"
            self.entered.append(r["promptId"])
        assert self.signals[signals:] == ([Wake()] if count else [])

    @precondition(lambda self: self.running is None and not self.active)
    @rule(write_fails=st.booleans())
    def take(self, write_fails: bool) -> None:
        """The session's work loop asks for the next prompt (only between work items)."""
        queued = [e for e in self.q.entries if e.state == "queued"]
        before = self.before()
        signals = len(self.signals)
        planned = self.q.take(self.now())
        if not queued:
            assert isinstance(planned, Step) and planned.answer is None and planned.effects == ()
            return
        committed, entry = self.fail_closed(before, planned, write_fails)
        if not committed:
            return
        assert entry is queued[0] and entry.state == "running" and self.q.active
        assert self.written[-1] == {"op": "started", "promptId": entry.prompt_id, "startedAt": entry.started_at}
        assert self.signals[signals] == HandedOver(entry.prompt_id)
        self.running = entry.prompt_id
        self.active = True
        # The running prompt is the first entry: promotions happen only while nothing runs.
        assert self.entries[0] == entry.prompt_id

    @precondition(lambda self: self.running is not None)
    @rule(state=st.sampled_from(["completed", "error", "cancelled"]))
    def settle(self, state: str) -> None:
        prompt_id = self.running
        assert prompt_id is not None
        events, written = len(self.events), len(self.written)
        stop_reason = "end_turn" if state == "completed" else None
        error = "boom" if state == "error" else None
        self.apply(self.q.settle(prompt_id, state, stop_reason, error, self.now()))  # type: ignore[arg-type]
        assert self.written[written]["op"] == "ended" and self.written[written]["promptId"] == prompt_id
        self.entries.remove(prompt_id)
        self.running = None
        self.active = False
        assert self.q.turns[prompt_id].state == state
        self.promoted(events)

    @rule(pick=st.integers(min_value=0, max_value=20), write_fails=st.booleans())
    def abort(self, pick: int, write_fails: bool) -> None:
        known = self.entered + ["prompt-unknown"]
        prompt_id = known[pick % len(known)]
        entry = next((e for e in self.q.entries if e.prompt_id == prompt_id and not e.aborted), None)
        before = self.before()
        events, signals = len(self.events), len(self.signals)
        planned = self.q.abort(prompt_id, self.now())
        if entry is None:
            assert planned == Step(False)
            return
        if entry.state == "running":
            assert planned == Step(True, (CancelRunning(prompt_id),)) and entry.aborted
            self.apply(planned)
            return
        committed, answer = self.fail_closed(before, planned, write_fails)
        if not committed:
            return
        assert answer is True
        self.entries.remove(prompt_id)
        assert self.new_events(events) == [("pending_prompt_completed", prompt_id), ("turn_complete", prompt_id)]
        released = [s for s in self.signals[signals:] if isinstance(s, QueueReleased)]
        assert len(released) == (0 if self.q.has_queued_prompt else 1)

    # ------------------------------------------------------------- rules: automatic turns, mid-turn input

    @precondition(lambda self: not self.active and not any(e.state == "queued" for e in self.q.entries))
    @rule()
    def automatic_turn_starts(self) -> None:
        """Nothing queued (the work loop's take found none): an automatic item runs."""
        self.apply(self.q.set_active(True, self.now()))
        self.active = self.automatic = True

    @precondition(lambda self: self.automatic)
    @rule()
    def automatic_turn_ends(self) -> None:
        events = len(self.events)
        self.apply(self.q.set_active(False, self.now()))
        self.active = self.automatic = False
        self.promoted(events)

    @rule(posts=st.lists(st.tuples(TEXTS, st.booleans(), st.booleans()), min_size=1, max_size=MAX_MID_TURN))
    def post_mid_turn(self, posts: list[tuple[str, bool, bool]]) -> None:
        """Mid-turn messages (a burst of them: enough to fill the waiting input, and to need two drains)."""
        for text, own_id, write_fails in posts:
            self.post_one(text, own_id, write_fails)

    def post_one(self, text: str, own_id: bool, write_fails: bool) -> None:
        message_id = f"client-msg-{next(self.client_ids)}" if own_id else None
        waiting = len(self.q.mid_turn)
        before = self.before()
        planned = self.q.post_mid_turn(text, message_id)
        if not self.active:
            assert planned == Step({"accepted": False, "reason": "session_idle"})
            return
        if waiting >= MAX_MID_TURN:
            assert planned == Step({"accepted": False, "reason": "queue_full"})
            return
        committed, answer = self.fail_closed(before, planned, write_fails)
        if not committed:
            return
        assert answer["accepted"] is True and (message_id is None or answer["messageId"] == message_id)
        self.mid.append(answer["messageId"])
        assert self.events[-1].name == "pending_prompt_added" and self.events[-1].prompt_id == answer["messageId"]

    @rule(watch=st.booleans())
    def drain(self, watch: bool) -> None:
        events = len(self.events)
        result = self.apply(self.q.drain(watch))
        assert len(result.items) <= MAX_DRAIN_ITEMS
        taken = [i.message_id for i in result.items]
        assert taken == self.mid[:MAX_DRAIN_ITEMS]  # the oldest first
        assert result.messages == tuple(i.text for i in result.items)
        assert result.has_queued_prompt == (watch and any(e.state == "queued" and not e.aborted
                                                          for e in self.q.entries))
        self.mid = self.mid[len(taken):]
        # Under the running prompt's id (an automatic turn's is the session's to give: none here)
        assert self.new_events(events) == ([("mid_turn_message_injected", self.running)] if taken else [])
        if taken:
            self.last_drain = result

    @precondition(lambda self: self.last_drain is not None)
    @rule()
    def late_drain_returns(self) -> None:
        """A drain answer that came too late: its messages go back (under fresh ids)."""
        assert self.last_drain is not None
        messages, self.last_drain = self.last_drain.messages, None
        events = len(self.events)
        waiting = len(self.q.mid_turn)
        self.apply(self.q.restore_mid_turn(messages, self.now()))
        if self.active:
            self.mid += [i.message_id for i in list(self.q.mid_turn)[waiting:]]
            self.restored_waiting += len(messages)
        else:
            self.mid += ["restored"] * len(messages)  # promoted at once
            self.promoted(events)

    @rule(pick=st.integers(min_value=0, max_value=20), source=st.sampled_from(wire.USAGE_SOURCES),
          tokens=st.integers(min_value=0, max_value=50))
    def model_call(self, pick: int, source: str, tokens: int) -> None:
        """A model call ended: the running prompt's, a settled one's (a suggestion) or an automatic turn's."""
        settled = [p for p in self.entered if p not in self.entries]
        known = ([self.running] if self.running else []) + settled + ["auto-1"]
        prompt_id = known[pick % len(known)]
        usage = Usage(prompt_tokens=tokens, completion_tokens=1) if self.reports_usage else None
        self.apply(self.q.record_usage(prompt_id, source, usage))
        self.calls.record(source, usage)
        assert self.journal[-1]["op"] == "usage"

    # ------------------------------------------------------------- rules: the journal

    @rule()
    def compact(self) -> None:
        """The journal is rewritten from a snapshot: a restart finds the same in it."""
        snapshot = self.q.snapshot()
        full, compacted = replay(self.journal), replay(snapshot)
        assert [r["promptId"] for r in compacted.queued] == [r["promptId"] for r in full.queued]
        assert compacted.interrupted == full.interrupted
        assert compacted.mid_turn == full.mid_turn
        assert UsageLedger.from_wire(compacted.usage) == UsageLedger.from_wire(full.usage)
        for prompt_id, turn in self.q.turns.items():
            assert turn_view(compacted.turns[prompt_id]) == turn_view(full.turns[prompt_id]), prompt_id
        self.journal = snapshot

    @rule()
    def restart(self) -> None:
        """The daemon dies and a new one restores the session from the journal."""
        replayed = replay(self.journal)
        queued = [e for e in self.q.entries if e.state == "queued"]
        assert [r["promptId"] for r in replayed.queued] == [e.prompt_id for e in queued]
        assert replayed.interrupted == ([self.running] if self.running else [])
        assert [(m["messageId"], m["text"]) for m in replayed.mid_turn] == \
            [(i.message_id, i.text) for i in self.q.mid_turn]
        assert UsageLedger.from_wire(replayed.usage) == self.q.usage == self.calls
        for prompt_id, turn in self.q.turns.items():
            assert turn_view(replayed.turns[prompt_id]) == turn_view(turn.to_wire()), prompt_id
        old = self.q
        self.q = self._queue()
        events = len(self.events)
        interrupted = self.apply(self.q.restore(replayed, self.now(), DAEMON_RESTARTED, RESTARTED_MESSAGE))
        assert interrupted == replayed.interrupted
        if self.running is not None:
            self.entries.remove(self.running)
            assert self.q.turns[self.running].error_code == DAEMON_RESTARTED
        self.running = None
        self.active = self.automatic = False
        self.last_drain = None
        restored = [e for e in self.q.entries if e.state == "queued"][len(self.mid):]  # after the promoted ones
        assert [e.to_wire() for e in restored] == [e.to_wire() for e in queued]
        assert all(e.waited for e in self.q.entries)
        self.promoted(events)
        assert self.q.usage == old.usage

    # ------------------------------------------------------------- invariants

    @invariant()
    def queue_is_the_model(self) -> None:
        q = self.q
        assert [e.prompt_id for e in q.entries] == self.entries
        assert [i.message_id for i in q.mid_turn] == self.mid
        running = [e.prompt_id for e in q.entries if e.state == "running"]
        assert running == ([self.running] if self.running else [])
        assert q.active == self.active
        assert len(set(self.entries)) == len(self.entries)

    @invariant()
    def has_queued_prompt_means_a_queued_prompt(self) -> None:
        q = self.q
        expected = any(e.state == "queued" and not e.aborted for e in q.entries)
        assert q.has_queued_prompt == expected == q.statistics()["hasQueuedPrompt"]
        stats = q.statistics()
        assert stats["pendingCount"] == len(q.entries)
        assert stats["currentPromptId"] == self.running
        assert stats["midTurnQueued"] == len(q.mid_turn)

    @invariant()
    def bounded(self) -> None:
        q = self.q
        assert sum(1 for p in self.entries if self.origin[p] == "admit") <= MAX_PENDING
        assert len(q.mid_turn) <= MAX_MID_TURN + self.restored_waiting
        if not q.mid_turn:
            self.restored_waiting = 0

    @invariant()
    def one_outcome_at_most(self) -> None:
        ended = Counter(r["promptId"] for r in self.written if r.get("op") in TERMINAL_OPS)
        for prompt_id in self.entries:
            assert ended[prompt_id] == 0, prompt_id
        assert all(n == 1 for n in ended.values()), ended
        removed = Counter(e.prompt_id for e in self.events if e.name == "turn_complete")
        assert all(n == 1 for n in removed.values()), removed
        for prompt_id in self.entries:
            assert removed[prompt_id] == 0

    def teardown(self) -> None:
        """The session closes (deleted): the running prompt and the queued ones all end, once each."""
        if self.running is not None:
            self.apply(self.q.settle_on_close(self.running, self.now()))
        self.apply(self.q.abandon_queued(self.now()))
        assert self.q.entries == [] and not self.q.mid_turn
        ended = Counter(r["promptId"] for r in self.written if r.get("op") in TERMINAL_OPS)
        assert sorted(ended) == sorted(self.entered) and set(ended.values()) <= {1}
        replayed = replay(self.journal)
        assert replayed.queued == [] and replayed.interrupted == [] and replayed.mid_turn == []
        for prompt_id in self.entered:
            state = replayed.turns[prompt_id]["state"]
            assert state in ("completed", "error", "cancelled"), (prompt_id, state)


def run(machine: type[RuleBasedStateMachine], *, examples: int, steps: int = 50, shrink: bool = True) -> None:
    # Derandomized and without an example database unless a long run is asked for: CI replays the same
    # examples every time.
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=not LONG_RUN,
        database=None, report_multiple_bugs=False, phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


def test_random_sequences_keep_the_queues_rules() -> None:
    run(PromptQueueMachine, examples=LONG_RUN or 200)


def test_an_abort_that_changes_the_queue_before_its_record_is_durable_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The abort marks the prompt aborted while it only proposes: a journal that refuses the record
    # leaves a queued prompt that no longer counts as one.
    original = PromptQueue.abort

    def abort_early(self: PromptQueue, prompt_id: str, now: int) -> Any:
        planned = original(self, prompt_id, now)
        for entry in self.entries:
            if entry.prompt_id == prompt_id:
                entry.aborted = True
        return planned

    monkeypatch.setattr(PromptQueue, "abort", abort_early)
    with pytest.raises(AssertionError) as info:
        run(PromptQueueMachine, examples=200, shrink=False)
    assert "state = PromptQueueMachine()" in "\n".join(getattr(info.value, "__notes__", []))
