"""The SSE subscribers of ``bench_sse_http.py``, in their own process (the same code for every server).

Reads one JSON command a line on stdin, ``{"url", "path", "headers", "k"}``:
opens ``k`` event streams with httpx (one connection each), prints ``ready``
once every stream has its first bytes (the ``retry:`` line, so ours has its
subscription), then reads each stream until ``event: turn_complete`` and
prints ``{"end": <time.monotonic() when the last one saw it>, "frames": [...],
"bytes": N}``. Parsing is cheap on purpose, so the client is not the
bottleneck: frames are counted as ``\\ndata:`` occurrences in the raw chunks
and the end found as a substring; nothing is JSON-decoded.
"""

from __future__ import annotations

import json
import sys
import time

import httpx
import trio

DATA = b"\ndata:"
END = b"event: turn_complete"
FAILED = (b"event: turn_error", b"event: client_evicted")


async def one_stream(client: httpx.AsyncClient, path: str, ready: trio.MemorySendChannel, out: list) -> None:
    async with client.stream("GET", path) as response:
        assert response.status_code == 200, response.status_code
        chunks = response.aiter_raw()
        tail = await chunks.__anext__()
        await ready.send(None)
        frames, size = 0, 0
        async for chunk in chunks:
            window = tail[-24:] + chunk
            frames += (tail[-(len(DATA) - 1):] + chunk).count(DATA)
            size += len(chunk)
            tail = chunk
            if END in window:
                out.append((time.monotonic(), frames, size))
                return
            if any(f in window for f in FAILED):
                raise SystemExit(f"stream failed: {window[-400:]!r}")
    raise SystemExit("stream ended before turn_complete")


async def one_round(command: dict) -> dict:
    out: list = []
    send, receive = trio.open_memory_channel(command["k"])
    limits = httpx.Limits(max_connections=command["k"] + 1)
    async with httpx.AsyncClient(base_url=command["url"], headers=command.get("headers", {}), timeout=60,
                                 limits=limits) as client:
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for _ in range(command["k"]):
                    nursery.start_soon(one_stream, client, command["path"], send, out)
                for _ in range(command["k"]):
                    await receive.receive()
                print("ready", flush=True)
    return {"end": max(t for t, _, _ in out), "frames": [f for _, f, _ in out], "bytes": sum(b for _, _, b in out)}


def main() -> None:
    for line in sys.stdin:
        print(json.dumps(trio.run(one_round, json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
