"""Recording a session (actors.replay.recorder) and replaying it (actors.replay.playback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from actors import ScriptedModel, Settings, open_daemon
from actors.replay import playback as pb_module
from actors.replay.cli import main
from actors.replay.playback import replay_recording
from actors.replay.recorder import Recorder
from actors.replay.recording import FORMAT, VERSION, read_recording

SECRET = "sk-planted-secret-0123456789"

TODOS_OPEN = {"todos": [{"id": "1", "content": "Write the parser", "status": "in_progress"},
                        {"id": "2", "content": "Test the parser", "status": "pending"}]}
TODOS_DONE = {"todos": [{"id": "1", "content": "Write the parser", "status": "completed"},
                        {"id": "2", "content": "Test the parser", "status": "completed"}]}

SCRIPT: list[Any] = [
    [{"text": "Planning. "}, {"tool_call": {"id": "call-todo", "name": "todo_write", "arguments": TODOS_OPEN}},
     {"tool_call": {"id": "call-write", "name": "write_file",
                    "arguments": {"path": "notes.txt", "content": f"key {SECRET}\n"}}},
     {"usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}}],
    [{"text": "I have a plan."}],
    [{"text": "Still working on the parser."}],
    [{"text": "Blocked: the grammar is missing."}],
    [{"tool_call": {"id": "call-done", "name": "todo_write", "arguments": TODOS_DONE}},
     {"tool_call": {"id": "call-wake", "name": "schedule_wakeup", "arguments": {"delay": 2, "note": "check CI"}}}],
    [{"text": "Waiting for CI."}],
    [{"text": "Woke up: CI is green."}],
    {"delay": 0.5, "steps": [{"text": "thinking "}, {"sleep": 50}, {"text": "done"}]},
]


async def _live(tmp: Path, *, guard_only: bool = False) -> Path:
    """A 'live' session with the recorder attached: real tools, the scripted model, client calls."""
    settings = Settings(todo_stop_guard=True, model={"apiKey": SECRET}, checkpoints_enabled=False)
    model = ScriptedModel()
    model.extend(SCRIPT[:4] if guard_only else SCRIPT, where="script")
    workspace = tmp / "workspace"
    workspace.mkdir(exist_ok=True)
    recorder = Recorder(tmp / "recordings", secrets=["another-secret-token"])
    async with open_daemon(settings, state_dir=tmp / "state", workspace=str(workspace),
                           **recorder.edges(settings, model)) as daemon:
        recorder.attach(daemon)
        handle, _ = await daemon.create_session()
        requests: list[str] = []
        handle._session.bus.observers.append(
            lambda e: requests.append(e.data["requestId"]) if e.type == "permission_request" else None)
        sub = handle.subscribe()
        await handle.prompt("write and test the parser")
        with trio.fail_after(10):
            while not requests:
                await trio.sleep(0.01)
        assert await handle.vote(requests[-1], "selected", "proceed_once")
        await trio.sleep(0.5)
        if not guard_only:
            await handle.prompt("finish up and wait for CI")
            await trio.sleep(2.8)  # the wakeup fires after 2 s, its turn runs
            await handle.prompt("think slowly")
            await trio.sleep(0.3)
            assert (await handle.post_mid_turn_message("also check the docs"))["accepted"]
            queued = await handle.prompt("one more thing")
            assert await handle.abort_prompt(queued.prompt_id)
            again = handle.subscribe(last_event_id=handle.last_event_id - 2)  # a client reconnects
            await trio.sleep(0.5)
            again.close()
            assert await handle.cancel()
            await trio.sleep(0.2)
        sub.close()
        await trio.sleep(0.2)
    (path,) = recorder.files.values()
    return path


def record(tmp: Path, **kw: Any) -> Path:
    """Recorded on the real clock, as a daemon runs (threads, file writes and all)."""
    return trio.run(lambda: _live(tmp, **kw))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("rec"))


@pytest.fixture(scope="module")
def guard_recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("guard"), guard_only=True)


def test_the_recording_has_every_input_and_no_secret(recorded: Path) -> None:
    text = recorded.read_text()
    assert SECRET not in text and "[redacted]" in text
    header = json.loads(text.splitlines()[0])
    assert header["format"] == FORMAT and header["version"] == VERSION
    rec = read_recording(recorded)
    kinds = {e.kind for e in rec.entries}
    assert {"action", "model", "tool", "event"} <= kinds
    actions = [e.data["do"] for e in rec.of_kind("action")]
    assert actions == ["attach", "prompt", "vote", "prompt", "prompt", "mid_turn", "prompt", "abort", "attach",
                       "detach", "cancel", "detach"]
    # (the mid-turn message of the cancelled turn becomes a prompt of its own: the demo model plans it)
    assert [e.data["name"] for e in rec.of_kind("tool")][:4] == ["todo_write", "write_file", "todo_write",
                                                                    "schedule_wakeup"]
    write = rec.of_kind("tool")[1].data
    assert write["asks"] and write["asks"][0]["answer"] is None  # asked, and allowed by the vote
    types = [e.data["type"] for e in rec.of_kind("event")]
    assert "permission_request" in types and "background_task" in types
    models = rec.of_kind("model")
    assert len(models) > 8 and models[7].data.get("cancelled")
    last = models[0].data["items"][-1]
    assert last["dt"] >= 0 and last["usage"] == {"prompt_tokens": 120, "completion_tokens": 30,
                                                 "total_tokens": 150, "cached_tokens": None}


def test_a_recording_replays_identically(recorded: Path) -> None:
    result = replay_recording(recorded)
    assert result.ok, result.difference.describe()  # type: ignore[union-attr]
    rec = read_recording(recorded)
    assert result.model_calls == len(rec.of_kind("model")) and result.events == len(rec.of_kind("event"))


def test_the_command_replays_a_recording(recorded: Path, capsys: pytest.CaptureFixture[str],
                                        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="trellis"):
        assert main(["--recording", str(recorded)]) == 0
    assert "identical" in capsys.readouterr().out
    # No command runs in a replay: nothing is said of a sandbox (before, "no sandbox ... have your rights").
    assert not [r for r in caplog.records if "sandbox" in r.getMessage()]


def test_a_changed_tool_result_is_caught_at_its_step(recorded: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    lines = recorded.read_text().splitlines()
    changed = []
    step = None
    for line in lines:
        data = json.loads(line)
        if data.get("kind") == "tool" and data["data"]["name"] == "write_file":
            data["data"]["result"]["content"] = "something else happened"
            line = json.dumps(data)
        changed.append(line)
    path = tmp_path / "changed.jsonl"
    path.write_text("\n".join(changed) + "\n")
    rec = read_recording(recorded)
    # The first event that shows the result: the write's tool_call_update with its text.
    for e in rec.of_kind("event"):
        if "Wrote" in json.dumps(e.data) or "notes.txt" in json.dumps(e.data.get("data", {}).get("update", {})
                                                                       .get("content", "")):
            step = e.n
            break
    result = replay_recording(path)
    assert not result.ok
    assert result.difference.step == step, result.difference.describe()
    assert main(["--recording", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"step {step}" in out and "recorded:" in out and "replayed:" in out


def test_a_planted_change_in_the_guards_bound_stops_at_the_third_guard_stream(
        guard_recorded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert replay_recording(guard_recorded).ok
    monkeypatch.setattr("actors.guard.state.MAX_ATTEMPTS", 3)
    result = replay_recording(guard_recorded)
    assert not result.ok
    diff = result.difference
    assert "model call 5" in diff.what, diff.describe()  # calls: the work, its stop, guard 1, guard 2, guard 3
    rec = read_recording(guard_recorded)
    after_fourth = [e for e in rec.of_kind("event") if e.t >= rec.of_kind("model")[3].t]
    exhausted = next(e for e in after_fourth if "Automatic continuation stopped" in json.dumps(e.data))
    assert diff.step == exhausted.n


def test_a_session_tool_that_behaves_otherwise_is_caught(recorded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pb_module, "SESSION_TOOLS", frozenset())  # schedule_wakeup answered, never scheduled
    result = replay_recording(recorded)
    assert not result.ok


def test_a_recording_becomes_a_scenario_that_passes_and_explores(recorded: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "incident.json"
    assert main(["--recording", str(recorded), "--to-scenario", str(out)]) == 0, capsys.readouterr().out
    data = json.loads(out.read_text())
    assert [s["do"] for s in data["timeline"]] == ["create_session", "attach", "prompt", "vote", "prompt", "prompt",
                                                   "mid_turn", "prompt", "abort", "attach", "disconnect", "cancel",
                                                   "disconnect"]
    assert set(data["tool_results"]) == {"call-write"} and data["tool_results"]["call-write"]["asks"]
    assert data["expect"]["prompts"]["p3"]["state"] == "cancelled"
    assert "guard_bounded" in data["invariants"]
    assert SECRET not in out.read_text()
    assert main([str(out), "--explore", "3", "--from", "0"]) == 0, capsys.readouterr().out


async def _live_shell(tmp: Path) -> Path:
    """A background shell (a real subprocess, live): its output and end come back as recorded."""
    model = ScriptedModel()
    model.extend([
        [{"tool_call": {"id": "call-sh", "name": "shell",
                        "arguments": {"command": "echo started; sleep 0.3; echo finished",
                                      "run_in_background": True}}}],
        [{"text": "It runs in the background."}],
        [{"text": "The build finished."}],
    ], where="script")
    workspace = tmp / "workspace"
    workspace.mkdir(exist_ok=True)
    recorder = Recorder(tmp / "recordings")
    settings = Settings(approval_mode="yolo", checkpoints_enabled=False, sandbox="off",
                        hooks={"Stop": [{"hooks": [{"type": "command", "command": "echo checked >&2; exit 0"}]}]})
    async with open_daemon(settings, state_dir=tmp / "state", workspace=str(workspace),
                           **recorder.edges(settings, model)) as daemon:
        recorder.attach(daemon)
        handle, _ = await daemon.create_session()
        await handle.prompt("build it in the background")
        with trio.fail_after(10):
            while len(model.calls if hasattr(model, "calls") else []) < 3 or not handle._session.is_idle():
                await trio.sleep(0.05)
    (path,) = recorder.files.values()
    return path


def test_a_background_shell_replays_without_running(tmp_path: Path) -> None:
    path = trio.run(_live_shell, tmp_path)
    rec = read_recording(path)
    statuses = [e.data["data"].get("status") for e in rec.of_kind("event") if e.data["type"] == "background_task"]
    assert statuses[0] == "started" and statuses[-1] == "finished" and "output" in statuses
    assert rec.of_kind("background") and len(rec.of_kind("model")) == 3  # the notification's turn too
    assert [h.data["outcome"] for h in rec.of_kind("hook")][0] == [0, "", "checked\n"]
    result = replay_recording(path)
    assert result.ok, result.difference.describe()  # type: ignore[union-attr]
    out = tmp_path / "shell_incident.json"
    assert main(["--recording", str(path), "--to-scenario", str(out)]) == 0  # its output and end come as recorded
    shell = json.loads(out.read_text())["tool_results"]["call-sh"]
    assert "{taskId}" in shell["result"]["content"] and shell["background"][0]["events"][-1]["status"] == "finished"


EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "actors" / "replay" / "scenarios" / "recordings")
                  .glob("*.jsonl"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_example_recordings_of_the_library_replay_identically(path: Path) -> None:
    assert len(EXAMPLES) >= 3
    result = replay_recording(path)
    assert result.ok, result.difference.describe()  # type: ignore[union-attr]


def test_the_subagent_example_replays_the_runs_end_as_its_notification() -> None:
    rec = read_recording(next(p for p in EXAMPLES if p.stem == "subagent_parent"))
    assert [e.data["name"] for e in rec.of_kind("tool")] == ["agent"]
    assert [e.data["kind"] for e in rec.of_kind("background")] == ["agent"]
    assert len(rec.of_kind("model")) == 3  # the start, its answer, the automatic turn of the run's end


def test_the_openai_example_becomes_a_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "openai_incident.json"
    example = next(p for p in EXAMPLES if p.stem == "openai_guard_vote_cancel")
    assert main(["--recording", str(example), "--to-scenario", str(out)]) == 0, capsys.readouterr().out


def test_the_subagent_example_becomes_a_scenario_with_its_runs_end(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "subagent_incident.json"
    example = next(p for p in EXAMPLES if p.stem == "subagent_parent")
    assert main(["--recording", str(example), "--to-scenario", str(out)]) == 0, capsys.readouterr().out
    data = json.loads(out.read_text())
    (answer,) = data["tool_results"].values()
    assert answer["name"] == "agent" and answer["background"][0]["kind"] == "agent"
    assert data["expect"]["model_calls"] == 3  # the automatic turn of the run's end happens in the scenario too
