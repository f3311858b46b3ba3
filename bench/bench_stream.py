"""Events per second: a scripted model streaming N chunks through one session to one subscriber.

Compared with a bare Trio memory-channel pipeline carrying the same number of items.

    python bench/bench_stream.py [--chunks 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import trio

from actors import CountingIds, Limits, Settings, open_daemon
from actors.model import ScriptedModel
from actors.model.scripted import Response
from actors.model import TextDelta


async def bare_pipeline(n: int) -> float:
    send, receive = trio.open_memory_channel(256)

    async def produce() -> None:
        async with send:
            for i in range(n):
                await send.send(i)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        count = 0
        async with receive:
            async for _ in receive:
                count += 1
    assert count == n
    return time.perf_counter() - start


async def through_session(n: int) -> tuple[float, int]:
    model = ScriptedModel([Response(tuple(TextDelta("x") for _ in range(n)))], demo_after=False)
    settings = Settings(limits=Limits(event_ring_size=8000, subscriber_queue=4096))
    async with open_daemon(settings, model=model, ids=CountingIds()) as daemon:
        session, _ = await daemon.create_session()
        sub = session.subscribe()
        start = time.perf_counter()
        await session.prompt("stream")
        received = 0
        async for event in sub:
            received += 1
            if event.type in ("turn_complete", "turn_error", "client_evicted"):
                break
        elapsed = time.perf_counter() - start
        assert event.type == "turn_complete", event
        return elapsed, received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    bare = min(trio.run(bare_pipeline, args.chunks) for _ in range(args.repeat))
    runs = [trio.run(through_session, args.chunks) for _ in range(args.repeat)]
    session_time, events = min(runs)
    bare_rate = args.chunks / bare
    session_rate = events / session_time
    print(f"{'pipeline':<34}{'items':>10}{'seconds':>10}{'items/s':>12}")
    print(f"{'bare trio memory channel':<34}{args.chunks:>10}{bare:>10.3f}{bare_rate:>12,.0f}")
    print(f"{'scripted model -> session -> sub':<34}{events:>10}{session_time:>10.3f}{session_rate:>12,.0f}")
    print(f"ratio (session / bare): {session_rate / bare_rate:.2f}   (best of {args.repeat})")


if __name__ == "__main__":
    main()
