"""What a turn's end costs the event loop now that the ring stays raw and compaction runs beside it.

A turn of ``--chunks`` text chunks of ``--size`` characters (the default fills
the 8,000-event ring) is published into a fresh bus; then its ``turn_complete``,
the one step that folds the turn. Each round times, in turn (A B A B …):

- ``chunk floor``: building, encoding and ring-appending one chunk event
  without a bus (the mean over the turn), beside
- ``chunk``: the mean cost of publishing one chunk of the turn (ingest included);
- ``floor``: publishing one more ordinary chunk into the same full bus, beside
- ``turn end``: publishing ``turn_complete`` (the fold, in one synchronous
  step), whose target is absolute: within the 20 ms an event-loop step may take.

The old design folded the ring itself at turn end: 5 s for this turn at 100
characters, 17 s at 400 (the issue that replaced it). Medians compared.

    python bench/bench_turn_end.py [--rounds 15] [--chunks 7999] [--size 400] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import STALL_MS, Figure, emit, interleave, median  # noqa: E402

from actors.events import EventBus  # noqa: E402
from actors.wire import Event  # noqa: E402

BENCH = "turn_end"


def chunk_data(text: str) -> dict:
    return {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": text}}}


def variants(chunks: int, size: int) -> dict:
    """The four steps of a round, in order; ``chunk`` leaves the full bus that ``floor`` and ``turn end`` use."""
    text = "x" * size
    state: dict[str, EventBus] = {}

    def chunk_floor() -> float:
        ring: deque[Event] = deque(maxlen=8000)
        start = time.perf_counter()
        for i in range(chunks):
            event = Event("session_update", chunk_data(text), "P", i + 1, 0)
            event.json()
            ring.append(event)
        return (time.perf_counter() - start) / chunks

    def chunk() -> float:
        bus = state["bus"] = EventBus()
        start = time.perf_counter()
        for _ in range(chunks):
            bus.publish("session_update", chunk_data(text), "P")
        return (time.perf_counter() - start) / chunks

    def floor() -> float:
        start = time.perf_counter()
        state["bus"].publish("session_update", chunk_data(text), "P")
        return time.perf_counter() - start

    def turn_end() -> float:
        bus = state["bus"]
        start = time.perf_counter()
        bus.publish("turn_complete", {"sessionId": "s", "promptId": "P", "stopReason": "end_turn"}, "P")
        elapsed = time.perf_counter() - start
        [(segment, _)] = bus.compactor.segments
        assert len(segment[0].data["update"]["content"]["text"]) == (chunks + 1) * size
        return elapsed

    return {"chunk floor": chunk_floor, "chunk": chunk, "floor": floor, "turn end": turn_end}


def measure(quick: bool = False, rounds: int | None = None, chunks: int = 7999, size: int = 400) -> list[Figure]:
    rounds = rounds or (5 if quick else 15)
    interleave(1, variants(200, size))  # warm up
    samples = interleave(rounds, variants(chunks, size))
    return [
        Figure(BENCH, f"publishing turn_complete after {chunks} chunks of {size} chars", median(samples["turn end"]) * 1e3,
               median(samples["floor"]) * 1e3, "ms", floor_name="one more chunk", target=STALL_MS,
               target_is_absolute=True),
        Figure(BENCH, "publishing one chunk into the bus", median(samples["chunk"]) * 1e6,
               median(samples["chunk floor"]) * 1e6, "us", floor_name="encode + ring append, no bus"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--chunks", type=int, default=7999)
    parser.add_argument("--size", type=int, default=400)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.rounds, args.chunks, args.size),
         title=f"turn end: {args.chunks} chunks of {args.size} characters, Python {sys.version.split()[0]}",
         as_json=args.json)


if __name__ == "__main__":
    main()
