"""Cluster mode (``docs/cluster.md``): failover time, admission on a non-owner, events/s through Redis.

Real daemons (``python -m transport --store … --events …``, subprocesses on
loopback, one shared token) on a real PostgreSQL and Redis started from
Debian's packages by ``tests/cluster/servers.py`` (loopback ports, a fresh
database and Redis logical database per part). That PostgreSQL runs as the
tests run it, with ``fsync=off`` and ``synchronous_commit=off``: what the
cluster figures pay is PostgreSQL's and Redis's round trips and work, not a
disk flush. This process is the client. Without PostgreSQL, Redis or the
cluster extra the benchmark prints why on stderr and returns no figures.

1. **Takeover after SIGKILL.** A cluster at ``--lease-seconds`` :data:`LEASE`:
   node ``b``, which survives, and five owners ``a0`` … ``a4``, all started
   first, each with a session of its own (pinned there) and a prompt whose
   scripted model stalls for 300 s. Each owner is capped at one session, so
   only ``b`` claims. Round ``i``: once ``a<i>``'s turn is ``running`` it is
   SIGKILLed; the clock runs from the kill until another node owns the
   session in ``trellis_leases`` (polled every 10 ms), and until that node
   answers the prompt's turn record as terminal (``GET
   /session/:id/turns/:promptId`` polled every 10 ms; state ``error``,
   errorCode ``node_lost``, and any other ending is said on stderr with what
   the node logged of the session). Five rounds, medians. The floor is the
   configured lease time itself, a constant, so there is nothing to
   interleave it with: the ratio is takeover / lease. (A node renews every
   lease/3 and looks for orphans as often, so a takeover may land anywhere
   from about 2/3 to 4/3 of the lease after the kill.)
2. **Admission on a non-owner.** A second cluster (default lease) of three
   nodes ``a``, ``b``, ``s``. Sessions pinned on ``a`` (the owner); ``POST
   /session/:id/prompt`` to its 202 from a keep-alive client to ``a``, from
   one to ``b`` (which writes the prompt to the session's inbox in PostgreSQL
   and wakes ``a`` through Redis), and from one to a single daemon (no
   cluster, local files, ``storage.fsync: never``), one request at a time,
   the three in turn (A B C A B C …), medians. Each turn's scripted model ends
   it at once ("ok"), prompts go round-robin over several sessions per
   variant, and each request is followed by a short untimed settle (as in
   ``bench_admission.py``), so no prompt waits behind a turn. Figures:
   non-owner against the owner, and the owner against the single daemon (what
   a PostgreSQL-backed 202 costs over a local-file one without fsync).
3. **Events/s through Redis.** The workload of ``bench_sse_http.py``: a
   scripted turn of :data:`CHUNKS` text chunks, one SSE subscriber in a client
   subprocess (this file with ``--subscriber``, counting ``data:`` frames in
   the raw bytes as ``bench/_sse_client.py`` does) connected before the prompt
   is posted, the time from the POST until it has ``turn_complete``; the
   figure is frames received per second. A stream that ends before
   ``turn_complete`` (a cluster follower more than 1,024 events behind is
   ended; ``?maxQueued`` is not read there) is reopened from its last id, as
   a client would, and how often that happened is said on stderr. Ours: node ``s`` owns the session, the
   subscriber follows it on ``s`` and (second figure) on ``b``; in a cluster
   every SSE stream is read from Redis, on the owner too. The floor: a single
   daemon (in-process ring) playing the same script. The three in turn,
   medians; higher is better.

The daemons of a part are started side by side (each costs about 1.5 s of
CPU to import) before anything is timed, and all stopped at its end, also on
an error or a SIGTERM of this process.

No targets are set for these figures.

    python bench/bench_cluster.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Figure, _clean_env, die_with_parent, emit, interleave, median  # noqa: E402

BENCH = "cluster"
LEASE = 2.0  # seconds, --lease-seconds of every node of part 1
TAKEOVER_ROUNDS = 5
SURVIVORS = ("b",)  # the nodes that take a<i>'s session over (each process costs ~1.5 s of CPU to start)
POLL = 0.010  # seconds between looks at trellis_leases and at the turn record
STALLED = {"responses": [{"delay": 300, "steps": [{"text": "never"}]}]}
PROMPT = {"prompt": [{"type": "text", "text": "Summarise the last build log and tell me which test failed."}]}
STREAM = {"prompt": [{"type": "text", "text": "stream"}]}
SESSIONS = 8  # per admission variant, round-robin
WARMUP = 20  # untimed admissions per variant first
SETTLE = 0.010  # untimed, after each admission: the turn it started ends (through the inbox and a wake, on b)
NO_FSYNC = {"storage": {"fsync": "never"}}
CHUNKS = 3000  # text chunks of the streamed turn (part 3); fits in Redis' ~4,096-event stream
SSE_SETTLE = 0.02  # untimed, after each streamed turn: whatever the daemon does after the last frame ends first
FORWARDED = {"X-Trellis-Forwarded": "bench"}  # answered by the node it is sent to: pins a new session there


class Proc:
    """A daemon in a subprocess, started at once; :meth:`ready` waits for its ``listening on`` line.

    With ``cluster`` (store URL, events URL, token) a cluster node named ``name``
    (``--node-id``, ``--lease-seconds``, the three URLs and the token in its
    environment); without, a single daemon on local files (its own token).
    Starting them all before waiting for any starts them side by side.
    """

    def __init__(self, name: str, script: dict[str, Any], *, cluster: tuple[str, str, str] | None = None,
                 lease: float | None = None, settings: dict[str, Any] | None = None, extra: tuple[str, ...] = ()) -> None:
        self.name = name
        self._tmp = tempfile.TemporaryDirectory(prefix=f"trellis-bench-{name}-")
        root = Path(self._tmp.name)
        self.state_dir = root / "state"
        (root / "script.json").write_text(json.dumps(script))
        argv = [sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(self.state_dir),
                "--model", "scripted", "--script", str(root / "script.json"), *extra]
        if settings is not None:
            (root / "settings.json").write_text(json.dumps(settings))
            argv += ["--settings", str(root / "settings.json")]
        self.token: str | None = None
        env: dict[str, str] = {}
        if cluster is not None:
            store, events, self.token = cluster
            env = {"TRELLIS_TOKEN": self.token, "TRELLIS_STORE": store, "TRELLIS_EVENTS": events}
            argv += ["--node-id", name]
            if lease is not None:
                argv += ["--lease-seconds", f"{lease:g}"]
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - a file, not a pipe nobody reads while it runs
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env=_clean_env(env), cwd=str(ROOT),
                                     preexec_fn=die_with_parent)  # noqa: PLW1509 - no threads here
        self.client: httpx.Client | None = None

    def ready(self) -> Proc:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.kill()
            raise SystemExit(f"{self.name} did not start: {line!r} {self.stderr()[-2000:]}")
        self.url = line.split()[-1]
        if self.token is None:
            from transport.auth import read_token_file

            self.token = read_token_file(self.state_dir)
        self.headers = {"Authorization": f"Bearer {self.token}"}
        self.client = httpx.Client(base_url=self.url, headers=self.headers, timeout=30)
        return self

    def create_session(self) -> str:
        """A new session on this daemon (marked forwarded, so a cluster's placement keeps it on this node)."""
        assert self.client is not None
        r = self.client.post("/session", json={}, headers=FORWARDED)
        assert r.status_code in (200, 201), r.text
        return r.json()["sessionId"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stderr(self) -> str:
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()

    def terminate(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()  # a cluster node drains first

    def reap(self) -> None:
        """After :meth:`terminate`: wait (SIGKILL after 20 s), remove everything."""
        try:
            self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
        self._stderr.close()
        self._tmp.cleanup()


def start_all(stack: ExitStack, procs: list[Proc]) -> None:
    """Wait until every one of ``procs`` (already started, side by side) listens; all stopped with ``stack``."""
    def stop() -> None:
        start = time.perf_counter()
        for p in procs:
            p.terminate()
        for p in procs:
            p.reap()
        print(f"{BENCH}: {len(procs)} daemons stopped in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    stack.callback(stop)
    start = time.perf_counter()
    for p in procs:
        p.ready()
    print(f"{BENCH}: {len(procs)} daemons started in {time.perf_counter() - start:.1f} s", file=sys.stderr)


def owner_of(conn: Any, sid: str) -> str | None:
    row = conn.execute("SELECT node_id FROM trellis_leases WHERE session_id = %s", (sid,)).fetchone()
    return row[0] if row else None


def wait_state(client: httpx.Client, sid: str, prompt_id: str, done: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(f"/session/{sid}/turns/{prompt_id}")
        if r.status_code == 200 and done(r.json()):
            return r.json()
        if time.monotonic() > deadline:
            raise SystemExit(f"turn {prompt_id} of {sid}: no such state within {timeout} s: {r.status_code} {r.text}")
        time.sleep(POLL)


# ----------------------------------------------------------------- 1. takeover after SIGKILL


def takeover(stack: ExitStack, store: str, events: str) -> dict[str, list[float]]:
    """The takeover samples: ``owner`` (the lease names another node) and ``terminal`` (the turn answered)."""
    import psycopg

    cluster = (store, events, secrets.token_hex(16))
    conn = stack.enter_context(psycopg.connect(store, autocommit=True))
    log = ("--log-level", "info")  # what a round that ends otherwise than node_lost prints comes from these lines
    others = {name: Proc(name, {"responses": [[{"text": f"{name} answer"}]] * 20}, cluster=cluster, lease=LEASE,
                         extra=log) for name in SURVIVORS}
    # One owner a round, all started now, each with its session and stalled turn: while a<i> dies
    # the later ones idle, full (a cap of one session), so only the survivors claim what a<i> held.
    owners = [Proc(f"a{i}", STALLED, cluster=cluster, lease=LEASE, extra=(*log, "--max-sessions", "1"))
              for i in range(TAKEOVER_ROUNDS)]
    start_all(stack, [*others.values(), *owners])
    by_name = {p.name: p for p in [*others.values(), *owners]}
    running = []  # each a<i>'s session and the prompt whose turn stalls there, all started before any kill
    for a in owners:
        assert a.client is not None
        sid = a.create_session()
        assert owner_of(conn, sid) == a.name, (owner_of(conn, sid), a.name)
        r = a.client.post(f"/session/{sid}/prompt", json=PROMPT)
        assert r.status_code == 202, r.text
        running.append((sid, r.json()["promptId"]))
    samples: dict[str, list[float]] = {"owner": [], "terminal": []}
    for i, (a, (sid, prompt_id)) in enumerate(zip(owners, running)):
        assert a.client is not None
        wait_state(a.client, sid, prompt_id, lambda t: t["state"] == "running")
        a.kill()
        start = time.perf_counter()
        deadline = start + 4 * LEASE + 10
        while (owner := owner_of(conn, sid)) in (None, a.name):
            if time.perf_counter() > deadline:
                raise SystemExit(f"round {i}: nobody took session {sid} over from {a.name} "
                                 f"within {deadline - start:.0f} s")
            time.sleep(POLL)
        owned = time.perf_counter() - start
        new = by_name[owner]
        assert new.client is not None
        turn = wait_state(new.client, sid, prompt_id, lambda t: t["state"] not in ("queued", "running"))
        terminal = time.perf_counter() - start
        samples["owner"].append(owned)
        samples["terminal"].append(terminal)
        print(f"{BENCH}: takeover round {i}: {a.name} -> {owner} in {owned:.3f} s, turn {turn['state']} "
              f"{turn.get('errorCode')} at {terminal:.3f} s", file=sys.stderr, flush=True)
        if (turn["state"], turn.get("errorCode")) != ("error", "node_lost"):
            lines = [line for p in others.values() for line in p.stderr().splitlines() if sid in line]
            lease = conn.execute("SELECT node_id, epoch, released FROM trellis_leases WHERE session_id = %s",
                                 (sid,)).fetchone()
            print(f"{BENCH}: UNEXPECTED: the turn lost with {a.name} ended {turn.get('errorCode')!r}, not "
                  f"'node_lost' (lease now {lease}); the surviving nodes said of {sid}:\n  " + "\n  ".join(lines),
                  file=sys.stderr, flush=True)
    return samples


# ----------------------------------------------------------------- 2. admission on a non-owner


class Admitter:
    """A keep-alive client posting prompts round-robin to its sessions through one node (or daemon)."""

    def __init__(self, via: Proc, sessions: list[str]) -> None:
        assert via.client is not None
        self.client = via.client
        self.sessions = sessions
        self.n = 0
        self.last: tuple[str, str] | None = None  # session and prompt of the last 202

    def admit(self) -> float:
        sid = self.sessions[self.n % len(self.sessions)]
        self.n += 1
        start = time.perf_counter()
        r = self.client.post(f"/session/{sid}/prompt", json=PROMPT)
        elapsed = time.perf_counter() - start
        assert r.status_code == 202, r.text
        self.last = (sid, r.json()["promptId"])
        time.sleep(SETTLE)
        return elapsed


def admission(a: Proc, b: Proc, single: Proc, rounds: int) -> dict[str, list[float]]:
    owner = Admitter(a, [a.create_session() for _ in range(SESSIONS)])
    other = Admitter(b, [a.create_session() for _ in range(SESSIONS)])  # a's sessions, through b
    alone = Admitter(single, [single.create_session() for _ in range(SESSIONS)])
    for _ in range(WARMUP):  # connections, code paths, and each session's first turn
        owner.admit(), other.admit(), alone.admit()
    samples = interleave(rounds, {"owner": owner.admit, "non-owner": other.admit, "single": alone.admit})
    assert a.client is not None and other.last is not None
    turn = wait_state(a.client, *other.last, lambda t: t["state"] not in ("queued", "running"))
    assert turn["state"] == "completed", turn  # what b admitted ran on a
    return samples


# ----------------------------------------------------------------- 3. events/s through Redis


async def _follow(command: dict[str, Any]) -> dict[str, Any]:
    """One subscriber (in the ``--subscriber`` process): ``ready`` once its stream is open, then until turn_complete.

    Counts ``data:`` frames in the raw chunks (nothing is JSON-decoded, as in
    ``bench/_sse_client.py``) and remembers the last ``id:``. A stream that
    ends before ``turn_complete`` (a cluster follower that fell too far
    behind is ended, docs/cluster.md) is reopened from that id with its
    epoch, as a client would; the reopenings are counted.
    """
    import re

    import trio

    headers = dict(command["headers"])
    frames, reconnects, tail, ready = 0, 0, b"", False
    last_id: bytes | None = None
    async with httpx.AsyncClient(base_url=command["url"], timeout=60) as client:
        with trio.fail_after(120):
            while True:
                async with client.stream("GET", command["path"], headers=headers) as response:
                    assert response.status_code == 200, response.status_code
                    headers["X-Qwen-Event-Epoch"] = response.headers.get("X-Qwen-Event-Epoch", "")
                    async for chunk in response.aiter_raw():
                        if not ready:
                            ready = True
                            print("ready", flush=True)
                        window = tail + chunk
                        frames += window.count(b"\ndata:") - tail.count(b"\ndata:")
                        ids = re.findall(rb"(?:^|\n)id: (\d+)\n", window)
                        if ids:
                            last_id = ids[-1]
                        if b"event: turn_complete" in window:
                            return {"end": time.monotonic(), "frames": frames, "reconnects": reconnects}
                        if b"event: turn_error" in window or b"event: client_evicted" in window:
                            raise SystemExit(f"stream failed: {window[-400:]!r}")
                        tail = window[-64:]
                if last_id is None:
                    raise SystemExit("stream ended before its first event")
                reconnects += 1
                headers["Last-Event-ID"] = last_id.decode()
                tail = b""


def _subscriber_main() -> None:
    """``bench_cluster.py --subscriber``: one JSON command a line on stdin, one JSON report a line on stdout."""
    import trio

    for line in sys.stdin:
        print(json.dumps(trio.run(_follow, json.loads(line))), flush=True)


class Subscriber:
    """The ``--subscriber`` process: one SSE stream a round, its own CPU (as ``bench_sse_http.py``'s clients)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--subscriber"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(ROOT),
                                     preexec_fn=die_with_parent)  # noqa: PLW1509 - no threads here

    def round(self, url: str, path: str, headers: dict[str, str], post: Any) -> dict[str, Any]:
        """Connect, post, and the report plus ``elapsed`` from the POST to turn_complete."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"url": url, "path": path, "headers": headers}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"the subscriber did not connect: {line!r}")
        start = time.monotonic()
        post()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the subscriber failed (its error is above)")
        report = json.loads(line)
        report["elapsed"] = report["end"] - start
        time.sleep(SSE_SETTLE)
        return report

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def stream(stack: ExitStack, s: Proc, t: Proc, single: Proc, rounds: int,
           chunks: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Events/s samples by variant, and how often each variant's stream had to be reopened."""
    subscriber = Subscriber()
    stack.callback(subscriber.stop)
    sid = s.create_session()
    reopened: dict[str, int] = {}

    def rate(name: str, via: Proc, sid: str, poster: Proc):
        path = f"/session/{sid}/events?maxQueued=2048"
        reopened[name] = 0

        def post() -> None:
            assert poster.client is not None
            r = poster.client.post(f"/session/{sid}/prompt", json=STREAM)
            assert r.status_code == 202, r.text

        def run() -> float:
            report = subscriber.round(via.url, path, via.headers, post)
            assert report["frames"] >= chunks, (report["frames"], chunks)  # every chunk, and then some
            reopened[name] += report["reconnects"]
            return report["frames"] / report["elapsed"]
        return run

    variants = {"owner": rate("owner", s, sid, s),
                "single": rate("single", single, single.create_session(), single),
                "non-owner": rate("non-owner", t, sid, s)}
    for run in variants.values():  # warm up
        run()
    return interleave(rounds, variants), reopened


# ----------------------------------------------------------------- all three


@contextmanager
def _timed(part: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    print(f"{BENCH}: {part}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(f"{BENCH}: terminated by signal {signum}")  # so the finally clauses stop every server


def measure(quick: bool = False, rounds: int | None = None, chunks: int | None = None) -> list[Figure]:
    sys.path.insert(0, str(ROOT))
    from tests.cluster.servers import skip_reason

    reason = skip_reason()
    if reason:
        print(f"{BENCH}: skipped: {reason}", file=sys.stderr)
        return []
    from tests.cluster.servers import Postgres, Redis

    rounds = rounds or (60 if quick else 300)
    chunks = chunks or (1500 if quick else CHUNKS)
    stream_rounds = 5 if quick else 9
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with ExitStack() as stack:
            postgres = Postgres()
            stack.callback(postgres.stop)
            redis = Redis()
            stack.callback(redis.stop)
            with _timed("takeover"), ExitStack() as part:
                took = takeover(part, postgres.database("bench_takeover"), redis.database(1))
            with _timed("admission and events"), ExitStack() as part:
                # One cluster (default lease) of three nodes: a owns the sessions b admits prompts for;
                # s owns the streamed session, which a client follows on s and on b. A single daemon
                # for each floor.
                cluster = (postgres.database("bench_cluster"), redis.database(2), secrets.token_hex(16))
                ok = {"responses": [[{"text": "ok"}]] * (2 * (rounds + WARMUP) + 10)}
                turn = [{"text": f"token {i:05d} of a long streamed answer "} for i in range(chunks)]
                streamed_script = {"responses": [turn] * (3 * stream_rounds + 6)}
                a, b = (Proc(n, ok, cluster=cluster) for n in ("a", "b"))
                s = Proc("s", streamed_script, cluster=cluster)
                single_ok = Proc("single-ok", ok, settings=NO_FSYNC)
                single_stream = Proc("single-stream", streamed_script)  # nothing is fsynced on the events' way
                start_all(part, [a, b, s, single_ok, single_stream])
                admitted = admission(a, b, single_ok, rounds)
                streamed, reopened = stream(part, s, b, single_stream, stream_rounds, chunks)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if any(reopened.values()):
        print(f"{BENCH}: SSE streams ended early and reopened from their cursor (rounds and warm-up): "
              + ", ".join(f"{name} {n}" for name, n in reopened.items()), file=sys.stderr)
    ms = {name: median(xs) * 1000 for name, xs in admitted.items()}
    lease = f"lease {LEASE:g} s"
    return [
        Figure(BENCH, f"SIGKILL -> another node owns the session (median of {TAKEOVER_ROUNDS})",
               median(took["owner"]), LEASE, "s", floor_name=lease),
        Figure(BENCH, f"SIGKILL -> running turn answered node_lost (median of {TAKEOVER_ROUNDS})",
               median(took["terminal"]), LEASE, "s", floor_name=lease),
        Figure(BENCH, "POST prompt -> 202 on a non-owner (inbox + wake)", ms["non-owner"], ms["owner"], "ms",
               floor_name="on the owner"),
        Figure(BENCH, "POST prompt -> 202 on the owner (PostgreSQL)", ms["owner"], ms["single"], "ms",
               floor_name="single daemon, fsync never"),
        Figure(BENCH, f"SSE events/s from Redis, on the owner ({chunks:,} chunks)", median(streamed["owner"]),
               median(streamed["single"]), "events/s", floor_name="single daemon, in-process ring",
               lower_is_better=False),
        Figure(BENCH, f"SSE events/s from Redis, on a non-owner ({chunks:,} chunks)", median(streamed["non-owner"]),
               median(streamed["single"]), "events/s", floor_name="single daemon, in-process ring",
               lower_is_better=False),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="admissions per variant (part 2)")
    parser.add_argument("--chunks", type=int, default=CHUNKS, help="text chunks of the streamed turn (part 3)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.rounds, None if args.quick else args.chunks),
         title="cluster: takeover, admission on a non-owner, events through Redis", as_json=args.json)


if __name__ == "__main__":
    if sys.argv[1:] == ["--subscriber"]:
        _subscriber_main()
    else:
        main()
