"""The SSE subscribers of ``bench_scale.py``: up to thousands of event streams held by one Trio process.

Cheap on purpose, so that a thousand streams cost the client less than they
cost the daemon: raw sockets (no HTTP library), one task per stream, and each
read scanned with ``bytes.count`` / one regex for the fake model's stamps
(``@<time_ns>@``, see ``bench/_rate_fake.py``) over the complete frames it
holds; nothing is JSON-decoded. A stamp's delay is ``time.time_ns()`` at the
read less the stamp: the same wall clock in both processes.

stdin, a JSON object a line; stdout, a JSON line each:

- ``{"op": "open", "host", "port", "paths", "headers"}``: one connection per
  path (``GET``), all at once (at most 64 connecting at a time); answered
  once each has its status and its first body bytes (the ``retry:`` line: our
  daemon has the subscription then), ``{"accepted", "refused": {status:
  count}}``. The streams are read from then on.
- ``{"op": "mark"}``: counting starts again (tokens, delays, frames, CPU).
- ``{"op": "collect", "turns": k, "timeout": s, "split_ns": t}``: waits until
  every open stream has seen ``k`` more ``turn_complete`` events than at the
  last mark or collect (or ended, or the timeout passed), then answers what was
  counted since the mark: ``tokens``, ``first_ns``/``last_ns`` (wall clock of
  the first and last stamp read), ``delay_ms`` (``p50``, ``p99``, ``max``),
  ``after_ms`` (the same for stamps written at or after ``split_ns``),
  ``tail_ms`` (a stream's last stamp read to its ``turn_complete``),
  ``frames``, ``bytes``, ``errors``, ``ended``, ``late`` (streams short of
  their turns at the timeout), ``cpu`` (this process's CPU seconds) and
  ``wall``; then marks. ``{"op": "turns"}`` answers each stream's count and
  the paths of those short of their goal.
- ``{"op": "direct", "host", "port", "path", "n", "body"}``: ``n`` chat
  requests straight to the fake model, each read to ``data: [DONE]``,
  counted like the streams (the delay's floor: no daemon between); answers
  ``{"done": n}``.
- ``{"op": "close"}``: closes every stream; ``{"op": "reopen"}``: closes and
  opens each again with ``Last-Event-ID`` (the last id it read), as a client
  that reconnects; both answer ``{"streams": n}``.
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
import time
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import stdin_commands  # noqa: E402

STAMP = re.compile(rb"@(\d{16,20})@")
TURN = b"event: turn_complete"
FAILED = (b"event: turn_error", b"event: client_evicted")
ID = b"\nid: "
CONNECTING = 64  # connections being opened at once (the daemon's listen backlog is finite)


class Counts:
    def __init__(self) -> None:
        self.mark()

    def mark(self) -> None:
        self.tokens = 0
        self.first_ns = 0
        self.last_ns = 0
        self.delays: list[int] = []
        self.stamps: list[int] = []  # each delay's stamp, in the same order
        self.tails: list[int] = []  # a stream's last stamp read -> its turn_complete read
        self.frames = 0
        self.bytes = 0
        self.errors = 0
        self.cpu = _cpu()
        self.wall = time.monotonic()

    def scan(self, part: bytes, now: int) -> int:
        """Count one run of complete frames read at ``now``; how many stamps it held."""
        self.bytes += len(part)
        self.frames += part.count(b"\ndata:")
        stamps = STAMP.findall(part)
        if stamps:
            if not self.first_ns:
                self.first_ns = now
            self.last_ns = now
            self.tokens += len(stamps)
            at = [int(s) for s in stamps]
            self.stamps.extend(at)
            self.delays.extend(now - t for t in at)
        for failed in FAILED:
            self.errors += part.count(failed)
        return len(stamps)

    def report(self, split_ns: int = 0) -> dict[str, Any]:
        delays = sorted(self.delays)
        after = sorted(d for d, t in zip(self.delays, self.stamps) if t >= split_ns) if split_ns else []
        tails = sorted(self.tails)

        def at(q: float) -> float | None:
            return delays[min(len(delays) - 1, int(q * len(delays)))] / 1e6 if delays else None

        return {"tokens": self.tokens, "first_ns": self.first_ns, "last_ns": self.last_ns,
                "delay_ms": {"p50": at(0.5), "p99": at(0.99), "max": delays[-1] / 1e6 if delays else None},
                "after_ms": {"p50": _at(after, 0.5), "p99": _at(after, 0.99), "count": len(after)},
                "tail_ms": {"p50": _at(tails, 0.5), "max": _at(tails, 1.0)},
                "frames": self.frames, "bytes": self.bytes, "errors": self.errors,
                "cpu": _cpu() - self.cpu, "wall": time.monotonic() - self.wall}


def _at(ordered: list[int], q: float) -> float | None:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6 if ordered else None


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Stream:
    """One subscriber: its socket, what it has read, and the turns it has seen."""

    def __init__(self, client: Client, path: str) -> None:
        self.client = client
        self.path = path
        self.turns = 0
        self.base = 0  # its turns at the last mark: a turn that ends before the collect is asked for still counts
        self.goal = 0
        self.last_id: bytes | None = None
        self.ended = False
        self.code = 0
        self.last_token_ns = 0
        self.scope = trio.CancelScope()

    async def run(self, host: str, port: int, headers: dict[str, str], status: trio.MemorySendChannel) -> None:
        """Connect, say the status once the body has begun, then read until closed or cancelled."""
        with self.scope:
            sock = None
            try:
                async with self.client.connecting:
                    sock = await trio.open_tcp_stream(host, port)
                    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                    if self.last_id is not None:
                        extra += f"Last-Event-ID: {self.last_id.decode()}\r\n"
                    await sock.send_all(f"GET {self.path} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}"
                                        "Accept: text/event-stream\r\n\r\n".encode())
                    buffer = b""
                    while b"\r\n\r\n" not in buffer:
                        data = await sock.receive_some(65536)
                        if not data:
                            break
                        buffer += data
                    code = int(buffer.split(b" ", 2)[1]) if buffer.startswith(b"HTTP/1.1 ") else 0
                    rest = buffer.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in buffer else b""
                    if code == 200 and not rest:  # the headers alone: wait for the retry: line
                        rest = await sock.receive_some(65536)
                self.code = code or -1
                await status.send(code)
                if code != 200:
                    return
                await self.read(sock, rest)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                if not self.code:  # refused at connect, or cut before its status: said as status 0
                    self.code = -1
                    status.send_nowait(0)
                self.ended = True
                self.client.reached(self)
                if sock is not None:
                    with trio.CancelScope(shield=True):
                        await sock.aclose()

    async def read(self, sock: trio.SocketStream, rest: bytes) -> None:
        counts = self.client.counts
        while True:
            cut = rest.rfind(b"\n\n")
            if cut >= 0:  # complete frames: counted now; the rest waits for its end
                part, rest = rest[:cut + 2], rest[cut + 2:]
                now = time.time_ns()
                if counts.scan(part, now):
                    self.last_token_ns = now
                at = part.rfind(ID)
                if at >= 0:
                    self.last_id = part[at + len(ID):part.index(b"\n", at + 1)]
                turns = part.count(TURN)
                if turns:
                    self.turns += turns
                    if self.last_token_ns:
                        counts.tails.append(now - self.last_token_ns)
                        self.last_token_ns = 0
                    self.client.reached(self)
            data = await sock.receive_some(65536)
            if not data:
                return
            rest += data


class Client:
    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.counts = Counts()
        self.streams: list[Stream] = []
        self.connecting = trio.Semaphore(CONNECTING)
        self.waiting = 0  # streams short of their goal
        self.changed = trio.Event()
        self.where: tuple[str, int, dict[str, str]] = ("", 0, {})

    def reached(self, stream: Stream) -> None:
        self.changed.set()

    def short(self) -> int:
        return sum(1 for s in self.streams if s.turns < s.goal and not s.ended)

    async def open(self, host: str, port: int, paths: list[str], headers: dict[str, str],
                   previous: list[Stream] | None = None) -> dict[str, Any]:
        self.where = (host, port, headers)
        send, receive = trio.open_memory_channel(len(paths) or 1)
        streams = []
        for i, path in enumerate(paths):
            stream = Stream(self, path)
            if previous is not None:  # from the last id it read (one that read none yet, from the start),
                before = previous[i]      # its turns so far carried over: the one it saw end is not replayed
                stream.last_id = before.last_id or b"0"
                stream.turns, stream.base = before.turns, before.base
            streams.append(stream)
            self.nursery.start_soon(stream.run, host, port, headers, send)
        refused: dict[str, int] = {}
        accepted = 0
        for _ in paths:
            code = await receive.receive()
            if code == 200:
                accepted += 1
            else:
                refused[str(code)] = refused.get(str(code), 0) + 1
        self.streams += [s for s in streams if s.code == 200]
        return {"accepted": accepted, "refused": refused}

    async def close(self) -> list[Stream]:
        closed, self.streams = self.streams, []
        for s in closed:
            s.scope.cancel()
        await trio.sleep(0)  # their finally clauses close the sockets
        return closed

    def mark(self) -> None:
        self.counts.mark()
        for s in self.streams:
            s.base = s.turns

    async def collect(self, turns: int, timeout: float, split_ns: int = 0) -> dict[str, Any]:
        for s in self.streams:
            s.goal = s.base + turns
        with trio.move_on_after(timeout):
            while self.short():
                self.changed = trio.Event()
                await self.changed.wait()
        report = self.counts.report(split_ns)
        report["late"] = self.short()
        report["ended"] = sum(1 for s in self.streams if s.ended)
        self.mark()
        return report

    async def direct(self, host: str, port: int, path: str, n: int, body: bytes) -> dict[str, Any]:
        async def one() -> None:
            async with self.connecting:
                sock = await trio.open_tcp_stream(host, port)
            try:
                await sock.send_all(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json"
                                    f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
                rest = b""
                while True:
                    data = await sock.receive_some(65536)
                    if not data:
                        return
                    rest += data
                    cut = rest.rfind(b"\n\n")
                    if cut >= 0:
                        part, rest = rest[:cut + 2], rest[cut + 2:]
                        self.counts.scan(part, time.time_ns())
                        if b"data: [DONE]" in part:
                            return
            finally:
                await sock.aclose()

        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(one)
        return {"done": n}


async def main() -> None:
    async with trio.open_nursery() as nursery:
        client = Client(nursery)
        async for c in stdin_commands():
            op = c["op"]
            if op == "open":
                out = await client.open(c["host"], c["port"], c["paths"], c.get("headers", {}))
            elif op == "mark":
                client.mark()
                out = {"marked": True}
            elif op == "collect":
                out = await client.collect(int(c.get("turns", 1)), float(c.get("timeout", 120)),
                                           int(c.get("split_ns", 0)))
            elif op == "direct":
                out = await client.direct(c["host"], c["port"], c["path"], int(c["n"]), c["body"].encode())
            elif op == "turns":
                out = {"turns": [s.turns for s in client.streams], "ended": [s.ended for s in client.streams],
                       "short": [s.path for s in client.streams if s.turns < s.goal][:3]}
            elif op == "close":
                out = {"streams": len(await client.close())}
            elif op == "reopen":
                host, port, headers = client.where
                closed = await client.close()
                out = await client.open(host, port, [s.path for s in closed], headers, closed)
                out["streams"] = len(closed)
            else:
                raise SystemExit(f"unknown op {op!r}")
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()

        await client.close()  # stdin closed: the benchmark is done with it
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
