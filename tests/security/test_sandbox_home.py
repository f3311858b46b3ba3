"""Issue 37 (and 35's home rule): sandboxed commands write a home of their own session, never the user's.

Real tools write state under the home (npm's ``~/.npm/_npx/…/concurrency.lock``, uv's cache,
``~/.claude``, ``~/.qwen``); the user's home is read-only in the sandbox. Each session's commands get a
writable HOME of their own, which no other session sees and which is deleted with the session; the
settings can add writable directories (``sandbox.writable``) and take the network away
(``sandbox.network: "off"``). The real daemon (``python -m transport``) against the loopback fake
OpenAI server, as root in CI.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.conftest import daemon_process
from tests.e2e.test_hooks_e2e import tool_message
from tests.e2e.test_openai_daemon import prompt, wait_turn
from transport.fake_openai import FakeOpenAI

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None
    or subprocess.run(["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True).returncode != 0,
    reason="needs a working bubblewrap (CI installs it)")


def shell(command: str, call_id: str) -> list:
    return [{"tool_call": {"id": call_id, "name": "shell", "arguments": {"command": command}}}]


def tool_output(fake: FakeOpenAI, request: int) -> str:
    return tool_message(fake, request)


async def run_sessions(nursery, tmp_path: Path, commands: list[list[str]], sandbox: object = "auto",
                       after=None) -> tuple[FakeOpenAI, Path, list[str]]:
    """Each inner list is a session, each command a prompt of it (a shell call, then "ok")."""
    responses: list = []
    for n, session in enumerate(commands):
        for m, command in enumerate(session):
            responses += [shell(command, f"call_{n}_{m}"), [{"text": "ok"}]]
    fake = FakeOpenAI(responses)
    url = await nursery.start(fake.serve)
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"approvalMode": "yolo", "sandbox": sandbox,
                                    "ui": {"enableFollowupSuggestions": False}}))
    state = tmp_path / "state"
    ids = []
    env = {"OPENAI_API_KEY": "sk-fake", "OPENAI_MODEL": "fake", "HOME": str(home)}
    with trio.fail_after(90):
        async with daemon_process("--model", "openai", "--openai-base-url", url, "--settings", str(settings),
                                  state_dir=state, env=env) as daemon:
            async with daemon.client(daemon.token()) as client:
                for session in commands:
                    work = tmp_path / f"work{len(ids)}"
                    work.mkdir(exist_ok=True)
                    sid = (await client.post("/session", json={"cwd": str(work)})).json()["sessionId"]
                    ids.append(sid)
                    for _ in session:
                        pid = (await client.post(f"/session/{sid}/prompt", json=prompt("go"))).json()["promptId"]
                        await wait_turn(client, sid, pid)
                if after is not None:
                    await after(client, ids, state)
    return fake, home, ids


async def test_a_sandboxed_command_writes_its_sessions_home_never_the_users(nursery, tmp_path):
    command = ("echo HOME=$HOME; mkdir -p ~/.npm/_npx/x && touch ~/.npm/_npx/x/concurrency.lock "
               "~/.bash_profile && echo wrote-home; touch " + str(tmp_path / "home" / ".profile") +
               " 2>/dev/null || echo real-home-read-only")
    seen: dict = {}

    async def after(client, ids, state) -> None:
        seen["home"] = state / "homes" / ids[0] / "commands"
        seen["during"] = (seen["home"] / ".npm" / "_npx" / "x" / "concurrency.lock").exists()
        assert (await client.delete(f"/session/{ids[0]}")).status_code in (200, 204)
        with trio.fail_after(10):
            while seen["home"].exists():
                await trio.sleep(0.05)

    fake, home, ids = await run_sessions(nursery, tmp_path, [[command]], after=after)
    out = tool_output(fake, 1)
    assert f"HOME={seen['home']}" in out and "wrote-home" in out and "real-home-read-only" in out
    assert seen["during"]  # the tool's state was there while the session lived, in its home
    assert sorted(p.name for p in home.iterdir()) == [".config"]  # nothing reached the user's home
    assert not seen["home"].exists()  # and the session's home went with the session


async def test_one_sessions_home_is_not_anothers(nursery, tmp_path):
    plant = "echo 'registry=http://127.0.0.1:9/' > ~/.npmrc && echo planted"
    look = "cat ~/.npmrc 2>&1 || echo no-npmrc; ls -a $(dirname $HOME) 2>&1 | wc -l"
    fake, _, _ = await run_sessions(nursery, tmp_path, [[plant], [look]])
    assert "planted" in tool_output(fake, 1)
    out = tool_output(fake, 3)
    assert "no-npmrc" in out and "registry=" not in out


async def test_the_network_can_be_taken_away_from_commands(nursery, tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    probe = (f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); "
             f"print('connected')\" 2>&1 | tail -1")
    try:
        fake, _, _ = await run_sessions(nursery, tmp_path, [[probe]], sandbox={"network": "off"})
        off = tool_output(fake, 1)
        fake, _, _ = await run_sessions(nursery, tmp_path / "on", [[probe]])
        on = tool_output(fake, 1)
    finally:
        listener.close()
    assert "connected" in on
    assert "connected" not in off and "Connection refused" in off


async def test_settings_can_make_a_directory_writable_for_commands(nursery, tmp_path):
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    other = tmp_path / "not-listed"
    other.mkdir()
    command = f"touch {shared}/made && echo shared-ok; touch {other}/made 2>/dev/null || echo other-read-only"
    fake, _, _ = await run_sessions(nursery, tmp_path, [[command]],
                                    sandbox={"mode": "auto", "writable": [str(shared)]})
    out = tool_output(fake, 1)
    assert "shared-ok" in out and "other-read-only" in out
    assert (shared / "made").exists() and not (other / "made").exists()


async def test_a_writable_directory_keeps_the_credentials_in_it_hidden(nursery, tmp_path):
    """``writable: ["~/.cache"]`` was bound after the hidden paths and covered them again:
    ``~/.cache/huggingface/token`` was readable (and writable) by every command."""
    cache = tmp_path / "home" / ".cache"
    token = cache / "huggingface" / "token"
    token.parent.mkdir(parents=True)
    token.write_text("hf_the-users-token")
    command = (f"cat {token} 2>/dev/null || echo token-hidden; "
               f"echo planted > {token} 2>/dev/null || echo token-read-only; "
               f"mkdir -p {cache}/pip && touch {cache}/pip/made && echo cache-writable")
    fake, _, _ = await run_sessions(nursery, tmp_path, [[command]], sandbox={"mode": "bwrap", "writable": ["~/.cache"]})
    out = tool_output(fake, 1)
    assert "token-hidden" in out and "token-read-only" in out and "cache-writable" in out, out
    assert "hf_the-users-token" not in out
    assert token.read_text() == "hf_the-users-token" and (cache / "pip" / "made").exists()
