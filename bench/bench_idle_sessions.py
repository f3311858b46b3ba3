"""Resident memory per idle session: N sessions in one daemon.

    python bench/bench_idle_sessions.py [--sessions 1000]
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import trio
import trio.testing

from actors import CountingIds, Limits, Settings, open_daemon


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def measure(n: int) -> tuple[int, int, int]:
    settings = Settings(limits=Limits(max_sessions=n + 1))
    async with open_daemon(settings, ids=CountingIds()) as daemon:
        # Warm up: one session loads every code path's modules and caches.
        warm, _ = await daemon.create_session()
        await daemon.close_session(warm.session_id)
        gc.collect()
        before_rss = rss_kib()
        tracemalloc.start()
        before_heap = tracemalloc.get_traced_memory()[0]
        for _ in range(n):
            await daemon.create_session()
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        heap = tracemalloc.get_traced_memory()[0] - before_heap
        tracemalloc.stop()
        after_rss = rss_kib()
        assert daemon.session_count == n
        return after_rss - before_rss, heap, daemon.session_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    rss, heap, count = trio.run(measure, args.sessions)
    print(f"{'measure':<36}{'total KiB':>12}{'KiB/session':>14}")
    print(f"{'resident set growth (VmRSS)':<36}{rss:>12,}{rss / count:>14.1f}")
    print(f"{'Python heap growth (tracemalloc)':<36}{heap // 1024:>12,}{heap / 1024 / count:>14.1f}")
    print(f"sessions: {count}")


if __name__ == "__main__":
    main()
