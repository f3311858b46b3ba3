"""Issue 37: real MCP servers, fetched from npm and PyPI at test time, run by the real daemon.

``python -m transport`` on loopback port 0 (tests/conftest.py ``daemon_process``) plays the
``openai`` provider against the loopback fake OpenAI server, whose scripted model calls the
servers' tools; each test asserts what the real server answered, as the model got it. Every
test runs twice: under the default sandbox (``auto``, bubblewrap here; skipped where it does not
work) and with the sandbox off.

- ``@modelcontextprotocol/server-filesystem`` and ``@modelcontextprotocol/server-everything``
  through ``npx -y``, from the settings' ``mcpServers`` and from an ACP client's ``session/new``
  (the official ``agent-client-protocol`` package over the daemon's ``/acp``);
- ``mcp-server-git`` and ``mcp-server-fetch`` from PyPI through ``uvx`` (the ``uv`` package of
  the ``test`` extra), the fetch one reading a page this test serves on loopback;
- servers that cannot start (a package npm does not have, a command that writes to stderr and
  exits 3): a notice naming the command and the last lines of its stderr, and the session goes on;
- ``"sandbox": false``, a settings server run outside the sandbox (no registry needed).

Nothing is vendored: a test that needs a registry is skipped, saying why, when a quick probe
(``npm view``, ``uv pip compile``; once per test session) cannot reach it. Downloads are not
shared between tests: under the sandbox every session has a home (and so an npm and uv cache) of
its own, which is the point; a cold ``npx -y`` of one of these packages takes about 5 s.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.mcp_client.config import McpConfigError, parse_acp, parse_settings
from tests.conftest import DaemonProcess, daemon_process
from tests.processes import kill_all, marker, pids_with
from transport.fake_openai import FakeOpenAI

pytest.importorskip("mcp")

ROOT = Path(__file__).resolve().parents[2]
TEST_SERVER = ROOT / "tests" / "actors" / "mcp_client" / "mcp_server.py"
FILESYSTEM = "@modelcontextprotocol/server-filesystem"
EVERYTHING = "@modelcontextprotocol/server-everything"
MISSING = "@modelcontextprotocol/does-not-exist-xyz"
PROBE_TIMEOUT = 60  # seconds for a registry probe
TURN_TIMEOUT = 180  # seconds for a turn whose servers are downloaded first (a cold npx -y, uvx)
START_MS = 150_000  # the servers' discoveryTimeoutMs: a first download on a slow network takes a while
# Variables a package manager may need to reach its registry from a CI runner or behind a proxy's CA. A server's
# environment is minimal (HOME, PATH, the locale... plus its own env), so the configuration passes them on.
NPM_VARIABLES = ("NODE_EXTRA_CA_CERTS", "npm_config_registry", "npm_config_cafile")
UV_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_NATIVE_TLS",
                "UV_PYTHON")


def _bwrap_works() -> bool:
    bwrap = shutil.which("bwrap")
    return bwrap is not None and subprocess.run([bwrap, "--ro-bind", "/", "/", "true"],
                                                capture_output=True).returncode == 0


SANDBOXES = [pytest.param("auto", marks=pytest.mark.skipif(not _bwrap_works(), reason=(
                 "needs a working bubblewrap (CI installs it): without one the default sandbox is off")),
                          id="sandbox-auto"),
             pytest.param("off", id="sandbox-off")]


# ----------------------------------------------------------------- the registries, probed once


def _why(text: str) -> str:
    """The lines of a failed probe's output that say why (npm's ``code``/``FetchError``, uv's ``cause``)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    telling = [line for line in lines if any(word in line for word in (" code ", "Error", "cause:"))]
    return " / ".join(telling[:3] or lines[-2:]) or "no output"


def _probe(argv: list[str], what: str, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.skip(f"{what} cannot be reached: `{' '.join(argv)}` took over {PROBE_TIMEOUT} s")
    if done.returncode != 0:
        pytest.skip(f"{what} cannot be reached: `{' '.join(argv)}` exited {done.returncode}: "
                    f"{_why(done.stderr or done.stdout)}")
    return done.stdout


@pytest.fixture(scope="session")
def npm_registry() -> str:
    """npx, once npm's registry answered for both packages (skips the test otherwise)."""
    npx, npm = shutil.which("npx"), shutil.which("npm")
    if npx is None or npm is None:
        pytest.skip("node's npm and npx are not installed: the npm MCP servers run with `npx -y`")
    for package in (FILESYSTEM, EVERYTHING):
        _probe([npm, "view", package, "version", "--fetch-retries=0", "--fetch-timeout=30000"], "the npm registry")
    return npx


@pytest.fixture(scope="session")
def pypi() -> str:
    """uvx (the test extra's uv), once uv resolved both packages from its index (skips the test otherwise)."""
    where = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    uv, uvx = shutil.which("uv", path=where), shutil.which("uvx", path=where)
    if uv is None or uvx is None:
        pytest.skip("uv is not installed (the test extra: pip install -e '.[test]')")
    _probe([uv, "pip", "compile", "--no-cache", "--no-deps", "--quiet", "-"], "PyPI (through uv)",
           stdin="mcp-server-git\nmcp-server-fetch\n")
    return uvx


def passed_on(*names: str) -> dict[str, str]:
    """``env`` entries handing a server the daemon's own value of each variable that is set."""
    return {name: "${%s}" % name for name in names if os.environ.get(name)}


def npx_server(package: str, *args: str) -> dict[str, Any]:
    """A settings entry, as the README shows it (with a generous first start)."""
    return {"command": "npx", "args": ["-y", package, *args], "env": passed_on(*NPM_VARIABLES),
            "discoveryTimeoutMs": START_MS}


def uvx_server(uvx: str, package: str, *args: str) -> dict[str, Any]:
    # The test extra's uvx may not be on PATH (a venv not activated): its absolute path, the rest as in the README.
    return {"command": uvx, "args": [package, *args], "env": passed_on(*UV_VARIABLES), "discoveryTimeoutMs": START_MS}


# ----------------------------------------------------------------- the daemon, the model, the events


def call(call_id: str, name: str, /, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"id": call_id, "name": name, "arguments": arguments}}


def tool_results(fake: FakeOpenAI) -> dict[str, str]:
    """What each tool call gave the model, by call id (the tool messages of its last request)."""
    return {m["tool_call_id"]: m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"}


@asynccontextmanager
async def trellis(nursery: trio.Nursery, tmp_path: Path, sandbox: str | dict[str, Any], fake: FakeOpenAI,
                  servers: dict[str, Any]) -> AsyncIterator[tuple[DaemonProcess, Any]]:
    """``python -m transport`` with these ``mcpServers``, the ``sandbox`` setting as given (``auto``: the default,
    no key)."""
    url = await nursery.start(fake.serve)
    settings: dict[str, Any] = {"approvalMode": "yolo", "mcpServers": servers,
                                "ui": {"enableFollowupSuggestions": False}}
    if sandbox != "auto":
        settings["sandbox"] = sandbox
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    env = {"OPENAI_API_KEY": "sk-fake", "OPENAI_MODEL": "fake"}
    async with daemon_process("--model", "openai", "--openai-base-url", url, "--settings", str(path),
                              state_dir=tmp_path / "state", env=env) as running:
        async with running.client(running.token()) as client:
            kind = (await client.get("/capabilities")).json()["sandbox"]
            assert kind == ("off" if sandbox == "off" else "bwrap"), kind
            yield running, client


async def start(client: Any, cwd: Path, text: str = "go") -> tuple[str, str]:
    sid = (await client.post("/session", json={"cwd": str(cwd)})).json()["sessionId"]
    return sid, await prompt(client, sid, text)


async def prompt(client: Any, sid: str, text: str) -> str:
    r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})
    assert r.status_code == 202, r.text
    return r.json()["promptId"]


async def wait_turn(client: Any, sid: str, pid: str) -> dict[str, Any]:
    with trio.fail_after(TURN_TIMEOUT):
        while True:
            r = await client.get(f"/session/{sid}/turns/{pid}")
            if r.status_code == 200 and r.json()["state"] in ("completed", "error", "cancelled"):
                return r.json()
            await trio.sleep(0.1)


async def session_updates(client: Any, sid: str) -> list[dict[str, Any]]:
    from tests.e2e.sse_client import frames

    out = []
    with trio.fail_after(30):
        async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
            async for frame in frames(r):
                if frame["type"] == "replay_complete":
                    return out
                if frame["type"] == "session_update":
                    out.append(frame["data"]["update"])
    return out


def notices(updates: list[dict[str, Any]]) -> list[str]:
    return [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
            and (u.get("_meta") or {}).get("source") == "daemon"]


def workspace(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("a line from the test's own file\n")
    return work.resolve()


def expected_home(sandbox: str, state: Path, sid: str) -> str:
    """A sandboxed server's HOME: the session's servers' own (apart from its commands' one)."""
    return str(state.resolve() / "homes" / sid / "servers") if sandbox == "auto" else os.environ["HOME"]


# ----------------------------------------------------------------- npm: npx -y, from the settings


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_npm_servers_from_the_settings_answer_the_models_calls(nursery, tmp_path, npm_registry, sandbox):
    work = workspace(tmp_path)
    fake = FakeOpenAI([
        [call("ls", "mcp__fs__list_directory", path=str(work)),
         call("read", "mcp__fs__read_text_file", path=str(work / "notes.txt")),
         call("write", "mcp__fs__write_file", path=str(work / "out.txt"), content="written by server-filesystem"),
         call("echo", "mcp__everything__echo", message="hello from trellis"),
         call("env", "mcp__everything__get-env")],
        [{"text": "done"}]])
    servers = {"fs": npx_server(FILESYSTEM, "."), "everything": npx_server(EVERYTHING)}
    began = time.monotonic()
    async with trellis(nursery, tmp_path, sandbox, fake, servers) as (running, client):
        sid, pid = await start(client, work)
        record = await wait_turn(client, sid, pid)
        assert (record["state"], record["stopReason"]) == ("completed", "end_turn"), record
        updates = await session_updates(client, sid)
    print(f"npx servers from the settings, sandbox {sandbox}: {time.monotonic() - began:.1f} s")
    assert notices(updates) == []
    offered = {t["function"]["name"] for t in fake.requests[0].body["tools"]}
    assert {"mcp__fs__list_directory", "mcp__fs__read_text_file", "mcp__everything__echo"} <= offered
    got = tool_results(fake)
    assert "notes.txt" in got["ls"] and not got["ls"].startswith("Error")
    assert got["read"].strip() == "a line from the test's own file"
    assert not got["write"].startswith("Error") and (work / "out.txt").read_text() == "written by server-filesystem"
    assert got["echo"] == "Echo: hello from trellis"
    env = json.loads(got["env"])
    # Under the sandbox its HOME is the session's own (where npx's cache went); no daemon secret either way.
    assert env["HOME"] == expected_home(sandbox, running.state_dir, sid)
    assert not {"OPENAI_API_KEY", "TRELLIS_TOKEN"} & set(env)
    statuses = [u["status"] for u in updates if u["sessionUpdate"] == "tool_call_update"]
    assert statuses == ["completed"] * 5


@pytest.mark.skipif(not _bwrap_works(), reason="needs a working bubblewrap: without one the home is the user's")
async def test_sessions_share_an_npm_cache_the_settings_make_writable(nursery, tmp_path, npm_registry):
    # The README's recipe: each session's home (and npx's cache in it) is its own, so each session downloads
    # again, unless the settings name a writable cache and the server's env points npm at it.
    work = workspace(tmp_path)
    cache = tmp_path / "npm-cache"
    cache.mkdir()
    fake = FakeOpenAI([[call("one", "mcp__everything__echo", message="first session")], [{"text": "done"}],
                       [call("two", "mcp__everything__echo", message="second session")], [{"text": "done"}]])
    server = npx_server(EVERYTHING)
    server["env"]["npm_config_cache"] = str(cache)
    took = []
    async with trellis(nursery, tmp_path, {"writable": [str(cache)]}, fake, {"everything": server}) as (_, client):
        for _ in range(2):
            began = time.monotonic()
            sid, pid = await start(client, work)
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
            took.append(time.monotonic() - began)
            assert notices(await session_updates(client, sid)) == []
            assert (await client.delete(f"/session/{sid}")).status_code in (200, 204)
    print(f"npx with a shared cache: {took[0]:.1f} s, then {took[1]:.1f} s")
    assert [m["content"] for m in fake.requests[1].body["messages"] if m["role"] == "tool"] == ["Echo: first session"]
    assert tool_results(fake) == {"two": "Echo: second session"}
    assert (cache / "_npx").is_dir() and (cache / "_cacache").is_dir()  # npm wrote the shared cache, not a home


# ----------------------------------------------------------------- npm: npx -y, from ACP's session/new


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_npm_servers_from_an_acp_clients_session_new(nursery, tmp_path, npm_registry, sandbox):
    acp = pytest.importorskip("acp")
    httpx = pytest.importorskip("httpx")
    from acp import connect_to_agent, schema, text_block
    from acp.http import create_http_stream

    from tests.e2e.test_acp_stdio import RecordingClient

    work = workspace(tmp_path)
    fake = FakeOpenAI([
        [call("read", "mcp__files__read_text_file", path=str(work / "notes.txt")),
         call("echo", "mcp__everything__echo", message="hello over ACP")],
        [{"text": "Done."}]])
    env = [schema.EnvVariable(name=k, value=v) for k, v in os.environ.items() if k in NPM_VARIABLES]
    given = [schema.McpServerStdio(name="files", command="npx", args=["-y", FILESYSTEM, str(work)], env=env),
             schema.McpServerStdio(name="everything", command="npx", args=["-y", EVERYTHING], env=env)]

    async def scenario(url: str, token: str) -> tuple[Any, RecordingClient]:
        client = RecordingClient("allow_once")
        async with httpx.AsyncClient(timeout=httpx.Timeout(None), trust_env=False,
                                     headers={"Authorization": f"Bearer {token}"}) as http:
            conn = connect_to_agent(client, create_http_stream(url + "/acp", client=http))
            try:
                await asyncio.wait_for(conn.initialize(protocol_version=acp.PROTOCOL_VERSION), 30)
                session = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=given), 60)
                done = await asyncio.wait_for(
                    conn.prompt(session_id=session.session_id, prompt=[text_block("use the servers")]),
                    TURN_TIMEOUT)
            finally:
                await conn.close()
        return done, client

    began = time.monotonic()
    async with trellis(nursery, tmp_path, sandbox, fake, {}) as (running, _):
        done, client = await trio.to_thread.run_sync(asyncio.run, scenario(running.url, running.token()))
    print(f"npx servers from ACP session/new, sandbox {sandbox}: {time.monotonic() - began:.1f} s")
    assert done.stop_reason == "end_turn"
    daemon_notices = [u.content.text for u in client.updates if u.session_update == "agent_message_chunk"
                      and (u.field_meta or {}).get("source") == "daemon"]
    assert daemon_notices == []
    got = tool_results(fake)
    assert got["read"].strip() == "a line from the test's own file"
    assert got["echo"] == "Echo: hello over ACP"
    texts = [u.content[0].content.text for u in client.updates
             if u.session_update == "tool_call_update" and u.content]
    assert "Echo: hello over ACP" in texts  # the client saw the real server's answer too


# ----------------------------------------------------------------- PyPI: uvx


class _Page(http.server.BaseHTTPRequestHandler):
    BODY = b"plain text served on loopback for mcp-server-fetch\n"

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(self.BODY)))
        self.end_headers()
        self.wfile.write(self.BODY)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def loopback_page() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/page.txt"
    finally:
        server.shutdown()
        server.server_close()


def git_repository(path: Path) -> Path:
    path.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (["init", "-q"], ["add", "notes.txt"],
                 ["-c", "user.name=Test", "-c", "user.email=test@example.com", "commit", "-qm", "the first commit"]):
        if argv[0] == "add":
            (path / "notes.txt").write_text("tracked\n")
        subprocess.run(["git", *argv], cwd=path, env=env, check=True, capture_output=True)
    (path / "untracked.txt").write_text("new\n")
    return path.resolve()


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_pypi_servers_with_uvx_answer_the_models_calls(nursery, tmp_path, pypi, sandbox):
    if shutil.which("git") is None:
        pytest.skip("git is not installed (mcp-server-git runs it)")
    repo = git_repository(tmp_path / "repo")
    with loopback_page() as page:
        fake = FakeOpenAI([
            [call("log", "mcp__git__git_log", repo_path=str(repo), max_count=1),
             call("status", "mcp__git__git_status", repo_path=str(repo)),
             call("fetch", "mcp__fetch__fetch", url=page)],
            [{"text": "done"}]])
        servers = {"git": uvx_server(pypi, "mcp-server-git", "--repository", "."),
                   # A loopback URL: refused by default, allowed by the flag; no robots.txt to ask for.
                   "fetch": uvx_server(pypi, "mcp-server-fetch", "--allow-private-ips", "--ignore-robots-txt")}
        began = time.monotonic()
        async with trellis(nursery, tmp_path, sandbox, fake, servers) as (running, client):
            sid, pid = await start(client, repo)
            record = await wait_turn(client, sid, pid)
            updates = await session_updates(client, sid)
        print(f"uvx servers, sandbox {sandbox}: {time.monotonic() - began:.1f} s")
    assert notices(updates) == [], notices(updates)
    assert (record["state"], record["stopReason"]) == ("completed", "end_turn"), record
    got = tool_results(fake)
    assert "the first commit" in got["log"]
    assert "untracked.txt" in got["status"]
    assert "plain text served on loopback for mcp-server-fetch" in got["fetch"]


# ----------------------------------------------------------------- servers that cannot start


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_server_that_cannot_start_is_a_notice_with_its_command_and_stderr(nursery, tmp_path, npm_registry,
                                                                                 sandbox):
    work = workspace(tmp_path)
    script = "echo starting up >&2; echo fatal: no configuration found >&2; exit 3"
    servers = {"missing": npx_server(MISSING),
               "exits": {"command": "sh", "args": ["-c", script]},
               "hangs": {"command": "sh", "args": ["-c", "echo waiting for a licence key >&2; exec sleep 600"],
                         "discoveryTimeoutMs": 3000},
               "works": {"command": sys.executable, "args": [str(TEST_SERVER)]}}
    fake = FakeOpenAI([[{"text": "still here"}], [call("add", "mcp__works__add", a=2, b=40)], [{"text": "and on"}]])
    began = time.monotonic()
    async with trellis(nursery, tmp_path, sandbox, fake, servers) as (running, client):
        sid, pid = await start(client, work)
        assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
        second = await prompt(client, sid, "again")  # the session goes on, with the server that works
        assert (await wait_turn(client, sid, second))["stopReason"] == "end_turn"
        updates = await session_updates(client, sid)
    print(f"servers that cannot start, sandbox {sandbox}: {time.monotonic() - began:.1f} s")
    assert tool_results(fake) == {"add": "42"}
    texts = sorted(notices(updates))
    assert len(texts) == 3, texts
    exits, hangs, missing = texts
    boxed = ", run in the sandbox" if sandbox == "auto" else ""
    assert exits.startswith("MCP server 'exits' did not start: exited with code 3 (stderr: starting up\n"
                            "fatal: no configuration found).")
    assert f"Its command{boxed}: sh -c '{script}'." in exits
    assert hangs.startswith("MCP server 'hangs' did not start: no answer to initialize and tools/list within 3 s "
                            "(stderr so far: waiting for a licence key).")
    assert missing.startswith("MCP server 'missing' did not start: exited with code 1 (stderr: ")
    assert "E404" in missing and "404 Not Found" in missing  # npm's own words (npm 10 and 11)
    assert "complete log" not in missing and "npm notice" not in missing  # not npm's boilerplate
    assert f"Its command{boxed}: npx -y {MISSING}." in missing
    assert all(t.endswith("The session goes on without its tools.") for t in texts)
    texts_of_model = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
                      and "_meta" not in u]
    assert texts_of_model == ["still here", "and on"]


# ----------------------------------------------------------------- "sandbox": false


def test_the_sandbox_member_is_a_boolean_of_stdio_servers_in_the_settings_only(tmp_path):
    from actors.settings import SettingsError
    from actors.settings_file import load_settings

    [server], warnings = parse_settings({"s": {"command": "npx", "args": ["-y", "x"], "sandbox": False}})
    assert server.sandbox is False and warnings == []
    assert parse_settings({"s": {"command": "x"}})[0][0].sandbox is True
    with pytest.raises(McpConfigError, match=r'mcpServers.s.sandbox: must be true or false, got "no"'):
        parse_settings({"s": {"command": "x", "sandbox": "no"}})
    assert parse_settings({"s": {"httpUrl": "http://h/mcp", "sandbox": False}})[1] == [
        "mcpServers.s.sandbox ignored (a URL server has none)"]
    # A client cannot take its servers out of the sandbox: ACP's format has no such member.
    [given] = parse_acp([{"name": "c", "command": "x", "args": [], "env": [], "sandbox": False}])
    assert given.sandbox is True
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"mcpServers": {"s": {"command": "x", "sandbox": 0}}}))
    with pytest.raises(SettingsError, match="mcpServers.s.sandbox: must be true or false, got 0"):
        load_settings(path)
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "actors" / "settings.schema.json").read_text())
    jsonschema.validate({"mcpServers": {"s": {"command": "x", "sandbox": False}}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"mcpServers": {"s": {"command": "x", "sandbox": "no"}}}, schema)


def _pid_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


@pytest.mark.skipif(not _bwrap_works(), reason="needs a working bubblewrap: without one nothing is sandboxed")
async def test_a_settings_server_with_sandbox_false_runs_outside_the_sandbox(nursery, tmp_path):
    boxed, free = marker(), marker()
    work = workspace(tmp_path)
    servers = {"boxed": {"command": sys.executable, "args": [str(TEST_SERVER), "--marker", boxed]},
               "free": {"command": sys.executable, "args": [str(TEST_SERVER), "--marker", free], "sandbox": False}}
    fake = FakeOpenAI([[call("boxed", "mcp__boxed__env", name="HOME"), call("free", "mcp__free__env", name="HOME")],
                       [{"text": "done"}]])
    try:
        async with trellis(nursery, tmp_path, "auto", fake, servers) as (running, client):
            sid, pid = await start(client, work)
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"

            def servers_of(mark: str) -> list[int]:  # the Python process itself, not the bwrap carrying its argv
                return [p for p in pids_with(mark)
                        if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] == sys.executable.encode()]

            [in_box], [outside] = servers_of(boxed), servers_of(free)
            assert _pid_namespace(in_box) != _pid_namespace(os.getpid())  # bwrap's own PID namespace
            assert _pid_namespace(outside) == _pid_namespace(os.getpid())
            got = tool_results(fake)
            assert got["boxed"] == expected_home("auto", running.state_dir, sid)
            assert got["free"] == os.environ["HOME"]  # the user's own home, as hooks see it
    finally:
        kill_all(pids_with(boxed) + pids_with(free))


# ----------------------------------------------------------------- sandbox.network: "off"


@pytest.mark.skipif(not _bwrap_works(), reason="needs a working bubblewrap: network off is a sandbox's namespace")
async def test_with_the_network_off_a_local_server_works_and_an_npx_download_is_refused(nursery, tmp_path,
                                                                                     npm_registry):
    """What still works (a server on disk, the model's own tools) and what is refused, in the server's own words."""
    work = workspace(tmp_path)
    servers = {"fresh": npx_server(EVERYTHING) | {"discoveryTimeoutMs": 8_000},  # its home's npm cache is empty
               "local": {"command": sys.executable, "args": [str(TEST_SERVER)]}}
    fake = FakeOpenAI([[call("add", "mcp__local__add", a=2, b=40), call("sh", "shell", command="echo local-ok")],
                       [{"text": "done"}]])
    async with trellis(nursery, tmp_path, {"network": "off"}, fake, servers) as (running, client):
        sid, pid = await start(client, work)
        assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
        updates = await session_updates(client, sid)
    got = tool_results(fake)
    assert got["add"] == "42" and "local-ok" in got["sh"]
    [fresh] = notices(updates)
    # npm cannot reach its registry and retries until the start times out; the notice says why that is likely
    assert fresh.startswith("MCP server 'fresh' did not start: "), fresh
    assert (f"Its command, run in the sandbox without a network (sandbox.network is off): npx -y {EVERYTHING}."
            in fresh), fresh
