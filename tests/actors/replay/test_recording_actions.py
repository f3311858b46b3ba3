"""Recording the client calls beyond prompts and votes (rewinds, checkpoint restores, titles, cwd changes,
permission-rule edits), restores from the state directory, and the model requests; replaying them."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from actors import ScriptedModel, Settings, open_daemon
from actors.replay.cli import main
from actors.replay.playback import replay_recording
from actors.replay.recorder import Recorder, RecordingHandle
from actors.replay.recording import ACTIONS, READS, VERSION, read_recording
from actors.replay.to_scenario import to_scenario
from actors.permission_rules import RuleLists
from actors.session.handle import SessionHandle

SECRET = "sk-request-secret-0123456789"


def _write(call_id: str, path: str, content: str) -> dict[str, Any]:
    return {"tool_call": {"id": call_id, "name": "write_file", "arguments": {"path": path, "content": content}}}


SCRIPT: list[Any] = [
    [_write("call-a", "a.txt", "alpha\n")],
    [{"text": "Wrote a."}],
    [_write("call-b", "b.txt", f"beta {SECRET}\n")],
    [{"text": "Wrote b."}],
    [_write("call-c1", "c.txt", "gamma\n")],  # denied by the session's rule
    [{"text": "The rule denies c."}],
    [_write("call-c2", "c.txt", "gamma\n")],  # allowed once the rule is gone
    [{"text": "Wrote c."}],
    [{"text": "Working in the new directory."}],
]


async def _idle(handle: Any) -> None:
    with trio.fail_after(15):
        await trio.sleep(0.05)
        while not handle._session.is_idle():
            await trio.sleep(0.02)


async def _live(tmp: Path) -> Path:
    settings = Settings(approval_mode="yolo", checkpoints_enabled=True, model={"apiKey": SECRET})
    model = ScriptedModel()
    model.extend(SCRIPT, where="script")
    workspace = tmp / "workspace"
    (workspace / "sub").mkdir(parents=True)
    outside = tmp / "elsewhere"
    outside.mkdir()
    recorder = Recorder(tmp / "recordings")
    async with open_daemon(settings, state_dir=tmp / "state", workspace=str(workspace),
                           **recorder.edges(settings, model)) as daemon:
        recorder.attach(daemon)
        handle, _ = await daemon.create_session(title="first title", append_system_prompt="Keep notes short.",
                                                permissions=RuleLists(ask=("Bash(rm:*)",)))
        assert isinstance(handle, RecordingHandle)
        for text in ("write a", "write b"):
            await handle.prompt(text)
            await _idle(handle)
        rewound = await handle.checkpoints("rewind", turn=1)  # b.txt goes, and turn 1 with it
        assert not (workspace / "b.txt").exists() and rewound["historyLength"] < 6
        undone = await handle.checkpoints("undo", undo_id=rewound["undoId"])
        assert (workspace / "b.txt").exists() and undone["historyLength"] > rewound["historyLength"]
        again = await handle.checkpoints("rewind", turn=1)
        assert again["historyLength"] == rewound["historyLength"] and not (workspace / "b.txt").exists()
        with pytest.raises(ValueError):
            await handle.rewind(7)  # refused: recorded with its failure
        assert await handle.set_title("Parser work") == "Parser work"
        assert await handle.add_permission_rule("deny", "Edit(./c.txt)")
        await handle.prompt("write c")
        await _idle(handle)
        assert not (workspace / "c.txt").exists()
        assert await handle.remove_permission_rule("deny", "Edit(./c.txt)")
        await handle.prompt("write c again")
        await _idle(handle)
        assert (workspace / "c.txt").exists()
        kept = await handle.rewind(2)  # the conversation only: "write c again" and its answer go
        assert kept == len(handle._session.conversation)
        assert await handle.change_cwd("sub") == str(workspace / "sub")
        assert await handle.change_cwd(str(outside)) == str(outside)
        await handle.prompt("look around")
        await _idle(handle)
    (path,) = recorder.files.values()
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trio.run(_live, tmp_path_factory.mktemp("actions"))


def test_every_call_a_client_makes_on_a_session_is_recorded_or_only_reads() -> None:
    public = {name for name, member in inspect.getmembers(SessionHandle)
              if not name.startswith("_") and inspect.iscoroutinefunction(member)}
    recorded = set(ACTIONS.values())
    assert public - recorded - set(READS) == set(), "a SessionHandle call neither recorded nor a read"
    for name in public & recorded:
        assert name in RecordingHandle.__dict__, f"RecordingHandle does not record {name}"
    assert "subscribe" in RecordingHandle.__dict__


def test_the_recording_has_the_calls_and_the_requests_and_no_secret(recorded: Path) -> None:
    text = recorded.read_text()
    assert SECRET not in text
    rec = read_recording(recorded)
    assert rec.header.version == VERSION == 2
    assert rec.header.record["title"] == "first title" and rec.header.now and rec.header.os
    assert rec.header.record["appendSystemPrompt"] == "Keep notes short."
    assert rec.header.record["permissions"]["ask"] == ["Bash(rm:*)"]
    actions = [e.data["do"] for e in rec.of_kind("action")]
    assert actions == ["prompt", "prompt", "checkpoints", "checkpoints", "checkpoints", "rewind", "title",
                       "add_rule", "prompt", "remove_rule", "prompt", "rewind", "cwd", "cwd", "prompt"]
    failed = rec.of_kind("action")[5].data["result"]
    assert failed["error"]["type"] == "ValueError"
    models = rec.of_kind("model")
    first = models[0].data["request"]
    assert first["keep"] == 0 and first["messages"][0]["role"] == "system" and first["tools"]
    assert all("request" in m.data for m in models)
    assert all("tools" not in m.data["request"] for m in models[1:8])  # written again only when they change
    assert models[1].data["request"]["keep"] > 0  # the conversation it extends is not written twice


def test_a_session_with_rewinds_a_title_a_cwd_and_rule_edits_replays_identically(recorded: Path) -> None:
    result = replay_recording(recorded)
    assert result.ok, result.difference.describe()  # type: ignore[union-attr]
    rec = read_recording(recorded)
    assert result.model_calls == len(rec.of_kind("model")) and result.events == len(rec.of_kind("event"))


@pytest.mark.parametrize("left_out", ["checkpoints", "rewind", "title", "add_rule", "remove_rule", "cwd"])
def test_each_recorded_call_is_needed_for_the_replay(recorded: Path, tmp_path: Path, left_out: str) -> None:
    """Without one kind of call (as a recorder that did not record it would write), the replay differs."""
    lines = [line for line in recorded.read_text().splitlines()
             if json.loads(line).get("data", {}).get("do") != left_out]
    path = tmp_path / f"without_{left_out}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = replay_recording(path)
    assert not result.ok, f"the replay does not notice a missing {left_out}"


def _plant_in_system_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime altering its system prompt: one more sentence."""
    from actors.session import system_prompt

    original = system_prompt._default_prompt

    def altered(*args: Any) -> str:
        return original(*args) + "\n\nAnswer in haiku."

    monkeypatch.setattr(system_prompt, "_default_prompt", altered)


def test_a_planted_change_in_the_system_prompt_is_caught_at_the_first_request(
        recorded: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _plant_in_system_prompt(monkeypatch)
    result = replay_recording(recorded)
    assert not result.ok
    diff = result.difference
    first = read_recording(recorded).of_kind("model")[0]
    assert diff.step == first.n and "request of model call 1" in diff.what, diff.describe()
    assert "$.messages[0].content" in diff.what
    assert "Answer in haiku." in json.dumps(diff.got) and "Answer in haiku." not in json.dumps(diff.expected)
    assert main(["--recording", str(recorded)]) == 1
    out = capsys.readouterr().out
    assert f"step {first.n}" in out and "recorded:" in out and "replayed:" in out and "Answer in haiku." in out


def test_a_planted_change_in_a_tool_schema_is_caught_at_the_first_request(
        recorded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from actors.session.tools import ToolRegistry

    specs = ToolRegistry.specs

    def altered(self: ToolRegistry) -> tuple[Any, ...]:
        out = specs(self)
        return tuple(attrs_evolve(s, description=s.description + " (planted)") if s.name == "write_file" else s
                     for s in out)

    monkeypatch.setattr(ToolRegistry, "specs", altered)
    result = replay_recording(recorded)
    assert not result.ok
    diff = result.difference
    assert diff.step == read_recording(recorded).of_kind("model")[0].n, diff.describe()
    assert ".tools[" in diff.what and diff.what.endswith(".description"), diff.what


def attrs_evolve(value: Any, **changes: Any) -> Any:
    import attrs

    return attrs.evolve(value, **changes)


def test_a_planted_change_in_a_later_request_is_caught_at_its_step(recorded: Path, tmp_path: Path) -> None:
    """A request the session sends after a rewind: a recording whose rewind kept one more message than the
    replay's differs at the first request after it, not before."""
    rec = read_recording(recorded)
    models = rec.of_kind("model")
    target = models[4]  # the request after the rewind and the rule: "write c"
    lines = []
    for line in recorded.read_text().splitlines():
        data = json.loads(line)
        if data.get("n") == target.n:
            data["data"]["request"]["messages"][-1]["content"] = "write c, planted"
            line = json.dumps(data)
        lines.append(line)
    path = tmp_path / "planted.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = replay_recording(path)
    assert not result.ok and result.difference.step == target.n, result.difference.describe()
    assert "request of model call 5" in result.difference.what


V1 = Path(__file__).resolve().parent / "recordings_v1" / "openai_guard_vote_cancel.jsonl"


def test_a_version_1_recording_is_still_read_and_replayed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The previous version (the library's example as version 1 wrote it: no requests, no session record)."""
    rec = read_recording(V1)
    assert rec.header.version == 1 and not rec.of_kind("restored")
    assert not any("request" in m.data for m in rec.of_kind("model"))
    result = replay_recording(V1)
    assert result.ok, result.difference.describe()  # type: ignore[union-attr]
    header, *rest = V1.read_text().splitlines()
    future = tmp_path / "v3.jsonl"
    future.write_text("\n".join([json.dumps({**json.loads(header), "version": 3}), *rest]) + "\n")
    assert main(["--recording", str(future)]) == 2
    assert "this reads versions 1, 2" in capsys.readouterr().out


def test_the_recording_becomes_a_scenario_with_its_cwd_and_rewind(recorded: Path) -> None:
    """The calls a scenario action takes are carried over; the others are named in notes. (The scenario does
    not run as the session did: its rule edits are left out, so the write they denied runs.)"""
    data, notes = to_scenario(read_recording(recorded), "actions")
    steps = [(s["do"], s.get("turn"), s.get("path")) for s in data["timeline"]]
    assert ("rewind", 2, None) in steps and ("cwd", None, "sub") in steps
    assert [n for n in notes if "add_rule" in n] and [n for n in notes if "elsewhere" in n]


def test_the_restart_example_becomes_a_scenario_that_restarts(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[3] / "scenarios" / "recordings" / "openai_rewind_restart.jsonl"
    out = tmp_path / "restart.json"
    assert main(["--recording", str(example), "--to-scenario", str(out)]) == 0, capsys.readouterr().out
    steps = [s["do"] for s in json.loads(out.read_text())["timeline"]]
    assert steps.count("restart") == 1 and steps.index("restart") < len(steps) - 1 and "rewind" in steps


# ----------------------------------------------------------------- restores


SCRIPT_RESTORE: list[Any] = [
    [{"text": "First answer."}],
    [{"text": "Second answer, after the restart."}],
    [{"text": "Third answer, after the session was opened again."}],
]


async def _live_restore(tmp: Path, *, record_first: bool) -> Path:
    """A session answers, the daemon stops; the next daemon restores it, it answers again, it is closed and
    opened again (another restore), and answers once more."""
    settings = Settings(checkpoints_enabled=False)
    model = ScriptedModel()
    model.extend(SCRIPT_RESTORE, where="script")
    workspace = tmp / "workspace"
    workspace.mkdir(exist_ok=True)
    state = tmp / "state"
    first = Recorder(tmp / "recordings", record_all=record_first)
    async with open_daemon(settings, state_dir=state, workspace=str(workspace),
                           **first.edges(settings, model)) as daemon:
        first.attach(daemon)
        handle, _ = await daemon.create_session(title="restored one")
        session_id = handle.session_id
        await handle.prompt("first")
        await _idle(handle)
        assert await handle.set_title("before the restart") == "before the restart"
    second = Recorder(tmp / "recordings")
    async with open_daemon(settings, state_dir=state, workspace=str(workspace),
                           **second.edges(settings, model)) as daemon:
        second.attach(daemon)
        handle = await daemon.load_session(session_id)
        await handle.prompt("second")
        await _idle(handle)
        await daemon.close_session(session_id)
        handle, attached = await daemon.create_session(session_id=session_id)
        assert not attached
        await handle.prompt("third")
        await _idle(handle)
    (path,) = list((tmp / "recordings").iterdir())
    return path


def test_a_restored_session_goes_on_in_its_recording_and_replays_identically(tmp_path: Path) -> None:
    path = trio.run(lambda: _live_restore(tmp_path, record_first=True))
    rec = read_recording(path)
    restores = rec.of_kind("restored")
    assert len(restores) == 2
    assert restores[0].data["record"]["title"] == "before the restart" and restores[0].data["transcript"]
    assert [e.n for e in rec.entries] == list(range(1, len(rec.entries) + 1))
    for restored in restores:  # its clock goes on: a restore comes after all that was recorded before it
        assert restored.t >= max(e.t for e in rec.entries if e.n < restored.n)
    reasons = [e.data["data"].get("reason") for e in rec.of_kind("event") if e.data["type"] == "session_closed"]
    assert reasons == ["daemon_shutdown", "closed", "daemon_shutdown"]
    result = replay_recording(path)
    assert result.ok, result.difference.describe()  # type: ignore[union-attr]
    assert result.model_calls == 3

    # Without its restores the file cannot be replayed: the replay says where it stops being the same.
    lines = [line for line in path.read_text().splitlines() if json.loads(line).get("kind") != "restored"]
    stripped = tmp_path / "no_restores.jsonl"
    stripped.write_text("\n".join(lines) + "\n")
    assert not replay_recording(stripped).ok


def test_a_session_recorded_from_its_restore_on_replays_from_the_restored_state(tmp_path: Path) -> None:
    path = trio.run(lambda: _live_restore(tmp_path, record_first=False))
    rec = read_recording(path)
    assert rec.entries[0].kind == "restored"
    assert rec.header.record.get("title") == "before the restart"
    result = replay_recording(path)
    assert result.ok, result.difference.describe()  # type: ignore[union-attr]
    assert result.model_calls == 2


async def _refused_calls(tmp: Path) -> Path:
    settings = Settings()
    recorder = Recorder(tmp / "recordings")
    async with open_daemon(settings, state_dir=tmp / "state", workspace=str(tmp),
                           **recorder.edges(settings, ScriptedModel())) as daemon:
        recorder.attach(daemon)
        handle, _ = await daemon.create_session()
        with pytest.raises(ValueError):
            await handle.set_approval_mode("bogus")
        with pytest.raises(ValueError):
            await handle.set_model("  ")
        assert await handle.set_approval_mode("plan") == "plan"
    [path] = sorted((tmp / "recordings").glob("*.jsonl"))
    return path


def test_a_refused_call_is_recorded_with_its_failure_and_replays_identically(tmp_path: Path) -> None:
    path = trio.run(_refused_calls, tmp_path)
    actions = [(e.data["do"], e.data["result"]) for e in read_recording(path).of_kind("action")]
    assert [do for do, _ in actions] == ["approval_mode", "model", "approval_mode"]
    assert actions[0][1]["error"]["type"] == "ValueError" and "bogus" in actions[0][1]["error"]["message"]
    assert actions[2][1] == "plan"
    result = replay_recording(path)
    assert result.ok, result.difference.describe()  # type: ignore[union-attr]
