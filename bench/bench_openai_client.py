"""How much the openai provider costs per streamed chunk.

The fake OpenAI server runs in a subprocess (so its CPU time is not charged to
the client) and streams 20,000 chunks over loopback. Three ways to consume the
same bytes are compared:

- bare loop: ``orjson.loads`` over the ``data:`` lines already in memory (no I/O);
- raw httpx: ``aiter_lines`` + ``orjson.loads`` over loopback, no provider logic;
- provider: ``OpenAIModel.stream`` (SSE parsing, deltas, tool-call accumulation).

Shapes: 20,000 text deltas, and one tool call whose arguments come in 20,000
fragments, both sent by the server back to back (``burst``) so the client is
the bottleneck; then 20,000 text deltas in one write each, as a live server
streams (there the fake server is the bottleneck). Best of three runs each.
Last, end to end: the burst of text deltas through a daemon session on the
``openai`` provider to one event subscriber.
Figures only, no assertions::

    .venv/bin/python bench/bench_openai_client.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.model.base import ChatMessage, ChatRequest  # noqa: E402
from actors.model.openai import OpenAIConfig, OpenAIModel  # noqa: E402
from transport.fake_openai import FakeOpenAI, render  # noqa: E402

N = 20_000
REPS = 3
SHAPES: dict[str, dict[str, Any]] = {  # burst: the server sends back to back, so the client is the bottleneck
    "text deltas": {"burst": True, "steps": [{"text": f"w{i} "} for i in range(N)]
                    + [{"usage": {"prompt_tokens": 5, "completion_tokens": N}}]},
    "tool-call fragments": {"burst": True, "steps": [{"tool_call": {
        "name": "write", "arguments": {"text": "x" * (N * 4 - 12)}, "id": "call_1", "split": N}}]},
    # one write per chunk, as a live server streams: bound by the (Python) fake server
    "text, 1 write/chunk": {"steps": [{"text": f"w{i} "} for i in range(N)]},
}
REQUEST = ChatRequest((ChatMessage("user", "go"),))


def bare_loop(data: bytes) -> tuple[float, int]:
    start = time.perf_counter()
    chunks = 0
    for line in data.split(b"\n"):
        if line.startswith(b"data: "):
            payload = line[6:]
            if payload == b"[DONE]":
                break
            orjson.loads(payload)
            chunks += 1
    return time.perf_counter() - start, chunks


async def raw_httpx(client: httpx.AsyncClient, url: str) -> float:
    start = time.perf_counter()
    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True}
    async with client.stream("POST", url + "/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                orjson.loads(payload)
    return time.perf_counter() - start


async def provider(model: OpenAIModel) -> float:
    start = time.perf_counter()
    async with model.stream(REQUEST) as stream:
        async for _ in stream:
            pass
    return time.perf_counter() - start


def main() -> None:
    script = []
    for shape in SHAPES.values():
        script += [shape] * (2 * REPS)  # raw httpx runs, then provider runs
    script += [SHAPES["text deltas"]] * REPS  # through a session
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(script, f)
    server = subprocess.Popen(
        [sys.executable, "-m", "transport.fake_openai", "--port", "0", "--script", f.name],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        line = server.stdout.readline() if server.stdout else ""
        if not line.startswith("listening on "):
            raise SystemExit(f"the fake server did not start: {line!r}")
        url = line.split()[-1]
        rows = trio.run(measure, url)
        session_rows = trio.run(through_session, url)
    finally:
        server.terminate()
        server.wait(timeout=5)
        Path(f.name).unlink()
    print(f"{'shape':<22} {'path':<12} {'chunks':>7} {'best s':>8} {'chunks/s':>10} {'us/chunk':>9} {'+us vs bare':>12}")
    for shape, path, chunks, seconds, bare in rows:
        per = seconds / chunks * 1e6
        print(f"{shape:<22} {path:<12} {chunks:>7} {seconds:>8.3f} {chunks / seconds:>10,.0f} {per:>9.2f}"
              f" {per - bare / chunks * 1e6:>12.2f}")
    seconds, events = min(session_rows)
    print(f"\nend to end through a session: {events:,} events in {seconds:.3f} s = {events / seconds:,.0f} chunks/s "
          f"(best of {REPS})")


async def through_session(url: str) -> list[tuple[float, int]]:
    """Text deltas from the fake server, through a daemon session, to one subscriber."""
    from actors import CountingIds, Limits, Settings, ToolRegistry, open_daemon

    runs = []
    model = OpenAIModel(OpenAIConfig(base_url=url, api_key="sk-bench", model="bench", read_timeout=30))
    settings = Settings(limits=Limits(subscriber_queue=4096))
    async with open_daemon(settings, model=model, ids=CountingIds(), tools=ToolRegistry) as daemon:
        session, _ = await daemon.create_session()
        for _ in range(REPS):
            sub = session.subscribe()
            start = time.perf_counter()
            await session.prompt("go")
            events = 0
            async for event in sub:
                if event.type == "session_update" and event.update["sessionUpdate"] == "agent_message_chunk":
                    events += 1
                if event.type in ("turn_complete", "turn_error", "client_evicted"):
                    break
            runs.append((time.perf_counter() - start, events))
            sub.close()
    return runs


async def measure(url: str) -> list[tuple[str, str, int, float, float]]:
    rows = []
    async with httpx.AsyncClient(timeout=30) as client:
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key="sk-bench", model="bench", read_timeout=30),
                            client=client)
        for name, shape in SHAPES.items():
            data = b"".join(i for i in render(FakeOpenAI([shape]).plans[0]) if type(i) is bytes)
            bare, chunks = min(bare_loop(data) for _ in range(REPS))
            rows.append((name, "bare loop", chunks, bare, bare))
            rows.append((name, "raw httpx", chunks, min([await raw_httpx(client, url) for _ in range(REPS)]), bare))
            rows.append((name, "provider", chunks, min([await provider(model) for _ in range(REPS)]), bare))
    return rows


if __name__ == "__main__":
    main()
