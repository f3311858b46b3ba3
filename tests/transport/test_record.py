"""``python -m transport --record DIR``: sessions recorded over HTTP, no secret written, and replayed identically."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
