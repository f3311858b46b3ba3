"""Scenario replays per second on one core, and the whole library with 20 seeds each.

Replays each scenario in process (``actors.replay.replay``) with seeds
0..N-1, pinned to one CPU where the platform allows, and prints a table.

    python bench/bench_replay.py [--replays 100] [--seeds 20] [PATH ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.replay import load_scenario, replay  # noqa: E402
from actors.replay.cli import collect  # noqa: E402


def pin_to_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity here)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["scenarios"])
    parser.add_argument("--replays", type=int, default=100, help="replays per scenario for the rate")
    parser.add_argument("--seeds", type=int, default=20, help="seeds per scenario for the library run")
    args = parser.parse_args()
    pinned = pin_to_one_core()
    # Known-bug scenarios fail by design (some until their timeout): they are not benchmarked.
    scenarios = [s for s in (load_scenario(p) for p in collect(args.paths)) if not s.known_bug]
    for s in scenarios:  # warm up imports and code paths
        replay(s, 0)

    rows = []
    for s in scenarios:
        samples = []
        for seed in range(args.replays):
            start = time.perf_counter()
            result = replay(s, seed)
            samples.append(time.perf_counter() - start)
            assert result.ok, (s.name, seed, result.failures)
        rows.append((s.name, len(result.trace.records), statistics.median(samples) * 1e3,
                     len(samples) / sum(samples)))

    start = time.perf_counter()
    for s in scenarios:
        for seed in range(args.seeds):
            replay(s, seed)
    library = time.perf_counter() - start
    total = len(scenarios) * args.seeds

    print(f"replay benchmark: {len(scenarios)} scenarios, {args.replays} replays each (seeds 0..{args.replays - 1}), "
          f"{pinned}, Python {sys.version.split()[0]}")
    print()
    print(f"| {'scenario':<36} | {'trace records':>13} | {'median ms':>9} | {'replays/s':>9} |")
    print(f"|{'-' * 38}|{'-' * 15}|{'-' * 11}|{'-' * 11}|")
    for name, records, median_ms, rate in rows:
        print(f"| {name:<36} | {records:>13} | {median_ms:>9.2f} | {rate:>9.0f} |")
    overall = sum(args.replays for _ in rows) / sum(args.replays / r[3] for r in rows)
    print(f"| {'all (mean rate)':<36} | {'':>13} | {'':>9} | {overall:>9.0f} |")
    print()
    print(f"whole library, {args.seeds} seeds each ({total} replays): {library:.2f} s")


if __name__ == "__main__":
    main()
