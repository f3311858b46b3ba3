"""The prompt FIFO actor (actors/session/fifo.py), driven through its synchronous ``handle``: the transitions of
its pure queue (actors/session/prompt_queue.py, tested on its own in test_prompt_queue*.py) as it applies them —
the events it publishes, the journal it writes (fail-closed before a change, logged after), the session's
callbacks."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import pytest
import trio

from actors import wire
from actors._actor import Reply, reply_pair
from actors.events import EventBus
from actors.ids import CountingIds
from actors.session import fifo as f
from actors.session.fifo import (
    MAX_DRAIN_ITEMS,
    Admitted,
    DrainResult,
    PendingPrompt,
    PromptFifo,
    QueueFull,
)

SID = "sess-1"


class Harness:
    def __init__(self, *, max_pending: int = 4, max_mid_turn: int = 32, prepublished: int = 0) -> None:
        self.bus = EventBus(epoch="epoch-1")
        for i in range(prepublished):
            self.bus.publish("session_update", {"n": i})
        self.wakes = 0
        self.cancelled: list[str] = []
        clock = itertools.count(1000, 10)
        self.fifo = PromptFifo(
            SID, self.bus, CountingIds(), max_pending=max_pending, max_mid_turn=max_mid_turn,
            wake_session=self._wake, cancel_running=self.cancelled.append, now_ms=lambda: next(clock),
        )
        self._seen = self.bus.last_event_id

    def _wake(self) -> None:
        self.wakes += 1

    def ask(self, make: Callable[[Reply[Any]], Any]) -> Any:
        reply, pending = reply_pair()
        self.fifo.handle(make(reply))
        answered, value = pending.poll()
        assert answered, "the FIFO answers every message at once"
        return value

    def new_events(self) -> list[tuple[str, str | None, dict[str, Any]]]:
        """(type, promptId, data) of the events published since the last call."""
        out = [(e.type, e.prompt_id, e.data) for e in self.bus.ring if e.id > self._seen]  # type: ignore[operator]
        self._seen = self.bus.last_event_id
        return out

    # conveniences
    def admit(self, text: str, client_id: str | None = None) -> Admitted | QueueFull:
        return self.ask(lambda r: f.Admit(prompt_body(text), client_id, r))

    def take(self) -> PendingPrompt | None:
        return self.ask(lambda r: f.TakeNext(r))

    def abort(self, prompt_id: str) -> bool:
        return self.ask(lambda r: f.Abort(prompt_id, r))

    def settle(self, prompt_id: str, state: str = "completed", stop_reason: str | None = "end_turn",
               error: str | None = None) -> None:
        self.fifo.handle(f.Settle(prompt_id, state, stop_reason, error))  # type: ignore[arg-type]

    def post(self, text: str, message_id: str | None = None) -> dict[str, Any]:
        return self.ask(lambda r: f.PostMidTurn(text, message_id, r))

    def drain(self, watch: bool = True) -> DrainResult:
        return self.ask(lambda r: f.Drain(watch, r))

    def pending(self) -> list[dict[str, Any]]:
        return self.ask(lambda r: f.ListPending(r))

    def turn(self, prompt_id: str) -> dict[str, Any] | None:
        return self.ask(lambda r: f.GetTurn(prompt_id, r))

    def stats(self) -> dict[str, Any]:
        return self.ask(lambda r: f.Statistics(r))


def prompt_body(text: str) -> wire.PromptBody:
    return wire.PromptBody(prompt=[wire.TextBlock(type="text", text=text)])


# ----------------------------------------------------------------- admit


def test_admit_into_an_idle_empty_fifo_does_not_announce_a_wait() -> None:
    h = Harness(prepublished=3)
    admitted = h.admit("first", client_id="client-a")
    assert admitted == Admitted("prompt-1", 3, "epoch-1")
    assert h.new_events() == []  # nothing to wait behind: no pending_prompt_added
    assert h.wakes == 1
    [entry] = h.pending()
    assert entry == {"promptId": "prompt-1", "state": "queued", "queuedAt": 1000, "text": "first",
                     "originatorClientId": "client-a"}
    assert h.turn("prompt-1") == {"promptId": "prompt-1", "state": "queued", "promptText": "first",
                                  "queuedAt": 1000}


def test_admit_behind_other_work_announces_pending_prompt_added() -> None:
    h = Harness(prepublished=3)
    h.admit("first")
    second = h.admit("second")
    assert isinstance(second, Admitted)
    assert second.last_event_id == 3  # the bus's last id *before* this prompt published anything
    assert h.new_events() == [
        ("pending_prompt_added", "prompt-2",
         {"sessionId": SID, "promptId": "prompt-2", "text": "second", "queuedAt": 1010}),
    ]
    third = h.admit("third")
    assert isinstance(third, Admitted) and third.last_event_id == 4
    assert h.wakes == 3


def test_admit_while_the_session_is_active_waits() -> None:
    h = Harness()
    h.fifo.handle(f.SetActive(True))  # e.g. an automatic turn is running
    h.admit("during automatic turn")
    assert [e[0] for e in h.new_events()] == ["pending_prompt_added"]


def test_queue_full_at_the_cap() -> None:
    h = Harness(max_pending=2)
    h.admit("a")
    h.admit("b")
    h.new_events()
    wakes = h.wakes
    assert h.admit("c") == QueueFull(limit=2, pending_count=2)
    assert h.new_events() == []
    assert h.wakes == wakes
    assert [p["promptId"] for p in h.pending()] == ["prompt-1", "prompt-2"]
    assert h.turn("prompt-3") is None


def test_running_prompt_counts_towards_the_cap() -> None:
    h = Harness(max_pending=2)
    h.admit("a")
    h.take()
    h.admit("b")
    assert isinstance(h.admit("c"), QueueFull)
    h.settle("prompt-1")
    assert isinstance(h.admit("c"), Admitted)


# ----------------------------------------------------------------- take next


def test_take_next_is_fifo() -> None:
    h = Harness()
    for text in ("one", "two", "three"):
        h.admit(text)
    order = []
    while (entry := h.take()) is not None:
        order.append(entry.text)
        assert entry.state == "running" and entry.started_at is not None
        h.settle(entry.prompt_id)
    assert order == ["one", "two", "three"]
    assert h.take() is None


def test_take_next_marks_running_and_announces_only_waited_prompts() -> None:
    h = Harness()
    h.admit("first")
    h.admit("second")
    h.new_events()
    first = h.take()
    assert first is not None and first.prompt_id == "prompt-1"
    assert h.new_events() == []  # it never waited
    assert h.turn("prompt-1")["state"] == "running"  # type: ignore[index]
    assert h.turn("prompt-1")["startedAt"] == first.started_at  # type: ignore[index]
    assert h.pending()[0]["state"] == "running"
    assert h.pending()[0]["startedAt"] == first.started_at
    h.settle("prompt-1")
    h.new_events()
    second = h.take()
    assert second is not None and second.prompt_id == "prompt-2"
    assert h.new_events() == [
        ("pending_prompt_started", "prompt-2", {"sessionId": SID, "promptId": "prompt-2", "text": "second"}),
    ]


def test_take_next_on_an_empty_fifo() -> None:
    h = Harness()
    assert h.take() is None
    assert h.post("hi") == {"accepted": False, "reason": "session_idle"}  # taking nothing activates nothing


# ----------------------------------------------------------------- abort


def test_abort_a_queued_prompt() -> None:
    h = Harness()
    h.admit("running")
    h.take()
    h.admit("queued")
    h.new_events()
    assert h.abort("prompt-2") is True
    assert [p["promptId"] for p in h.pending()] == ["prompt-1"]
    assert h.new_events() == [
        ("pending_prompt_completed", "prompt-2", {"sessionId": SID, "promptId": "prompt-2", "state": "removed"}),
        ("turn_complete", "prompt-2", {"sessionId": SID, "stopReason": "cancelled", "promptId": "prompt-2"}),
    ]
    record = h.turn("prompt-2")
    assert record is not None
    assert (record["state"], record["stopReason"]) == ("cancelled", "cancelled")
    assert "endedAt" in record
    assert h.cancelled == []
    assert h.abort("prompt-2") is False  # already removed
    assert h.new_events() == []


def test_abort_a_running_prompt_cancels_it_and_keeps_it_until_settled() -> None:
    h = Harness()
    h.admit("running")
    h.take()
    h.new_events()
    assert h.abort("prompt-1") is True
    assert h.cancelled == ["prompt-1"]
    assert h.new_events() == []  # the session reports the end when the turn settles
    assert [p["promptId"] for p in h.pending()] == ["prompt-1"]
    assert h.abort("prompt-1") is False  # one abort per prompt
    assert h.cancelled == ["prompt-1"]
    h.settle("prompt-1", "cancelled", "cancelled")
    assert h.pending() == []
    assert h.turn("prompt-1")["state"] == "cancelled"  # type: ignore[index]


def test_abort_unknown_prompt() -> None:
    h = Harness()
    h.admit("a")
    assert h.abort("prompt-99") is False
    assert h.cancelled == []
    assert len(h.pending()) == 1


# ----------------------------------------------------------------- settle


def test_settle_records_the_outcome() -> None:
    h = Harness()
    h.admit("a")
    h.take()
    h.new_events()
    h.settle("prompt-1", "completed", "end_turn")
    assert h.new_events() == []  # it never waited: no pending_prompt_completed
    record = h.turn("prompt-1")
    assert record is not None
    assert record["state"] == "completed"
    assert record["stopReason"] == "end_turn"
    assert record["endedAt"] >= record["startedAt"] >= record["queuedAt"]
    assert h.pending() == []


def test_settle_a_waited_prompt_publishes_pending_prompt_completed() -> None:
    h = Harness()
    h.admit("a")
    h.admit("b")
    h.take()
    h.settle("prompt-1")
    h.take()
    h.new_events()
    h.settle("prompt-2", "error", None, "boom")
    assert h.new_events() == [
        ("pending_prompt_completed", "prompt-2", {"sessionId": SID, "promptId": "prompt-2", "state": "completed"}),
    ]
    record = h.turn("prompt-2")
    assert record is not None
    assert (record["state"], record["error"]) == ("error", "boom")
    assert "stopReason" not in record


def test_settle_ends_activity() -> None:
    h = Harness()
    h.admit("a")
    h.take()
    assert h.post("x")["accepted"] is True
    h.drain()
    h.settle("prompt-1")
    assert h.post("y") == {"accepted": False, "reason": "session_idle"}


# ----------------------------------------------------------------- mid-turn messages and drain


def test_mid_turn_post_rejected_when_idle() -> None:
    h = Harness()
    h.admit("queued but not running")
    assert h.post("hello") == {"accepted": False, "reason": "session_idle"}
    assert h.drain().items == ()


def test_mid_turn_post_accepted_when_active() -> None:
    h = Harness()
    h.admit("a")
    h.take()
    assert h.post("first") == {"accepted": True, "messageId": "msg-1"}
    assert h.post("second", "client-chosen") == {"accepted": True, "messageId": "client-chosen"}
    assert h.stats()["midTurnQueued"] == 2


def test_mid_turn_post_accepted_during_set_active() -> None:
    h = Harness()
    h.fifo.handle(f.SetActive(True))
    assert h.post("x")["accepted"] is True
    h.fifo.handle(f.SetActive(False))
    assert h.post("y") == {"accepted": False, "reason": "session_idle"}


def test_mid_turn_queue_full_at_its_cap() -> None:
    h = Harness(max_mid_turn=3)
    h.admit("a")
    h.take()
    for i in range(3):
        assert h.post(f"m{i}")["accepted"] is True
    assert h.post("one too many") == {"accepted": False, "reason": "queue_full"}
    h.drain()
    assert h.post("room again")["accepted"] is True


def test_drain_returns_at_most_ten_and_publishes_them() -> None:
    h = Harness()
    h.admit("a")
    h.take()
    for i in range(12):
        h.post(f"m{i}", f"id-{i}")
    h.new_events()
    first = h.drain()
    assert len(first.items) == MAX_DRAIN_ITEMS == 10
    assert first.messages == tuple(f"m{i}" for i in range(10))
    assert [i.message_id for i in first.items] == [f"id-{i}" for i in range(10)]
    [(kind, prompt_id, data)] = h.new_events()
    assert kind == "mid_turn_message_injected"
    assert prompt_id == "prompt-1"  # the turn that took them (qwen serve's envelope promptId)
    assert data["sessionId"] == SID
    assert data["messages"] == [f"m{i}" for i in range(10)]
    assert data["messageIds"] == [f"id-{i}" for i in range(10)]
    assert data["items"][0] == {"messageId": "id-0", "displayText": "m0", "content": [{"type": "text", "text": "m0"}]}
    second = h.drain()
    assert second.messages == ("m10", "m11")
    assert [e[0] for e in h.new_events()] == ["mid_turn_message_injected"]
    third = h.drain()
    assert third.items == () and third.messages == ()
    assert h.new_events() == []  # nothing drained, nothing published
    assert third.to_wire() == {"messages": [], "items": [], "hasQueuedPrompt": False}


@pytest.mark.parametrize(
    ("watch", "queued", "abort_it", "expected"),
    [
        (True, True, False, True),
        (False, True, False, False),  # only when the caller watches for it
        (True, False, False, False),  # no queued prompt
        (True, True, True, False),  # the queued prompt was aborted
    ],
)
def test_has_queued_prompt(watch: bool, queued: bool, abort_it: bool, expected: bool) -> None:
    h = Harness()
    h.admit("running")
    h.take()
    if queued:
        h.admit("queued")
    if abort_it:
        h.abort("prompt-2")
    result = h.drain(watch)
    assert result.has_queued_prompt is expected
    assert result.to_wire()["hasQueuedPrompt"] is expected
    assert h.stats()["hasQueuedPrompt"] is (queued and not abort_it)


def test_running_prompt_alone_is_not_a_queued_prompt() -> None:
    h = Harness()
    h.admit("running")
    h.take()
    h.abort("prompt-1")  # aborted but still running until it settles
    assert h.drain(True).has_queued_prompt is False


def test_leftover_mid_turn_messages_become_a_queued_prompt_at_the_head() -> None:
    h = Harness()
    h.admit("running")
    h.take()
    h.admit("already queued")
    h.post("left", "m-left")
    h.post("over", "m-over")
    h.new_events()
    wakes = h.wakes
    h.settle("prompt-1")
    events = h.new_events()
    # Each runs as a prompt of its own under its message id (qwen serve's promotion), in the order sent
    assert [(kind, prompt_id, data["text"]) for kind, prompt_id, data in events] == [
        ("pending_prompt_added", "m-left", "left"), ("pending_prompt_added", "m-over", "over")]
    assert h.wakes == wakes + 1
    assert [(p["promptId"], p["text"]) for p in h.pending()] == [
        ("m-left", "left"), ("m-over", "over"), ("prompt-2", "already queued")]
    assert h.turn("m-left")["state"] == "queued"  # type: ignore[index]
    assert h.stats()["midTurnQueued"] == 0
    nxt = h.take()
    assert nxt is not None and nxt.prompt_id == "m-left"
    assert nxt.body == prompt_body("left")
    assert [e[0] for e in h.new_events()] == ["pending_prompt_started"]


def test_drained_messages_do_not_become_a_prompt() -> None:
    h = Harness()
    h.admit("running")
    h.take()
    h.post("taken at a tool boundary")
    h.drain()
    h.settle("prompt-1")
    assert h.pending() == []


# ----------------------------------------------------------------- queries


def test_get_turn_current() -> None:
    h = Harness()
    assert h.turn("current") is None
    h.admit("a")
    assert h.turn("current") is None  # queued, not running
    h.take()
    current = h.turn("current")
    assert current is not None
    assert (current["promptId"], current["state"], current["promptText"]) == ("prompt-1", "running", "a")
    h.settle("prompt-1")
    assert h.turn("current") is None
    assert h.turn("prompt-1")["state"] == "completed"  # type: ignore[index]
    assert h.turn("nope") is None


def test_statistics() -> None:
    h = Harness()
    h.admit("a")
    h.admit("b")
    h.take()
    assert h.stats() == {"pendingCount": 2, "currentPromptId": "prompt-1", "queuedCount": 1,
                         "midTurnQueued": 0, "hasQueuedPrompt": True}


def test_trusted_retry_flags() -> None:
    h = Harness()
    for meta in ({"retry": True}, {"continueLastTurn": True}, {"retry": "true"}, None):
        h.ask(lambda r, m=meta: f.Admit(wire.PromptBody(prompt=[wire.TextBlock(type="text", text="x")], meta=m),
                                        None, r))
    entries = [h.take() for _ in range(4)]
    assert [e.is_trusted_retry for e in entries if e is not None] == [True, True, False, False]


def test_unknown_message_is_a_type_error() -> None:
    h = Harness()
    with pytest.raises(TypeError):
        h.fifo.handle("not a message")  # type: ignore[arg-type]


async def test_run_serves_messages_through_its_mailbox() -> None:
    h = Harness()
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            ref = await nursery.start(h.fifo.run)
            admitted = await ref.ask(lambda r: f.Admit(prompt_body("via mailbox"), None, r))
            assert isinstance(admitted, Admitted) and admitted.prompt_id == "prompt-1"
            listed = await ref.ask(lambda r: f.ListPending(r))
            assert [p["text"] for p in listed] == ["via mailbox"]
            ref.close()


# ----------------------------------------------------------------- prompts another node admitted (cluster mode)


def inbox_record(prompt_id: str, text: str) -> dict[str, Any]:
    return {"op": "admitted", "promptId": prompt_id, "body": wire.unstructure(prompt_body(text)), "text": text,
            "queuedAt": 5, "clientId": "elsewhere", "waited": True}


def test_prompts_taken_from_the_inbox_join_the_queue_in_their_order() -> None:
    h = Harness()
    h.admit("local first")
    taken: list[int] = []

    def take() -> list[dict[str, Any]]:
        taken.append(1)
        return [inbox_record("p-x", "from b"), inbox_record("p-y", "from c")]

    assert h.ask(lambda r: f.TakeInbox(take, r)) == 2
    assert taken == [1]
    assert [p["promptId"] for p in h.pending()] == ["prompt-1", "p-x", "p-y"]
    added = [(t, pid) for t, pid, _ in h.new_events() if t == "pending_prompt_added"]
    assert added == [("pending_prompt_added", "p-x"), ("pending_prompt_added", "p-y")]  # behind other work
    assert h.turn("p-x")["state"] == "queued" and h.wakes == 2
    # taken twice (a wake and a sweep racing): a prompt it already has is not queued again
    assert h.ask(lambda r: f.TakeInbox(lambda: [inbox_record("p-x", "from b")], r)) == 1
    assert [p["promptId"] for p in h.pending()] == ["prompt-1", "p-x", "p-y"]


def test_an_inbox_that_cannot_be_read_changes_nothing() -> None:
    h = Harness()

    def refuse() -> list[dict[str, Any]]:
        raise OSError("the database is gone")

    assert h.ask(lambda r: f.TakeInbox(refuse, r)) == 0
    assert h.pending() == [] and h.wakes == 0


def test_a_restore_ends_the_interrupted_prompt_with_the_code_it_is_given() -> None:
    from actors.storage import NODE_LOST, NODE_LOST_MESSAGE, replay

    h = Harness()
    records = [inbox_record("p-run", "was running"), {"op": "started", "promptId": "p-run", "startedAt": 7},
               inbox_record("p-next", "queued")]
    assert h.fifo.restore(replay(records), NODE_LOST, NODE_LOST_MESSAGE) == ["p-run"]
    assert (h.turn("p-run")["state"], h.turn("p-run")["errorCode"]) == ("error", "node_lost")
    assert [p["promptId"] for p in h.pending()] == ["p-next"]


# ----------------------------------------------------------------- the journal: fail-closed before, logged after


class Journal:
    """A JournalWriter's part the FIFO uses; ``refuse`` makes the next appends raise, as a full disk would."""

    def __init__(self) -> None:
        self.records: list[tuple[dict[str, Any], bool]] = []
        self.refuse = False
        self.compactions = 0

    def append(self, record: dict[str, Any], *, durable: bool = True) -> None:
        if self.refuse:
            raise OSError(28, "No space left on device")
        self.records.append((record, durable))

    def deferring(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def compact_if_due(self, snapshot: Callable[[], list[dict[str, Any]]]) -> None:
        self.compactions += 1

    def existing(self, count: int) -> None:
        pass

    def ops(self) -> list[tuple[str, str | None, bool]]:
        return [(r["op"], r.get("promptId"), durable) for r, durable in self.records]


def journalled(**kwargs: Any) -> tuple[Harness, Journal]:
    h = Harness(**kwargs)
    journal = Journal()
    h.fifo._journal = journal  # type: ignore[assignment]
    return h, journal


def test_the_journal_gets_each_change_in_order_durable_or_not() -> None:
    h, journal = journalled()
    h.admit("a")
    h.admit("b")
    h.take()
    h.post("mid", "m-1")
    h.drain()
    h.post("left over", "m-2")
    h.fifo.record_usage("prompt-1", "primary", None)
    h.settle("prompt-1")
    h.abort("prompt-2")
    h.fifo.handle(f.SetActive(True))
    h.post("auto", "m-3")
    h.fifo.handle(f.SetActive(False))
    assert journal.ops() == [
        ("admitted", "prompt-1", True), ("admitted", "prompt-2", True), ("started", "prompt-1", True),
        ("mid_turn", None, True), ("drained", None, True), ("mid_turn", None, True), ("usage", "prompt-1", False),
        ("ended", "prompt-1", False), ("promoted", "m-2", True), ("aborted", "prompt-2", True),
        ("mid_turn", None, True), ("promoted", "m-3", True),
    ]
    assert journal.compactions == 12  # after each of the 11 messages, and after the model call


def test_an_admission_the_journal_refuses_changes_nothing() -> None:
    h, journal = journalled()
    h.admit("running")
    journal.refuse = True
    answer = h.admit("refused")
    assert isinstance(answer, f.StorageUnavailable) and "No space left" in answer.reason
    assert [p["promptId"] for p in h.pending()] == ["prompt-1"]
    assert h.new_events() == [] and h.wakes == 1
    journal.refuse = False
    assert h.admit("later").prompt_id == "prompt-3"  # type: ignore[union-attr]


def test_a_start_the_journal_refuses_leaves_the_prompt_queued(caplog: pytest.LogCaptureFixture) -> None:
    h, journal = journalled()
    h.admit("a")
    journal.refuse = True
    assert h.take() is None
    assert "prompt-1 stays queued" in caplog.text
    assert h.pending()[0]["state"] == "queued"
    assert h.post("x") == {"accepted": False, "reason": "session_idle"}  # nothing became active
    journal.refuse = False
    assert h.take() is not None


def test_an_abort_the_journal_refuses_keeps_the_prompt(caplog: pytest.LogCaptureFixture) -> None:
    h, journal = journalled()
    h.admit("running")
    h.take()
    h.admit("queued")
    h.new_events()
    released: list[int] = []
    h.fifo._queue_released = lambda: released.append(1)
    journal.refuse = True
    assert h.abort("prompt-2") is False
    assert "abort of prompt-2 refused" in caplog.text
    assert [p["promptId"] for p in h.pending()] == ["prompt-1", "prompt-2"]
    assert h.stats()["hasQueuedPrompt"] is True and h.new_events() == [] and released == []
    assert h.abort("prompt-1") is True  # running: cancelled without the journal
    assert h.cancelled == ["prompt-1"]
    journal.refuse = False
    assert h.abort("prompt-2") is True and released == [1]


def test_a_mid_turn_message_the_journal_refuses_is_not_accepted() -> None:
    h, journal = journalled()
    h.admit("a")
    h.take()
    journal.refuse = True
    assert h.post("x") == {"accepted": False, "reason": "storage_unavailable"}
    assert h.stats()["midTurnQueued"] == 0


def test_a_mid_turn_message_the_journal_refuses_to_take_back_stays(caplog: pytest.LogCaptureFixture) -> None:
    h, journal = journalled()
    h.admit("a")
    h.take()
    assert h.post("keep me", "m-1")["accepted"] is True
    journal.refuse = True
    answer = h.ask(lambda r: f.RemoveMidTurn("m-1", r))
    assert isinstance(answer, f.StorageUnavailable) and "No space left" in answer.reason
    assert "mid-turn message m-1 not removed" in caplog.text
    assert h.stats()["midTurnQueued"] == 1  # still waiting: the turn will take it
    journal.refuse = False
    assert h.ask(lambda r: f.RemoveMidTurn("m-1", r)) is True
    assert h.stats()["midTurnQueued"] == 0


def test_a_record_written_after_its_change_is_logged_when_refused(caplog: pytest.LogCaptureFixture) -> None:
    h, journal = journalled()
    h.admit("a")
    h.take()
    h.post("left over")
    h.new_events()
    journal.refuse = True
    h.settle("prompt-1")  # ended, then promoted: both refused, the change made
    assert caplog.text.count("No space left") == 2
    assert [p["text"] for p in h.pending()] == ["left over"]
    assert [e[0] for e in h.new_events()] == ["pending_prompt_added"]
    assert h.turn("prompt-1")["state"] == "completed"  # type: ignore[index]


def test_the_fifo_is_a_shell_around_the_pure_queue() -> None:
    h = Harness()
    h.admit("a")
    assert h.fifo.queue.statistics() == h.stats()
    assert h.fifo.usage is h.fifo.queue.usage
