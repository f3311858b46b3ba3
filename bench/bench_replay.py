"""Scenario replays on one core: the mean replay of the library against one plain turn of the same runtime.

Each round replays every scenario once (``actors.replay.replay``, seed = the
round) and, beside it, the floor: what every replay does at the least — a
``run_deterministic`` Trio run (mock clock, seeded scheduler) that opens the
daemon on a state directory in ``/dev/shm``, opens a session, runs one
scripted one-chunk turn to ``turn_complete`` and closes, without the
harness (no timeline, trace, expectations or invariants). Rounds alternate
the two (A B A B …), pinned to one CPU where the platform allows; medians
compared. Also the slowest scenario beside the same floor, and the whole
library with ``--seeds`` seeds each (wall time, no floor). Known-bug
scenarios fail by design and are left out.

    python bench/bench_replay.py [--rounds 20] [--seeds 20] [--scenarios] [--json] [PATH ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Figure, emit, interleave, median  # noqa: E402

from actors import CountingIds, Settings, load_script, open_daemon  # noqa: E402
from actors.replay import load_scenario, replay, run_deterministic  # noqa: E402
from actors.replay.cli import BUNDLED, collect  # noqa: E402

BENCH = "replay"


def pin_to_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


async def _plain_turn(state_dir: str) -> None:
    model = load_script({"responses": [[{"text": "ok"}]]})
    async with open_daemon(Settings(), model=model, ids=CountingIds(), state_dir=state_dir) as daemon:
        session, _ = await daemon.create_session()
        sub = session.subscribe()
        await session.prompt("hello")
        async for event in sub:
            if event.type in ("turn_complete", "turn_error"):
                break
        assert event.type == "turn_complete", event


def plain_turn() -> float:
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trellis-bench-", dir=shm) as tmp:
        run_deterministic(_plain_turn, tmp, seed=0)
    return time.perf_counter() - start


def measure(quick: bool = False, rounds: int | None = None, seeds: int | None = None,
            paths: list[str] | None = None, per_scenario: dict[str, list[float]] | None = None) -> list[Figure]:
    rounds = rounds or (5 if quick else 20)
    seeds = seeds or (2 if quick else 20)
    saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    pin_to_one_core()
    try:
        scenarios = [s for s in (load_scenario(p) for p in collect(paths or [str(BUNDLED)]))
                     if not s.known_bug]
        for s in scenarios:  # warm up imports and code paths
            replay(s, 0)
        times: dict[str, list[float]] = per_scenario if per_scenario is not None else {}
        seed = iter(range(10**9))

        def library() -> float:
            n = next(seed)
            for s in scenarios:
                start = time.perf_counter()
                result = replay(s, n)
                times.setdefault(s.name, []).append(time.perf_counter() - start)
                assert result.ok, (s.name, n, result.failures)
            return sum(times[s.name][-1] for s in scenarios) / len(scenarios)

        plain_turn()
        samples = interleave(rounds, {"replay": library, "floor": plain_turn})
        start = time.perf_counter()
        for s in scenarios:
            for n in range(seeds):
                replay(s, n)
        whole = time.perf_counter() - start
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)
    floor = median(samples["floor"]) * 1e3
    slowest = max(times, key=lambda name: median(times[name]))
    return [
        Figure(BENCH, f"mean replay, {len(scenarios)} scenarios", median(samples["replay"]) * 1e3, floor, "ms",
               floor_name="one plain turn"),
        Figure(BENCH, f"slowest replay ({slowest})", median(times[slowest]) * 1e3, floor, "ms",
               floor_name="one plain turn"),
        Figure(BENCH, f"whole library, {seeds} seeds each ({len(scenarios) * seeds} replays)", whole, None, "s"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=20, help="replays of each scenario, interleaved with the floor")
    parser.add_argument("--seeds", type=int, default=20, help="seeds per scenario for the library run")
    parser.add_argument("--scenarios", action="store_true", help="also print each scenario's median")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    times: dict[str, list[float]] = {}
    figures = measure(args.quick, None if args.quick else args.rounds, None if args.quick else args.seeds,
                      args.paths or None, times)
    if args.scenarios:
        for name, xs in sorted(times.items()):
            print(f"{name:<40} {median(xs) * 1e3:8.2f} ms")
    emit(figures, title=f"scenario replays, one core, Python {sys.version.split()[0]}", as_json=args.json)


if __name__ == "__main__":
    main()
