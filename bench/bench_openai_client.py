"""What the openai provider costs per streamed chunk, against raw httpx reading the same stream.

The loopback fake model (``python -m transport.fake_openai``) runs in its own
process and streams ``--chunks`` chunks a request. For each shape, in one
Trio run, in turn (A B A B …):

- raw httpx (the floor): ``aiter_lines`` + ``orjson.loads`` of each ``data:``
  line, no provider logic;
- provider: ``OpenAIModel.stream`` (SSE parsing, deltas, tool-call accumulation).

Shapes: text deltas, and one tool call whose arguments come in as many
fragments, both sent back to back (``burst``) so the client is the
bottleneck; then text deltas one write each, as a live server streams (there
the fake server is the bottleneck, so the ratio nears 1). Last, end to end:
the burst of text deltas through a daemon session on the ``openai`` provider
to one event subscriber, against the same raw httpx floor. Figures are
microseconds per chunk (medians); no targets.

    python bench/bench_openai_client.py [--chunks 20000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import FakeModel, Figure, ainterleave, emit, median  # noqa: E402

from actors import CountingIds, Limits, Settings, ToolRegistry, open_daemon  # noqa: E402
from actors.model.base import ChatMessage, ChatRequest  # noqa: E402
from actors.model.openai import OpenAIConfig, OpenAIModel  # noqa: E402

BENCH = "openai_client"
REQUEST = ChatRequest((ChatMessage("user", "go"),))


def shapes(n: int) -> dict[str, dict[str, Any]]:
    return {
        "text deltas": {"burst": True, "steps": [{"text": f"w{i} "} for i in range(n)]
                        + [{"usage": {"prompt_tokens": 5, "completion_tokens": n}}]},
        "tool-call fragments": {"burst": True, "steps": [{"tool_call": {
            "name": "write", "arguments": {"text": "x" * (n * 4 - 12)}, "id": "call_1", "split": n}}]},
        "text, 1 write/chunk": {"steps": [{"text": f"w{i} "} for i in range(n)]},
    }


async def raw_httpx(client: httpx.AsyncClient, url: str) -> int:
    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True}
    chunks = 0
    async with client.stream("POST", url + "/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                orjson.loads(payload)
                chunks += 1
    return chunks


async def provider(model: OpenAIModel) -> int:
    chunks = 0
    async with model.stream(REQUEST) as stream:
        async for _ in stream:
            chunks += 1
    return chunks


def per_chunk(run, n: int):
    """A variant timing ``run()`` in microseconds per chunk of the ``n`` sent."""
    async def timed() -> float:
        start = time.perf_counter()
        await run()
        return (time.perf_counter() - start) / n * 1e6
    return timed


async def run(url: str, names: list[str], n: int, rounds: int) -> dict[str, list[float]]:
    config = OpenAIConfig(base_url=url, api_key="sk-bench", model="bench", read_timeout=30)
    async with httpx.AsyncClient(timeout=30) as client, \
            open_daemon(Settings(limits=Limits(subscriber_queue=4096)), model=OpenAIModel(config), ids=CountingIds(),
                        tools=ToolRegistry) as daemon:
        model = OpenAIModel(config, client=client)
        session, _ = await daemon.create_session()

        async def through_session() -> None:
            sub = session.subscribe()
            await session.prompt("go")
            async for event in sub:
                if event.type in ("turn_complete", "turn_error", "client_evicted"):
                    break
            sub.close()
            assert event.type == "turn_complete", event

        variants = {}
        for name in names:
            variants[f"raw {name}"] = per_chunk(lambda: raw_httpx(client, url), n)
            variants[f"provider {name}"] = per_chunk(lambda: provider(model), n)
        variants["session"] = per_chunk(through_session, n)
        for variant in variants.values():  # warm up
            await variant()
        return await ainterleave(rounds, variants)


def measure(quick: bool = False, chunks: int | None = None, rounds: int | None = None) -> list[Figure]:
    n = chunks or (5_000 if quick else 20_000)
    rounds = max(rounds or 5, 5)
    by_name = shapes(n)
    names = list(by_name)
    one_round = [r for name in names for r in (by_name[name], by_name[name])] + [by_name["text deltas"]]
    with FakeModel(one_round * (rounds + 1)) as fake:
        samples = trio.run(run, fake.url, names, n, rounds)
    us = {name: median(xs) for name, xs in samples.items()}
    figures = [Figure(BENCH, f"provider, {name} ({n:,})", us[f"provider {name}"], us[f"raw {name}"], "us/chunk",
                      floor_name="raw httpx") for name in names]
    figures.append(Figure(BENCH, f"through a session to a subscriber, text deltas ({n:,})", us["session"],
                          us["raw text deltas"], "us/chunk", floor_name="raw httpx"))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.chunks, args.rounds),
         title="openai provider cost per chunk vs raw httpx", as_json=args.json)


if __name__ == "__main__":
    main()
