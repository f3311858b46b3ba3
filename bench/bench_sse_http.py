"""SSE over HTTP: frames/s our daemon's ``GET /session/:id/events`` delivers, against a bare quart-trio SSE route.

Ours: one session of the real daemon (subprocess) whose scripted model
streams ``--chunks`` text chunks a turn; 1 or 10 subscribers connect first,
then the prompt is posted, and the time runs from the POST until every
subscriber has seen ``turn_complete``. The floor: ``bench/_bare_server.py``
streaming the same number of pre-encoded frames of the same size (measured
from ours) to 1 or 10 clients, released by a ``POST /prompt`` the same way.
The subscribers run in a client subprocess (``bench/_sse_client.py``, one per
subscriber count, the same for both servers) that counts ``data:`` lines
without decoding them. Rounds alternate ours and the bare route; the figure
is the median of frames delivered per second (all subscribers together);
target: at least 0.8 of the bare rate.

    python bench/bench_sse_http.py [--chunks 3000] [--rounds 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (ROOT, BareServer, Daemon, Figure, emit, interleave, load_child, median,  # noqa: E402
                     stall_args, stall_figures)

BENCH = "sse_http"
PROMPT = {"prompt": [{"type": "text", "text": "stream"}]}
SUBSCRIBERS = (1, 10)
SETTLE = 0.02  # untimed, after each round: whatever the server does after the last frame ends first


class Subscribers:
    """One ``_sse_client.py`` process holding ``k`` streams a round."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_sse_client.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=str(ROOT),
                                     preexec_fn=load_child)

    def round(self, url: str, path: str, headers: dict[str, str], post) -> dict:
        """Connect, post, and return the client's report plus ``elapsed`` from the POST to the last turn_complete."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"url": url, "path": path, "headers": headers, "k": self.k}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"subscribers did not connect: {line!r}")
        start = time.monotonic()
        post()
        report = json.loads(self.proc.stdout.readline())
        report["elapsed"] = report["end"] - start
        time.sleep(SETTLE)
        return report

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(10)


def measure(quick: bool = False, chunks: int | None = None, rounds: int | None = None) -> list[Figure]:
    chunks = chunks or (1500 if quick else 3000)
    rounds = rounds or (5 if quick else 7)
    turn = [{"text": f"token {i:05d} of a long streamed answer "} for i in range(chunks)]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"responses": [turn] * (len(SUBSCRIBERS) * (rounds + 2))}, f)
    daemon = Daemon("--model", "scripted", "--script", f.name, *stall_args())
    bare = BareServer("--report-loop-stalls", "20")
    clients = {k: Subscribers(k) for k in SUBSCRIBERS}
    try:
        with httpx.Client(base_url=daemon.url, headers=daemon.headers, timeout=60) as ours, \
                httpx.Client(base_url=bare.url, timeout=60) as floor:
            sid = ours.post("/session", json={}).json()["sessionId"]
            events = f"/session/{sid}/events?maxQueued=2048"

            def post_ours() -> None:
                assert ours.post(f"/session/{sid}/prompt", json=PROMPT).status_code == 202

            def post_bare() -> None:
                assert floor.post("/prompt", json=PROMPT).status_code == 202

            first = clients[1].round(daemon.url, events, daemon.headers, post_ours)  # warm up, and our frame shape
            frames = first["frames"][0]
            size = first["bytes"] // frames - len(b"id: 1234\nevent: session_update\ndata: \n\n")
            sse = f"/sse?frames={frames}&size={size}&wait=1"
            clients[10].round(bare.url, sse, {}, post_bare)
            clients[10].round(daemon.url, events, daemon.headers, post_ours)

            def rate(k: int, url: str, path: str, headers: dict[str, str], post):
                def run() -> float:
                    report = clients[k].round(url, path, headers, post)
                    assert min(report["frames"]) >= frames - 1, (report["frames"], frames)
                    return sum(report["frames"]) / report["elapsed"]
                return run

            variants = {}
            for k in SUBSCRIBERS:
                variants[f"ours {k}"] = rate(k, daemon.url, events, daemon.headers, post_ours)
                variants[f"bare {k}"] = rate(k, bare.url, sse, {}, post_bare)
            samples = interleave(rounds, variants)
    finally:
        for c in clients.values():
            c.stop()
        err = daemon.stop()
        bare_err = bare.stop()
        Path(f.name).unlink()
    figures = [Figure(BENCH, f"frames/s to {k} subscriber{'s' * (k > 1)} ({frames} frames of ~{size + 39} B)",
                      median(samples[f"ours {k}"]), median(samples[f"bare {k}"]), "frames/s",
                      floor_name="bare SSE route", target=0.8, lower_is_better=False) for k in SUBSCRIBERS]
    return figures + stall_figures(BENCH, err, bare_err, "bare server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=3000, help="text chunks the model streams a turn")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.chunks, None if args.quick else args.rounds),
         title="SSE over HTTP: frames/s, ours vs a bare quart-trio route", as_json=args.json)


if __name__ == "__main__":
    main()
