"""Running the real ``trellis`` command (``python -m trellis``) against a real daemon subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from tests.conftest import DaemonProcess, daemon_process

CLIENT_ENV = ("TRELLIS_URL", "TRELLIS_TOKEN", "TRELLIS_STATE_DIR", "OPENAI_API_KEY", "NO_COLOR")


def client_env(**extra: str) -> dict[str, str]:
    """This environment without a developer's own ``TRELLIS_*`` (they would change what a test sees)."""
    return {k: v for k, v in os.environ.items() if k not in CLIENT_ENV} | extra


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines()]


async def trellis(*args: str, cwd: Path, env: Mapping[str, str] | None = None, stdin: bytes = b"",
                  timeout: float = 30) -> Result:
    """``python -m trellis *args`` to its end."""
    with trio.fail_after(timeout):
        done = await trio.run_process([sys.executable, "-m", "trellis", *args], stdin=stdin, capture_stdout=True,
                                      capture_stderr=True, check=False, cwd=cwd,
                                      env=dict(env) if env is not None else client_env())
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def daemon_args(daemon: DaemonProcess) -> list[str]:
    """``--url`` and ``--state-dir`` naming ``daemon`` (its token is read from the state directory)."""
    return ["--url", daemon.url, "--state-dir", str(daemon.state_dir)]


@asynccontextmanager
async def scripted_daemon(tmp_path: Path, *responses: Any, guard: bool = False, then: str = "error",
                          args: tuple[str, ...] = (), env: Mapping[str, str] | None = None,
                          ) -> AsyncIterator[DaemonProcess]:
    """A daemon whose model plays ``responses`` (the demo model when there are none)."""
    extra = list(args)
    if responses:
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"responses": list(responses), "then": then}))
        extra += ["--script", str(script)]
    if guard:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps({"experimental": {"todoStopGuard": True}}))
        extra += ["--settings", str(settings)]
    async with daemon_process(*extra, state_dir=tmp_path / "state", env=env) as daemon:
        yield daemon


class Running:
    """A ``trellis`` process still running: read its stdout and stderr as they come, signal it."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stdout = b""
        self.stderr = b""

    async def read_until(self, text: str, *, stream: str = "stdout", timeout: float = 20) -> None:
        with trio.fail_after(timeout):
            while text.encode() not in getattr(self, stream):
                chunk = await getattr(self.process, stream).receive_some()
                if not chunk:
                    raise AssertionError(f"{stream} ended without {text!r}: {self.stdout!r} {self.stderr!r}")
                setattr(self, stream, getattr(self, stream) + chunk)

    async def finish(self, timeout: float = 20) -> Result:
        async def drain(name: str) -> None:
            while chunk := await getattr(self.process, name).receive_some():
                setattr(self, name, getattr(self, name) + chunk)

        with trio.fail_after(timeout):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, "stdout")
                nursery.start_soon(drain, "stderr")
            await self.process.wait()
        return Result(self.process.returncode, self.stdout.decode(), self.stderr.decode())


@asynccontextmanager
async def running_trellis(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> AsyncIterator[Running]:
    process = await trio.lowlevel.open_process([sys.executable, "-m", "trellis", *args], stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                                               env=dict(env) if env is not None else client_env())
    try:
        yield Running(process)
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await process.wait()
