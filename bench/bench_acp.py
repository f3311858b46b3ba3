"""Round trip of an ACP ``session/prompt`` over stdio, from the request to its answer.

Starts ``python -m transport.acp`` with a scripted model whose every turn streams
``--chunks`` text chunks, then sends prompts one at a time and times each until
its answer arrives (after all its ``session/update`` notifications).

    python bench/bench_acp.py [--prompts 200] [--chunks 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=20, help="text chunks streamed per turn")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.json"
        turn = [{"text": f"chunk {i} "} for i in range(args.chunks)]
        script.write_text(json.dumps({"responses": [turn] * (args.prompts + 5)}))
        proc = subprocess.Popen([sys.executable, "-m", "transport.acp", "--script", str(script), "--state-dir", tmp],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        assert proc.stdin is not None and proc.stdout is not None
        next_id = 0

        def request(method: str, params: dict) -> tuple[dict, int]:
            nonlocal next_id
            next_id += 1
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}) + "\n")
            proc.stdin.flush()
            updates = 0
            while True:
                message = json.loads(proc.stdout.readline())
                if message.get("id") == next_id:
                    return message, updates
                updates += message.get("method") == "session/update"

        try:
            request("initialize", {"protocolVersion": 1})
            sid = request("session/new", {"cwd": tmp, "mcpServers": []})[0]["result"]["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
            for _ in range(5):
                request("session/prompt", prompt)
            samples, total_updates = [], 0
            started = time.perf_counter()
            for _ in range(args.prompts):
                t0 = time.perf_counter()
                answer, updates = request("session/prompt", prompt)
                samples.append(time.perf_counter() - t0)
                total_updates += updates
                assert answer["result"]["stopReason"] == "end_turn", answer
            elapsed = time.perf_counter() - started
        finally:
            proc.stdin.close()
            proc.wait(10)
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(f"{args.prompts} prompts, {args.chunks} chunks each: "
          f"p50 {statistics.median(samples) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, "
          f"{total_updates / elapsed:.0f} session/update per s")


if __name__ == "__main__":
    main()
