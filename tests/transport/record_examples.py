"""Make the example recordings of the scenario library (``actors/replay/scenarios/recordings/``).

    python -m tests.transport.record_examples [OUT_DIR]

Each runs the real daemon (``python -m transport --record DIR``) against the OpenAI-compatible wire of
``transport/fake_openai.py`` (no real model server can be built here: the fake plays scripted streams over
real HTTP and SSE, so the ``openai`` provider's own code path is what is recorded), drives it over HTTP as
a client does, and keeps the session's recording:

- ``openai_guard_vote_cancel.jsonl`` — a Todo Stop Guard run with a permission vote, two guard
  continuations, then a slow stream the client cancels;
- ``subagent_parent.jsonl`` / ``subagent_child.jsonl`` — a session that starts a subagent run (the
  ``agent`` tool, ``session`` runner), and the run's child session; the run's end comes back to the
  parent as a task notification that starts an automatic turn;
- ``openai_rewind_restart.jsonl`` — a session's rewind with its files and the undo of it, a rewind of the
  conversation, a title, a session permission rule added then removed and a cwd change, all over HTTP;
  then the daemon is stopped and started again on the same state directory, the session is loaded
  (restored) and answers once more: the recording goes on in the same file after a ``restored`` step.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.conftest import daemon_process
from transport.auth import read_token_file
from transport.fake_openai import FakeOpenAI

LIBRARY = Path(__file__).resolve().parents[2] / "actors" / "replay" / "scenarios" / "recordings"

TODOS = {"todos": [{"id": "1", "content": "Write the release notes", "status": "in_progress"},
                   {"id": "2", "content": "Tag the release", "status": "pending"}]}

GUARD_SCRIPT: list[Any] = [
    [{"text": "Planning the release. "}, {"tool_call": {"id": "call_todo", "name": "todo_write", "arguments": TODOS}},
     {"tool_call": {"id": "call_write", "name": "write_file",
                    "arguments": {"path": "NOTES.md", "content": "# Release notes\n"}}},
     {"usage": {"prompt_tokens": 812, "completion_tokens": 64}}],
    [{"text": "The notes are written."}, {"usage": {"prompt_tokens": 900, "completion_tokens": 8}}],
    [{"text": "Still on the tag."}],
    [{"text": "I cannot tag without the key."}],
    [{"text": "Let me think "}, {"stall": 30}, {"text": "about it."}],
]

SUBAGENT_SCRIPT: list[Any] = [
    [{"text": "Delegating. "}, {"tool_call": {"id": "call_agent", "name": "agent",
                                              "arguments": {"name": "scout", "brief": "list the files",
                                                            "runner": "session"}}}],
    [{"text": "The scout is running."}],
    [{"text": "There is one file: README.md."}],  # the child session's turn
    [{"text": "The scout reported: one file."}],  # the parent's automatic turn
]


async def _wait(client: httpx.AsyncClient, sid: str, check: Any, timeout: float = 15) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            status = (await client.get(f"/session/{sid}/status")).json()
            if check(status):
                return status
            await trio.sleep(0.05)


def _idle(status: dict[str, Any]) -> bool:
    return status.get("currentPromptId") is None and not status.get("pendingCount") and not status.get(
        "automaticQueue") and not [t for t in status.get("backgroundTasks", []) if t.get("state") == "running"]


async def _record(script: list[Any], drive: Any, tmp: Path, settings: dict[str, Any]) -> list[Path]:
    fake = FakeOpenAI(script)
    record_dir = tmp / "recordings"
    (tmp / "settings.json").write_text(json.dumps(settings))
    workspace = tmp / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("hello\n")
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        async with daemon_process("--record", str(record_dir), "--settings", str(tmp / "settings.json"),
                                  "--model", "openai", "--openai-base-url", url, "--openai-model", "fake",
                                  "--workspace", str(workspace), "--sandbox", "off",
                                  state_dir=tmp / "state") as daemon:
            headers = {"Authorization": f"Bearer {read_token_file(tmp / 'state')}"}
            async with httpx.AsyncClient(base_url=daemon.url, headers=headers, trust_env=False,
                                         timeout=30) as client:
                await drive(client)
        nursery.cancel_scope.cancel()
    return sorted(record_dir.iterdir(), key=lambda p: p.stem.rpartition("-")[2])  # by when each session began


async def _guard_vote_cancel(client: httpx.AsyncClient) -> None:
    sid = (await client.post("/session", json={})).json()["sessionId"]
    await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "prepare the release"}]})
    status = await _wait(client, sid, lambda s: s.get("pendingPermissions"))
    request_id = status["pendingPermissions"][0]
    voted = await client.post(f"/session/{sid}/permission/{request_id}",
                              json={"outcome": {"outcome": "selected", "optionId": "proceed_once"}})
    assert voted.status_code == 200, voted.text
    await _wait(client, sid, _idle)
    await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "and now?"}]})
    await trio.sleep(0.5)
    assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
    await _wait(client, sid, _idle)


REWIND_SCRIPT: list[Any] = [
    [{"tool_call": {"id": "call_notes", "name": "write_file",
                    "arguments": {"path": "NOTES.md", "content": "# Release notes\n"}}}],
    [{"text": "The notes are written."}],
    [{"tool_call": {"id": "call_changes", "name": "write_file",
                    "arguments": {"path": "CHANGELOG.md", "content": "## 1.0\n"}}}],
    [{"text": "The changelog is written."}],
    [{"text": "Nothing else in docs/."}],
    [{"text": "Back after the restart: the notes are still there."}],  # the restored session's turn
]


async def _rewind_restart(tmp: Path) -> list[Path]:
    fake = FakeOpenAI(REWIND_SCRIPT)
    record_dir = tmp / "recordings"
    (tmp / "settings.json").write_text(json.dumps({"model": {"apiKey": "sk-example-not-a-key"}}))
    workspace = tmp / "workspace"
    (workspace / "docs").mkdir(parents=True)
    args = ("--record", str(record_dir), "--settings", str(tmp / "settings.json"), "--model", "openai",
            "--openai-model", "fake", "--workspace", str(workspace), "--sandbox", "off")
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        async with daemon_process(*args, "--openai-base-url", url, state_dir=tmp / "state") as daemon:
            headers = {"Authorization": f"Bearer {read_token_file(tmp / 'state')}"}
            async with httpx.AsyncClient(base_url=daemon.url, headers=headers, trust_env=False,
                                         timeout=30) as client:
                sid = (await client.post("/session", json={"approvalMode": "yolo", "title": "Release prep"})
                       ).json()["sessionId"]
                for text in ("write the release notes", "write the changelog"):
                    await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})
                    await trio.sleep(0.3)
                    await _wait(client, sid, _idle)
                rewound = await client.post(f"/session/{sid}/rewind", json={"turn": 1, "files": True})
                assert rewound.status_code == 200, rewound.text
                assert not (workspace / "CHANGELOG.md").exists()
                undone = await client.post(f"/session/{sid}/checkpoints/undo/{rewound.json()['undoId']}", json={})
                assert undone.status_code == 200 and (workspace / "CHANGELOG.md").exists(), undone.text
                assert (await client.post(f"/session/{sid}/rewind", json={"turn": 1})).status_code == 200
                assert (await client.post(f"/session/{sid}/title", json={"title": "Release notes"})).status_code == 200
                rule = {"effect": "deny", "rule": "Edit(./CHANGELOG.md)"}
                assert (await client.post(f"/session/{sid}/permissions", json=rule)).status_code == 200
                removed = await client.delete(f"/session/{sid}/permissions/deny", params={"rule": rule["rule"]})
                assert removed.status_code == 200, removed.text
                assert (await client.post(f"/session/{sid}/cwd", json={"cwd": "docs"})).status_code == 200
                await client.post(f"/session/{sid}/prompt",
                                  json={"prompt": [{"type": "text", "text": "anything else?"}]})
                await trio.sleep(0.3)
                await _wait(client, sid, _idle)
        async with daemon_process(*args, "--openai-base-url", url, state_dir=tmp / "state") as daemon:
            headers = {"Authorization": f"Bearer {read_token_file(tmp / 'state')}"}
            async with httpx.AsyncClient(base_url=daemon.url, headers=headers, trust_env=False,
                                         timeout=30) as client:
                loaded = await client.post(f"/session/{sid}/load", json={})
                assert loaded.status_code == 200, loaded.text
                await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "still there?"}]})
                await trio.sleep(0.3)
                await _wait(client, sid, _idle)
        nursery.cancel_scope.cancel()
    return sorted(record_dir.iterdir())


async def _subagent(client: httpx.AsyncClient) -> None:
    sid = (await client.post("/session", json={"approvalMode": "yolo"})).json()["sessionId"]
    await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "have a scout look"}]})
    await trio.sleep(0.5)
    await _wait(client, sid, _idle)
    await trio.sleep(0.3)
    await _wait(client, sid, _idle)


async def make(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    made = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a").mkdir()
        files = await _record(GUARD_SCRIPT, _guard_vote_cancel, Path(tmp) / "a",
                              {"experimental": {"todoStopGuard": True}, "model": {"apiKey": "sk-example-not-a-key"}})
        made.append(Path(shutil.copy(files[0], out / "openai_guard_vote_cancel.jsonl")))
        (Path(tmp) / "b").mkdir()
        files = await _record(SUBAGENT_SCRIPT, _subagent, Path(tmp) / "b",
                              {"subagents": {"runners": {"session": {"approvalMode": "yolo"}}}})
        parent, child = files[0], files[1]
        made.append(Path(shutil.copy(parent, out / "subagent_parent.jsonl")))
        made.append(Path(shutil.copy(child, out / "subagent_child.jsonl")))
        (Path(tmp) / "c").mkdir()
        (recorded,) = await _rewind_restart(Path(tmp) / "c")
        made.append(Path(shutil.copy(recorded, out / "openai_rewind_restart.jsonl")))
    return made


if __name__ == "__main__":
    for path in trio.run(make, Path(sys.argv[1]) if len(sys.argv) > 1 else LIBRARY):
        print(path)
