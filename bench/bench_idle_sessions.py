"""Resident memory per idle session of the real daemon, against a bare Trio task with a memory channel.

Ours: a fresh daemon subprocess (``python -m transport``); after one warm-up
session, ``--sessions`` more are opened with ``POST /session`` and the growth
of the daemon's ``VmRSS`` is divided by their number. The floor: a fresh
Python process (this file with ``--bare N``) that starts N Trio tasks, each
waiting on its own ``trio.open_memory_channel(64)`` (a session's mailbox),
measured the same way. Every round starts both processes anew, ours then the
bare one (A B A B …); medians compared; target: at most 50 KiB a session.

    python bench/bench_idle_sessions.py [--sessions 1000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Daemon, Figure, emit, interleave, median, rss_kib, server_child  # noqa: E402

BENCH = "idle_sessions"
SETTLE = 0.2  # seconds for a new session's tasks to reach their first wait


def ours(n: int) -> float:
    """KiB of daemon RSS per idle session."""
    with Daemon("--max-sessions", str(n + 10)) as daemon, \
            httpx.Client(base_url=daemon.url, headers=daemon.headers, timeout=30) as client:
        client.post("/session", json={})  # warm up: every code path's modules and caches
        time.sleep(SETTLE)
        before = rss_kib(daemon.pid)
        for _ in range(n):
            assert client.post("/session", json={}).status_code == 200
        time.sleep(SETTLE)
        return (rss_kib(daemon.pid) - before) / n


async def _bare_tasks(n: int) -> float:
    async def actor(receive: trio.MemoryReceiveChannel) -> None:
        async for _ in receive:
            pass

    async with trio.open_nursery() as nursery:
        mailboxes = []
        for _ in range(n + 1):
            send, receive = trio.open_memory_channel(64)
            mailboxes.append(send)
            nursery.start_soon(actor, receive)
            if len(mailboxes) == 1:  # the warm-up one
                await trio.testing.wait_all_tasks_blocked()
                before = rss_kib(os.getpid())
        await trio.testing.wait_all_tasks_blocked()
        grown = (rss_kib(os.getpid()) - before) / n
        nursery.cancel_scope.cancel()
    return grown


def bare(n: int) -> float:
    """KiB of RSS per bare task + memory channel, in a fresh process."""
    out = subprocess.run([sys.executable, __file__, "--bare", str(n)], capture_output=True, text=True, check=True,
                         preexec_fn=server_child)  # where the daemon runs (bench/_common.py cpu_layout)
    return float(out.stdout)


def measure(quick: bool = False, sessions: int | None = None, rounds: int | None = None) -> list[Figure]:
    n = sessions or (200 if quick else 1000)
    samples = interleave(rounds or 5, {"ours": lambda: ours(n), "bare": lambda: bare(n)})
    return [Figure(BENCH, f"resident memory per idle session ({n} sessions)", median(samples["ours"]),
                   median(samples["bare"]), "KiB", floor_name="bare task + memory channel", target=50.0,
                   target_is_absolute=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    parser.add_argument("--bare", type=int, default=None, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare is not None:
        print(trio.run(_bare_tasks, args.bare))
        return
    emit(measure(args.quick, None if args.quick else args.sessions, args.rounds),
         title="resident memory per idle session", as_json=args.json)


if __name__ == "__main__":
    main()
