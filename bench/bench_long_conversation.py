"""A long conversation: daemon CPU per model call around turn 500 against around turn 10, in one run.

The real daemon (``--model openai``) talks the real OpenAI wire to the
loopback fake model (both subprocesses). Two sessions are driven to turn 485
(untimed); two more get five warm-up turns. Then fifteen rounds
(``--rounds``), each one turn of every session, the short ones (turns 6-20)
and the long ones (turns 486-500) in alternate order: each sample is the
daemon's on-CPU time (all its threads, ``/proc/<pid>/task/*/schedstat``)
from the POST until just after that turn's ``turn_complete``, divided by the
turn's model calls; medians of the 30 samples of each kind compared, target
ratio <= 1.2 (a turn must not cost more as the history grows). One session
of each kind gave medians that moved the ratio by 0.1 from run to run on a
busy two-core machine; two, alternated, halve that.

Realistic turns: prompts and answers of 200-500 characters, answers streamed
in ~25-character chunks with a usage chunk; every fifth turn calls
``todo_write`` (two model calls: the call, then the answer after its
result), so the history carries assistant tool calls and tool results. Each
prompt is posted once the previous turn's ``turn_complete`` arrived on the
session's SSE stream. ``--quick`` runs the same 500 turns (about 20 s):
the figure is about turn 500.

    python bench/bench_long_conversation.py [--turns 500] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (MIN_ROUNDS, Daemon, FakeModel, Figure, cpu_ns, emit, median, stall_args,  # noqa: E402
                     stall_figures)

BENCH = "long_conversation"
ROUNDS = 15  # measured turns of each session
PAIRS = 2  # sessions of each length: twice the samples from the same turns (one pair's medians moved by 0.1)
SHORT_START = 6  # the short sessions' measured turns: 6..20
TOOL_EVERY = 5
SETTLE = 0.03  # untimed, after turn_complete: what the turn leaves to do is charged to it
WORDS = ("the build of the billing service failed in the migration step because the schema check "
         "found a column that the previous release had renamed so the rollback script and the seed data "
         "disagree about which table holds invoices and the tests that cover refunds now time out").split()


def text(n: int, length: int) -> str:
    """Deterministic prose of about ``length`` characters, varied by ``n``."""
    out, i = [], n
    while sum(len(w) + 1 for w in out) < length:
        out.append(WORDS[(i * 7 + len(out) * 3) % len(WORDS)])
        i += 1
    return " ".join(out).capitalize() + "."


def chunks(s: str, size: int = 25) -> list[dict]:
    return [{"text": s[i:i + size]} for i in range(0, len(s), size)]


def responses(turn: int) -> list[list[dict]]:
    """The model calls of a session's ``turn`` (1-based): one, or a todo_write and the answer after it."""
    usage = {"usage": {"prompt_tokens": 150 * turn, "completion_tokens": 90}}
    if turn % TOOL_EVERY:
        return [[*chunks(text(turn, 200 + turn % 7 * 45)), usage]]
    todos = [{"id": f"t{i}", "content": text(turn + i, 80), "status": "completed" if i == 0 else "pending"}
             for i in range(3)]
    return [[*chunks(text(turn, 150)), {"tool_call": {"id": f"call_{turn}", "name": "todo_write",
                                                     "arguments": {"todos": todos}}}, usage],
            [*chunks(text(turn + 1, 350)), usage]]


def prompt(turn: int) -> dict:
    return {"prompt": [{"type": "text", "text": text(turn * 11, 200 + turn % 5 * 60)}]}


class Conversation:
    """One session, its SSE stream, and its turn count."""

    def __init__(self, client: httpx.AsyncClient, sid: str, stream: httpx.Response) -> None:
        self.client, self.sid, self.lines, self.turn = client, sid, stream.aiter_lines(), 0

    async def next_turn(self) -> None:
        self.turn += 1
        r = await self.client.post(f"/session/{self.sid}/prompt", json=prompt(self.turn))
        assert r.status_code == 202, r.text
        async for line in self.lines:
            if line.startswith("event: turn_"):
                assert line == "event: turn_complete", line
                return

    async def timed_turn(self, pid: int) -> float:
        """Daemon CPU ms per model call of the next turn."""
        calls = len(responses(self.turn + 1))
        before = cpu_ns(pid)
        await self.next_turn()
        await trio.sleep(SETTLE)
        return (cpu_ns(pid) - before) / 1e6 / calls


Step = tuple[str, int, int, bool]  # (kind, which session of that kind, turn, measured)


def plan(long_turns: int, rounds: int = ROUNDS) -> list[Step]:
    """Every turn in the order it runs: the untimed ones, then the measured rounds.

    Each round runs one turn of every session, the short and the long ones in
    alternate order (short first in even rounds, long first in odd ones), so
    neither kind always runs right after the other.
    """
    steps: list[Step] = []
    for pair in range(PAIRS):
        steps += [("long", pair, t, False) for t in range(1, long_turns - rounds + 1)]
    for pair in range(PAIRS):
        steps += [("short", pair, t, False) for t in range(1, SHORT_START)]
    for i in range(rounds):
        order = ("short", "long") if i % 2 == 0 else ("long", "short")
        for pair in range(PAIRS):
            for kind in order:
                steps.append((kind, pair, SHORT_START + i if kind == "short" else long_turns - rounds + 1 + i, True))
    return steps


async def drive(daemon: Daemon, long_turns: int, rounds: int = ROUNDS) -> dict[str, list[float]]:
    async with httpx.AsyncClient(base_url=daemon.url, headers=daemon.headers, timeout=120) as client:
        conversations: dict[tuple[str, int], Conversation] = {}
        streams = []
        try:
            for kind in ("long", "short"):
                for pair in range(PAIRS):
                    sid = (await client.post("/session", json={})).json()["sessionId"]
                    stream = await client.send(client.build_request("GET", f"/session/{sid}/events"), stream=True)
                    streams.append(stream)
                    conversations[kind, pair] = Conversation(client, sid, stream)
            samples: dict[str, list[float]] = {"short": [], "long": []}
            for kind, pair, turn, measured in plan(long_turns, rounds):
                conversation = conversations[kind, pair]
                assert conversation.turn + 1 == turn, (kind, pair, conversation.turn, turn)
                if measured:
                    samples[kind].append(await conversation.timed_turn(daemon.pid))
                else:
                    await conversation.next_turn()
        finally:
            for stream in streams:
                await stream.aclose()
    return samples


def script(long_turns: int, rounds: int = ROUNDS) -> list:
    """Every model call in the order the sessions make them."""
    return [call for _, _, turn, _ in plan(long_turns, rounds) for call in responses(turn)]


def measure(quick: bool = False, turns: int | None = None, rounds: int = ROUNDS) -> list[Figure]:
    turns = turns or 500
    rounds = max(rounds, MIN_ROUNDS)
    started = time.perf_counter()
    with FakeModel(script(turns, rounds)) as fake:
        daemon = Daemon("--model", "openai", "--openai-base-url", fake.url, "--openai-model", "fake", *stall_args(),
                        env={"OPENAI_API_KEY": "bench"})
        try:
            samples = trio.run(drive, daemon, turns, rounds)
        finally:
            err = daemon.stop()
    wall = time.perf_counter() - started
    end = SHORT_START + rounds - 1
    return [
        Figure(BENCH, f"daemon CPU per model call, turns {turns - rounds + 1}-{turns}", median(samples["long"]),
               median(samples["short"]), "ms", floor_name=f"turns {SHORT_START}-{end}", target=1.2),
        Figure(BENCH, f"wall time of the {PAIRS * (turns + end)}-turn run", wall, None, "s"),
        *stall_figures(BENCH, err),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500, help="the long session's last turn")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="measured turns of each session")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    if args.turns <= max(args.rounds, MIN_ROUNDS) + SHORT_START:
        parser.error(f"--turns must exceed --rounds + {SHORT_START} (the long sessions run untimed first)")
    emit(measure(args.quick, args.turns, args.rounds), title="long conversation: CPU per model call, late vs early",
         as_json=args.json)


if __name__ == "__main__":
    main()
