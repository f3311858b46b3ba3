"""``python -m transport --record DIR``: sessions recorded over HTTP, no secret written, and replayed identically."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

from actors.replay.recording import read_recording
from tests.conftest import daemon_process
from transport.auth import read_token_file

API_KEY = "sk-settings-secret-abcdef123456"
ENV_SECRET = "env-secret-value-987654"


async def _idle(client: httpx.AsyncClient, session_id: str) -> None:
    with trio.fail_after(15):
        while True:
            status = (await client.get(f"/session/{session_id}/status")).json()
            if status.get("currentPromptId") is None and not status.get("pendingCount"):
                return
            await trio.sleep(0.05)


async def test_a_daemon_records_sessions_and_the_recording_replays(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"model": {"apiKey": API_KEY}, "experimental": {"todoStopGuard": True}}))
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [
        [{"text": f"The key is {API_KEY} and {ENV_SECRET}. "},
         {"tool_call": {"id": "t1", "name": "todo_write", "arguments": {"todos": [
             {"id": "1", "content": "ship it", "status": "in_progress"}]}}}],
        [{"text": "Stopping here."}],
        [{"text": "Continuing."}],
        [{"text": "Still blocked."}],
    ]}))
    record_dir = tmp_path / "recordings"
    state = tmp_path / "state"
    async with daemon_process("--record", str(record_dir), "--settings", str(settings), "--model", "scripted",
                              "--script", str(script), state_dir=state,
                              env={"MY_SERVICE_TOKEN": ENV_SECRET}) as daemon:
        headers = {"Authorization": f"Bearer {read_token_file(state)}"}
        async with httpx.AsyncClient(base_url=daemon.url, headers=headers, trust_env=False) as client:
            skipped = (await client.post("/session", json={"record": False})).json()["sessionId"]
            created = await client.post("/session", json={"record": True})
            assert created.status_code in (200, 201), created.text
            session_id = created.json()["sessionId"]
            answer = await client.post(f"/session/{session_id}/prompt",
                                       json={"prompt": [{"type": "text", "text": "ship it"}]})
            assert answer.status_code == 202, answer.text
            await trio.sleep(0.2)
            await _idle(client, session_id)
    files = list(record_dir.iterdir())
    assert [f.name.startswith(session_id) for f in files] == [True]
    assert not any(f.name.startswith(skipped) for f in files)
    text = files[0].read_text()
    token = read_token_file(state)
    assert API_KEY not in text and ENV_SECRET not in text and token not in text
    rec = read_recording(files[0])
    assert [e.data["do"] for e in rec.of_kind("action")] == ["prompt"]
    assert len(rec.of_kind("model")) == 4  # the work, its stop, two guard continuations
    assert rec.of_kind("event")[-1].data["type"] == "session_closed"
    replayed = await trio.run_process([sys.executable, "-m", "actors.replay", "--recording", str(files[0])],
                                      capture_stdout=True, check=False)
    assert replayed.returncode == 0, replayed.stdout.decode()
    assert b"identical" in replayed.stdout


async def test_record_true_is_refused_by_a_daemon_that_does_not_record(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with daemon_process(state_dir=state) as daemon:
        headers = {"Authorization": f"Bearer {read_token_file(state)}"}
        async with httpx.AsyncClient(base_url=daemon.url, headers=headers, trust_env=False) as client:
            refused = await client.post("/session", json={"record": True})
            assert refused.status_code == 400 and refused.json()["code"] == "not_recording"
            assert (await client.post("/session", json={"record": False})).status_code in (200, 201)


async def _killed_and_restored(tmp_path: Path, slow: Any) -> Path:
    """A session answers, then is killed (``kill -9``) while it runs ``slow``; the next daemon restores it
    (the prompt it was running ends ``daemon_restarted``) and it answers again. Its recording."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [[{"text": "First answer."}], slow, [{"text": "Back again."}]]}))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"approvalMode": "yolo"}))
    record_dir = tmp_path / "recordings"
    state = tmp_path / "state"
    args = ("--record", str(record_dir), "--model", "scripted", "--script", str(script), "--settings", str(settings),
            "--sandbox", "off")

    async def prompt(client: httpx.AsyncClient, session_id: str, text: str) -> None:
        answer = await client.post(f"/session/{session_id}/prompt", json={"prompt": [{"type": "text", "text": text}]})
        assert answer.status_code == 202, answer.text

    async with daemon_process(*args, state_dir=state) as daemon:
        headers = {"Authorization": f"Bearer {read_token_file(state)}"}
        async with httpx.AsyncClient(base_url=daemon.url, headers=headers, trust_env=False) as client:
            session_id = (await client.post("/session", json={})).json()["sessionId"]
            await prompt(client, session_id, "first")
            await trio.sleep(0.2)
            await _idle(client, session_id)
            await prompt(client, session_id, "slow")
            with trio.fail_after(10):
                while "slowly" not in (files := list(record_dir.iterdir()))[0].read_text():
                    await trio.sleep(0.05)
            await trio.sleep(0.2)
            daemon.process.kill()
            with trio.fail_after(10):
                await daemon.process.wait()
    assert "session_closed" not in files[0].read_text()
    async with daemon_process(*args, state_dir=state) as daemon:
        headers = {"Authorization": f"Bearer {read_token_file(state)}"}
        async with httpx.AsyncClient(base_url=daemon.url, headers=headers, trust_env=False) as client:
            assert (await client.post(f"/session/{session_id}/load", json={})).status_code == 200
            await prompt(client, session_id, "again")
            await trio.sleep(0.2)
            await _idle(client, session_id)
    assert list(record_dir.iterdir()) == files  # the same file
    rec = read_recording(files[0])
    (restored,) = rec.of_kind("restored")
    types = [(e.data["type"], (e.data.get("data") or {}).get("code")) for e in rec.of_kind("event") if e.n > restored.n]
    assert ("turn_error", "daemon_restarted") in types
    return files[0]


async def test_a_session_restored_after_the_daemon_was_killed_goes_on_in_its_recording(tmp_path: Path) -> None:
    """Killed while a tool ran: the replay ends its first daemon as the recorded one ended (without a word),
    the tool still running, and restores the state the session was restored from."""
    path = await _killed_and_restored(tmp_path, [{"text": "Working slowly. "}, {"tool_call": {
        "id": "call-sleep", "name": "shell", "arguments": {"command": "sleep 30"}}}])
    replayed = await trio.run_process([sys.executable, "-m", "actors.replay", "--recording", str(path)],
                                      capture_stdout=True, check=False)
    assert replayed.returncode == 0, replayed.stdout.decode()


async def test_a_stream_the_kill_cut_replays_as_far_as_it_was_published(tmp_path: Path) -> None:
    """Killed mid-stream: the call is not in the recording (it is written when its stream ends), but the text it
    streamed before the kill was published; the replay plays that, then the stream hangs until the daemon ends."""
    path = await _killed_and_restored(tmp_path, {"steps": [{"text": "Answering slowly "}, {"sleep": 60},
                                                          {"text": "never sent."}]})
    assert len(read_recording(path).of_kind("model")) == 2  # the first answer, the one after the restore
    replayed = await trio.run_process([sys.executable, "-m", "actors.replay", "--recording", str(path)],
                                      capture_stdout=True, check=False)
    assert replayed.returncode == 0, replayed.stdout.decode()
