"""The journal's usage records: each model call summed onto its turn and the session, compaction's
``session_usage`` resetting the session's figures, and what a restart reads back from them."""

from __future__ import annotations

from actors.storage import replay
from actors.session.usage import UsageLedger
from actors.model import Usage


def admitted(pid: str) -> dict:
    return {"op": "admitted", "promptId": pid, "text": pid, "queuedAt": 1,
            "body": {"prompt": [{"type": "text", "text": pid}]}}


def call(pid: str, source: str, usage: Usage | None) -> dict:
    """A ``usage`` record as the FIFO writes one per model call."""
    return {"op": "usage", "promptId": pid, "usage": UsageLedger.of_call(source, usage).to_wire()}


def test_each_call_adds_to_its_turn_and_to_the_session_and_an_automatic_turn_only_to_the_session():
    r = replay([admitted("a"), {"op": "started", "promptId": "a"},
                call("a", "primary", Usage(10, 2, 12, 4)), call("a", "todo_stop_guard", Usage(20, 3, 23)),
                call("a", "todo_stop_guard", None),
                {"op": "ended", "promptId": "a", "state": "completed", "stopReason": "end_turn"},
                call("auto-1", "primary", Usage(5, 1, 6))])
    turn = UsageLedger.from_wire(r.turns["a"]["usage"])
    assert (turn.total.calls, turn.total.input_tokens, turn.total.cached_read_tokens) == (3, 30, 4)
    assert turn.by_source["todo_stop_guard"].calls == 2 and turn.by_source["todo_stop_guard"].total_tokens == 23
    session = UsageLedger.from_wire(r.usage)
    assert (session.total.calls, session.total.total_tokens) == (4, 41)
    assert "auto-1" not in r.turns


def test_the_last_session_usage_record_sets_the_figures_and_later_calls_add_to_them():
    kept = UsageLedger.of_call("primary", Usage(100, 10, 110)).to_wire()
    r = replay([{"op": "turn", "record": {"promptId": "old", "state": "completed", "promptText": "x", "queuedAt": 1,
                                          "usage": kept}},
                call("x", "primary", Usage(1, 1, 2)),  # folded into the snapshot's figures below
                {"op": "session_usage", "usage": kept},
                call("auto-2", "compaction", Usage(7, 0, 7))])
    assert r.turns["old"]["usage"] == kept  # a compacted turn record keeps its own figures
    session = UsageLedger.from_wire(r.usage)
    assert (session.total.calls, session.total.total_tokens) == (2, 117)
    assert set(session.by_source) == {"primary", "compaction"}


def test_malformed_usage_records_are_skipped_and_bad_counts_read_as_zero():
    r = replay([admitted("a"), {"op": "usage", "promptId": "a", "usage": "lots"},
                {"op": "usage", "promptId": "a", "usage": {"calls": 1, "inputTokens": "9", "bySource": []}}])
    assert r.usage == {"calls": 1} and r.turns["a"]["usage"] == {"calls": 1}
    assert UsageLedger.from_wire({"calls": -3, "totalTokens": True}).total.calls == 0
