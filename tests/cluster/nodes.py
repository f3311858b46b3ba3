"""Daemons of one cluster as real subprocesses: ``python -m transport --store … --events …`` on loopback.

Each node has its own state directory and scripted model (so a test can tell
which node ran a turn by its answer); all share the token, PostgreSQL and Redis.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from transport.process_image import SECRET_ENV

LEASE = 1.5  # seconds: failover within a couple of seconds


def text(body: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": body}]}


def answers(node: str, n: int = 20) -> dict[str, Any]:
    """A script whose answers name the node: ``"<node> answer <i>"``."""
    return {"responses": [[{"text": f"{node} answer {i}"}] for i in range(n)]}


class Node:
    """One daemon of the cluster."""

    def __init__(self, name: str, proc: trio.Process, url: str, token: str, log: Path) -> None:
        self.name = name
        self.proc = proc
        self.url = url
        self.log = log
        self.client = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=20)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    async def local(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request this node answers itself (as if another node had forwarded it)."""
        headers = {**kwargs.pop("headers", {}), "X-Trellis-Forwarded": "test"}
        return await self.client.request(method, path, headers=headers, **kwargs)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


class Cluster:
    def __init__(self, tmp: Path, store: str, events: str) -> None:
        self.tmp = tmp
        self.store = store
        self.events = events
        self.token = secrets.token_hex(16)
        self.nodes: dict[str, Node] = {}
        self._stack = AsyncExitStack()

    async def start(self, name: str, script: dict[str, Any], *extra: str) -> Node:
        script_file = self.tmp / f"script-{name}-{secrets.token_hex(3)}.json"
        script_file.write_text(json.dumps(script))
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        env.update(TRELLIS_TOKEN=self.token, TRELLIS_STORE=self.store, TRELLIS_EVENTS=self.events)
        log = self.tmp / f"{name}.log"
        logf = open(log, "ab")  # noqa: SIM115 - the daemon writes to it until it ends
        self._stack.callback(logf.close)
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(self.tmp / name),
             "--script", str(script_file), "--node-id", name, "--lease-seconds", str(LEASE),
             "--log-level", "info", *extra], env=env, stdout=subprocess.PIPE, stderr=logf)
        self._stack.push_async_callback(self._end, proc)
        line = b""
        with trio.fail_after(30):
            while b"\n" not in line:
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, log.read_text()
                line += chunk
        node = Node(name, proc, line.decode().split()[-1], self.token, log)
        self._stack.push_async_callback(node.client.aclose)
        self.nodes[name] = node
        return node

    @staticmethod
    async def _end(proc: trio.Process) -> None:
        if proc.returncode is None:
            try:
                proc.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            proc.kill()
        with trio.move_on_after(10):
            await proc.wait()

    async def aclose(self) -> None:
        await self._stack.aclose()


@asynccontextmanager
async def cluster(tmp: Path, store: str, events: str) -> AsyncIterator[Cluster]:
    c = Cluster(tmp, store, events)
    try:
        yield c
    finally:
        with trio.CancelScope(shield=True):
            await c.aclose()


async def events_until(client: httpx.AsyncClient, sid: str, stop: Any, *, last_event_id: int | None = None,
                       epoch: str | None = None, timeout: float = 20) -> list[dict[str, Any]]:
    """SSE events of ``sid`` (from ``last_event_id`` when given) until ``stop(event)`` is true."""
    headers = {}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    if epoch is not None:
        headers["X-Qwen-Event-Epoch"] = epoch
    out: list[dict[str, Any]] = []
    with trio.fail_after(timeout):
        async with client.stream("GET", f"/session/{sid}/events", headers=headers) as r:
            assert r.status_code == 200, await r.aread()
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    out.append(json.loads(line[6:]))
                    if stop(out[-1]):
                        return out
    return out


async def wait_turn(client: httpx.AsyncClient, sid: str, prompt_id: str, timeout: float = 20) -> dict[str, Any]:
    """The turn record once it is terminal."""
    with trio.fail_after(timeout):
        while True:
            r = await client.get(f"/session/{sid}/turns/{prompt_id}")
            if r.status_code == 200 and r.json()["state"] not in ("queued", "running"):
                return r.json()
            await trio.sleep(0.05)
