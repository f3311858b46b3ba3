"""Bad scenario files are refused with the file, the field and what was expected."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.replay import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parents[3]

OK_TIMELINE = [{"at": 0, "do": "create_session"}, {"at": 0, "do": "prompt", "label": "one", "text": "hi"}]


def doc(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "bad", "model": [[{"text": "ok"}]], "timeline": OK_TIMELINE}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


BAD: list[tuple[Any, str, str]] = [
    # (document, the field named, a phrase of what was expected)
    ([1, 2], "$", "an object"),
    (doc(name=None), "name", "required field missing"),
    (doc(name=3), "name", "non-empty label"),
    (doc(extra=1), "extra", "one of the fields"),
    (doc(timeline=[]), "timeline", "non-empty list"),
    (doc(timeline=[{"do": "create_session"}]), "timeline[0].at", "virtual time"),
    (doc(timeline=[{"at": -1, "do": "create_session"}]), "timeline[0].at", "non-negative number"),
    (doc(timeline=[{"at": 0, "do": "explode"}]), "timeline[0].do", "one of the actions"),
    (doc(timeline=[{"at": 0, "do": "prompt", "text": "hi"}]), "timeline[0].session", "create_session action"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "prompt"}]), "timeline[2].text", "required field missing"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "prompt", "text": 7}]), "timeline[2].text", "a string"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "prompt", "txt": "x"}]), "timeline[2].txt", "one of the fields"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "abort", "prompt": "two"}]), "timeline[2].prompt",
     "label of a prompt given earlier"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "prompt", "label": "one", "text": "x"}]), "timeline[2].label",
     "not used before"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "cancel", "session": "other"}]), "timeline[2].session",
     "session created earlier"),
    (doc(timeline=[{"at": 5, "do": "create_session"}, {"at": 1, "do": "cancel"}]), "timeline[1].at",
     "not before the previous step"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "prompt", "text": "x", "_meta": []}]), "timeline[2]._meta",
     "an object"),
    (doc(model=[[{"text": 3}]]), "model[0].steps[0].text", "a string"),
    (doc(model={"responses": [{"refuse": {}}]}), "model.responses[0].refuse", "an object {code"),
    (doc(model={"responses": [], "loop": True}), "model.loop", "one of the fields"),
    (doc(model={"responses": [], "then": "again"}), "model.then", "one of ['error', 'demo']"),
    (doc(settings={"todoStopGuard": True}), "settings.todoStopGuard", "one of the settings"),
    (doc(settings={"todo_stop_guard": "yes"}), "settings.todo_stop_guard", "a JSON bool"),
    (doc(settings={"approval_mode": "sometimes"}), "settings.approval_mode", "one of"),
    (doc(settings={"limits": {"max_pending_prompts": 0}}), "settings.limits.max_pending_prompts", "positive integer"),
    (doc(settings={"limits": {"max_prompts": 2}}), "settings.limits.max_prompts", "one of the limits"),
    (doc(expect={"prompts": {"zzz": "completed"}}), "expect.prompts.zzz", "label of a prompt"),
    (doc(expect={"prompts": {"one": "finished"}}), "expect.prompts.one", "one of ['completed'"),
    (doc(expect={"events": [7]}), "expect.events[0]", "an event pattern"),
    (doc(expect={"events": [{"type": "turn_complete", "prompt": "nope"}]}), "expect.events[0].prompt",
     "label of a prompt"),
    (doc(expect={"model_requests": [{"call": 0}]}), "expect.model_requests[0].call", "positive integer"),
    (doc(expect={"model_calls": "3"}), "expect.model_calls", "non-negative integer"),
    (doc(invariants=["fifo_orderr"]), "invariants[0]", "one of the invariants"),
    (doc(invariants=[{"name": "precedes", "first": "turn_complete"}]), "invariants[0].then", "required field"),
    (doc(invariants=[{"name": "precedes", "first": "x", "then": "y", "also": 1}]), "invariants[0].also",
     "one of the fields"),
    (doc(timeout=-3), "timeout", "non-negative number"),
    # the actions and expectations added for the guard scenarios
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "background", "label": "b", "kind": "daemon"}]),
     "timeline[2].kind", "one of ['agent', 'shell', 'monitor']"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "background"}]), "timeline[2].label", "required field missing"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "background", "label": "b"},
                   {"at": 0, "do": "background", "label": "b"}]), "timeline[3].label",
     "background task label not used"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "finish_background", "label": "nope"}]), "timeline[2].label",
     "label of a background task defined earlier"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "vote", "outcome": "yes"}]), "timeline[2].outcome",
     "one of ['selected', 'cancelled']"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "approval_mode", "mode": "auto"}]), "timeline[2].mode", "one of"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "rewind", "turn": -1}]), "timeline[2].turn", "non-negative integer"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "bridge_drain", "delay": 3, "answer": {"messages": "hi"}}]),
     "timeline[2].answer.messages", "a list"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "cron", "label": "c", "prompt": "p"}]), "timeline[2].schedule",
     "required field missing"),
    (doc(expect={"guard_attempts": {"one": [1, "2"]}}), "expect.guard_attempts.one[1]", "positive integer"),
    (doc(expect={"guard_attempts": {"zzz": [1]}}), "expect.guard_attempts.zzz", "label of a prompt"),
    (doc(expect={"guard_attempts": 3}), "expect.guard_attempts", "a list of attempts"),
    (doc(expect={"status": {"main": {"guard": {}}}}), "expect.status.main.guard", "recorded status fields"),
    (doc(expect={"status": {"other": {}}}), "expect.status.other", "session created earlier"),
    (doc(expect={"counts": [{"match": "turn_complete"}]}), "expect.counts[0].count", "required field missing"),
    (doc(expect={"absent": ["turn_error", 4]}), "expect.absent[1]", "an event pattern"),
    (doc(settings={"hooks": {"Stop": "check"}}), "settings.hooks", "hooks in the documented form"),
    (doc(settings={"hooks": {"Stop": [{"hooks": [{"command": "check"}]}]}}), "hooks.check",
     "scripted runs of this settings.hooks command"),
    (doc(hooks={"check": [{"exit": 2}]}), "hooks.check", "a command of settings.hooks"),
    (doc(settings={"hooks": {"Stop": [{"hooks": [{"command": "check"}]}]}}, hooks={"check": []}), "hooks.check",
     "non-empty list of runs"),
    (doc(settings={"hooks": {"Stop": [{"hooks": [{"command": "check"}]}]}}, hooks={"check": [{"exit": "2"}]}),
     "hooks.check[0].exit", "non-negative integer"),
    # the subagent actions and expectations
    (doc(timeline=[{"at": 0, "do": "subagent_start", "brief": "b"}]), "timeline[0].label", "required field missing"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "a b", "brief": "b"}]), "timeline[0].label",
     "a run name"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "subagent_start", "label": "main", "brief": "b"}]),
     "timeline[2].label", "not a session label"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b"},
                   {"at": 0, "do": "create_session", "label": "r"}]), "timeline[1].label",
     "not a subagent run's label"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b"},
                   {"at": 0, "do": "subagent_start", "label": "r", "brief": "b"}]), "timeline[1].label",
     "subagent run label not used before"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b", "max_turns": 0}]),
     "timeline[0].max_turns", "a positive integer"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b", "runner": "command"}]),
     "timeline[0].runner", "one of the fields"),
    (doc(timeline=[*OK_TIMELINE, {"at": 0, "do": "subagent_status", "label": "r"}]), "timeline[2].label",
     "label of a subagent run defined earlier"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b"},
                   {"at": 0, "do": "subagent_signal", "label": "r", "signal": "done"}]), "timeline[1].signal",
     "one of ['goal_reached', 'need_help']"),
    (doc(expect={"subagent": {"r": {}}}), "expect.subagent.r", "label of a subagent run defined earlier"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b"}],
         expect={"subagent": {"r": {"end_reason": "done"}}}), "expect.subagent.r.end_reason", "one of ['no_goal'"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b"}],
         expect={"subagent": {"r": {"report_contains": "x"}}}), "expect.subagent.r.report_contains", "a list"),
    (doc(timeline=[{"at": 0, "do": "subagent_start", "label": "r", "brief": "b"}],
         expect={"events": [{"type": "turn_complete", "session": "q"}]}), "expect.events[0].session",
     "label of a session or subagent run"),
]


@pytest.mark.parametrize(("document", "field", "phrase"), BAD)
def test_bad_files_name_file_field_and_expectation(tmp_path: Path, document: Any, field: str, phrase: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: expected "), message
    assert phrase in message, message
    assert info.value.where == field


def test_unparsable_files(tmp_path: Path) -> None:
    json_path = tmp_path / "broken.json"
    json_path.write_text('{"name": "x",\n  "model": [,]}')
    with pytest.raises(ScenarioError, match=r"broken\.json: line 2 column \d+: expected valid JSON"):
        load_scenario(json_path)
    toml_path = tmp_path / "broken.toml"
    toml_path.write_text("name = \n")
    with pytest.raises(ScenarioError, match=r"broken\.toml: \$: expected valid TOML"):
        load_scenario(toml_path)
    with pytest.raises(ScenarioError, match=r"missing\.json: \$: expected a readable file"):
        load_scenario(tmp_path / "missing.json")


def test_toml_scenarios_work(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text('name = "ok"\nmodel = [[{text = "hi"}]]\n'
                    '[[timeline]]\nat = 0\ndo = "create_session"\n'
                    '[[timeline]]\nat = 0\ndo = "prompt"\nlabel = "p"\ntext = "hello"\n'
                    '[expect]\nmodel_calls = 1\nprompts = {p = "completed"}\n')
    scenario = load_scenario(path)
    assert scenario.name == "ok" and [s.do for s in scenario.timeline] == ["create_session", "prompt"]


def test_the_cli_reports_a_bad_file_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc(timeline=[{"at": 0, "do": "explode"}])))
    done = subprocess.run([sys.executable, "-m", "actors.replay", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert f"ERROR {path}: timeline[0].do: expected one of the actions" in done.stdout
