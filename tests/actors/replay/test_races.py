"""Races in the scenario format: windows, schedules drawn from the seed, and ``together`` groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.replay import ScenarioError, load_scenario, parse_scenario, replay
from actors.replay.jitter import BadOverride, Schedule, Window
from actors.replay.runner import plan

ROOT = Path(__file__).resolve().parents[3]


def two_sessions(at_a: Any, at_b: Any, **extra: Any) -> dict[str, Any]:
    """Sessions a and b each get one prompt; their model answers take a second."""
    return {
        "name": "two",
        "model": [[{"sleep": 1}, {"text": "x"}], [{"sleep": 1}, {"text": "y"}]],
        "timeline": [
            {"at": 0, "do": "create_session", "label": "a"},
            {"at": 0, "do": "create_session", "label": "b"},
            {"at": at_a, "do": "prompt", "session": "a", "label": "pa", "text": "to a"},
            {"at": at_b, "do": "prompt", "session": "b", "label": "pb", "text": "to b"},
        ],
        **extra,
    }


def started(result: Any) -> list[str]:
    """The sessions in the order their prompts were submitted."""
    return [r["args"]["session"] for r in result.trace.of_kind("action") if r["do"] == "prompt"]


# ----------------------------------------------------------------- windows and schedules


def test_a_window_is_drawn_from_the_seed_on_its_grid() -> None:
    scenario = parse_scenario(two_sessions({"between": [1, 3]}, {"between": [1, 3], "step": 0.5}))
    assert [w.key for w in scenario.windows] == ["timeline[2].at", "timeline[3].at"]
    assert scenario.races
    values = [scenario.schedule(seed).values for seed in range(40)]
    assert values == [scenario.schedule(seed).values for seed in range(40)]  # the seed alone decides
    assert all(1 <= v["timeline[2].at"] <= 3 and abs(round(v["timeline[2].at"] * 1000) - v["timeline[2].at"] * 1000)
               < 1e-6 for v in values)  # whole milliseconds
    assert {v["timeline[3].at"] for v in values} == {1, 1.5, 2, 2.5, 3}
    assert len({v["timeline[2].at"] for v in values}) > 30


def test_the_schedule_is_the_same_in_another_process() -> None:
    code = ("from actors.replay import parse_scenario; import json, sys; "
            "s = parse_scenario(json.loads(sys.argv[1])); print(json.dumps(s.schedule(7).values, sort_keys=True))")
    doc = json.dumps(two_sessions({"between": [1, 3]}, {"between": [1, 9]}))
    runs = {subprocess.run([sys.executable, "-c", code, doc], cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "1", "random")}
    assert len(runs) == 1 and "timeline[2].at" in runs.pop()


def test_an_override_moves_one_window_and_leaves_the_others_as_drawn() -> None:
    windows = [Window(0, 10, "a"), Window(0, 10, "b"), Window(0, 10, "c")]
    drawn = Schedule(windows, 3).values
    moved = Schedule(windows, 3, {"b": 0.25}).values
    assert moved == {**drawn, "b": 0.25}
    with pytest.raises(BadOverride, match="no window 'd'"):
        Schedule(windows, 3, {"d": 1})
    with pytest.raises(BadOverride, match=r"outside its window \[0, 10\]"):
        Schedule(windows, 3, {"a": 11})


def test_model_hook_and_action_times_take_windows_too() -> None:
    scenario = parse_scenario({
        "name": "everywhere",
        "settings": {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "gate"}]}]}},
        "hooks": {"gate": [{"delay": {"between": [0, 1]}}]},
        "model": [{"delay": {"between": [0, 1]}, "steps": [{"sleep": {"between": [1, 2]}}, {"text": "x"}]},
                  [{"sleep": {"between": [2, 3]}}]],
        "timeline": [{"at": 0, "do": "create_session"},
                     {"at": 0, "do": "background", "label": "job", "finish_at": {"between": [4, 5]}},
                     {"at": 0, "do": "prompt", "text": "go"}],
    })
    assert [w.key for w in scenario.windows] == [
        "model[0].delay", "model[0].steps[0].sleep", "model[1].steps[0].sleep", "timeline[1].finish_at",
        "hooks.gate[0].delay"]
    result = replay(scenario, seed=4)
    assert result.ok, result.failures
    schedule = result.trace.records[0]
    assert schedule["kind"] == "schedule" and schedule["values"] == result.schedule
    background = next(r for r in result.trace.of_kind("action") if r["do"] == "background")
    assert background["args"]["finish_at"] == result.schedule["timeline[1].finish_at"]  # resolved before it ran


def test_a_scenario_without_windows_records_no_schedule() -> None:
    result = replay(parse_scenario(two_sessions(0, 0)))
    assert result.trace.records[0]["kind"] == "action" and result.schedule == {}
    assert not parse_scenario(two_sessions(0, 0)).races


def test_steps_run_in_the_order_of_their_drawn_times() -> None:
    scenario = parse_scenario(two_sessions({"between": [0, 4]}, 2))
    orders = {tuple(started(replay(scenario, seed))) for seed in range(12)}
    assert orders == {("a", "b"), ("b", "a")}
    timeline = scenario.timeline
    assert [s.index for _, steps in plan(timeline, scenario.schedule(0, {"timeline[2].at": 3})) for s in steps] == \
        [0, 1, 3, 2]


# ----------------------------------------------------------------- together


def test_a_group_starts_its_actions_together_and_the_scheduler_orders_them() -> None:
    doc = two_sessions(0, 0)
    doc["timeline"][2:] = [{"at": 1, "together": [
        {"do": "prompt", "session": "a", "label": "pa", "text": "to a"},
        {"do": "prompt", "session": "b", "label": "pb", "text": "to b", "expect": {"promptId": {"$contains": "p"}}},
    ]}]
    scenario = parse_scenario(doc)
    assert scenario.races and [s.group for s in scenario.timeline] == [None, None, 2, 2]
    assert [s.where for s in scenario.timeline[2:]] == ["timeline[2].together[0]", "timeline[2].together[1]"]
    results = [replay(scenario, seed) for seed in range(12)]
    assert all(r.ok for r in results), [r.failures for r in results]
    assert {tuple(started(r)) for r in results} == {("a", "b"), ("b", "a")}
    assert all(r["t"] == 1.0 for res in results for r in res.trace.of_kind("action") if r["do"] == "prompt")


def test_a_group_member_fails_like_a_step() -> None:
    doc = two_sessions(0, 0)
    doc["timeline"][2:] = [{"at": 1, "together": [
        {"do": "prompt", "session": "a", "label": "pa", "text": "to a", "expect": {"promptId": "nope"}},
        {"do": "cancel", "session": "b"},
    ]}]
    assert replay(parse_scenario(doc)).failures == [
        "timeline[2].together[0].expect: prompt returned {'promptId': 'prompt-1'}, expected {'promptId': 'nope'}"]


# ----------------------------------------------------------------- what a file may not say


BAD: list[tuple[list[dict[str, Any]], str, str]] = [
    # (timeline after the two create_session steps, the field named, a phrase of what was expected)
    ([{"at": {"between": [3, 1]}, "do": "cancel"}], "timeline[2].at.between", "lo <= hi"),
    ([{"at": {"between": [1]}, "do": "cancel"}], "timeline[2].at.between", "two numbers"),
    ([{"at": {"from": 1}, "do": "cancel"}], "timeline[2].at", "a window"),
    ([{"at": {"between": [1, 2], "step": 0}, "do": "cancel"}], "timeline[2].at.step", "at least 0.001"),
    ([{"at": {"between": [-1, 2]}, "do": "cancel"}], "timeline[2].at.between[0]", "non-negative number"),
    ([{"at": 2, "do": "cancel"}, {"at": {"between": [1, 3]}, "do": "cancel"}], "timeline[3].at",
     "not before the previous step's"),
    ([{"at": {"between": [0, 2]}, "do": "prompt", "label": "p", "text": "x"}, {"at": 1, "do": "abort", "prompt": "p"}],
     "timeline[3].prompt", "defined by a step that surely runs earlier"),
    ([{"at": 0, "together": [{"do": "create_session", "label": "c"}, {"do": "cancel", "session": "c"}]}],
     "timeline[2].together[1].session", "defined before this group"),
    ([{"at": 0, "together": [{"do": "cancel"}]}], "timeline[2].together", "at least two actions"),
    ([{"at": 0, "together": [{"do": "cancel"}, {"at": 1, "do": "cancel"}]}], "timeline[2].together[1].at",
     "one of the fields"),
    ([{"at": 0, "do": "cancel", "together": [{"do": "cancel"}, {"do": "cancel"}]}], "timeline[2].do",
     "only at and together"),
]


@pytest.mark.parametrize(("steps", "field", "phrase"), BAD)
def test_bad_windows_and_groups_name_the_field(steps: list[dict[str, Any]], field: str, phrase: str) -> None:
    doc = {"name": "bad", "model": [], "timeline": [{"at": 0, "do": "create_session", "label": "a"},
                                                      {"at": 0, "do": "create_session", "label": "b"}, *steps]}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc)
    assert info.value.where == field, str(info.value)
    assert phrase in str(info.value)


def test_a_label_defined_by_a_window_that_surely_ends_first_is_fine() -> None:
    doc = two_sessions({"between": [0, 2]}, 0)
    doc["timeline"].append({"at": 2, "do": "abort", "session": "a", "prompt": "pa"})
    assert parse_scenario(doc).timeline[-1].do == "abort"


def test_the_library_races_are_marked_so() -> None:
    scenario = load_scenario(ROOT / "actors" / "replay" / "scenarios" / "guard_mid_turn_races_queued_prompt.json")
    assert scenario.races and scenario.windows
