"""Hook commands as real processes: a timed-out hook leaves nothing behind; hooks never see credentials."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import trio

from actors import CountingIds, Settings, load_script, open_daemon
from tests.actors.session.guard.harness import call, run_prompt

# The hook's shell starts a grandchild that would outlive it by five minutes.
LINGERING = "sh -c 'sleep 300 & echo $! > {name}; wait'"


def alive(pid: int) -> bool:
    """Alive: present in /proc and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_for(predicate: Any, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


def hook_settings(event: str, command: str, timeout: float | None = None, **extra: Any) -> Settings:
    hook: dict[str, Any] = {"type": "command", "command": command}
    if timeout is not None:
        hook["timeout"] = timeout
    return Settings(approval_mode="yolo", hooks={event: [{"hooks": [hook]}]}, **extra)


async def _timed_out_hook_leaves_no_process(event: str, responses: list[Any], tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    settings = hook_settings(event, LINGERING.format(name=pid_file.name), timeout=0.3)
    model = load_script(responses)
    pid: int | None = None
    try:
        with trio.fail_after(20):
            async with open_daemon(settings, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
                session, _ = await daemon.create_session()
                run = await run_prompt(session, "go", timeout=20)
                assert run.stop_reason == "end_turn"
                reports = [e.data for e in run.events if e.type == "hook_result"]
                assert reports and reports[0]["hookEvent"] == event and "timed out" in reports[0]["failures"][0]
                assert pid_file.exists()
                pid = int(pid_file.read_text())
                # The session is still open: only the hook's own end may have taken the grandchild.
                await wait_for(lambda: not alive(pid), timeout=2)
    finally:
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)  # don't leave it behind when the assertion fails


async def test_a_stop_hook_that_times_out_leaves_no_process_behind(tmp_path):
    await _timed_out_hook_leaves_no_process("Stop", [[{"text": "done"}]], tmp_path)


async def test_a_post_tool_use_hook_that_times_out_leaves_no_process_behind(tmp_path):
    todos = {"todos": [{"id": "1", "content": "a", "status": "completed"}]}
    await _timed_out_hook_leaves_no_process("PostToolUse", [[call("todo_write", **todos)], [{"text": "done"}]],
                                            tmp_path)


async def test_hook_commands_never_see_the_model_key_or_the_daemon_token(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leak-me-not")
    monkeypatch.setenv("TRELLIS_TOKEN", "token-leak-me-not")
    monkeypatch.setenv("TRELLIS_TEST_VISIBLE", "seen-by-hooks")
    settings = Settings(approval_mode="yolo", hooks={
        "Stop": [{"hooks": [{"type": "command", "command": "cat > /dev/null; env > stop_env.txt"}]}],
        "PostToolUse": [{"hooks": [{"type": "command", "command": "cat > /dev/null; env > post_env.txt"}]}],
    })
    model = load_script([[call("shell", command="true")], [{"text": "done"}]])
    with trio.fail_after(20):
        async with open_daemon(settings, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            run = await run_prompt(session, "go", timeout=20)
    assert run.stop_reason == "end_turn"
    for name in ("stop_env.txt", "post_env.txt"):
        env = (tmp_path / name).read_text()
        assert "TRELLIS_TEST_VISIBLE=seen-by-hooks" in env  # the environment is passed on
        assert "leak-me-not" not in env and "OPENAI_API_KEY" not in env and "TRELLIS_TOKEN" not in env


async def test_a_hook_that_times_out_takes_what_left_its_group_with_it(tmp_path):
    from tests.processes import kill_all, marker, pids_with, sleeping

    mark = marker()
    # A new session and a double fork: neither is in the hook's process group any more.
    settings = hook_settings("Stop", f"setsid sleep {mark} & (sleep {mark} &); touch started; sleep {mark}",
                             timeout=1)
    try:
        with trio.fail_after(20):
            async with open_daemon(settings, model=load_script([[{"text": "done"}]]), ids=CountingIds(),
                                   workspace=str(tmp_path)) as daemon:
                session, _ = await daemon.create_session()
                run = await run_prompt(session, "go", timeout=20)
                reports = [e.data for e in run.events if e.type == "hook_result"]
                assert reports and "timed out" in reports[0]["failures"][0]
                assert (tmp_path / "started").exists()
                # The session is still open: only the hook's own end may have taken them.
                await wait_for(lambda: not sleeping(mark) and not pids_with(mark), timeout=2)
    finally:
        kill_all(pids_with(mark))
