"""What a turn's end costs the event loop now that the ring stays raw and compaction runs beside it.

A turn of ``--chunks`` text chunks of ``--size`` characters (the default fills
the 8,000-event ring) is published into a fresh bus; then its ``turn_complete``,
the one step that folds the turn. Each round times, interleaved:

- ``turn end``: publishing ``turn_complete`` (the fold, in one synchronous step);
- ``floor``: publishing one more ordinary chunk into the same full bus instead;
- ``chunk``: the mean cost of publishing one chunk of the turn (ingest included),
  beside ``chunk floor``: building, encoding and ring-appending the same event
  without a bus.

The old design folded the ring itself at turn end: 5 s for this turn at 100
characters, 17 s at 400 (the issue that replaced it).

    python bench/bench_turn_end.py [--rounds 15] [--chunks 7999] [--size 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.events import EventBus  # noqa: E402
from actors.wire import Event  # noqa: E402


def chunk_data(text: str) -> dict:
    return {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": text}}}


def one_round(chunks: int, size: int) -> dict[str, float]:
    text = "x" * size
    floor_ring: deque[Event] = deque(maxlen=8000)
    start = time.perf_counter()
    for i in range(chunks):
        event = Event("session_update", chunk_data(text), "P", i + 1, 0)
        event.json()
        floor_ring.append(event)
    chunk_floor = (time.perf_counter() - start) / chunks

    bus = EventBus()
    start = time.perf_counter()
    for _ in range(chunks):
        bus.publish("session_update", chunk_data(text), "P")
    chunk = (time.perf_counter() - start) / chunks

    start = time.perf_counter()
    bus.publish("session_update", chunk_data(text), "P")
    floor = time.perf_counter() - start
    start = time.perf_counter()
    bus.publish("turn_complete", {"sessionId": "s", "promptId": "P", "stopReason": "end_turn"}, "P")
    turn_end = time.perf_counter() - start
    [(segment, _)] = bus.compactor.segments
    assert len(segment[0].data["update"]["content"]["text"]) == (chunks + 1) * size
    return {"turn end": turn_end, "floor": floor, "chunk": chunk, "chunk floor": chunk_floor}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--chunks", type=int, default=7999)
    parser.add_argument("--size", type=int, default=400)
    args = parser.parse_args()
    one_round(200, args.size)  # warm up
    samples: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, value in one_round(args.chunks, args.size).items():
            samples.setdefault(name, []).append(value)
    print(f"turn end: {args.chunks} chunks of {args.size} characters, {args.rounds} rounds, "
          f"Python {sys.version.split()[0]}")
    print()
    print(f"| {'step':<12} | {'median':>10} | {'max':>10} | {'floor':>10} |")
    print(f"|{'-' * 14}|{'-' * 12}|{'-' * 12}|{'-' * 12}|")
    for name, floor_name, unit, scale in (("turn end", "floor", "ms", 1e3), ("chunk", "chunk floor", "µs", 1e6)):
        ours, floor = samples[name], samples[floor_name]
        print(f"| {name:<12} | {statistics.median(ours) * scale:>7.2f} {unit} | {max(ours) * scale:>7.2f} {unit} "
              f"| {statistics.median(floor) * scale:>7.2f} {unit} |")


if __name__ == "__main__":
    main()
