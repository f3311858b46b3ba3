"""Daemon CPU per canonical guard turn, over the real HTTP daemon and the real OpenAI wire, beside the daemon of
the day issue 17 was filed.

The daemon (``python -m transport --model openai``) and the loopback fake model
run as their own subprocesses; this process is the client. In each round,
``--sessions`` sessions (each with one SSE stream held open throughout, and one
unmeasured warm-up turn) run ``--turns`` canonical turns each, the sessions in
turn (a todo write, then three natural stops: four model calls, guard attempts
``[1, 2, 2]``), each prompt posted once the previous turn's ``turn_complete``
arrives (how the cost grows over a 500-turn conversation is
``bench_long_conversation.py``'s). A round's figure is the daemon's process CPU
time (user + system, ``/proc``, its threads included) over its measured turns,
divided by their number.

Each round runs two daemons in turn on the same harness, a fresh fake model
each: this tree's, and the one of the day the issue was filed (commit
``09c64bc``, exported from this clone's history by ``_common.issue_day_tree``;
the figure is left out, with the reason, where the history lacks it). Rounds
alternate, at least five, medians compared.

The target: the issue asks for "7 ms of daemon CPU a turn, a third of today"
(today: 20.7 ms, when the fake model used 7 ms). CPU time on this shared
machine moves 2-3x with its neighbours (the fake model alone has used 3.0 and
11.5 ms a turn on different days), so the target is read as the ratio it was
set as: this daemon's CPU at most 7/20.7 (0.338) of the issue-day daemon's,
measured side by side. The absolute figure is printed too, beside the fake
model's CPU over the same turns (it does the same four requests' worth of HTTP
and JSON: the floor a Python process pays for the wire); 7 ms holds when the
machine is as fast as it was that day.

    python bench/bench_turn_cpu.py [--sessions 10] [--turns 10] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (GUARD_SETTINGS, ISSUE_DAY_COMMIT, ISSUE_DAY_SHARE, MIN_ROUNDS, ROOT, Daemon,  # noqa: E402
                     FakeModel, Figure, canonical_turn, cpu_seconds, emit, interleave, issue_day_tree,
                     positive_int)

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


def _one_round(root: Path, sessions: int, turns: int) -> tuple[float, float, float]:
    """One daemon of ``root`` on a fresh fake model: its CPU, the fake's CPU and the wall time, in seconds, over
    ``sessions`` x ``turns`` measured canonical turns."""
    responses = [r for n in range(sessions * (turns + 1)) for r in canonical_turn(n)]
    with FakeModel(responses) as fake:
        daemon = Daemon("--model", "openai", "--openai-base-url", fake.url, "--openai-model", "fake",
                        settings=GUARD_SETTINGS, env={"OPENAI_API_KEY": "bench"}, root=root)
        try:
            marks: dict[str, tuple[float, float, float]] = {}

            def mark(name: str) -> None:
                marks[name] = (cpu_seconds(daemon.pid), cpu_seconds(fake.proc.pid), time.perf_counter())

            attempts = trio.run(run_turns, daemon, sessions, turns, lambda: mark("start"), lambda: mark("end"))
        finally:
            daemon.stop()
    wrong = [a for a in attempts if a != [1, 2, 2]]
    if wrong:
        raise SystemExit(f"not the canonical turn ({root}): guard attempts {wrong[0]} in {len(wrong)} turns")
    (d0, f0, t0), (d1, f1, t1) = marks["start"], marks["end"]
    return d1 - d0, f1 - f0, t1 - t0


def measure(quick: bool = False, sessions: int | None = None, turns: int | None = None,
            rounds: int | None = None) -> list[Figure]:
    sessions = sessions or (5 if quick else 10)
    turns = turns or (4 if quick else 10)
    rounds = max(rounds or MIN_ROUNDS, MIN_ROUNDS)
    per_round = sessions * turns
    variants = {"ours": ROOT}
    issue_day = issue_day_tree()
    if issue_day is not None:
        variants["issue day"] = issue_day
    samples = interleave(rounds, {name: partial(_one_round, root, sessions, turns) for name, root in variants.items()})
    ours = samples["ours"]
    total = per_round * len(ours)
    daemon_ms = sum(s[0] for s in ours) / total * 1000
    fake_ms = sum(s[1] for s in ours) / total * 1000
    figures = []
    if "issue day" in samples:
        figures.append(Figure(
            "turn_cpu", f"daemon CPU per canonical turn, against the baseline daemon ({ISSUE_DAY_COMMIT}; "
                        f"{rounds} rounds x {per_round} turns; target 7/20.7)",
            statistics.median(s[0] for s in ours) / per_round * 1000,
            statistics.median(s[0] for s in samples["issue day"]) / per_round * 1000, "ms",
            floor_name=f"baseline daemon ({ISSUE_DAY_COMMIT})", target=round(ISSUE_DAY_SHARE, 3)))
    figures += [
        Figure("turn_cpu", f"daemon CPU per canonical turn ({total} turns; the target's 7 ms on the baseline's machine)",
               daemon_ms, fake_ms, "ms", floor_name="fake model's CPU"),
        Figure("turn_cpu", "wall time per canonical turn", sum(s[2] for s in ours) / total * 1000, None, "ms"),
    ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=positive_int, default=10)
    parser.add_argument("--turns", type=positive_int, default=10, help="measured turns per session and round")
    parser.add_argument("--rounds", type=positive_int, default=MIN_ROUNDS, help=f"rounds (at least {MIN_ROUNDS})")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(sessions=args.sessions, turns=args.turns, rounds=args.rounds),
         title="daemon CPU per canonical guard turn", as_json=args.json)


if __name__ == "__main__":
    main()
