"""The journal's replay: a pure fold of records into what a restarted session resumes with."""

from __future__ import annotations

from actors.storage import replay


def admitted(pid: str, text: str = "") -> dict:
    return {"op": "admitted", "promptId": pid, "text": text or pid, "queuedAt": 1,
            "body": {"prompt": [{"type": "text", "text": text or pid}]}}


def test_queued_prompts_keep_their_order_and_running_ones_are_interrupted():
    r = replay([admitted("a"), admitted("b"), admitted("c"), {"op": "started", "promptId": "a", "startedAt": 2}])
    assert [q["promptId"] for q in r.queued] == ["b", "c"]
    assert r.interrupted == ["a"]
    assert r.turns["a"]["state"] == "running" and r.turns["b"]["state"] == "queued"


def test_aborted_and_ended_prompts_are_gone_from_the_queue_but_keep_their_records():
    r = replay([admitted("a"), admitted("b"), {"op": "aborted", "promptId": "b"},
                {"op": "started", "promptId": "a"},
                {"op": "ended", "promptId": "a", "state": "completed", "stopReason": "end_turn", "endedAt": 5}])
    assert r.queued == [] and r.interrupted == []
    assert (r.turns["a"]["state"], r.turns["a"]["stopReason"], r.turns["a"]["endedAt"]) == ("completed", "end_turn", 5)
    assert r.turns["b"]["state"] == "cancelled"


def test_promoted_input_goes_to_the_head_and_takes_its_mid_turn_messages():
    r = replay([admitted("a"), {"op": "mid_turn", "messageId": "m1", "text": "also"},
                {"op": "mid_turn", "messageId": "m2", "text": "and"},
                {"op": "promoted", "promptId": "p", "text": "also", "queuedAt": 3, "messageIds": ["m1"]}])
    assert [q["promptId"] for q in r.queued] == ["p", "a"]
    assert r.mid_turn == [{"messageId": "m2", "text": "and"}]


def test_drained_input_is_not_restored():
    r = replay([{"op": "mid_turn", "messageId": "m1", "text": "x"}, {"op": "drained", "messageIds": ["m1"]}])
    assert r.mid_turn == []


def test_an_interrupted_prompt_ended_by_a_restart_stays_ended():
    r = replay([admitted("a"), {"op": "started", "promptId": "a"},
                {"op": "ended", "promptId": "a", "state": "error", "errorCode": "daemon_restarted"}])
    assert r.interrupted == [] and r.turns["a"]["errorCode"] == "daemon_restarted"


def test_compacted_turn_records_and_unknown_records():
    r = replay([{"op": "turn", "record": {"promptId": "old", "state": "completed", "promptText": "x", "queuedAt": 1}},
                {"op": "from-a-newer-daemon", "promptId": "zz"}, admitted("a")])
    assert list(r.turns) == ["old", "a"] and [q["promptId"] for q in r.queued] == ["a"]


def test_a_malformed_turn_record_is_skipped_not_fatal():
    r = replay([{"op": "turn", "record": {"state": "completed"}}, admitted("a")])
    assert list(r.turns) == ["a"]
