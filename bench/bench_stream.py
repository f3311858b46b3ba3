"""Events per second through a session, against a bare Trio memory channel carrying as many items.

Ours: a scripted model streams ``--chunks`` text chunks through one session
of an in-process daemon (``open_daemon``) to one subscriber; the time runs
from the prompt until the subscriber has ``turn_complete``. The floor: a
producer task sending as many items through a ``trio.open_memory_channel(256)``
to a consumer. One Trio run, the two in turn (A B A B …), medians of the
rates compared (a session event is built, encoded, ringed and fanned out; a
channel item is only passed along). No target: the ratio is the figure.

    python bench/bench_stream.py [--chunks 50000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Figure, ainterleave, emit, median  # noqa: E402

from actors import CountingIds, Limits, Settings, open_daemon  # noqa: E402
from actors.model import ScriptedModel, TextDelta  # noqa: E402
from actors.model.scripted import Response  # noqa: E402

BENCH = "stream"


async def bare_pipeline(n: int) -> float:
    """Items per second through a bare memory channel."""
    send, receive = trio.open_memory_channel(256)

    async def produce() -> None:
        async with send:
            for i in range(n):
                await send.send(i)

    start = time.perf_counter()
    count = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        async with receive:
            async for _ in receive:
                count += 1
    assert count == n
    return n / (time.perf_counter() - start)


async def run(n: int, rounds: int) -> dict[str, list[float]]:
    responses = [Response(tuple(TextDelta("x") for _ in range(n)))] * (rounds + 1)
    model = ScriptedModel(responses, demo_after=False)
    settings = Settings(limits=Limits(event_ring_size=8000, subscriber_queue=4096))
    async with open_daemon(settings, model=model, ids=CountingIds()) as daemon:
        session, _ = await daemon.create_session()

        async def through_session() -> float:
            sub = session.subscribe()
            start = time.perf_counter()
            await session.prompt("stream")
            received = 0
            async for event in sub:
                received += 1
                if event.type in ("turn_complete", "turn_error", "client_evicted"):
                    break
            elapsed = time.perf_counter() - start
            sub.close()
            assert event.type == "turn_complete", event
            return received / elapsed

        await through_session()  # warm up
        await bare_pipeline(n)
        return await ainterleave(rounds, {"session": through_session, "bare": lambda: bare_pipeline(n)})


def measure(quick: bool = False, chunks: int | None = None, rounds: int | None = None) -> list[Figure]:
    chunks = chunks or (20_000 if quick else 50_000)
    samples = trio.run(run, chunks, rounds or 5)
    return [Figure(BENCH, f"events/s, scripted model -> session -> subscriber ({chunks:,} chunks)",
                   median(samples["session"]), median(samples["bare"]), "items/s",
                   floor_name="bare memory channel", lower_is_better=False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.chunks, args.rounds),
         title="events/s through a session vs a bare memory channel", as_json=args.json)


if __name__ == "__main__":
    main()
