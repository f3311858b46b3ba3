"""Performance at scale (issue 46): many sessions, many subscribers, long streams, a compressed day, the cluster.

Each figure is ours beside a floor or peer measured in the same run,
interleaved where there are two variants to time (``bench/_common.py``).
Sections (``--only idle,stream,fanout,soak,cluster``):

- **idle**: a daemon (scripted model) given ``N`` idle sessions (10,000;
  ``--quick`` 2,000) in five batches. Resident memory per session: the
  daemon's ``VmRSS`` growth over all ``N`` after a warm-up session, beside a
  bare Trio task with a memory channel (``bench_idle_sessions.py``'s floor),
  one bare process per batch, interleaved with the batches; target 32 KiB.
  Admission p50/p99 of ``POST /session/:id/prompt`` to a random one of the
  ``N``, and ``GET /session`` (every session listed), against a second daemon
  holding 10 sessions, one request each in turn.
- **stream**: ``S`` sessions (1,000; ``--quick`` 200) of a daemon on the
  ``openai`` provider, pointed at ``bench/_rate_fake.py``: a real
  OpenAI-compatible server in its own process that streams :data:`TOKENS`
  tokens a response at :data:`RATE` a second, each stamped with the wall
  clock it was written at. One subscriber per session, all held by one
  client process (``bench/_scale_client.py``: raw sockets, one Trio task a
  stream); then one prompt per session, posted one after another, and every
  subscriber read to its ``turn_complete``. Tokens per second the subscribers
  read (stamps counted, first to last read) against the fake's own output in
  the same round (tokens written, first to last write): target 0.9. The p99
  delay from a chunk's stamp to the read of the SSE frame it became: target
  50 ms absolute, beside the same client reading the fake's streams directly
  (no daemon; rounds alternate). The daemon's longest event-loop step over the
  whole section (``--report-loop-stalls``): target 50 ms.
- **fanout**: one session whose scripted model streams :data:`FANOUT_CHUNKS`
  chunks, read by 100 subscribers or by 1 (alternating rounds, the same
  frames): the daemon's CPU (``cpu_ns``) per frame delivered, with 100
  subscribers against with 1; target 1.5: each of a hundred watchers may cost
  at most half as much again as a lone one (a frame written to 100 sockets is
  100 sends, so the total can only grow with them; it is printed beside, with
  no target). The daemon refuses a session's subscribers past
  ``limits.maxSubscribers`` (128); the figure names how many it accepted.
- **soak**: a compressed day. One compressed hour is :data:`SOAK_PER_HOUR`
  session lifetimes (quick: fewer) run side by side: create a session, two
  subscribers, a prompt, both subscribers dropped mid-stream and reconnected
  with ``Last-Event-ID``, the turn read to its end, a second prompt, the
  subscribers closed, the session deleted. That is a busy shared daemon's
  hour (people opening a conversation, asking twice, a browser tab
  reconnecting, closing it): its memory, descriptors and connections are
  what a day of traffic can leak, and the day's time itself adds nothing
  the traffic does not (timers that run in real time, such as the SSE
  keep-alive, do not age in it). Twenty-four hours, the first four the
  warm-up; sampled after the warm-up and at the end, both times with every
  client disconnected: the daemon's RSS (end over warm-up, target 1.10), its
  open descriptors (``/proc/PID/fd``; growth, target 0) and its server-side
  TCP connections still open (``/proc/PID/net/tcp`` for its sockets on its
  port; target 0).
- **cluster**: ``bench_cluster.py``'s parts, reused. SSE frames per second a
  subscriber reads from Redis on the owner and on a non-owner, against a
  single daemon's in-process ring (target 0.8 on the owner). Takeover at
  ``T`` sessions (1,000; quick 200): a node owning ``T`` sessions is
  SIGKILLed; the time until the survivor owns all ``T`` leases in PostgreSQL,
  and until it has answered ``GET /session/:id/status`` for each (walked in
  order), beside the lease time.

A missed target prints ``NO`` and does not fail the run; the last line is
``scale: N of M targets met``.

    python bench/bench_scale.py [--quick] [--only idle,stream,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (ROOT, CommandChild, Daemon, Figure, cpu_ns, emit, interleave, longest_step_ms,  # noqa: E402
                     median, rss_kib, stall_args)
from _rate_fake import RateFakeProcess  # noqa: E402

BENCH = "scale"
SECTIONS = ("idle", "stream", "fanout", "soak", "cluster")
PROMPT = {"prompt": [{"type": "text", "text": "stream"}]}
STALL_MS = 50.0  # issue 46: no loop step over 50 ms with 1,000 sessions streaming
TOKENS = 40  # tokens a streamed response
RATE = 10.0  # tokens a second, each stream
FANOUT = 100
FANOUT_CHUNKS = 500
SOAK_PER_HOUR = 40  # session lifetimes in a compressed hour (quick: 10)
SOAK_HOURS, SOAK_WARM = 24, 4
LATE = 15.0  # seconds past a stream's end its turn_complete may take before the round goes on without it
SETTLE = 0.01  # untimed, after each admission: its turn (scripted "ok") ends before the next
NOTES: list[str] = []


def note(text: str) -> None:
    """A line printed under the table (and on stderr as it happens)."""
    NOTES.append(text)
    print(f"{BENCH}: {text}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def raise_fd_limit() -> None:
    """Soft limit of open files up to the hard one, inherited by every process started after (1,000+ sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def script_file(stack: ExitStack, responses: list[Any]) -> str:
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # noqa: SIM115 - removed with the stack
    json.dump({"responses": responses}, f)
    f.close()
    stack.callback(Path(f.name).unlink)
    return f.name


class ScaleClient(CommandChild):
    """``bench/_scale_client.py`` in a subprocess on the load CPUs, driven over its stdin."""

    def __init__(self) -> None:
        super().__init__([sys.executable, str(ROOT / "bench" / "_scale_client.py")], "the scale client")

    def open(self, daemon: Any, paths: list[str]) -> dict[str, Any]:
        parts = urlsplit(daemon.url)
        return self.command("open", host=parts.hostname, port=parts.port, paths=paths, headers=daemon.headers)



def create_sessions(client: httpx.Client, n: int) -> list[str]:
    out = []
    for _ in range(n):
        r = client.post("/session", json={})
        assert r.status_code == 200, r.text
        out.append(r.json()["sessionId"])
    return out


def stall_figure(name: str, stderr: str, target: float | None = STALL_MS) -> list[Figure]:
    ours = longest_step_ms(stderr)
    if ours is None:
        note(f"{name}: no 'longest step' line from the daemon")
        return []
    lines = [line for line in stderr.splitlines() if "longest step" in line]
    if lines:
        note(f"{name}: daemon said: {lines[-1].strip()[:300]}")
    return [Figure(BENCH, name, ours, None, "ms", target=target, target_is_absolute=True)]


# ----------------------------------------------------------------- idle


def idle(quick: bool) -> list[Figure]:
    from bench_idle_sessions import bare

    n = 2000 if quick else 10_000
    batch = n // 5
    admissions = 200 if quick else 500
    with ExitStack() as stack:
        script = script_file(stack, [[{"text": "ok"}]] * (admissions + 50))
        flags = ("--model", "scripted", "--script", script, "--max-pending-prompts", "64")
        big = Daemon(*flags, "--max-sessions", str(n + 20), *stall_args(STALL_MS))
        stack.callback(big.stop)
        small = Daemon(*flags, "--max-sessions", "50")
        stack.callback(small.stop)
        cb = stack.enter_context(httpx.Client(base_url=big.url, headers=big.headers, timeout=120))
        cs = stack.enter_context(httpx.Client(base_url=small.url, headers=small.headers, timeout=120))
        create_sessions(cb, 1)  # warm-up: every code path's modules and caches
        time.sleep(0.2)
        before = rss_kib(big.pid)
        sessions: list[str] = []
        created: list[float] = []

        def grow() -> float:
            start = time.perf_counter()
            sessions.extend(create_sessions(cb, batch))
            created.append((time.perf_counter() - start) / batch)
            time.sleep(0.2)  # the new sessions' tasks reach their first wait
            return float(rss_kib(big.pid))

        rss = interleave(5, {"ours": grow, "bare": lambda: bare(batch)})
        per_session = (rss["ours"][-1] - before) / len(sessions)
        slopes = [(b - a) / batch for a, b in zip([before, *rss["ours"]], rss["ours"])]
        note(f"idle: RSS per session by batch of {batch}: " + ", ".join(f"{s:.1f}" for s in slopes)
             + f" KiB; POST /session {median(created) * 1000:.2f} ms each (median of batches)")
        small_sessions = create_sessions(cs, 10)

        def admit(client: httpx.Client, ids: list[str]) -> Callable[[], float]:
            def run() -> float:
                sid = random.choice(ids)
                start = time.perf_counter()
                r = client.post(f"/session/{sid}/prompt", json=PROMPT)
                elapsed = time.perf_counter() - start
                assert r.status_code == 202, r.text
                time.sleep(SETTLE)
                return elapsed * 1000
            return run

        for _ in range(10):
            admit(cb, sessions)(), admit(cs, small_sessions)()
        adm = interleave(admissions, {"ours": admit(cb, sessions), "small": admit(cs, small_sessions)})

        def listing(client: httpx.Client) -> Callable[[], float]:
            def run() -> float:
                start = time.perf_counter()
                r = client.get("/session")
                elapsed = time.perf_counter() - start
                assert r.status_code == 200
                return elapsed * 1000
            return run

        size = len(cb.get("/session").content)
        lists = interleave(7, {"ours": listing(cb), "small": listing(cs)})
        stack.pop_all().close()
        err = big.stop()
    note(f"idle: GET /session at {n:,} sessions answers {size / 1024:.0f} KiB")
    return [
        Figure(BENCH, f"idle: resident memory per idle session ({n:,} sessions)", per_session,
               median(rss["bare"]), "KiB", floor_name="bare task + memory channel",
               target=32.0, target_is_absolute=True),
        Figure(BENCH, f"idle: POST prompt -> 202 to a random one of {n:,}, p50", percentile(adm["ours"], 0.5),
               percentile(adm["small"], 0.5), "ms", floor_name="daemon with 10 sessions"),
        Figure(BENCH, f"idle: POST prompt -> 202 to a random one of {n:,}, p99", percentile(adm["ours"], 0.99),
               percentile(adm["small"], 0.99), "ms", floor_name="daemon with 10 sessions"),
        Figure(BENCH, f"idle: GET /session listing {n:,} sessions", median(lists["ours"]), median(lists["small"]),
               "ms", floor_name="daemon with 10 sessions"),
        *stall_figure(f"idle: longest event-loop step ({n:,} sessions)", err, None),
    ]


# ----------------------------------------------------------------- stream


def stream(quick: bool) -> list[Figure]:
    n = 200 if quick else 1000
    rounds = 5
    with ExitStack() as stack:
        fake = RateFakeProcess(TOKENS, RATE)
        stack.callback(fake.stop)
        daemon = Daemon("--model", "openai", "--openai-base-url", fake.url, "--openai-model", "fake",
                        "--max-sessions", str(n + 20), "--max-connections", str(2 * n + 100),
                        *stall_args(STALL_MS))
        stack.callback(daemon.stop)
        client = ScaleClient()
        stack.callback(client.stop)
        control = stack.enter_context(httpx.Client(base_url=daemon.url, headers=daemon.headers, timeout=120))
        ids = create_sessions(control, n)
        opened = client.open(daemon, [f"/session/{sid}/events?maxQueued=256" for sid in ids])
        if opened["accepted"] != n:
            raise SystemExit(f"stream: {n} subscribers asked, {opened}")
        fake_url = urlsplit(fake.url)
        body = json.dumps({"model": "fake", "stream": True, "messages": [{"role": "user", "content": "stream"}]})
        timeout = TOKENS / RATE + LATE

        def through_daemon() -> dict[str, Any]:
            fake.command("reset")
            client.command("mark")
            cpu = (cpu_ns(daemon.pid), fake.command("stats")["cpu"])
            start = time.perf_counter()
            for sid in ids:
                r = control.post(f"/session/{sid}/prompt", json=PROMPT)
                assert r.status_code == 202, r.text
            posted = time.perf_counter() - start
            got = client.command("collect", turns=1, timeout=timeout, split_ns=time.time_ns())
            if got["late"]:
                got["short"] = client.command("turns")["short"]
            wrote = fake.command("stats")
            wall = time.perf_counter() - start
            got.update(posted=posted, wall=wall, daemon_cpu=(cpu_ns(daemon.pid) - cpu[0]) / 1e9 / wall,
                       fake_cpu=(wrote["cpu"] - cpu[1]) / wall, client_cpu=got["cpu"] / got["wall"], wrote=wrote)
            return got

        def direct() -> dict[str, Any]:
            fake.command("reset")
            client.command("mark")
            client.command("direct", host=fake_url.hostname, port=fake_url.port, path=fake_url.path
                           + "/chat/completions", n=n, body=body)
            got = client.command("collect", turns=0, timeout=1)
            got["wrote"] = fake.command("stats")
            return got

        def rate(tokens: int, first: int, last: int) -> float:
            return tokens / max((last - first) / 1e9, 1e-9)

        samples = interleave(rounds, {"ours": through_daemon, "direct": direct})
        stack.pop_all().close()
        err = daemon.stop()
    ours = samples["ours"]
    delivered = [rate(g["tokens"], g["first_ns"], g["last_ns"]) for g in ours]
    written = [rate(g["wrote"]["tokens"], g["wrote"]["first_ns"], g["wrote"]["last_ns"]) for g in ours]
    lost = [g["wrote"]["tokens"] - g["tokens"] for g in ours]
    if any(lost) or any(g["late"] or g["errors"] for g in ours):
        note(f"stream: tokens written but not read, by round: {lost}; subscribers without their turn_complete "
             f"{LATE:g} s after the stream's end, by round: {[g['late'] for g in ours]} (e.g. "
             f"{next((g['short'][0] for g in ours if g.get('short')), '-')}); turn_error/client_evicted frames "
             f"{[g['errors'] for g in ours]}")
    note(f"stream: p99 delay of the tokens written once every prompt was posted: "
         f"{median([g['after_ms']['p99'] or 0 for g in ours]):.1f} ms (all tokens: "
         f"{median([g['delay_ms']['p99'] for g in ours]):.1f} ms); a stream's last token -> its turn_complete, "
         f"max {max(g['tail_ms']['max'] or 0 for g in ours):.0f} ms")
    note(f"stream: the fake wrote {median(written):,.0f} tokens/s ({n * RATE:,.0f} while all {n} streams overlap; the "
         f"prompts' posting ramps it up and down); posting {n} prompts "
         f"took {median([g['posted'] for g in ours]):.2f} s; CPU busy (share of one core, medians): daemon "
         f"{median([g['daemon_cpu'] for g in ours]):.0%}, fake {median([g['fake_cpu'] for g in ours]):.0%}, client "
         f"{median([g['client_cpu'] for g in ours]):.0%}"
         + (" (fake and client share one core and used over 90% of it: the load, not the daemon, is the bottleneck)"
            if median([g['fake_cpu'] + g['client_cpu'] for g in ours]) > 0.9 else "; the load had CPU to spare"))
    note(f"stream: delay p50 through the daemon {median([g['delay_ms']['p50'] for g in ours]):.1f} ms, max "
         f"{max(g['delay_ms']['max'] for g in ours):.0f} ms")
    what = f"{n:,} sessions streaming {TOKENS} tokens at {RATE:g}/s"
    return [
        Figure(BENCH, f"stream: tokens/s read by SSE subscribers ({what})", median(delivered), median(written),
               "tokens/s", floor_name="the fake's own output", target=0.9, lower_is_better=False),
        Figure(BENCH, f"stream: p99 delay, fake's chunk -> subscriber's frame ({what})",
               median([g["delay_ms"]["p99"] for g in ours]),
               median([g["delay_ms"]["p99"] for g in samples["direct"]]), "ms",
               floor_name="read from the fake directly", target=50.0, target_is_absolute=True),
        *stall_figure(f"stream: longest event-loop step ({what})", err),
    ]


# ----------------------------------------------------------------- fanout


def fanout(quick: bool) -> list[Figure]:
    chunks = 300 if quick else FANOUT_CHUNKS
    rounds = 5 if quick else 7
    turn = [{"text": f"token {i:05d} of a long streamed answer "} for i in range(chunks)]
    accepted: dict[int, int] = {}
    with ExitStack() as stack:
        script = script_file(stack, [turn] * (2 * rounds + 4))
        daemon = Daemon("--model", "scripted", "--script", script, "--max-connections", str(FANOUT + 50))
        stack.callback(daemon.stop)
        client = ScaleClient()
        stack.callback(client.stop)
        control = stack.enter_context(httpx.Client(base_url=daemon.url, headers=daemon.headers, timeout=120))
        sid = create_sessions(control, 1)[0]

        def cpu_per_chunk(k: int) -> Callable[[], float]:
            def run() -> float:
                opened = client.open(daemon, [f"/session/{sid}/events?maxQueued=2048"] * k)
                accepted[k] = opened["accepted"]
                time.sleep(0.05)  # the subscriptions' first waits
                before = cpu_ns(daemon.pid)
                r = control.post(f"/session/{sid}/prompt", json=PROMPT)
                assert r.status_code == 202, r.text
                got = client.command("collect", turns=1, timeout=120)
                time.sleep(0.02)  # whatever the daemon does after the last frame
                spent = cpu_ns(daemon.pid) - before
                assert not got["late"] and not got["errors"], got
                client.command("close")
                time.sleep(0.05)
                return spent / chunks / 1000
            return run

        cpu_per_chunk(FANOUT)(), cpu_per_chunk(1)()  # warm up
        samples = interleave(rounds, {"many": cpu_per_chunk(FANOUT), "one": cpu_per_chunk(1)})
    k = accepted[FANOUT]
    if k < FANOUT:
        note(f"fanout: the daemon accepted {k} of {FANOUT} subscribers to one session (the rest: 503 "
             "too_many_subscribers, limits.maxSubscribers)")
    many, one = median(samples["many"]), median(samples["one"])
    asked = f" ({FANOUT} asked)" if k < FANOUT else ""
    return [Figure(BENCH, f"fanout: daemon CPU per frame delivered, {k} subscribers{asked} ({chunks} chunks)",
                   many / k, one, "us", floor_name="1 subscriber", target=1.5),
            Figure(BENCH, f"fanout: daemon CPU per streamed chunk, all {k} subscribers ({chunks} chunks)", many,
                   one, "us", floor_name="1 subscriber")]


# ----------------------------------------------------------------- soak


def daemon_sockets(pid: int, port: int) -> dict[str, int]:
    """The daemon's TCP sockets by kind: ``served`` (its port, not listening) and ``other`` (the model's, …)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = {"served": 0, "other": 0}
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] not in inodes or fields[3] == "0A":  # 0A: LISTEN
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            out["served" if local_port == port else "other"] += 1
    return out


def soak(quick: bool) -> list[Figure]:
    per_hour = 10 if quick else SOAK_PER_HOUR
    with ExitStack() as stack:
        fake = RateFakeProcess(20, 400.0)  # 50 ms answers: mid-stream reconnects land mid-stream
        stack.callback(fake.stop)
        daemon = Daemon("--model", "openai", "--openai-base-url", fake.url, "--openai-model", "fake",
                        "--max-sessions", str(per_hour + 20))
        stack.callback(daemon.stop)
        client = ScaleClient()
        stack.callback(client.stop)
        port = urlsplit(daemon.url).port
        assert port is not None
        problems: list[str] = []

        def hour() -> None:
            with httpx.Client(base_url=daemon.url, headers=daemon.headers, timeout=60) as control:
                ids = create_sessions(control, per_hour)
                paths = [f"/session/{sid}/events" for sid in ids for _ in range(2)]
                opened = client.open(daemon, paths)
                if opened["accepted"] != len(paths):
                    problems.append(f"open: {opened}")
                for i in range(2):
                    for sid in ids:
                        r = control.post(f"/session/{sid}/prompt", json=PROMPT)
                        assert r.status_code == 202, r.text
                    if i == 0:
                        client.command("reopen")  # dropped mid-stream, back with Last-Event-ID
                    got = client.command("collect", turns=1, timeout=30)
                    if got["late"] or got["errors"]:
                        problems.append(f"collect: late {got['late']}, errors {got['errors']}, ended {got['ended']}")
                client.command("close")
                for sid in ids:
                    assert control.delete(f"/session/{sid}").status_code == 204
            # every client gone: the daemon's own state is what is left

        def sample() -> dict[str, Any]:
            time.sleep(1.0)  # closed connections reach the daemon; its sessions' tasks end
            return {"rss": rss_kib(daemon.pid), "fds": len(list(Path(f"/proc/{daemon.pid}/fd").iterdir())),
                    **daemon_sockets(daemon.pid, port)}

        start = time.perf_counter()
        for _ in range(SOAK_WARM):
            hour()
        warm = sample()
        hourly = []  # RSS after each later hour: a leak grows with the sessions, a settling heap levels off
        for _ in range(SOAK_HOURS - SOAK_WARM):
            hour()
            hourly.append(rss_kib(daemon.pid))
        end = sample()
        took = time.perf_counter() - start
        stack.pop_all().close()
    note("soak: 'other' sockets are the daemon's own connections to the model, kept alive in a pool of at most "
         "DEFAULT_MAX_IDLE (actors/model/http.py) idle ones: as many as were last busy at once, not a leak")
    note(f"soak: {SOAK_HOURS} compressed hours of {per_hour} session lifetimes in {took:.1f} s; after warm-up "
         f"{warm}, at the end {end}")
    half = len(hourly) // 2
    slope = (hourly[-1] - hourly[half - 1]) / ((len(hourly) - half) * per_hour)
    note(f"soak: RSS by hour after the warm-up (MiB): {', '.join(f'{r / 1024:.1f}' for r in hourly)}; over the last "
         f"{len(hourly) - half} hours {slope:.1f} KiB more per session lifetime")
    for p in problems[:5]:
        note(f"soak: {p}")
    day = f"{SOAK_HOURS} h x {per_hour} sessions"
    return [
        Figure(BENCH, f"soak: daemon RSS at the end ({day})", end["rss"] / 1024, warm["rss"] / 1024, "MiB",
               floor_name="after the warm-up", target=1.10),
        Figure(BENCH, "soak: open descriptors grown since the warm-up (idle model connections aside)",
               (end["fds"] - end["other"]) - (warm["fds"] - warm["other"]), None, "fds", target=0,
               target_is_absolute=True),
        Figure(BENCH, "soak: server connections still open, no client left", end["served"], None, "conns",
               target=0, target_is_absolute=True),
    ]


# ----------------------------------------------------------------- cluster


def cluster(quick: bool) -> list[Figure]:
    sys.path.insert(0, str(ROOT))
    from tests.cluster.servers import skip_reason

    reason = skip_reason()
    if reason:
        note(f"cluster: skipped: {reason}")
        return []
    import bench_cluster as bc
    import psycopg
    from tests.cluster.servers import Postgres, Redis

    sessions = 200 if quick else 1000
    chunks = 1500 if quick else bc.CHUNKS
    stream_rounds = 5 if quick else 9
    with ExitStack() as stack:
        postgres = Postgres()
        stack.callback(postgres.stop)
        redis = Redis()
        stack.callback(redis.stop)
        with ExitStack() as part:
            token = secrets.token_hex(16)
            nodes = (postgres.database("scale_stream"), redis.database(5), token)
            ok = {"responses": [[{"text": "ok"}]] * 10}
            turn = [{"text": f"token {i:05d} of a long streamed answer "} for i in range(chunks)]
            streamed = {"responses": [turn] * (3 * stream_rounds + 6)}
            s = bc.Proc("s", streamed, cluster=nodes)
            b = bc.Proc("b", ok, cluster=nodes)
            single = bc.Proc("single-stream", streamed)
            bc.start_all(part, [s, b, single])
            rates, reopened = bc.stream(part, s, b, single, stream_rounds, chunks)
        if any(reopened.values()):
            note(f"cluster: SSE streams reopened from their cursor: {reopened}")
        with ExitStack() as part:
            store = postgres.database("scale_takeover")
            nodes = (store, redis.database(6), secrets.token_hex(16))
            cap = ("--max-sessions", str(sessions + 20))
            a = bc.Proc("a", ok, cluster=nodes, lease=bc.LEASE, extra=cap)
            survivor = bc.Proc("b", ok, cluster=nodes, lease=bc.LEASE, extra=cap)
            bc.start_all(part, [a, survivor])
            conn = part.enter_context(psycopg.connect(store, autocommit=True))
            ids = [a.create_session() for _ in range(sessions)]

            def owned(node: str) -> int:
                return conn.execute("SELECT count(*) FROM trellis_leases WHERE node_id = %s", (node,)).fetchone()[0]

            assert owned("a") == sessions, owned("a")
            a.kill()
            start = time.perf_counter()
            deadline = start + 4 * bc.LEASE + 60
            first = None
            while (count := owned("b")) < sessions:
                if count and first is None:
                    first = time.perf_counter() - start
                if time.perf_counter() > deadline:
                    raise SystemExit(f"cluster: {count} of {sessions} sessions taken over after "
                                     f"{deadline - start:.0f} s")
                time.sleep(bc.POLL)
            all_owned = time.perf_counter() - start
            first = all_owned if first is None else first
            assert survivor.client is not None
            for sid in ids:
                while survivor.client.get(f"/session/{sid}/status").status_code != 200:
                    if time.perf_counter() > deadline:
                        raise SystemExit(f"cluster: b does not answer for {sid}")
                    time.sleep(bc.POLL)
            answered = time.perf_counter() - start
    note(f"cluster: takeover of {sessions}: first lease moved at {first:.2f} s, all at {all_owned:.2f} s, "
         f"b answered for all at {answered:.2f} s")
    lease = f"lease {bc.LEASE:g} s"
    ring = median(rates["single"])
    return [
        Figure(BENCH, f"cluster: SSE frames/s from Redis, on the owner ({chunks:,} chunks)", median(rates["owner"]),
               ring, "frames/s", floor_name="single daemon, in-process ring", target=0.8, lower_is_better=False),
        Figure(BENCH, f"cluster: SSE frames/s from Redis, on a non-owner ({chunks:,} chunks)",
               median(rates["non-owner"]), ring, "frames/s", floor_name="single daemon, in-process ring",
               lower_is_better=False),
        Figure(BENCH, f"cluster: SIGKILL -> survivor owns all {sessions:,} sessions", all_owned, bc.LEASE, "s",
               floor_name=lease),
        Figure(BENCH, f"cluster: SIGKILL -> survivor answered for all {sessions:,}", answered, bc.LEASE, "s",
               floor_name=lease),
    ]


# ----------------------------------------------------------------- all


SECTION_FUNCS: dict[str, Callable[[bool], list[Figure]]] = {
    "idle": idle, "stream": stream, "fanout": fanout, "soak": soak, "cluster": cluster}


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(f"{BENCH}: terminated by signal {signum}")  # so every ExitStack stops its processes


def measure(quick: bool = False, only: tuple[str, ...] = SECTIONS) -> list[Figure]:
    raise_fd_limit()
    previous = signal.signal(signal.SIGTERM, _terminate)
    figures: list[Figure] = []
    try:
        for name in only:
            start = time.perf_counter()
            figures += SECTION_FUNCS[name](quick)
            print(f"{BENCH}: {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return figures


def summary(figures: list[Figure]) -> str:
    judged = [f for f in figures if f.met is not None]
    return f"scale: {sum(1 for f in judged if f.met)} of {len(judged)} targets met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (under 5 minutes on 2 cores)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections ({','.join(SECTIONS)})")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    only = tuple(s for s in args.only.split(",") if s)
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    start = time.perf_counter()
    figures = measure(args.quick, only)
    title = "scale: many sessions, subscribers, streams, a day, the cluster" + (" (quick)" if args.quick else "")
    emit(figures, title=title, as_json=args.json)
    out = sys.stderr if args.json else sys.stdout
    for line in NOTES:
        print(f"note: {line}", file=out)
    print(f"wall time {time.perf_counter() - start:.1f} s", file=out)
    print(summary(figures), file=out, flush=True)


if __name__ == "__main__":
    main()
