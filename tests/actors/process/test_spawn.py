"""spawn_child: a process started from the Trio thread, read and reaped through Trio."""

from __future__ import annotations

import os
import signal

import trio

from actors.process import spawn_child


async def test_output_and_exit_code():
    with trio.fail_after(10):
        child = spawn_child(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"], "/", {"PATH": os.environ["PATH"]})
        data = b""
        async for chunk in child.stdout:
            data += chunk
        assert await child.wait() == 3 and child.returncode == 3
    assert data == b"out\nerr\n"


async def test_own_session_and_process_group_and_a_killed_child_reports_the_signal():
    with trio.fail_after(10):
        child = spawn_child(["sleep", "30"], "/", {"PATH": os.environ["PATH"]})
        assert os.getpgid(child.pid) == child.pid and os.getsid(child.pid) == child.pid
        assert child.returncode is None
        os.killpg(child.pid, signal.SIGKILL)
        assert await child.wait() == -signal.SIGKILL


async def test_two_waiters_both_see_the_exit():
    results = []
    with trio.fail_after(10):
        child = spawn_child(["sleep", "0.2"], "/", {"PATH": os.environ["PATH"]})

        async def waiter() -> None:
            results.append(await child.wait())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            nursery.start_soon(waiter)
    assert results == [0, 0]


async def test_the_environment_is_exactly_what_was_given():
    with trio.fail_after(10):
        child = spawn_child(["/usr/bin/env"], "/", {"ONLY": "this"})
        data = b""
        async for chunk in child.stdout:
            data += chunk
        await child.wait()
    assert data == b"ONLY=this\n"


def test_a_missing_program_is_a_start_failure_as_without_a_sandbox(tmp_path):
    import pytest

    from actors.process import require_executable

    with pytest.raises(FileNotFoundError):
        require_executable("no-such-agent-cli", str(tmp_path), {"PATH": str(tmp_path)})
    with pytest.raises(FileNotFoundError):
        require_executable("./missing.sh", str(tmp_path), {})
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    require_executable("./agent.sh", str(tmp_path), {})
    require_executable("agent.sh", "/", {"PATH": str(tmp_path)})
    require_executable("/bin/sh", "/", {})
