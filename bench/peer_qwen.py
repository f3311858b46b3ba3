"""Trellis beside ``qwen serve`` (qwen-code 0.24.4) on the same fake model, over the same REST/SSE wire.

Both daemons are real processes on loopback, each with its own fake OpenAI
server (so the response order never mixes), driven by this process as the
client. Per round, interleaved (Trellis, qwen, Trellis cold, qwen cold):

- **warm**: on one long-lived session, ``--turns`` canonical guard turns (a todo
  write, then three natural stops: 4 model calls, guard attempts ``[1, 2, 2]``
  read from the SSE frames whose ``_meta.source`` is ``todo_stop_guard``), then
  ``--handoffs`` queued-prompt hand-offs (prompt 1's first model response stalls
  for 0.2 s; prompt 2 is posted once that request has reached the fake; the
  guard must yield to it: 3 model calls, no guard frame);
- **cold**: a fresh daemon (fresh state and ``HOME``), a fresh connection, a
  fresh session and its first canonical turn.

Every scenario is checked on both sides (call count, guard attempts) before
any figure is taken. Figures (ours = Trellis, peer = qwen serve; ratio = ours /
peer): prompt admission (POST -> 202) idle, queued and cold; cold session
create and daemon start; POST -> first model request; POST -> ``turn_complete``;
model-call gap (the fake's end of response k -> arrival of request k+1: what
the daemon spends between model calls); last response -> ``turn_complete``;
the hand-off gap (prompt 1's ``turn_complete`` at the client -> prompt 2's
first model request / first event); daemon CPU per canonical turn and peak RSS,
both over the daemon's whole process tree (qwen serve spawns a ``qwen --acp``
child per workspace): user+system CPU of every live descendant (with what it
reaped), and the sum of their ``VmHWM``. The target from the issue: Trellis's
peak RSS at most 1/8 of qwen serve's. ``GET /health`` is timed beside them: the
round trip of each HTTP stack, the floor under every other latency here.

Two figures say what the canonical turn could be at best. The turn less the
fake model's own time answering its four calls (request arrival -> response
end, as the fake reports them) is what each daemon adds. The harness's floor
under a turn is the cheaper side's ``GET /health`` round trip plus the cheaper
side's time inside the fake: what a daemon that took no time at all would still
show here. Both the turn and that floor are read against the issue's target of
1/30 of qwen serve's turn: when the floor misses it, no daemon can meet it on
this harness.

Reading the figures: CPU comes from ``/proc`` in 10 ms ticks, so a round's
``--turns`` turns give it 1/turns of a tick's resolution. qwen serve on loopback
wants no token (it is trusted by default); Trellis always checks its bearer
token, and fsyncs the prompt to its journal before the 202 (``storage.fsync:
always``). A cold qwen ``POST /session`` includes spawning its ``qwen --acp``
child. Every turn uses fresh tool-call ids: qwen 0.24.4 refuses a tool call
whose provider id it has already handled in the session ("Duplicate provider
tool call id ... ignored"), so a reused id would leave its guard unarmed.

The fake model runs in a subprocess (``bench/_timed_fake.py``) that
prints, on stdout, when each chat request arrives and when its response
ended (``CLOCK_MONOTONIC``, comparable with this process's ``time.monotonic``),
and takes each scenario's responses on stdin, so an unexpected extra request
(a title, a memory subagent) is caught as a count mismatch instead of shifting
every later response.

qwen-code is not a dependency of the project: ``--install`` installs it with npm
into ``--qwen-dir`` (default ``$TMPDIR/trellis-peer-qwen-0.24.4``, about 144 MB;
reused by later runs, so only the first pays). Without node, or without an
install and no ``--install``, the benchmark prints one ``skipped:`` line and
exits 0 (``measure`` returns no figures), so ``run_all`` can include it.

    python bench/peer_qwen.py [--install] [--qwen-dir DIR] [--rounds 5] [--turns 10] [--handoffs 2]
                              [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (CANONICAL_TODOS, GUARD_SETTINGS, Daemon, Figure, ainterleave,  # noqa: E402
                     canonical_turn, emit, median)
from _qwen_serve import (DEFAULT_QWEN_DIR, PEER, QWEN_PACKAGE, QWEN_VERSION, QwenSide, find_qwen,  # noqa: E402
                         tree_cpu_seconds, tree_peak_rss_kib, tree_pids, tree_rss_kib)
from _timed_fake import TIMEOUT, TimedFake  # noqa: E402

BENCH = "peer_qwen"
PROMPT = {"prompt": [{"type": "text", "text": "do the migration"}]}
NEXT_PROMPT = {"prompt": [{"type": "text", "text": "and then the keys"}]}
STALL = 0.2  # prompt 1's first response of a hand-off stalls this long, so prompt 2 queues behind it


def _now() -> float:
    return time.monotonic()


# ----------------------------------------------------------------- the two daemons


class TrellisSide:
    """``python -m transport --model openai`` on the fake (the Daemon of bench/_common.py)."""

    name = "Trellis"

    def __init__(self, fake: TimedFake) -> None:
        self.fake = fake
        self._workspace = tempfile.TemporaryDirectory(prefix="trellis-peer-ws-")
        self.workspace = self._workspace.name
        self.daemon: Daemon | None = None

    def start(self) -> float:
        """Start it; the seconds from spawn to its ``listening on`` line."""
        start = _now()
        self.daemon = Daemon("--model", "openai", "--openai-base-url", self.fake.url, "--openai-model", "fake",
                             settings=GUARD_SETTINGS, env={"OPENAI_API_KEY": "bench"})
        return _now() - start

    @property
    def url(self) -> str:
        assert self.daemon is not None
        return self.daemon.url

    @property
    def pid(self) -> int:
        assert self.daemon is not None
        return self.daemon.pid

    @property
    def headers(self) -> dict[str, str]:
        assert self.daemon is not None
        return self.daemon.headers

    def stop(self) -> None:
        if self.daemon is not None:
            state = Path(self.daemon.state_dir)
            self.daemon.stop()
            self.daemon = None
            # Daemon(settings=...) writes <state-dir>.settings.json beside the state directory and leaves it.
            (state.parent / f"{state.name}.settings.json").unlink(missing_ok=True)
        self._workspace.cleanup()


# ----------------------------------------------------------------- a session over the wire


class Session:
    """One session and its event stream, read by a background task that timestamps every frame."""

    def __init__(self, side: Any, client: httpx.AsyncClient) -> None:
        self.side = side
        self.client = client
        self.sid = ""
        self.headers: dict[str, str] = {}
        self.create_seconds = 0.0
        self.send, self.frames = trio.open_memory_channel[tuple[float, dict[str, Any]]](math.inf)

    async def open(self, nursery: trio.Nursery) -> None:
        start = _now()
        r = await self.client.post("/session", json={"cwd": self.side.workspace})
        self.create_seconds = _now() - start
        if r.status_code != 200:
            raise SystemExit(f"{self.side.name}: POST /session answered {r.status_code}: {r.text[:500]}")
        info = r.json()
        self.sid = info["sessionId"]
        if info.get("clientId"):
            self.headers = {"X-Qwen-Client-Id": info["clientId"]}
        await nursery.start(self._read)

    async def _read(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with self.client.stream("GET", f"/session/{self.sid}/events", headers=self.headers,
                                      timeout=httpx.Timeout(TIMEOUT, read=None)) as response:
            if response.status_code != 200:
                raise SystemExit(f"{self.side.name}: GET events answered {response.status_code}")
            task_status.started()
            data: list[str] = []
            async for line in response.aiter_lines():
                if line == "":
                    if data:
                        self.send.send_nowait((_now(), json.loads("\n".join(data))))
                    data = []
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())

    async def prompt(self, body: dict[str, Any]) -> tuple[float, float, str]:
        """POST a prompt: when it was sent, the seconds to its 202, and its promptId."""
        start = _now()
        r = await self.client.post(f"/session/{self.sid}/prompt", json=body, headers=self.headers)
        took = _now() - start
        if r.status_code != 202:
            raise SystemExit(f"{self.side.name}: prompt answered {r.status_code}: {r.text[:500]}")
        return start, took, r.json()["promptId"]

    async def until_complete(self, prompt_id: str, seen: list[tuple[float, dict[str, Any]]]) -> float:
        """Read frames (into ``seen``) until ``prompt_id``'s turn ends; when its ``turn_complete`` arrived."""
        with trio.fail_after(TIMEOUT):
            async for at, frame in self.frames:
                seen.append((at, frame))
                kind = frame.get("type")
                if kind in ("turn_complete", "turn_error") and _prompt_of(frame) == prompt_id:
                    if kind != "turn_complete":
                        raise SystemExit(f"{self.side.name}: the turn failed: {json.dumps(frame)[:800]}")
                    return at
        raise SystemExit(f"{self.side.name}: the event stream ended")


def _prompt_of(frame: dict[str, Any]) -> str | None:
    return frame.get("promptId") or (frame.get("data") or {}).get("promptId")


def _guard_attempts(frames: list[tuple[float, dict[str, Any]]], prompt_id: str | None = None) -> list[int]:
    attempts = []
    for _, frame in frames:
        if frame.get("type") != "session_update" or (prompt_id and _prompt_of(frame) != prompt_id):
            continue
        meta = ((frame.get("data") or {}).get("update") or {}).get("_meta") or {}
        if meta.get("source") == "todo_stop_guard":
            attempts.append(meta.get("attempt"))
    return attempts


# ----------------------------------------------------------------- the scenarios


async def canonical(session: Session, fake: TimedFake, n: int) -> dict[str, Any]:
    """One canonical guard turn, checked: 4 model calls, guard attempts [1, 2, 2]."""
    base = await fake.script(canonical_turn(n))
    seen: list[tuple[float, dict[str, Any]]] = []
    sent, admit, prompt_id = await session.prompt(PROMPT)
    done = await session.until_complete(prompt_id, seen)
    calls = len(fake.requests) - base
    attempts = _guard_attempts(seen, prompt_id)
    if calls != 4 or attempts != [1, 2, 2]:
        raise SystemExit(f"{session.side.name}: not the canonical turn: {calls} model calls, guard attempts "
                         f"{attempts} (want 4 and [1, 2, 2])")
    requests = [await fake.wait_end(base + k) for k in range(4)]
    fake.expected = base + 4
    return {"admit": admit, "first_request": requests[0]["t"] - sent, "complete": done - sent,
            "gaps": [requests[k + 1]["t"] - requests[k]["end"] for k in range(3)],
            "tail": done - requests[3]["end"], "in_model": sum(r["end"] - r["t"] for r in requests)}


def handoff_responses(n: int) -> list[Any]:
    """Prompt 1: a todo write (after a stall) and a natural stop the guard yields at; prompt 2: one stop."""
    return [
        [{"stall": STALL}, {"text": "Planning. "},
         {"tool_call": {"id": f"call_h{n}", "name": "todo_write", "arguments": CANONICAL_TODOS}},
         {"usage": {"prompt_tokens": 120, "completion_tokens": 30}}],
        [{"text": "I will stop here."}, {"usage": {"prompt_tokens": 160, "completion_tokens": 6}}],
        [{"text": "Keys rotated."}, {"usage": {"prompt_tokens": 180, "completion_tokens": 4}}],
    ]


async def handoff(session: Session, fake: TimedFake, n: int) -> dict[str, Any]:
    """Prompt 2 queued behind prompt 1, checked: the guard yields (3 model calls, no guard frame)."""
    base = await fake.script(handoff_responses(n))
    seen: list[tuple[float, dict[str, Any]]] = []
    _, _, first = await session.prompt(PROMPT)
    await fake.wait_request(base)  # prompt 1 is running (its first response stalls)
    _, queued, second = await session.prompt(NEXT_PROMPT)
    first_done = await session.until_complete(first, seen)
    mark = len(seen)
    second_done = await session.until_complete(second, seen)
    calls = len(fake.requests) - base
    attempts = _guard_attempts(seen)
    if calls != 3 or attempts:
        raise SystemExit(f"{session.side.name}: the guard did not yield to the queued prompt: {calls} model calls "
                         f"(want 3), guard attempts {attempts} (want none)")
    if fake.requests[base + 2]["t"] < fake.requests[base + 1]["end"]:
        raise SystemExit(f"{session.side.name}: prompt 2's model call started before prompt 1's last one ended")
    next_event, next_frame = next((at, frame) for at, frame in seen[mark:] if _prompt_of(frame) == second)
    await fake.wait_end(base + 2)
    fake.expected = base + 3
    return {"queued_admit": queued, "handoff_request": fake.requests[base + 2]["t"] - first_done,
            "handoff_event": next_event - first_done, "handoff_event_type": next_frame.get("type"),
            "second_complete": second_done - first_done}


# ----------------------------------------------------------------- the run


async def _run(cli: Path, rounds: int, turns: int, handoffs: int) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        fakes = {"trellis": TimedFake("Trellis"), "qwen": TimedFake("qwen")}
        for fake in fakes.values():
            await fake.start(nursery)
        sides: dict[str, Any] = {"trellis": TrellisSide(fakes["trellis"]), "qwen": QwenSide(fakes["qwen"], cli)}
        clients: dict[str, httpx.AsyncClient] = {}
        sessions: dict[str, Session] = {}
        out: dict[str, Any] = {"trellis": {}, "qwen": {}}
        counter = {"n": 0}

        def next_n() -> int:
            counter["n"] += 1
            return counter["n"]

        try:
            async with trio.open_nursery() as readers:  # the sessions' event streams
                for key, side in sides.items():
                    side.start()  # main thread: PR_SET_PDEATHSIG follows the forking thread
                    clients[key] = httpx.AsyncClient(base_url=side.url, headers=side.headers, timeout=TIMEOUT)
                    sessions[key] = Session(side, clients[key])
                    await sessions[key].open(readers)
                    await canonical(sessions[key], fakes[key], next_n())  # warm-up: the session's first turns
                    await handoff(sessions[key], fakes[key], next_n())

                def warm(key: str) -> Any:
                    async def run() -> dict[str, Any]:
                        side, session, fake = sides[key], sessions[key], fakes[key]
                        cpu = tree_cpu_seconds(side.pid)
                        turns_done = [await canonical(session, fake, next_n()) for _ in range(turns)]
                        cpu = tree_cpu_seconds(side.pid) - cpu
                        handed = [await handoff(session, fake, next_n()) for _ in range(handoffs)]
                        health = []
                        for _ in range(3):
                            start = _now()
                            r = await session.client.get("/health")
                            health.append(_now() - start)
                            r.raise_for_status()
                        return {"cpu": cpu / turns, "turns": turns_done, "handoffs": handed, "health": health}
                    return run

                def cold(key: str) -> Any:
                    async def run() -> dict[str, Any]:
                        fake = fakes[key]
                        side = TrellisSide(fake) if key == "trellis" else QwenSide(fake, cli)
                        try:
                            started = side.start()  # main thread (see _die_with_parent)
                            async with httpx.AsyncClient(base_url=side.url, headers=side.headers,
                                                         timeout=TIMEOUT) as client, trio.open_nursery() as inner:
                                session = Session(side, client)
                                await session.open(inner)
                                turn = await canonical(session, fake, next_n())
                                inner.cancel_scope.cancel()
                            return {"start": started, "create": session.create_seconds, **turn}
                        finally:
                            with trio.CancelScope(shield=True):
                                await trio.to_thread.run_sync(side.stop)
                    return run

                samples = await ainterleave(rounds, {"trellis": warm("trellis"), "qwen": warm("qwen"),
                                                     "trellis cold": cold("trellis"), "qwen cold": cold("qwen")})
                for key, side in sides.items():
                    out[key] = {"warm": samples[key], "cold": samples[f"{key} cold"],
                                "peak_rss": tree_peak_rss_kib(side.pid), "rss": tree_rss_kib(side.pid),
                                "pids": tree_pids(side.pid), "other_requests": list(fakes[key].other),
                                "request_bytes": median([r["bytes"] for r in fakes[key].requests])}
                readers.cancel_scope.cancel()  # before the clients close under them
        finally:
            with trio.CancelScope(shield=True):  # each step whatever the others did: no daemon is left behind
                for step in [*(c.aclose for c in clients.values()),
                             *(lambda side=side: trio.to_thread.run_sync(side.stop) for side in sides.values()),
                             *(f.stop for f in fakes.values())]:
                    try:
                        await step()
                    except Exception as exc:  # noqa: BLE001
                        print(f"{BENCH}: cleaning up: {exc!r}", file=sys.stderr)
            nursery.cancel_scope.cancel()
    return out


def _pool(runs: list[dict[str, Any]], *path: str) -> list[float]:
    values: list[float] = []
    for run in runs:
        node: Any = run
        for step in path[:-1]:
            node = node[step]
        items = node if isinstance(node, list) else [node]
        for item in items:
            value = item[path[-1]]
            values.extend(value if isinstance(value, list) else [value])
    return values


def _pool_items(runs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [item for run in runs for item in run[key]]


def figures_of(result: dict[str, Any], turns: int) -> list[Figure]:
    ours, peer = result["trellis"], result["qwen"]

    def ms(where: str, *path: str) -> tuple[float, float]:
        return (median(_pool(ours[where], *path)) * 1000, median(_pool(peer[where], *path)) * 1000)

    def fig(name: str, values: tuple[float, float], unit: str = "ms", target: float | None = None) -> Figure:
        return Figure(BENCH, name, values[0], values[1], unit, floor_name=PEER, target=target)

    # The least any daemon can take for a canonical turn on this harness: the client's request round trip
    # (the cheaper of the two HTTP stacks) plus the fake model's own time answering the turn's four calls (the
    # cheaper side's: qwen serve's requests are larger). The 30x is a budget of qwen serve's turn / 30.
    in_model = ms("warm", "turns", "in_model")
    floor = min(ms("warm", "health")) + min(in_model)
    turn = ms("warm", "turns", "complete")
    kinds = sorted({h["handoff_event_type"] for h in _pool_items(ours["warm"] + peer["warm"], "handoffs")})
    return [
        fig("GET /health round trip (the client's floor)", ms("warm", "health")),
        fig("prompt admission, idle session (POST -> 202)", ms("warm", "turns", "admit")),
        fig("prompt admission, queued behind a running turn", ms("warm", "handoffs", "queued_admit")),
        fig("cold first-prompt admission (fresh daemon + session)", ms("cold", "admit")),
        fig("cold session create (POST /session)", ms("cold", "create")),
        fig("cold daemon start (spawn -> listening)", ms("cold", "start")),
        fig("cold first prompt -> first model request", ms("cold", "first_request")),
        fig("cold first prompt -> turn_complete", ms("cold", "complete")),
        fig("POST prompt -> first model request", ms("warm", "turns", "first_request")),
        fig("POST prompt -> turn_complete (canonical turn)", turn, target=1 / 30),
        fig("the canonical turn less the fake model's time answering its 4 calls", (turn[0] - in_model[0],
                                                                                     turn[1] - in_model[1])),
        fig("the harness's floor under a canonical turn (client round trip + the fake's time) beside qwen serve's "
            "turn", (floor, turn[1]), target=1 / 30),
        fig("model-call gap (response k end -> request k+1)", ms("warm", "turns", "gaps")),
        fig("last model response -> turn_complete", ms("warm", "turns", "tail")),
        fig("hand-off: turn_complete -> queued prompt's model request", ms("warm", "handoffs", "handoff_request")),
        fig(f"hand-off: turn_complete -> queued prompt's first event ({'/'.join(kinds)})",
            ms("warm", "handoffs", "handoff_event")),
        fig(f"daemon CPU per canonical turn (process tree, {turns} a round)",
            (median(_pool(ours["warm"], "cpu")) * 1000, median(_pool(peer["warm"], "cpu")) * 1000)),
        fig("peak RSS (process tree, sum of VmHWM)", (ours["peak_rss"] / 1024, peer["peak_rss"] / 1024), "MiB",
            target=1 / 8),
        fig("RSS after the run (process tree)", (ours["rss"] / 1024, peer["rss"] / 1024), "MiB"),
    ]


def measure(quick: bool = False, *, install: bool = False, qwen_dir: Path | None = None, rounds: int | None = None,
            turns: int | None = None, handoffs: int | None = None, verbose: bool = False) -> list[Figure]:
    """The figures, or [] (after one ``skipped:`` line on stderr) without node or an installed qwen-code."""
    cli, reason = find_qwen(install, qwen_dir)
    if cli is None:
        print(f"skipped: {BENCH}: {reason}", file=sys.stderr)
        return []
    rounds = rounds or 5
    turns = turns or (4 if quick else 10)
    handoffs = handoffs or (1 if quick else 2)
    started = _now()
    result = trio.run(_run, cli, rounds, turns, handoffs)
    if verbose:
        took = _now() - started
        for key, name in (("trellis", "Trellis"), ("qwen", PEER)):
            r = result[key]
            print(f"{name}: {len(r['pids'])} process(es) in the tree at the end; median chat request "
                  f"{r['request_bytes'] / 1024:.1f} KiB; other requests to the fake: "
                  f"{sorted({(o['method'], o['path']) for o in r['other_requests']}) or 'none'}", file=sys.stderr)
        print(f"checked on both sides: {max(rounds, 5) * turns + max(rounds, 5) + 1} canonical turns (4 model "
              f"calls, guard attempts [1, 2, 2]) and {max(rounds, 5) * handoffs + 1} hand-offs (3 model calls, "
              f"no guard frame); {took:.0f} s", file=sys.stderr)
    return figures_of(result, turns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true",
                        help=f"npm install {QWEN_PACKAGE}@{QWEN_VERSION} into --qwen-dir if it is not there")
    parser.add_argument("--qwen-dir", type=Path, default=None,
                        help=f"where qwen-code is (or goes) installed (default: {DEFAULT_QWEN_DIR})")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (at least 5)")
    parser.add_argument("--turns", type=int, default=10, help="canonical turns per warm round")
    parser.add_argument("--handoffs", type=int, default=2, help="queued-prompt hand-offs per warm round")
    parser.add_argument("--quick", action="store_true", help="fewer turns a round")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    figures = measure(args.quick, install=args.install, qwen_dir=args.qwen_dir, rounds=args.rounds,
                      turns=None if args.quick else args.turns, handoffs=None if args.quick else args.handoffs,
                      verbose=not args.json)
    if figures:
        emit(figures, title=f"Trellis beside {PEER} (same fake model, same wire)", as_json=args.json)


if __name__ == "__main__":
    main()
