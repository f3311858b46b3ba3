"""A loopback OpenAI-compatible server that streams N tokens a response at a fixed rate, and counts what it wrote.

``bench_scale.py``'s model: ``POST …/chat/completions`` with ``stream: true``
answers 200 ``text/event-stream`` and sends ``tokens`` content chunks, chunk
``i`` at ``i / rate`` seconds after the request arrived (each stream on its
own schedule, so 1,000 concurrent streams write 1,000 × ``rate`` tokens a
second), then a ``finish_reason`` chunk, a usage chunk and ``data: [DONE]``.
Every content chunk's text is ``@<time.time_ns()>@ `` taken just before the
write: the wall clock (``CLOCK_REALTIME``), which every process on the machine
reads alike, so a subscriber of the daemon can subtract it from the time it
read the frame the chunk became. ``GET …/models`` answers one model.

It runs as its own process (the daemon's load, not charged to it). stdout:
``listening on URL``, then one JSON line per command. stdin, a JSON object a
line: ``{"op": "stats"}`` answers ``{"tokens", "first_ns", "last_ns",
"requests", "open", "cpu"}`` (content tokens written since the last reset,
the wall clock of the first and last of them, chat requests, streams still
open, this process's CPU seconds); ``{"op": "reset"}`` zeroes the counts;
``{"op": "set", "tokens": N, "rate": R}`` changes later responses. EOF on
stdin ends it.

    python bench/_rate_fake.py --tokens 40 --rate 10
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import h11
import orjson
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import CommandChild, stdin_commands  # noqa: E402

_ENVELOPE = b'data: {"id":"chatcmpl-rate","object":"chat.completion.chunk","created":0,"model":"fake","choices":'
_HEAD = _ENVELOPE + b'[{"index":0,"delta":{"content":"@'  # the stamp goes here, then _TAIL
_TAIL = b'@ "},"logprobs":null,"finish_reason":null}]}\n\n'
_ROLE = _ENVELOPE + b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
_STOP = _ENVELOPE + b'[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n'
_DONE = b"data: [DONE]\n\n"


class RateFake:
    def __init__(self, tokens: int, rate: float) -> None:
        self.tokens = tokens
        self.rate = rate
        self.reset()
        self.open = 0

    def reset(self) -> None:
        self.written = 0
        self.first_ns = 0
        self.last_ns = 0
        self.requests = 0

    async def connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                head, body = None, bytearray()
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(65536)
                        if not data:
                            return
                        conn.receive_data(data)
                    elif isinstance(event, h11.Request):
                        head = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                assert head is not None
                await self.answer(stream, conn, head, bytes(body))
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass  # the daemon walked away (a cancelled turn, a closed session)
        finally:
            await stream.aclose()

    async def answer(self, stream: trio.SocketStream, conn: h11.Connection, head: h11.Request, raw: bytes) -> None:
        path = head.target.decode().split("?")[0]
        if head.method == b"GET" and path.endswith("/models"):
            data = orjson.dumps({"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "fake"}]})
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=[
                ("Content-Type", "application/json"), ("Content-Length", str(len(data)))]))
                + conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage()))
            return
        if head.method != b"POST" or not path.endswith("/chat/completions"):
            await stream.send_all(conn.send(h11.Response(status_code=404, headers=[("Content-Length", "0")]))
                                  + conn.send(h11.EndOfMessage()))
            return
        self.requests += 1
        start = trio.current_time()
        tokens, rate = self.tokens, self.rate
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[
            ("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")])) + conn.send(h11.Data(data=_ROLE)))
        self.open += 1
        try:
            for i in range(tokens):
                await trio.sleep_until(start + i / rate)
                now = time.time_ns()
                await stream.send_all(conn.send(h11.Data(data=_HEAD + str(now).encode() + _TAIL)))
                if not self.first_ns:
                    self.first_ns = now
                self.last_ns = now
                self.written += 1
            usage = orjson.dumps({"id": "chatcmpl-rate", "object": "chat.completion.chunk", "created": 0,
                                  "model": "fake", "choices": [], "usage": {
                                      "prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": 20 + tokens}})
            await stream.send_all(conn.send(h11.Data(data=_STOP + b"data: " + usage + b"\n\n" + _DONE))
                                  + conn.send(h11.EndOfMessage()))
        finally:
            self.open -= 1

    def stats(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"tokens": self.written, "first_ns": self.first_ns, "last_ns": self.last_ns,
                "requests": self.requests, "open": self.open, "cpu": usage.ru_utime + usage.ru_stime}


async def _serve(fake: RateFake) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=4096)
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, fake.connection, listeners)
        print(f"listening on http://127.0.0.1:{port}/v1", flush=True)
        async for command in stdin_commands():
            if command["op"] == "reset":
                fake.reset()
            elif command["op"] == "set":
                fake.tokens, fake.rate = int(command["tokens"]), float(command["rate"])
            print(json.dumps(fake.stats()), flush=True)
        nursery.cancel_scope.cancel()  # stdin closed: the benchmark is done with it


class RateFakeProcess(CommandChild):
    """The benchmark's end of it: a subprocess on the load CPUs, driven over its stdin."""

    def __init__(self, tokens: int, rate: float) -> None:
        super().__init__([sys.executable, str(Path(__file__).resolve()), "--tokens", str(tokens),
                          "--rate", f"{rate:g}"], "the rate fake")
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            raise SystemExit(f"rate fake did not start: {line!r}")
        self.url = line.split()[-1]

    def stop(self, wait: float = 10) -> None:
        super().stop(wait)

    def __enter__(self) -> RateFakeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=40, help="content chunks a response")
    parser.add_argument("--rate", type=float, default=10.0, help="chunks a second, each stream")
    args = parser.parse_args()
    trio.run(_serve, RateFake(args.tokens, args.rate))


if __name__ == "__main__":
    main()
