"""Latency of ``POST /session/:id/prompt`` to its 202, over loopback HTTP.

Starts the real daemon (``python -m transport --port 0``) in a subprocess,
creates N sessions and posts prompts round-robin, one at a time, while the
admitted turns run on the embedded demo model.

    python bench/bench_prompt_latency.py [--sessions 100] [--prompts 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from transport.auth import read_token_file
from transport.process_image import SECRET_ENV


def start_daemon(state_dir: str, sessions: int) -> tuple[subprocess.Popen[str], str, str]:
    """The daemon, its URL, and the token it minted into ``<state_dir>/token``."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}  # so it mints its own token
    proc = subprocess.Popen(
        [sys.executable, "-m", "transport", "--port", "0", "--state-dir", state_dir,
         "--max-sessions", str(sessions + 1)],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"daemon did not start: {line!r}")
    return proc, line.split()[-1], read_token_file(state_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=10, help="prompts per session")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state_dir:
        proc, url, token = start_daemon(state_dir, args.sessions)
        try:
            with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
                ids = [client.post("/session", json={}).json()["sessionId"] for _ in range(args.sessions)]
                body = {"prompt": [{"type": "text", "text": "Plan a picnic"}]}
                for sid in ids[:5]:  # warm up the connection and code paths
                    client.post(f"/session/{sid}/prompt", json=body)
                samples = []
                for _ in range(args.prompts):
                    for sid in ids:
                        start = time.perf_counter()
                        r = client.post(f"/session/{sid}/prompt", json=body)
                        samples.append(time.perf_counter() - start)
                        assert r.status_code == 202, r.text
        finally:
            proc.terminate()
            proc.wait(10)
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(f"{'sessions':>9}{'requests':>10}{'median ms':>11}{'p99 ms':>9}{'max ms':>9}")
    print(f"{args.sessions:>9}{len(samples):>10}{statistics.median(samples) * 1000:>11.2f}"
          f"{p99 * 1000:>9.2f}{samples[-1] * 1000:>9.2f}")


if __name__ == "__main__":
    main()
