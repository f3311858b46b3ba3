"""The fake model of ``bench/peer_qwen.py``, timed: when each chat request arrives and its response ends.

Run as a script it is ``transport.fake_openai``'s server in its own process, reporting on stdout and taking
each scenario's responses on stdin (an unexpected extra request is then a count mismatch, not a shift of
every later response); :class:`TimedFake` is the benchmark's end of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, pin_load  # noqa: E402

TIMEOUT = 60.0


def serve() -> None:
    """This file as a script: transport.fake_openai's server, reporting request times and taking scripts on stdin.

    stdout: ``listening on URL``, then one JSON object a line: ``{"ev": "req", "i", "t", "messages"}`` when
    chat request ``i`` has arrived, ``{"ev": "end", "i", "t"}`` when its response is finished, ``{"ev":
    "other", "method", "path"}`` for anything else, ``{"ev": "ack", "seq"}`` for a script taken.
    stdin: ``{"seq": n, "set": [responses]}`` replaces the remaining script. EOF on stdin ends the server.
    """
    from transport.fake_openai import FakeOpenAI

    def say(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    class TimedFakeOpenAI(FakeOpenAI):
        chats = 0

        async def _answer(self, stream, conn, head, raw):  # type: ignore[no-untyped-def]
            path = head.target.decode().split("?")[0]
            if head.method != b"POST" or not path.endswith("/chat/completions"):
                say({"ev": "other", "method": head.method.decode(), "path": path})
                return await super()._answer(stream, conn, head, raw)
            index, self.chats = self.chats, self.chats + 1
            try:
                messages = len(json.loads(raw).get("messages") or ())
            except (ValueError, AttributeError):
                messages = -1
            say({"ev": "req", "i": index, "t": time.monotonic(), "messages": messages, "bytes": len(raw)})
            try:
                return await super()._answer(stream, conn, head, raw)
            finally:
                say({"ev": "end", "i": index, "t": time.monotonic()})

    fake = TimedFakeOpenAI([])

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(lambda task_status: fake.serve(port=0, task_status=task_status))
            print(f"listening on {url}", flush=True)
            stdin = trio.lowlevel.FdStream(os.dup(0))
            buffer = b""
            while True:
                data = await stdin.receive_some(1 << 20)
                if not data:
                    nursery.cancel_scope.cancel()
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    command = json.loads(line)
                    fake.plans.clear()
                    fake.add(*command["set"])
                    say({"ev": "ack", "seq": command["seq"]})

    trio.run(run)


class TimedFake:
    """The client's end of :func:`serve`: script it per scenario, wait for and read its request times."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.url = ""
        self.requests: list[dict[str, Any]] = []  # by index: {"t", "end", "messages"}
        self.other: list[dict[str, Any]] = []
        self.expected = 0  # chat requests the scenarios so far accounted for
        self._acks = 0
        self._seq = 0
        self._changed = trio.Event()
        self.proc: trio.Process | None = None

    async def start(self, nursery: trio.Nursery) -> None:
        self.proc = await trio.lowlevel.open_process(
            [sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, cwd=str(ROOT))
        pin_load(self.proc.pid)  # load, as bench/_common.py's FakeModel (its threads start later, and inherit it)
        listening = trio.Event()
        nursery.start_soon(self._read, listening)
        with trio.fail_after(20):
            await listening.wait()

    async def _read(self, listening: trio.Event) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        buffer = b""
        while True:
            data = await self.proc.stdout.receive_some(65536)
            if not data:
                return
            buffer += data
            while b"\n" in buffer:
                raw, buffer = buffer.split(b"\n", 1)
                line = raw.decode()
                if line.startswith("listening on "):
                    self.url = line.split()[-1]
                    listening.set()
                    continue
                event = json.loads(line)
                if event["ev"] == "req":
                    self.requests.append({"t": event["t"], "end": None, "messages": event["messages"],
                                          "bytes": event["bytes"]})
                elif event["ev"] == "end":
                    self.requests[event["i"]]["end"] = event["t"]
                elif event["ev"] == "ack":
                    self._acks = event["seq"]
                else:
                    self.other.append(event)
            self._changed.set()
            self._changed = trio.Event()

    async def _until(self, ready: Any) -> None:
        with trio.fail_after(TIMEOUT):
            while not ready():
                await self._changed.wait()

    async def script(self, responses: list[Any]) -> int:
        """Play ``responses`` next; the index the scenario's first request will have."""
        assert self.proc is not None and self.proc.stdin is not None
        if len(self.requests) != self.expected:
            raise SystemExit(f"{self.name}: {len(self.requests) - self.expected} model request(s) no scenario "
                             "asked for (a title, a suggestion or a memory call?)")
        self._seq += 1
        seq = self._seq
        await self.proc.stdin.send_all(json.dumps({"seq": seq, "set": responses}).encode() + b"\n")
        await self._until(lambda: self._acks >= seq)
        return len(self.requests)

    async def wait_request(self, index: int) -> dict[str, Any]:
        await self._until(lambda: len(self.requests) > index)
        return self.requests[index]

    async def wait_end(self, index: int) -> dict[str, Any]:
        await self._until(lambda: len(self.requests) > index and self.requests[index]["end"] is not None)
        return self.requests[index]

    async def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            await self.proc.stdin.aclose()
        with trio.move_on_after(10):
            await self.proc.wait()
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()



if __name__ == "__main__":
    serve()
