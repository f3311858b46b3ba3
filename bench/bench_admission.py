"""Admission: ``POST /session/:id/prompt`` to its 202 from our daemon, against a bare quart-trio 202 route.

Both servers are subprocesses on loopback (the real daemon, ``python -m
transport``, and ``bench/_bare_server.py``'s ``POST /prompt``); this process
is the client, one keep-alive ``httpx.Client`` per server, timing one request
at a time, ours and the bare one in turn (A B A B …), medians compared.

Only admission is timed: the daemon's scripted model ends each turn at once
(one "ok"), prompts go round-robin to several sessions, and each round ends
with a short untimed pause, so no prompt waits behind a turn; yet the turn a
prompt starts runs on the same event loop while its 202 is being sent. A
third daemon measures admission alone: every prompt queues behind a turn
that never ends, so nothing starts. Two daemons'
worth of figures: with the journal's fsync off (``storage.fsync: never``,
the target, ratio <= 1.2) and as configured by default (fsync before each
202, its cost measured by ``bench_journal.py``), no target.

Cold: a fresh daemon, a fresh session, and its first prompt's 202, each
round a new daemon, interleaved with warm admissions (each warm sample the
median of a burst on the long-lived daemon); target: within 2x of warm.

With a daemon that has ``--report-loop-stalls``, its longest event-loop
step too (target <= 20 ms; the bare server's beside it).

    python bench/bench_admission.py [--rounds 300] [--cold 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BareServer, Daemon, Figure, emit, interleave, median, stall_args, stall_figures  # noqa: E402

BENCH = "admission"
PROMPT = {"prompt": [{"type": "text", "text": "Summarise the last build log and tell me which test failed."}]}
SESSIONS = 8
SETTLE = 0.004  # untimed, after each round: the turn just admitted ends (a scripted "ok" takes about 1 ms)
NO_FSYNC = {"storage": {"fsync": "never"}}


def script_file(turns: int) -> str:
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, prefix="bench-admission-")
    json.dump({"responses": [[{"text": "ok"}]] * turns}, f)
    f.close()
    return f.name


class Ours:
    """A daemon, a keep-alive client, and sessions taking prompts in turn."""

    def __init__(self, script: str, settings: dict | None, *extra: str) -> None:
        self.daemon = Daemon("--model", "scripted", "--script", script, *extra, settings=settings)
        self.client = httpx.Client(base_url=self.daemon.url, headers=self.daemon.headers, timeout=30)
        self.sessions = [self.client.post("/session", json={}).json()["sessionId"] for _ in range(SESSIONS)]
        self.n = 0

    def admit(self) -> float:
        sid = self.sessions[self.n % len(self.sessions)]
        self.n += 1
        start = time.perf_counter()
        r = self.client.post(f"/session/{sid}/prompt", json=PROMPT)
        elapsed = time.perf_counter() - start
        assert r.status_code == 202, r.text
        return elapsed

    def stop(self) -> str:
        self.client.close()
        return self.daemon.stop()


class Queued(Ours):
    """One session whose first turn never ends (its model waits an hour): each admission only queues.

    Admission alone, with no turn starting on the same event loop while the 202 is sent.
    """

    def __init__(self, rounds: int) -> None:
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, prefix="bench-admission-")
        json.dump({"responses": [{"delay": 3600, "steps": [{"text": "late"}]}]}, f)
        f.close()
        self.script = f.name
        self.daemon = Daemon("--model", "scripted", "--script", f.name, "--max-pending-prompts", str(rounds + 200),
                             settings=NO_FSYNC)
        self.client = httpx.Client(base_url=self.daemon.url, headers=self.daemon.headers, timeout=30)
        self.sessions = [self.client.post("/session", json={}).json()["sessionId"]]
        self.n = 0
        self.admit()  # the turn that never ends

    def stop(self) -> str:
        err = super().stop()
        Path(self.script).unlink()
        return err


def cold_admission(script: str, settings: dict | None) -> float:
    """A fresh daemon and session, the 202 of its first prompt (the connection already open)."""
    daemon = Daemon("--model", "scripted", "--script", script, settings=settings)
    try:
        with httpx.Client(base_url=daemon.url, headers=daemon.headers, timeout=30) as client:
            sid = client.post("/session", json={}).json()["sessionId"]
            start = time.perf_counter()
            r = client.post(f"/session/{sid}/prompt", json=PROMPT)
            elapsed = time.perf_counter() - start
            assert r.status_code == 202, r.text
            return elapsed
    finally:
        daemon.stop()


def measure(quick: bool = False, rounds: int | None = None, cold: int | None = None) -> list[Figure]:
    rounds = rounds or (100 if quick else 300)
    cold = cold or 5
    script = script_file(2 * rounds + 40 * cold + 100)
    bare = BareServer("--report-loop-stalls", "20")
    ours = Ours(script, NO_FSYNC, *stall_args())
    fsynced = Ours(script, None)
    queued = Queued(rounds + 40)
    try:
        with httpx.Client(base_url=bare.url, timeout=30) as client:

            def bare_admit() -> float:
                start = time.perf_counter()
                r = client.post("/prompt", json=PROMPT)
                elapsed = time.perf_counter() - start
                assert r.status_code == 202, r.text
                return elapsed

            def settle(run):
                def timed() -> float:
                    elapsed = run()
                    time.sleep(SETTLE)
                    return elapsed
                return timed

            for _ in range(20):  # warm up connections and code paths
                ours.admit(), fsynced.admit(), queued.admit(), bare_admit()
                time.sleep(SETTLE)
            samples = interleave(rounds, {"ours": settle(ours.admit), "bare": bare_admit,
                                          "fsync": settle(fsynced.admit), "queued": queued.admit})

            def warm() -> float:
                return median([settle(ours.admit)() for _ in range(20)])

            cold_samples = interleave(cold, {"cold": lambda: cold_admission(script, NO_FSYNC), "warm": warm})
    finally:
        err = ours.stop()
        fsynced.stop()
        queued.stop()
        bare_err = bare.stop()
        Path(script).unlink()
    ms = {name: median(xs) * 1000 for name, xs in {**samples, **cold_samples}.items()}
    return [
        Figure(BENCH, "POST prompt -> 202 (fsync never)", ms["ours"], ms["bare"], "ms", floor_name="bare 202 route",
               target=1.2),
        Figure(BENCH, "POST prompt -> 202, queued behind a running turn (fsync never)", ms["queued"], ms["bare"],
               "ms", floor_name="bare 202 route", target=1.2),
        Figure(BENCH, "POST prompt -> 202 (default: fsync)", ms["fsync"], ms["bare"], "ms",
               floor_name="bare 202 route"),
        Figure(BENCH, "first prompt of a fresh daemon (cold)", ms["cold"], ms["warm"], "ms",
               floor_name="warm admission", target=2.0),
        *stall_figures(BENCH, err, bare_err, "bare server"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--cold", type=int, default=5, help="fresh daemons for the cold figure")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.rounds, args.cold), title="admission: POST prompt -> 202",
         as_json=args.json)


if __name__ == "__main__":
    main()
