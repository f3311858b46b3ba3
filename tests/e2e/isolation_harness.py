"""A real daemon process on the ``openai`` model, played by a hostile loopback fake.

The daemon runs as ``python -m transport`` with ``OPENAI_API_KEY`` (and, when
asked, ``TRELLIS_TOKEN``) in its environment, exactly as an operator starts it;
the fake model's tool calls run the commands an attacker would. What a test
collects afterwards (every event, the transcript, every model request) is
searched for the secrets.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from actors.process.sandbox import probe
from tests.e2e.sse_client import collect
from transport.auth import read_token_file
from transport.fake_openai import FakeOpenAI

KEY = "sk-isolation-" + secrets.token_hex(12)
TOKEN = "trellis-isolation-" + secrets.token_hex(12)

_BWRAP = shutil.which("bwrap")
HAVE_BWRAP = _BWRAP is not None and probe(_BWRAP) is None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not usable here (CI installs it)")


@contextmanager
def small_tmpfs(path: Path, options: str = "size=32m") -> Iterator[Path]:
    """``path`` (made here) as a tmpfs of its own for the time of the block, so that a test may fill it without
    touching the host's disk; unmounted whatever happens. Skips the test where no tmpfs can be mounted (CI
    runs as root)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}): CI runs as root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def shell(command: str, *, background: bool = False) -> dict[str, Any]:
    arguments: dict[str, Any] = {"command": command}
    if background:
        arguments["run_in_background"] = True
    return {"tool_call": {"name": "shell", "arguments": arguments}}


@attrs.define
class Running:
    proc: trio.Process
    url: str
    token: str
    state: Path
    work: Path
    settings: Path
    fake: FakeOpenAI
    client: httpx.AsyncClient

    async def open_session(self) -> str:
        r = await self.client.post("/session", json={})
        assert r.status_code == 200, r.text
        return r.json()["sessionId"]

    async def prompt(self, sid: str, text: str) -> str:
        r = await self.client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})
        assert r.status_code == 202, r.text
        return r.json()["promptId"]

    async def wait_turn(self, sid: str, pid: str, timeout: float = 30) -> dict[str, Any]:
        with trio.fail_after(timeout):
            while True:
                r = await self.client.get(f"/session/{sid}/turns/{pid}")
                if r.status_code == 200 and r.json()["state"] in ("completed", "error", "cancelled"):
                    return r.json()
                await trio.sleep(0.02)

    def tool_results(self) -> list[str]:
        """What the model was told every tool returned, in order."""
        seen: list[str] = []
        for request in self.fake.requests:
            for message in request.body.get("messages", []):
                if message.get("role") == "tool" and message["content"] not in seen:
                    seen.append(message["content"])
        return seen

    async def evidence(self, *session_ids: str) -> str:
        """Every event of the sessions, their transcripts and every model request body, as one text."""
        parts = [json.dumps(r.body) for r in self.fake.requests]
        for sid in session_ids:
            with trio.fail_after(10):
                events = await collect(self.client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            parts.append(json.dumps(events))
            parts.append((await self.client.get(f"/session/{sid}/transcript")).text)
        return "\n".join(parts)

    async def assert_no_secret(self, *session_ids: str) -> None:
        text = await self.evidence(*session_ids)
        for secret in (KEY, TOKEN, self.token):
            assert secret not in text


@asynccontextmanager
async def hostile_daemon(tmp_path: Path, responses: list[Any], *, settings: dict[str, Any] | None = None,
                         sandbox: str = "auto", token_in_env: bool = False) -> AsyncIterator[Running]:
    """The daemon as a subprocess, its model the fake playing ``responses``; yields once it listens."""
    fake = FakeOpenAI(responses)
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir(exist_ok=True)
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps({"approvalMode": "yolo", "sandbox": sandbox, **(settings or {})}))
    env = {k: v for k, v in os.environ.items() if k not in ("TRELLIS_TOKEN", "OPENAI_API_KEY")}
    env["OPENAI_API_KEY"] = KEY
    if token_in_env:
        env["TRELLIS_TOKEN"] = TOKEN
    async with trio.open_nursery() as nursery:
        fake_url = await nursery.start(fake.serve)
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "transport", "--model", "openai", "--openai-base-url", fake_url,
             "--openai-model", "fake", "--port", "0", "--state-dir", str(state), "--workspace", str(work),
             "--settings", str(settings_file)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        try:
            line = b""
            with trio.fail_after(30):
                while b"\n" not in line:
                    chunk = await proc.stdout.receive_some()
                    assert chunk, "the daemon exited before it listened"
                    line += chunk
            url = line.decode().split()[-1]
            token = TOKEN if token_in_env else read_token_file(state)
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                         timeout=10) as client:
                yield Running(proc, url, token, state, work, settings_file, fake, client)
        finally:
            if proc.returncode is None:
                proc.terminate()
            with trio.move_on_after(15):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
            nursery.cancel_scope.cancel()


# ------------------------------------------------------------------ the daemon's process tree


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it, from the host's /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        tree += children
        frontier = children
    return tree


def process_image(pid: int) -> str:
    """A process's environment and command line, as any same-uid process can read them."""
    parts = []
    for name in ("environ", "cmdline"):
        try:
            parts.append(Path(f"/proc/{pid}/{name}").read_bytes().decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(parts)


# ------------------------------------------------------------------ what a hostile command runs

# A model-run script's MCP and HTTP calls, by hand (an attacker needs no SDK).
HTTP_PROBE = '''
import json, urllib.request, urllib.error

def call(method, url, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)
    except OSError as exc:
        return None, str(exc), {}

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}

def mcp_tool(url, name, arguments, headers=None):
    status, body, got = call("POST", url, INIT, headers)
    if status != 200:
        return status, body
    session = {"Mcp-Session-Id": got.get("Mcp-Session-Id") or got.get("mcp-session-id"), **(headers or {})}
    call("POST", url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    return call("POST", url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                              "params": {"name": name, "arguments": arguments}}, session)[:2]

def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        return None
'''


def quote_url(url: str) -> str:
    return urllib.parse.quote(url, safe=":/")
