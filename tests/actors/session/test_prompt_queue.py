"""The pure prompt queue (actors/session/prompt_queue.py): its rules, one transition at a time, without Trio.

What each transition emits, in which order; a fail-closed transition that proposes and one that commits;
what the core may import. The FIFO actor that applies all this is tested in test_fifo.py; random
sequences of transitions in test_prompt_queue_properties.py.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import wire
from actors.model.base import Usage
from actors.session import prompt_queue
from actors.session.prompt_queue import (
    MAX_DRAIN_ITEMS,
    MID_TURN_IDS_KEPT,
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
    StaleProposal,
    Step,
    Wake,
)
from actors.session.prompt_records import PendingPrompt
from actors.storage import NODE_LOST, NODE_LOST_MESSAGE, replay

SID = "s-1"
ROOT = Path(__file__).resolve().parents[3]


def queue(*, max_pending: int = 4, max_mid_turn: int = 32, first_id: int = 1) -> PromptQueue:
    counter = itertools.count(first_id)
    return PromptQueue(SID, max_pending=max_pending, max_mid_turn=max_mid_turn,
                       new_id=lambda prefix: f"{prefix}-{next(counter)}")


def body(text: str) -> wire.PromptBody:
    return wire.PromptBody(prompt=[wire.TextBlock(type="text", text=text)])


def commit(q: PromptQueue, planned: Step[Any] | Proposal[Any]) -> Step[Any]:
    """The shell's part when the journal took the record."""
    assert isinstance(planned, Proposal), planned
    return q.commit(planned)


def admit(q: PromptQueue, text: str, now: int = 100, client_id: str | None = None) -> PendingPrompt:
    return commit(q, q.admit(body(text), client_id, now)).answer


def take(q: PromptQueue, now: int = 200) -> PendingPrompt:
    return commit(q, q.take(now)).answer


def publish(name: str, payload: dict[str, Any], prompt_id: str | None = None, originator: str | None = None) -> Publish:
    return Publish(name, payload, prompt_id, originator)


def fingerprint(q: PromptQueue) -> Any:
    return (q.pending(), list(q.mid_turn), {p: t.to_wire() for p, t in q.turns.items()}, q.active,
            q.usage.to_wire(), [(e.aborted, e.waited) for e in q.entries])


# ----------------------------------------------------------------- what the core may import


def test_the_core_imports_no_trio_no_io_and_no_clock() -> None:
    tree = ast.parse((ROOT / "actors" / "session" / "prompt_queue.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    forbidden = {"trio", "logging", "time", "datetime", "random", "secrets", "os", "..events", ".._actor",
                 "..storage", "..storage.writer", "..ids", ".fifo"}
    assert not imported & forbidden, imported & forbidden


def test_the_core_runs_without_trio_in_the_process() -> None:
    # The packages' __init__ files re-export the whole runtime (Trio with it): stand in bare packages for
    # them, so only the modules the core imports, directly or not, are loaded.
    code = f"""
import sys, types
root = {str(ROOT)!r}
for name in ("actors", "actors.session", "actors.model", "actors.storage"):
    module = types.ModuleType(name)
    module.__path__ = [root + "/" + name.replace(".", "/")]
    sys.modules[name] = module
import actors.session.prompt_queue as pq
q = pq.PromptQueue("s", max_pending=1, max_mid_turn=1, new_id=lambda prefix: prefix + "-1")
assert isinstance(q.take(0), pq.Step)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("trio", "anyio", "httpx"))
print(",".join(loaded))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


# ----------------------------------------------------------------- proposals


def test_a_proposal_changes_nothing_until_it_is_committed() -> None:
    q = queue()
    admit(q, "running")
    take(q)
    admit(q, "queued")
    q.set_active(True, 300)
    before = fingerprint(q)
    proposals = [q.admit(body("x"), None, 400), q.abort("prompt-2", 400), q.post_mid_turn("hi", None)]
    assert all(isinstance(p, Proposal) for p in proposals)
    assert fingerprint(q) == before


def test_a_proposal_is_good_until_the_next_transition() -> None:
    q = queue()
    planned = q.admit(body("a"), None, 100)
    assert isinstance(planned, Proposal)
    q.drain(False)  # any transition, even one that changes nothing
    with pytest.raises(StaleProposal):
        q.commit(planned)
    assert q.entries == []
    planned = q.admit(body("b"), None, 100)
    q.commit(planned)  # type: ignore[arg-type]
    with pytest.raises(StaleProposal):  # once
        q.commit(planned)  # type: ignore[arg-type]
    assert [e.text for e in q.entries] == ["b"]


def test_a_refused_admission_draws_no_id() -> None:
    q = queue(max_pending=1)
    admit(q, "a")
    assert q.admit(body("b"), None, 100) == Step(QueueFull(limit=1, pending_count=1))
    assert admit(queue(), "fresh").prompt_id == "prompt-1"
    take(q)
    q.settle("prompt-1", "completed", "end_turn", None, 300)
    assert admit(q, "c").prompt_id == "prompt-2"  # the refused one took none


# ----------------------------------------------------------------- what each transition emits


def test_admit_journals_before_and_announces_a_wait_only_behind_other_work() -> None:
    q = queue()
    planned = q.admit(body("first"), "client-a", 100)
    assert isinstance(planned, Proposal)
    assert planned.record == {"op": "admitted", "promptId": "prompt-1", "body": wire.unstructure(body("first")),
                              "text": "first", "queuedAt": 100, "clientId": "client-a", "waited": False}
    step = q.commit(planned)
    assert step.effects == (PromptAdmitted("prompt-1", "first"), Wake())
    assert step.answer.prompt_id == "prompt-1"
    second = commit(q, q.admit(body("second"), None, 110))
    assert second.effects == (
        publish("pending_prompt_added", wire.pending_prompt_added(SID, "prompt-2", "second", 110), "prompt-2"),
        PromptAdmitted("prompt-2", "second"), Wake())
    assert q.turn("prompt-2") == {"promptId": "prompt-2", "state": "queued", "promptText": "second", "queuedAt": 110}


def test_take_journals_the_start_then_hands_over_and_announces_a_waited_prompt() -> None:
    q = queue()
    admit(q, "a")
    admit(q, "b")
    planned = q.take(200)
    assert isinstance(planned, Proposal) and planned.record == {"op": "started", "promptId": "prompt-1",
                                                                 "startedAt": 200}
    step = q.commit(planned)
    assert step.effects == (HandedOver("prompt-1"),)  # it never waited
    assert step.answer.state == "running" and step.answer.started_at == 200 and q.active
    q.settle("prompt-1", "completed", "end_turn", None, 300)
    step = commit(q, q.take(400))
    assert step.effects == (HandedOver("prompt-2"),
                            publish("pending_prompt_started", wire.pending_prompt_started(SID, "prompt-2", "b"),
                                    "prompt-2"))
    assert q.take(500) == Step(None)


def test_abort_of_a_queued_prompt_proposes_and_then_releases_the_queue() -> None:
    q = queue()
    admit(q, "running")
    take(q)
    admit(q, "queued")
    planned = q.abort("prompt-2", 300)
    assert isinstance(planned, Proposal) and planned.record == {"op": "aborted", "promptId": "prompt-2"}
    step = q.commit(planned)
    assert step == Step(True, (
        publish("pending_prompt_completed", wire.pending_prompt_completed(SID, "prompt-2", "removed"), "prompt-2"),
        publish("turn_complete", wire.turn_complete(SID, "prompt-2", "cancelled"), "prompt-2"),
        QueueReleased()))
    record = q.turn("prompt-2")
    assert record is not None and (record["state"], record["stopReason"], record["endedAt"]) == \
        ("cancelled", "cancelled", 300)
    assert q.abort("prompt-2", 400) == Step(False)


def test_abort_of_one_queued_prompt_of_two_does_not_release_the_queue() -> None:
    q = queue()
    admit(q, "a")
    admit(q, "b")
    step = commit(q, q.abort("prompt-1", 300))
    assert QueueReleased() not in step.effects


def test_abort_of_the_running_prompt_cancels_it_once_without_the_journal() -> None:
    q = queue()
    admit(q, "a")
    take(q)
    assert q.abort("prompt-1", 300) == Step(True, (CancelRunning("prompt-1"),))
    assert q.abort("prompt-1", 310) == Step(False)
    assert q.running is not None and q.running.aborted


def test_settle_writes_the_end_unsynced_and_promotes_waiting_input() -> None:
    q = queue()
    admit(q, "a")
    admit(q, "b")
    take(q)
    q.settle("prompt-1", "completed", "end_turn", None, 300)
    take(q, 400)
    commit(q, q.post_mid_turn("left", None))
    commit(q, q.post_mid_turn("over", "client-id", "tab-1"))
    step = q.settle("prompt-2", "error", None, "boom", 500)
    # Each message runs as a prompt of its own under its message id (qwen serve's promotion), in the order
    # sent; the journal puts each promoted record at the head, so the last one's comes first.
    assert step == Step(None, (
        Record({"op": "ended", "promptId": "prompt-2", "state": "error", "stopReason": None, "error": "boom",
                "endedAt": 500}, durable=False),
        publish("pending_prompt_completed", wire.pending_prompt_completed(SID, "prompt-2", "completed"), "prompt-2"),
        Record({"op": "promoted", "promptId": "client-id", "text": "over", "queuedAt": 500, "clientId": "tab-1",
                "messageIds": ["client-id"]}),
        Record({"op": "promoted", "promptId": "msg-3", "text": "left", "queuedAt": 500, "clientId": None,
                "messageIds": ["msg-3"]}),
        publish("pending_prompt_added", wire.pending_prompt_added(SID, "msg-3", "left", 500), "msg-3"),
        publish("pending_prompt_added", wire.pending_prompt_added(SID, "client-id", "over", 500), "client-id", "tab-1"),
        Wake()))
    assert [e.prompt_id for e in q.entries] == ["msg-3", "client-id"] and not q.active and not q.mid_turn
    assert [e.body for e in q.entries] == [body("left"), body("over")]
    assert [e.client_id for e in q.entries] == [None, "tab-1"] and all(e.promoted for e in q.entries)
    written = [e.record for e in step.effects if isinstance(e, Record) and e.record["op"] == "promoted"]
    assert [r["promptId"] for r in replay(written).queued] == ["msg-3", "client-id"]  # a restart keeps the order


def test_mid_turn_posts_need_work_and_room() -> None:
    q = queue(max_mid_turn=1)
    assert q.post_mid_turn("idle", None) == Step({"accepted": False, "reason": "session_idle"})
    q.set_active(True, 100)
    planned = q.post_mid_turn("one", None, "tab-1", 150)
    assert isinstance(planned, Proposal) and planned.record == {"op": "mid_turn", "messageId": "msg-1", "text": "one",
                                                                "clientId": "tab-1"}
    # Listed to every client as a pending prompt under its message id (qwen serve's event), the sender its originator
    assert q.commit(planned) == Step({"accepted": True, "messageId": "msg-1"}, (
        publish("pending_prompt_added", wire.pending_prompt_added(SID, "msg-1", "one", 150), "msg-1", "tab-1"),))
    assert q.post_mid_turn("two", None) == Step({"accepted": False, "reason": "queue_full"})


@settings(max_examples=100, derandomize=True, database=None, deadline=None)
@given(st.integers(min_value=0, max_value=3 * MAX_DRAIN_ITEMS), st.booleans())
def test_a_drain_takes_at_most_ten_the_oldest_first(waiting: int, watch: bool) -> None:
    q = queue(max_mid_turn=3 * MAX_DRAIN_ITEMS)
    q.set_active(True, 100, "auto-1")  # an automatic turn's: the drain publishes under its id
    for i in range(waiting):
        commit(q, q.post_mid_turn(f"m{i}", f"id-{i}"))
    taken: list[str] = []
    while True:
        step = q.drain(watch)
        result = step.answer
        assert isinstance(result, DrainResult) and len(result.items) <= MAX_DRAIN_ITEMS
        if not result.items:
            assert step.effects == ()
            break
        ids = [i.message_id for i in result.items]
        assert step.effects == (
            Record({"op": "drained", "messageIds": ids}),
            publish("mid_turn_message_injected",
                    wire.mid_turn_message_injected(SID, [i.to_wire() for i in result.items]), "auto-1"))
        taken += ids
    assert taken == [f"id-{i}" for i in range(waiting)]


def test_a_waiting_mid_turn_message_is_taken_back_once_the_journal_has_it() -> None:
    q = queue()
    q.set_active(True, 100)
    commit(q, q.post_mid_turn("keep", "a"))
    commit(q, q.post_mid_turn("drop", "b", "tab-1"))
    planned = q.remove_mid_turn("b")
    assert isinstance(planned, Proposal) and planned.record == {"op": "drained", "messageIds": ["b"]}
    assert [i.message_id for i in q.mid_turn] == ["a", "b"]  # nothing changed before the journal took it
    # Every client's queue shows it leave (qwen serve's event), under its sender
    assert q.commit(planned) == Step(True, (
        publish("pending_prompt_completed", wire.pending_prompt_completed(SID, "b", "removed"), "b", "tab-1"),))
    assert [i.message_id for i in q.mid_turn] == ["a"]
    assert q.remove_mid_turn("b") == Step(False)  # gone already
    assert q.remove_mid_turn("nope") == Step(False)
    # qwen's listing form: ``text`` (its Web Shell reads it; a missing one crashed the page)
    assert q.mid_turn_listing() == {"messages": [{"messageId": "a", "text": "keep"}],
                                    "settledMessageIds": [], "promotedMessageIds": []}


def test_the_listing_says_where_taken_messages_went_for_the_last_few() -> None:
    q = queue(max_mid_turn=MID_TURN_IDS_KEPT + 5)
    q.set_active(True, 100)
    for i in range(MID_TURN_IDS_KEPT + 5):
        commit(q, q.post_mid_turn(f"m{i}", f"in-turn-{i}"))
    while q.drain(False).answer.items:
        pass
    commit(q, q.post_mid_turn("late", "promoted-1"))
    q.set_active(False, 200)  # the work ended with it waiting: it runs as a prompt of its own
    listed = q.mid_turn_listing()
    assert listed["messages"] == []
    assert listed["settledMessageIds"] == [f"in-turn-{i}" for i in range(5, MID_TURN_IDS_KEPT + 5)]
    assert listed["promotedMessageIds"] == ["promoted-1"]
    assert [e.prompt_id for e in q.entries] == ["promoted-1"]  # a prompt now, under the message's id
    # Taken back as a mid-turn message still: the queued prompt it became is aborted (as qwen serve does)
    planned = q.remove_mid_turn("promoted-1", 300)
    assert isinstance(planned, Proposal) and planned.record == {"op": "aborted", "promptId": "promoted-1"}
    assert [type(e).__name__ for e in q.commit(planned).effects] == ["Publish", "Publish", "QueueReleased"]
    assert q.entries == [] and q.remove_mid_turn("promoted-1") == Step(False)


def test_a_late_drains_messages_come_back_under_fresh_ids_and_run_next_when_idle() -> None:
    q = queue()
    step = q.restore_mid_turn(("late",), 100)
    assert [type(e).__name__ for e in step.effects] == ["Record", "Record", "Publish", "Wake"]
    assert step.effects[0] == Record({"op": "mid_turn", "messageId": "msg-1", "text": "late"})
    assert [(e.prompt_id, e.text) for e in q.entries] == [("msg-1", "late")]
    q.set_active(True, 200)
    assert q.restore_mid_turn(("again",), 300).effects == (
        Record({"op": "mid_turn", "messageId": "msg-2", "text": "again"}),)
    assert [i.text for i in q.mid_turn] == ["again"]


def test_prompts_taken_from_the_inbox_join_once() -> None:
    q = queue()
    admit(q, "local")

    def record(prompt_id: str) -> dict[str, Any]:
        return {"op": "admitted", "promptId": prompt_id, "body": wire.unstructure(body(prompt_id)),
                "text": prompt_id, "clientId": "elsewhere"}

    step = q.take_inbox([record("p-x"), record("p-x"), {"promptId": 7}, record("p-y")], 500)
    assert step.answer == 4  # as many as were taken, whatever joined
    assert [e.prompt_id for e in q.entries] == ["prompt-1", "p-x", "p-y"]
    assert [(type(e).__name__, getattr(e, "prompt_id", None)) for e in step.effects] == [
        ("Publish", "p-x"), ("Publish", "p-y"), ("Wake", None)]
    assert q.entries[1].queued_at == 500  # none was recorded: taken now
    assert q.take_inbox([], 600) == Step(0)


def test_record_usage_books_the_call_for_the_session_and_its_turn() -> None:
    q = queue()
    admit(q, "a")
    take(q)
    step = q.record_usage("prompt-1", "primary", Usage(prompt_tokens=10, completion_tokens=2))
    [effect] = step.effects
    assert isinstance(effect, Record) and not effect.durable and effect.record["op"] == "usage"
    q.record_usage("auto-1", "suggestion", None)  # no turn record: the session's count only
    assert q.usage.total.calls == 2
    assert q.turns["prompt-1"].usage is not None and q.turns["prompt-1"].usage.total.calls == 1


def test_closing_the_session_ends_the_running_and_the_queued_prompts() -> None:
    q = queue()
    admit(q, "running")
    take(q)
    admit(q, "queued")
    commit(q, q.post_mid_turn("waiting", None))
    assert q.settle_on_close("prompt-2", 300) == Step(None)  # queued, not running: abandon_queued's
    step = q.settle_on_close("prompt-1", 300)
    assert step.effects == (Record({"op": "ended", "promptId": "prompt-1", "state": "cancelled",
                                    "stopReason": "cancelled", "endedAt": 300}),)
    step = q.abandon_queued(310)
    assert [(type(e).__name__, getattr(e, "record", {}).get("op") or getattr(e, "name", None))
            for e in step.effects] == [("Record", "aborted"), ("Publish", "pending_prompt_completed"),
                                       ("Publish", "turn_complete"), ("Record", "drained")]
    assert q.entries == [] and not q.mid_turn
    assert QueueReleased() not in step.effects


def test_restore_takes_the_queue_back_and_ends_the_interrupted_prompt() -> None:
    q = queue()
    admit(q, "was running")
    admit(q, "queued")
    records = [q.snapshot()[0], q.snapshot()[1], {"op": "started", "promptId": "prompt-1", "startedAt": 7},
               {"op": "mid_turn", "messageId": "m-1", "text": "left"}]
    restored = queue(first_id=10)  # a new daemon's ids
    step = restored.restore(replay(records), 900, NODE_LOST, NODE_LOST_MESSAGE)
    assert step.answer == ["prompt-1"]
    assert step.effects[0] == Record({"op": "ended", "promptId": "prompt-1", "state": "error",
                                      "error": NODE_LOST_MESSAGE, "errorCode": NODE_LOST, "endedAt": 900})
    assert [type(e).__name__ for e in step.effects[1:]] == ["Record", "Publish", "Wake"]  # "left" promoted
    assert [e.text for e in restored.entries] == ["left", "queued"]
    assert all(e.waited for e in restored.entries)
    assert restored.turn("prompt-1")["errorCode"] == NODE_LOST  # type: ignore[index]


def test_waiting_mid_turn_input_keeps_its_senders_client_id_across_a_restart() -> None:
    q = queue()
    admit(q, "running")
    take(q)
    proposal = q.post_mid_turn("from the tab", "m-1", "tab-1")
    record = {"op": "mid_turn", "messageId": "m-1", "text": "from the tab", "clientId": "tab-1"}
    assert isinstance(proposal, Proposal) and proposal.record == record  # what the post journals
    assert commit(q, proposal).answer["accepted"] is True
    assert [r for r in q.snapshot() if r["op"] == "mid_turn"] == [record]  # as a compaction writes it
    restored = queue(first_id=10)
    step = restored.restore(replay([*q.snapshot()]), 900, NODE_LOST, NODE_LOST_MESSAGE)
    # The interrupted turn is gone, so the waiting message runs next, as its own prompt, still the tab's.
    assert [(e.prompt_id, e.client_id) for e in restored.entries] == [("m-1", "tab-1")]
    added = [e for e in step.effects if isinstance(e, Publish) and e.name == "pending_prompt_added"]
    assert [(e.prompt_id, e.originator) for e in added] == [("m-1", "tab-1")]


def test_turn_records_are_kept_for_the_last_prompts_only() -> None:
    q = queue(max_pending=TURN_RECORDS_KEPT + 1)
    for i in range(TURN_RECORDS_KEPT + 1):
        admit(q, f"p{i}")
    assert len(q.turns) == TURN_RECORDS_KEPT and "prompt-1" not in q.turns
    assert q.turn("prompt-1") is None and q.turn("current") is None


def test_the_snapshot_ends_with_the_sessions_usage_after_the_extra_records() -> None:
    q = queue()
    admit(q, "a")
    take(q)
    q.record_usage("prompt-1", "primary", Usage(prompt_tokens=1, completion_tokens=1))
    ops = [r["op"] for r in q.snapshot([{"op": "timer", "taskId": "t"}])]
    assert ops == ["admitted", "started", "usage", "timer", "session_usage"]


def test_a_mid_turn_message_sent_again_under_its_id_is_the_same_one() -> None:
    """A client's retry of a mid-turn post (same id) adds no second copy, wherever the first went; another text
    under the id of a waiting or promoted message, or of a prompt, is refused (its id would name two prompts)."""
    q = queue()
    admit(q, "a")
    take(q)
    commit(q, q.post_mid_turn("one", "m1"))
    assert q.post_mid_turn("one", "m1") == Step({"accepted": True, "messageId": "m1"})
    assert q.post_mid_turn("other", "m1") == Step({"accepted": False, "reason": "message_id_conflict"})
    assert q.post_mid_turn("x", "prompt-1") == Step({"accepted": False, "reason": "message_id_conflict"})
    q.drain(False)
    assert q.post_mid_turn("one", "m1") == Step({"accepted": True, "messageId": "m1"})  # taken into the turn
    commit(q, q.post_mid_turn("two", "m2"))
    q.settle("prompt-1", "completed", "end_turn", None, 300)  # m2 runs as prompt m2
    assert q.post_mid_turn("two", "m2") == Step({"accepted": True, "messageId": "m2"})
    assert q.post_mid_turn("three", "m2") == Step({"accepted": False, "reason": "message_id_conflict"})
    assert [i.message_id for i in q.mid_turn] == [] and [e.prompt_id for e in q.entries] == ["m2"]


def test_a_fresh_prompt_id_is_never_one_a_promoted_message_has() -> None:
    q = queue()
    q.set_active(True, 100)
    commit(q, q.post_mid_turn("early", "prompt-1"))  # a client's id that the counter would draw next
    q.set_active(False, 200)
    assert admit(q, "b").prompt_id == "prompt-2"
    assert [e.prompt_id for e in q.entries] == ["prompt-1", "prompt-2"]


def test_the_module_documents_every_transition() -> None:
    doc = prompt_queue.__doc__ or ""
    for name in ("admit", "take_inbox", "abort", "take", "settle", "set_active", "post_mid_turn", "remove_mid_turn",
                 "restore_mid_turn", "drain", "restore", "abandon_queued", "settle_on_close", "record_usage"):
        assert f"\n{name}(" in doc, name
