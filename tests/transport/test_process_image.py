"""Neither the bearer token nor the model API key is in the daemon's ``/proc/<pid>/environ`` or ``cmdline``.

A command the model runs can read its parent's process image; ``python -m
transport`` re-executes itself without the secrets and takes them back through
a pipe (``transport.process_image``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import trio

from tests.conftest import daemon_process
from transport.acp.stdio import read_lines
from transport.fake_openai import FakeOpenAI
from transport.process_image import SECRET_ENV, Secrets, SecretsError, read_secrets, withhold

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")

TOKEN_ENV, TOKEN_FLAG = "tok-env-4f1c9a7e2b", "tok-flag-8d3e6b0a51"
KEY_ENV, KEY_FLAG = "sk-env-DO-NOT-LEAK-7731", "sk-flag-DO-NOT-LEAK-9902"
MARKER = ("TRELLIS_TEST_MARKER", "still-here")  # an ordinary variable survives the re-exec


# ------------------------------------------------------------------ /proc


def process_image(pid: int) -> bytes:
    """``environ`` and ``cmdline`` of ``pid`` (NUL-separated, as the kernel shows them)."""
    return Path(f"/proc/{pid}/environ").read_bytes() + b"\0" + Path(f"/proc/{pid}/cmdline").read_bytes()


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, from the parent pid in ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rpartition(")")[2].split()[1])  # after "(comm)": state, then ppid
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def assert_no_secret(pid: int, *secrets: str) -> None:
    for each in (pid, *descendants(pid)):
        try:
            image = process_image(each)
        except OSError:
            continue  # a descendant that ended meanwhile holds nothing
        for secret in secrets:
            assert secret.encode() not in image, (each, secret)
        for name in SECRET_ENV:
            assert f"\0{name}=".encode() not in b"\0" + image, (each, name)


def environ_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().partition("=")[::2] for p in pairs if p)


def cmdline_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


# ------------------------------------------------------------------ withholding, in-process


def test_every_spelling_of_the_secret_flags_is_withheld():
    argv = ["acp", "--token", "a", "--port", "0", "--token=b", "--openai-api-key", "k1", "--openai-api-key=k2",
            "--model", "openai"]
    environ = {"TRELLIS_TOKEN": "t", "OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://x", "HOME": "/h"}
    clean, env, secrets = withhold(argv, environ)
    assert clean == ["acp", "--port", "0", "--model", "openai"]
    assert env == {"OPENAI_BASE_URL": "http://x", "HOME": "/h"}
    assert secrets.flags == {"token": "b", "openai_api_key": "k2"}  # the last one wins, as in argparse
    assert secrets.environ == {"TRELLIS_TOKEN": "t", "OPENAI_API_KEY": "k"}
    assert secrets.overlay(env) == environ
    assert "k2" not in repr(secrets) and "t'" not in repr(secrets)


def test_nothing_to_withhold_and_a_flag_without_value():
    clean, env, secrets = withhold(["--port", "0", "--token"], {"HOME": "/h"})
    assert (clean, env, bool(secrets)) == (["--port", "0", "--token"], {"HOME": "/h"}, False)


def test_the_pipe_round_trip_and_its_errors(tmp_path):
    secrets = Secrets(environ={"OPENAI_API_KEY": "k"}, flags={"token": "t"})
    r, w = os.pipe()
    os.write(w, secrets.encode())
    os.close(w)
    assert read_secrets(r) == secrets
    with pytest.raises(OSError):
        os.fstat(r)  # read_secrets closed it
    with pytest.raises(SecretsError, match="--secrets-fd 987: not an open file descriptor"):
        read_secrets(987)
    with pytest.raises(SecretsError, match="standard stream"):
        read_secrets(0)
    with open(tmp_path / "f", "w") as f:
        with pytest.raises(SecretsError, match="not a pipe"):
            read_secrets(os.dup(f.fileno()))
    r, w = os.pipe()
    try:
        with pytest.raises(SecretsError, match="still open for writing"):  # an error, not a hang
            read_secrets(r)
    finally:
        os.close(w)
    r, w = os.pipe()
    os.write(w, b'{"environ": {"HOME": "/"}, "flags": {}}')
    os.close(w)
    with pytest.raises(SecretsError, match="unknown names"):
        read_secrets(r)


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | env
    return subprocess.run([sys.executable, "-m", "transport", *args], capture_output=True, text=True, timeout=20,
                          env=environ)


def test_a_bad_secrets_fd_is_a_clear_error():
    result = run_cli("--secrets-fd", "97", "--port", "0")
    assert result.returncode == 2
    assert "--secrets-fd 97: not an open file descriptor" in result.stderr
    result = run_cli("acp", "--secrets-fd", "97")
    assert result.returncode == 2
    assert "--secrets-fd 97: not an open file descriptor" in result.stderr


def test_secrets_fd_cannot_come_with_secrets():
    result = run_cli("--secrets-fd", "97", "--port", "0", TRELLIS_TOKEN=TOKEN_ENV)
    assert result.returncode == 2
    assert "--secrets-fd is internal" in result.stderr and TOKEN_ENV not in result.stderr


# ------------------------------------------------------------------ the HTTP daemon


async def test_the_daemon_holds_neither_env_secret_in_its_process_image(tmp_path):
    env = {"TRELLIS_TOKEN": TOKEN_ENV, "OPENAI_API_KEY": KEY_ENV, MARKER[0]: MARKER[1]}
    with trio.fail_after(30):
        async with daemon_process(state_dir=tmp_path, env=env) as daemon:
            assert_no_secret(daemon.pid, TOKEN_ENV, KEY_ENV)
            assert environ_of(daemon.pid)[MARKER[0]] == MARKER[1]
            assert "--secrets-fd" in cmdline_of(daemon.pid)  # the same pid, re-executed
            async with daemon.client(TOKEN_ENV) as client:
                assert (await client.get("/capabilities")).status_code == 200
            async with daemon.client() as anonymous:
                assert (await anonymous.get("/capabilities")).status_code == 401
    assert not (tmp_path / "token").exists()  # a given token is not minted over


async def test_the_daemon_holds_neither_flag_secret_in_its_process_image(tmp_path):
    with trio.fail_after(30):
        async with daemon_process("--token", TOKEN_FLAG, f"--openai-api-key={KEY_FLAG}", state_dir=tmp_path) as daemon:
            assert_no_secret(daemon.pid, TOKEN_FLAG, KEY_FLAG)
            async with daemon.client(TOKEN_FLAG) as client:
                assert (await client.get("/capabilities")).status_code == 200
            async with daemon.client() as anonymous:
                assert (await anonymous.get("/capabilities")).status_code == 401


async def test_a_minted_token_is_never_in_the_process_image_either(tmp_path):
    with trio.fail_after(30):
        async with daemon_process(state_dir=tmp_path) as daemon:
            assert_no_secret(daemon.pid, daemon.token())


async def test_the_api_key_still_reaches_the_model_server_after_the_reexec(nursery, tmp_path):
    fake = FakeOpenAI([[{"text": "hello"}]])
    url = await nursery.start(fake.serve)
    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": KEY_ENV, "OPENAI_MODEL": "fake"}
    with trio.fail_after(30):
        async with daemon_process("--model", "openai", state_dir=tmp_path, env=env) as daemon:
            async with daemon.client(daemon.token()) as client:
                sid = (await client.post("/session", json={})).json()["sessionId"]
                body = {"prompt": [{"type": "text", "text": "hi"}]}
                pid = (await client.post(f"/session/{sid}/prompt", json=body)).json()["promptId"]
                while (await client.get(f"/session/{sid}/turns/{pid}")).json().get("state") != "completed":
                    await trio.sleep(0.01)
            assert_no_secret(daemon.pid, KEY_ENV)
    assert [r.headers["authorization"] for r in fake.requests] == [f"Bearer {KEY_ENV}"]


# ------------------------------------------------------------------ the ACP agent on stdio


class AcpProcess:
    """``python -m transport acp`` with pipes on stdin/stdout, one JSON-RPC message per line."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines = read_lines(process.stdout)
        self.next_id = 0

    async def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        await self.process.stdin.send_all(orjson.dumps(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}) + b"\n")
        async for line in self.lines:
            message = orjson.loads(line)
            if message.get("id") == self.next_id and "method" not in message:
                return message
        raise AssertionError(f"stdout ended before the answer to {method}")


async def run_acp(tmp_path: Path, *args: str, env: dict[str, str], scenario) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | env
    command = [sys.executable, "-m", "transport", "acp", "--state-dir", str(tmp_path / "state"), *args]
    process = await trio.lowlevel.open_process(command, env=environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        await scenario(AcpProcess(process))
    finally:
        await process.stdin.aclose()  # the end of stdin ends the agent
        with trio.fail_after(10):
            await process.wait()
    assert process.returncode == 0


async def test_the_acp_agent_holds_no_secret_and_its_model_gets_the_key(nursery, tmp_path):
    fake = FakeOpenAI([[{"text": "hello over acp"}]])
    url = await nursery.start(fake.serve)
    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": KEY_ENV, "OPENAI_MODEL": "fake", MARKER[0]: MARKER[1]}

    async def scenario(acp: AcpProcess) -> None:
        assert "result" in await acp.request("initialize", {"protocolVersion": 1})
        pid = acp.process.pid
        assert_no_secret(pid, KEY_ENV, TOKEN_FLAG)
        assert environ_of(pid)[MARKER[0]] == MARKER[1] and "--secrets-fd" in cmdline_of(pid)
        session = await acp.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        done = await acp.request("session/prompt", {"sessionId": session["result"]["sessionId"],
                                                    "prompt": [{"type": "text", "text": "hi"}]})
        assert done["result"]["stopReason"] == "end_turn"

    with trio.fail_after(30):
        await run_acp(tmp_path, "--model", "openai", "--token", TOKEN_FLAG, env=env, scenario=scenario)
    assert [r.headers["authorization"] for r in fake.requests] == [f"Bearer {KEY_ENV}"]


async def test_the_acp_agent_takes_the_key_flag_too(nursery, tmp_path):
    fake = FakeOpenAI([[{"text": "hello"}]])
    url = await nursery.start(fake.serve)

    async def scenario(acp: AcpProcess) -> None:
        await acp.request("initialize", {"protocolVersion": 1})
        assert_no_secret(acp.process.pid, KEY_FLAG)
        session = await acp.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        await acp.request("session/prompt", {"sessionId": session["result"]["sessionId"],
                                             "prompt": [{"type": "text", "text": "hi"}]})

    with trio.fail_after(30):
        await run_acp(tmp_path, "--model", "openai", "--openai-base-url", url, "--openai-model", "fake",
                      "--openai-api-key", KEY_FLAG, env={}, scenario=scenario)
    assert [r.headers["authorization"] for r in fake.requests] == [f"Bearer {KEY_FLAG}"]


def test_make_undumpable_clears_the_dumpable_flag():
    """PR_GET_DUMPABLE (3) in a fresh interpreter: 1 before, 0 after (ptrace and /proc/<pid>/mem refused)."""
    code = ("import ctypes; from transport.process_image import make_undumpable; libc = ctypes.CDLL(None); "
            "before = libc.prctl(3, 0, 0, 0, 0); ok = make_undumpable(); print(before, ok, libc.prctl(3, 0, 0, 0, 0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == ["1", "True", "0"]


# ------------------------------------------------------------------ what the daemon imports, and when


def test_the_secret_check_before_the_reexec_imports_no_http_stack():
    # Whatever it imports it imports twice when it re-executes: the daemon's HTTP stack waits for after.
    code = ("import sys, transport.process_image; "
            "print(' '.join(m for m in ('actors', 'httpx', 'hypercorn', 'quart', 'transport.app') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == ""


def test_the_package_facade_imports_its_parts_on_first_use():
    import transport
    from transport import InsecureBind, auth, create_app, serve
    from transport.app import create_app as app_create_app
    from transport.server import InsecureBind as ServerInsecureBind, serve as server_serve

    assert (serve, InsecureBind, create_app) == (server_serve, ServerInsecureBind, app_create_app)
    assert auth is sys.modules["transport.auth"]
    assert set(transport.__all__) <= set(dir(transport))
    with pytest.raises(AttributeError, match="module 'transport' has no attribute 'servee'"):
        transport.servee  # noqa: B018


@pytest.mark.parametrize("orig_argv, options", [
    (["python", "-m", "transport", "--port", "0"], []),
    (["python", "-X", "dev", "-W", "error", "-I", "-m", "transport", "-X"], ["-X", "dev", "-W", "error", "-I"]),
    (["python", "-Xdev", "-OO", "-mtransport"], ["-Xdev", "-OO"]),
    (["python", "-u", "-c", "import transport"], ["-u"]),
    (["python", "script.py", "-X", "dev"], []),
    (["/usr/bin/trellis", "serve"], []),
])
def test_the_interpreter_s_own_options_carry_over_to_the_re_execution(orig_argv, options):
    from transport.process_image import interpreter_options

    assert interpreter_options(orig_argv) == options
