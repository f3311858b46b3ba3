"""Shared fixtures: an in-process daemon, a real daemon served on loopback port 0, and one as a subprocess."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from actors import CountingIds, Settings, open_daemon
from actors.model import ScriptedModel
from transport import serve
from transport.auth import read_token_file
from transport.process_image import SECRET_ENV



def pytest_configure(config: pytest.Config) -> None:
    """A developer's own per-user settings file must not change what a daemon under test runs with."""
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="trellis-test-config-")


_TEMPORARY = object()  # live_daemon's default workspace: a temporary directory


@asynccontextmanager
async def live_daemon(
    *, model: Any = None, settings: Settings | None = None, state_dir: Any = None, token: str | None = None,
    tools: Callable[[], Any] | None = None, workspace: Any = _TEMPORARY,
) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """The real HTTP daemon on 127.0.0.1:0 and an httpx client pointed at it, sending its bearer token.

    Authentication is on, as in the daemon proper: the token is ``token``, or a fresh one. Its ``workspace`` is
    an empty temporary directory unless given (``None``: the directory the daemon starts in, as ``open_daemon``'s
    default), not the directory the tests run in: that is this project's git repository, and the Web Shell's git
    routes (checkout, commit) act on the workspace, so a fuzzed request would change it.
    """
    token = token or secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory(prefix="trellis-test-workspace-") as temporary:
        async with open_daemon(settings, model=model or ScriptedModel(), state_dir=state_dir, ids=CountingIds(),
                               tools=tools, workspace=temporary if workspace is _TEMPORARY else workspace
                               ) as daemon, trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, daemon, host="127.0.0.1", port=0, token=token))
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
                yield daemon, client
            nursery.cancel_scope.cancel()


@dataclass
class DaemonProcess:
    """A ``python -m transport`` subprocess that printed its ``listening on`` line."""

    process: trio.Process
    state_dir: Path
    url: str = ""
    stdout: bytes = b""  # everything it wrote to stdout so far (all of it once it exited)
    stderr: bytes = b""  # filled once it exited

    @property
    def pid(self) -> int:
        return self.process.pid

    def token(self) -> str:
        """The token the daemon minted into ``<state-dir>/token``, read as a client would."""
        return read_token_file(self.state_dir)

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
        """An httpx client for the daemon, sending ``token`` (none when ``None``)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10, trust_env=False, **kwargs)


async def _drain(stream: Any) -> bytes:
    out = b""
    while chunk := await stream.receive_some():
        out += chunk
    return out


@asynccontextmanager
async def daemon_process(*args: str, state_dir: Path, env: Mapping[str, str] | None = None,
                         timeout: float = 20) -> AsyncIterator[DaemonProcess]:
    """Run ``python -m transport --port 0 --state-dir STATE_DIR *args`` until the body ends.

    The environment is this one without ``TRELLIS_TOKEN`` / ``OPENAI_API_KEY``
    (a developer's own must not change what a test sees), updated with ``env``.
    """
    environ = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | dict(env or {})
    command = [sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(state_dir), *args]
    process = await trio.lowlevel.open_process(command, env=environ, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE)
    running = DaemonProcess(process, Path(state_dir))

    async def stop() -> None:
        if process.returncode is None:
            process.terminate()
        with trio.fail_after(10):
            await process.wait()
            running.stdout += await _drain(process.stdout)
            running.stderr += await _drain(process.stderr)

    try:
        with trio.fail_after(timeout):
            while b"\n" not in running.stdout:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    break
                running.stdout += chunk
        line = running.stdout.decode().partition("\n")[0]
        if not line.startswith("listening on "):
            await stop()
            raise AssertionError(f"the daemon did not start: {running.stdout!r}\n{running.stderr.decode()}")
        running.url = line.split()[-1]
        yield running
    finally:
        with trio.CancelScope(shield=True):
            await stop()


class LoopTicks:
    """How often the event loop ran a ticking task (every millisecond) while ``busy()`` held."""

    def __init__(self) -> None:
        self.count = 0


@asynccontextmanager
async def loop_ticks_while(busy: Callable[[], bool]) -> AsyncIterator[LoopTicks]:
    """Tick every millisecond for the body, counting the ticks that found ``busy()`` (a slow write under way):
    none means the write held the event loop."""
    ticks = LoopTicks()

    async def tick() -> None:
        while True:
            ticks.count += bool(busy())
            await trio.sleep(0.001)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        yield ticks
        nursery.cancel_scope.cancel()


@pytest.fixture
def scripted() -> Callable[..., ScriptedModel]:
    from actors import load_script

    def make(*responses: Any, then: str = "error") -> ScriptedModel:
        return load_script({"responses": list(responses), "then": then})

    return make
