"""The daemon on its state directory, as a subprocess: one daemon per directory, ``daemon.json`` while it
runs, and the token it keeps across restarts (refused when others may read it)."""

from __future__ import annotations

import argparse
import json
import os
import signal

import trio

from tests.conftest import daemon_process
from trellis.connect import daemon_file_proof, target


async def test_a_second_daemon_on_the_same_state_directory_refuses_naming_the_first(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(60):
        async with daemon_process(state_dir=state) as first:
            announced = json.loads((state / "daemon.json").read_text())
            # With the proof that it knows its token, which the clients check (trellis.connect).
            proof = daemon_file_proof(first.token(), first.url, first.pid)
            assert announced == {"url": first.url, "pid": first.pid, "proof": proof}
            assert first.token() not in (state / "daemon.json").read_text()
            found = target(argparse.Namespace(url=None, token=None, state_dir=str(state)), {})
            assert (found.url, found.token) == (first.url, first.token())
            second = await trio.run_process(
                [*_command(state)], capture_stdout=True, capture_stderr=True, check=False,
                env={k: v for k, v in os.environ.items() if k != "TRELLIS_TOKEN"})
            assert second.returncode == 2, second.stderr
            message = second.stderr.decode()
            assert "another daemon uses the state directory" in message
            assert f"pid {first.pid}" in message and first.url in message
            # The first one is untouched and still answers.
            async with first.client(first.token()) as client:
                assert (await client.get("/capabilities")).status_code == 200
        assert not (state / "daemon.json").exists()  # removed on exit


async def test_a_killed_daemons_lock_does_not_stop_the_next_and_the_token_is_kept(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(60):
        async with daemon_process(state_dir=state) as first:
            token = first.token()
            first.process.send_signal(signal.SIGKILL)
            await first.process.wait()
        assert (state / "daemon.json").exists()  # left behind by the kill
        async with daemon_process(state_dir=state) as second:
            assert second.token() == token  # the same token across restarts
            assert json.loads((state / "daemon.json").read_text())["pid"] == second.pid
            async with second.client(token) as client:
                assert (await client.get("/capabilities")).status_code == 200


async def test_a_token_file_others_can_read_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "token").write_text("guessable")
    os.chmod(state / "token", 0o644)
    with trio.fail_after(30):
        done = await trio.run_process(
            [*_command(state)], capture_stdout=True, capture_stderr=True, check=False,
            env={k: v for k, v in os.environ.items() if k != "TRELLIS_TOKEN"})
    assert done.returncode == 2
    message = done.stderr.decode()
    assert f"refusing the token file {state / 'token'}" in message and "0644" in message
    assert "trellis token rotate" in message
    assert not (state / "daemon.json").exists()


def _command(state) -> list[str]:
    import sys

    return [sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(state)]


async def test_the_acp_agent_on_stdio_and_a_daemon_never_share_a_state_directory(tmp_path):
    import sys

    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k != "TRELLIS_TOKEN"}
    acp_command = [sys.executable, "-m", "transport", "acp", "--state-dir", str(state)]
    with trio.fail_after(60):
        async with daemon_process(state_dir=state) as first:
            refused = await trio.run_process(acp_command, stdin=b"", capture_stdout=True, capture_stderr=True,
                                             check=False, env=env)
            assert refused.returncode == 2, refused.stderr
            message = refused.stderr.decode()
            assert "another daemon uses the state directory" in message and first.url in message
        # Now the agent holds it (its stdin left open), and the daemon is the one refused.
        agent = await trio.lowlevel.open_process(acp_command, stdin=-1, stdout=-1, stderr=-1, env=env)
        try:
            lock = state / "daemon.lock"
            while not lock.exists() or b"the ACP agent on stdio" not in lock.read_bytes():
                await trio.sleep(0.05)  # polled under fail_after: the agent starting up
            second = await trio.run_process(_command(state), capture_stdout=True, capture_stderr=True,
                                            check=False, env=env)
            assert second.returncode == 2, second.stderr
            assert f"pid {agent.pid}, the ACP agent on stdio" in second.stderr.decode()
        finally:
            await agent.stdin.aclose()  # stdin ends: the agent shuts down and lets the lock go
            await agent.wait()
        assert agent.returncode == 0
        assert (state / "daemon.lock").read_bytes() == b""
