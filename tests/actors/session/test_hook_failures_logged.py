"""A failed hook is a warning in the daemon's log: its event and program, what went wrong, never its output."""

from __future__ import annotations

import logging

import pytest
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors.session.hooks import HookCommand, HookGroup, command_name, run_hooks
from tests.actors.session.guard.harness import run_prompt


@pytest.mark.parametrize(("command", "name"), [
    ("./check.sh --token abc", "./check.sh"),
    ("API_KEY=sk-123 OTHER=1 /usr/bin/notify 'a b'", "/usr/bin/notify"),
    ("python3 -c 'print(1)'", "python3"),
    ("echo 'unterminated", "echo"),
    ("", "?"),
    ("x" * 200, "x" * 79 + "…"),
])
def test_a_command_is_named_by_its_program(command, name):
    assert command_name(command) == name


async def test_failures_are_listed_without_their_output(tmp_path):
    async def runner(hook: HookCommand, stdin: bytes, cwd: str):
        return {"a": (1, "", "stderr with a secret"), "b": "timed out after 2 s", "c": (0, "not json", "")}[hook.command]

    groups = (HookGroup(None, commands=(HookCommand("a"), HookCommand("b"), HookCommand("c"))),)
    outcome = await run_hooks(groups, {}, str(tmp_path), runner=runner)
    assert outcome.failed == (("a", "exited with 1"), ("b", "timed out after 2 s"), ("c", "output is not JSON; ignored"))
    assert "stderr with a secret" in outcome.failures[0]  # the client's hook_result still has it


async def test_a_failing_hook_logs_a_warning_naming_event_and_program(tmp_path, caplog):
    settings = Settings(approval_mode="yolo", hooks={
        "Stop": [{"hooks": [{"type": "command", "command": "echo leaked-output >&2; exit 3 # ./x"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "SECRET=hunter2 sleep 5", "timeout": 0.2}]}],
    })
    model = load_script([[{"text": "done"}]])
    with caplog.at_level(logging.WARNING, logger="trellis.hooks"), trio.fail_after(20):
        async with open_daemon(settings, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            run = await run_prompt(session, "go", timeout=20)
    assert run.stop_reason == "end_turn"
    records = [r for r in caplog.records if r.name == "trellis.hooks"]
    assert [(r.event, r.command, r.why) for r in records] == [  # type: ignore[attr-defined]
        ("UserPromptSubmit", "sleep", "timed out after 0.2 s"), ("Stop", "echo", "exited with 3")]
    assert all(r.levelno == logging.WARNING and r.session == session.session_id for r in records)  # type: ignore[attr-defined]
    text = caplog.text
    assert "leaked-output" not in text and "hunter2" not in text
    assert f"hook failed session={session.session_id} event=Stop command=echo: exited with 3" in text
