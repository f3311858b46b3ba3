"""Subagent runs in replays: the in-process signal endpoint, the subagent actions and expectations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from actors.replay import format_trace, parse_scenario, replay
from actors.replay.patterns import subset_match

SCENARIOS = Path(__file__).resolve().parents[3] / "actors" / "replay" / "scenarios"
SUBAGENT_SCENARIOS = sorted(SCENARIOS.glob("subagent_*.json"))
AUTO_EDIT = {"subagents": {"runners": {"session": {"approvalMode": "auto-edit"}}}}


def scenario(**fields: Any) -> Any:
    return parse_scenario({"name": "inline", "settings": AUTO_EDIT, **fields})


def test_the_library_covers_each_end_reason() -> None:
    assert {p.stem for p in SUBAGENT_SCENARIOS} >= {
        "subagent_no_goal", "subagent_goal_reached", "subagent_need_help", "subagent_turn_cap"}


@pytest.mark.parametrize("path", SUBAGENT_SCENARIOS, ids=lambda p: p.stem)
def test_no_thread_and_no_http_in_a_subagent_replay(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    # A thread hop lets virtual time jump to the next deadline; an HTTP call would never be answered.
    async def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a subagent run hopped to a thread")

    async def no_http(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a signal went over HTTP")

    monkeypatch.setattr(trio.to_thread, "run_sync", no_thread)
    monkeypatch.setattr("actors.subagents.signal_tools.call_signal_tool", no_http)
    monkeypatch.setattr("actors.subagents.registry.call_signal_tool", no_http)
    result = replay(path, seed=5)
    assert result.ok, result.failures


def test_the_child_session_signals_through_its_config_file_and_token() -> None:
    result = replay(SCENARIOS / "subagent_goal_reached.json")
    assert result.ok, result.failures
    signals = list(result.trace.of_kind("signal"))
    assert [(s["run"], s["tool"], s["answer"]["isError"]) for s in signals] == [("fixer", "goal_reached", False)]
    # The child session's events are traced under the run's label; the report is read back at the end.
    assert {e["session"] for e in result.trace.events()} == {"fixer"}
    final = result.trace.subagent_final("fixer")
    assert final is not None and final["status"]["endReason"] == "goal_reached"
    assert final["report"].count("\n") == 4
    text = format_trace(result.trace)
    assert "subagent fixer signal goal_reached" in text and "report (4 lines):" in text


def test_the_replay_plays_the_subagent_side_and_the_first_signal_decides() -> None:
    result = replay(scenario(
        model=[[{"text": "Looking. "}, {"sleep": 10}, {"text": "Done looking."}]],
        timeline=[
            {"at": 0, "do": "subagent_start", "label": "scout", "brief": "Look around.", "goal": "A map exists.",
             "max_turns": 3, "report_file": "scout.md"},
            {"at": 2, "do": "subagent_signal", "label": "scout", "signal": "goal_reached", "summary": "mapped",
             "expect": {"isError": False, "text": {"$contains": "Recorded goal_reached as self-reported"}}},
            {"at": 3, "do": "subagent_signal", "label": "scout", "signal": "need_help", "question": "now what?",
             "expect": {"isError": False,
                        "text": "Recorded; the run's end reason stays goal_reached (the first signal decides)."}},
            {"at": 4, "do": "subagent_signal", "label": "scout", "signal": "need_help", "question": " ",
             "expect": {"isError": True, "text": "need_help needs a question"}},
            {"at": 20, "do": "subagent_signal", "label": "scout", "signal": "goal_reached",
             "expect": {"refused": {"$contains": "refused this run's token"}}},
        ],
        expect={
            "model_calls": 1,
            # The later need_help is recorded (question and all) but decides nothing: the run ends idle.
            "subagent": {"scout": {"end_reason": "goal_reached", "state": "idle", "turn": 1, "max_turns": 3,
                                   "status": {"question": "now what?", "goalReachedSelfReported": True},
                                   "report_contains": ["Summary: mapped", "asks: now what?"], "report_lines": 4}},
        },
    ))
    assert result.ok, result.failures
    assert [s["run"] for s in result.trace.of_kind("signal")] == ["scout", "scout", "scout", None]


def test_stop_cancels_the_turn_and_closes_the_child_session() -> None:
    result = replay(scenario(
        model=[{"delay": 100, "steps": [{"text": "never"}]}],
        timeline=[
            {"at": 0, "do": "subagent_start", "label": "slow", "brief": "Take your time.", "goal": "Done.",
             "max_turns": 3, "report_file": "slow.md"},
            {"at": 5, "do": "subagent_stop", "label": "slow",
             "expect": {"ended": True, "endReason": "stopped", "state": "idle", "turn": 1,
                        "text": {"$contains": "idle, turn 1 of 3"}}},
        ],
        expect={
            "events": [{"type": "turn_complete", "session": "slow", "data": {"stopReason": "cancelled"}},
                       {"type": "session_closed", "session": "slow"}],
            "settled_by": 5.1,
            "subagent": {"slow": {"end_reason": "stopped", "report_contains": ["(end reason: stopped)"]}},
        },
        invariants=["one_terminal_per_prompt", "no_events_after_close"],
    ))
    assert result.ok, result.failures


def test_a_refused_start_is_an_action_error_and_leaves_no_run() -> None:
    result = replay(scenario(
        model=[],
        timeline=[{"at": 0, "do": "subagent_start", "label": "lost", "brief": "b", "report_file": "no/such/dir.md",
                   "expect": {"error": "StartError", "message": {"$contains": "must be a file in an existing"}}}],
        expect={"subagent": {"lost": {"end_reason": "no_goal"}}},
    ))
    assert result.failures == ["expect.subagent.lost: no such run when the replay settled "
                               "(its start failed, or it never settled)"]


def test_a_run_holds_the_replay_open_until_it_ends() -> None:
    result = replay(scenario(
        model=[{"delay": 40, "steps": [{"text": "one"}]}, {"delay": 40, "steps": [{"text": "two"}]}],
        timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b", "goal": "g", "max_turns": 2}],
        expect={"settled_by": 80.1, "subagent": {"r": {"end_reason": "turn_cap", "report_lines": 0}}},
    ))
    settled = next(r["t"] for r in result.trace.of_kind("settled"))
    assert settled >= 80
    assert result.failures == ["expect.subagent.r: the run has no report file on disk"]


def test_contains_matches_strings_only() -> None:
    assert subset_match({"$contains": "turn 2"}, "a turn 2 of 5")
    assert subset_match({"text": {"$contains": ["turn 2", "of 5"]}}, {"text": "turn 2 of 5", "x": 1})
    assert not subset_match({"$contains": "turn 3"}, "turn 2 of 5")
    assert not subset_match({"$contains": "2"}, 2)
    assert subset_match({"$contains": "x", "other": 1}, {"$contains": "x", "other": 1})  # not the matcher
