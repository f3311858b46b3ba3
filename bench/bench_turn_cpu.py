"""Daemon CPU per canonical guard turn, over the real HTTP daemon and the real OpenAI wire.

The daemon (``python -m transport --model openai``) and the loopback fake model
run as their own subprocesses; this process is the client. ``--sessions``
sessions (each with one SSE stream held open throughout, and one unmeasured
warm-up turn) run ``--turns`` canonical turns each, the sessions in turn (a
todo write, then three natural stops: four model calls, guard attempts
``[1, 2, 2]``), each prompt posted once the previous turn's ``turn_complete``
arrives: 200 turns by default, in conversations of up to 11 turns (how the
cost grows over a 500-turn conversation is ``bench_long_conversation.py``'s).
The daemon's process CPU time (user + system, ``/proc``) over the measured
turns, divided by their number, is the figure; the fake model's CPU
over the same turns is printed beside it (it does the same four requests'
worth of HTTP and JSON, so it is the floor a Python process pays for the
wire). The target is absolute: 7 ms of daemon CPU a turn.

    python bench/bench_turn_cpu.py [--sessions 20] [--turns 10] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (GUARD_SETTINGS, Daemon, FakeModel, Figure, canonical_turn, cpu_seconds,  # noqa: E402
                     emit)

PROMPT = {"prompt": [{"type": "text", "text": "do the migration"}]}


async def _frames(response: httpx.Response):
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield json.loads("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


async def _one_turn(client: httpx.AsyncClient, sid: str, frames) -> list[int]:
    r = await client.post(f"/session/{sid}/prompt", json=PROMPT)
    assert r.status_code == 202, r.text
    seen: list[int] = []
    async for frame in frames:
        if frame.get("type") == "session_update":
            meta = frame["data"]["update"].get("_meta") or {}
            if meta.get("source") == "todo_stop_guard":
                seen.append(meta["attempt"])
        elif frame.get("type") in ("turn_complete", "turn_error"):
            assert frame["type"] == "turn_complete", frame
            return seen
    raise AssertionError("the event stream ended before turn_complete")


async def run_turns(daemon: Daemon, sessions: int, turns: int, on_measure_start, on_measure_end) -> list[list[int]]:
    """A warm-up turn in each of ``sessions`` sessions, then ``turns`` measured turns each, the sessions
    in turn; returns the guard attempts seen in each measured turn."""
    attempts: list[list[int]] = []
    # Room in the pool for every held stream and the prompts' connection: with httpx's default 20 kept-alive
    # connections, 20 streams left none, and every prompt paid the daemon a TCP accept and teardown.
    limits = httpx.Limits(max_connections=sessions + 4, max_keepalive_connections=sessions + 4)
    async with httpx.AsyncClient(base_url=daemon.url, headers=daemon.headers, timeout=60, limits=limits) as client:
        async with contextlib.AsyncExitStack() as stack:
            streams = []
            for _ in range(sessions):
                sid = (await client.post("/session", json={})).json()["sessionId"]
                stream = await stack.enter_async_context(client.stream("GET", f"/session/{sid}/events"))
                streams.append((sid, _frames(stream)))
            for sid, frames in streams:
                await _one_turn(client, sid, frames)
            on_measure_start()
            for _ in range(turns):
                for sid, frames in streams:
                    attempts.append(await _one_turn(client, sid, frames))
            on_measure_end()
    return attempts


def measure(quick: bool = False, sessions: int | None = None, turns: int | None = None) -> list[Figure]:
    sessions = sessions or (10 if quick else 20)
    turns = turns or (4 if quick else 10)
    total = sessions * turns
    responses = [r for n in range(sessions * (turns + 1)) for r in canonical_turn(n)]
    with FakeModel(responses) as fake:
        daemon = Daemon("--model", "openai", "--openai-base-url", fake.url, "--openai-model", "fake",
                        settings=GUARD_SETTINGS, env={"OPENAI_API_KEY": "bench"})
        try:
            marks: dict[str, tuple[float, float, float]] = {}

            def mark(name: str) -> None:
                marks[name] = (cpu_seconds(daemon.pid), cpu_seconds(fake.proc.pid), time.perf_counter())

            attempts = trio.run(run_turns, daemon, sessions, turns, lambda: mark("start"), lambda: mark("end"))
        finally:
            daemon.stop()
    wrong = [a for a in attempts if a != [1, 2, 2]]
    if wrong:
        raise SystemExit(f"not the canonical turn: guard attempts {wrong[0]} in {len(wrong)} turns")
    (d0, f0, t0), (d1, f1, t1) = marks["start"], marks["end"]
    name = f"daemon CPU per canonical turn ({sessions} sessions x {turns} turns)"
    return [
        Figure("turn_cpu", name, (d1 - d0) / total * 1000, (f1 - f0) / total * 1000,
               "ms", floor_name="fake model's CPU", target=7.0, target_is_absolute=True),
        Figure("turn_cpu", "wall time per canonical turn", (t1 - t0) / total * 1000, None, "ms"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10, help="measured turns per session")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(sessions=args.sessions, turns=args.turns), title="daemon CPU per canonical guard turn", as_json=args.json)


if __name__ == "__main__":
    main()
