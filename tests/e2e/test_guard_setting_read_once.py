"""experimental.todoStopGuard is read once, at start (spec 000): editing the settings file while the
daemon runs changes nothing, not even for sessions created after the edit; a restart reads it again.

A real ``python -m transport`` process with ``--settings`` and a scripted model that leaves two todos open.
"""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.conftest import daemon_process

SCRIPT = [
    [{"tool_call": {"name": "todo_write", "arguments": {"todos": [
        {"id": "1", "content": "Sort the inbox", "status": "in_progress"},
        {"id": "2", "content": "Answer the mail", "status": "pending"}]}}}],
    [{"text": "stopping"}],
    [{"text": "continuing"}],
    [{"text": "still continuing"}],
    [{"text": "spare"}],
]


def write_settings(path: Path, guard: bool) -> None:
    path.write_text(json.dumps({"experimental": {"todoStopGuard": guard}, "approvalMode": "yolo"}))


async def run_one_prompt(client: object) -> dict:
    """A new session and one prompt, to its end; the session's guard status afterwards."""
    sid = (await client.post("/session", json={})).json()["sessionId"]
    pid = (await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})).json()[
        "promptId"]
    while (await client.get(f"/session/{sid}/turns/{pid}")).json()["state"] in ("queued", "running"):
        await trio.sleep(0.02)
    return (await client.get(f"/session/{sid}/status")).json()["todoStopGuard"]


async def test_editing_the_setting_changes_nothing_until_a_restart(tmp_path: Path) -> None:
    settings, script = tmp_path / "settings.json", tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    write_settings(settings, False)
    args = ("--settings", str(settings), "--script", str(script))
    with trio.fail_after(60):
        async with daemon_process(*args, state_dir=tmp_path / "state") as daemon:
            async with daemon.client(daemon.token()) as client:
                write_settings(settings, True)  # the daemon is running: too late
                running = await run_one_prompt(client)
        async with daemon_process(*args, state_dir=tmp_path / "state") as daemon:
            async with daemon.client(daemon.token()) as client:
                restarted = await run_one_prompt(client)
    assert running["enabled"] is False and running["attempts"] == 0 and running["armed"] is False
    assert restarted["enabled"] is True and restarted["attempts"] == 2 and restarted["exhaustionReported"] is True
