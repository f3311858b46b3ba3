"""Round trip of an ACP ``session/prompt`` over stdio, against a bare JSON-RPC peer answering the same lines.

Ours: ``python -m transport.acp`` with a scripted model whose every turn
streams ``--chunks`` text chunks; a prompt is timed from the request until
its answer arrives (after all its ``session/update`` notifications). The
floor: a bare peer in its own process (this file with ``--bare``) that reads
each request line, decodes it, and writes as many pre-encoded notification
lines, of the size ours sent (measured at warm-up), then the answer —
flushing each line, as a streaming agent does. One prompt to each in turn
(A B A B …); medians compared.

    python bench/bench_acp.py [--prompts 200] [--chunks 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Figure, emit, interleave, median, pin_client, server_child  # noqa: E402

BENCH = "acp"


class Peer:
    """A JSON-RPC peer on a pipe: requests out, lines back until the answer."""

    def __init__(self, argv: list[str]) -> None:
        pin_client()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     preexec_fn=server_child)
        self.next_id = 0

    def request(self, method: str, params: dict) -> tuple[dict, int, int]:
        """The answer, how many ``session/update`` came before it, and their bytes."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
                              + "\n")
        self.proc.stdin.flush()
        updates = size = 0
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"{self.proc.args[:3]} closed its output")
            if '"session/update"' in line:
                updates, size = updates + 1, size + len(line)
                continue
            message = json.loads(line)
            if message.get("id") == self.next_id:
                return message, updates, size

    def timed_prompt(self, sid: str) -> float:
        start = time.perf_counter()
        answer, _, _ = self.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})
        elapsed = time.perf_counter() - start
        assert answer["result"]["stopReason"] == "end_turn", answer
        return elapsed

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(10)


def bare_peer(updates: int, size: int) -> None:
    """The floor: answer every request, a session/prompt with ``updates`` notification lines first."""
    note = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}}}}
    note["params"]["update"]["content"]["text"] = "x" * max(0, size - len(json.dumps(note)) - 1)
    lines = [json.dumps(note) + "\n"] * updates
    out = sys.stdout
    for raw in sys.stdin:
        request = json.loads(raw)
        if request.get("method") == "session/prompt":
            for line in lines:
                out.write(line)
                out.flush()
            result = {"stopReason": "end_turn"}
        else:
            result = {"sessionId": "s", "protocolVersion": 1}
        out.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\n")
        out.flush()


def measure(quick: bool = False, prompts: int | None = None, chunks: int = 20) -> list[Figure]:
    prompts = prompts or (50 if quick else 200)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.json"
        turn = [{"text": f"chunk {i} "} for i in range(chunks)]
        script.write_text(json.dumps({"responses": [turn] * (prompts + 10)}))
        work = Path(tmp) / "work"  # a session's cwd must lie outside the state directory
        work.mkdir()
        ours = Peer([sys.executable, "-m", "transport.acp", "--script", str(script), "--state-dir", f"{tmp}/state"])
        bare = None
        try:
            ours.request("initialize", {"protocolVersion": 1})
            sid = ours.request("session/new", {"cwd": str(work), "mcpServers": []})[0]["result"]["sessionId"]
            _, updates, size = ours.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text",
                                                                                              "text": "go"}]})
            bare = Peer([sys.executable, __file__, "--bare", str(updates), str(size // max(1, updates))])
            for _ in range(5):  # warm up
                ours.timed_prompt(sid), bare.timed_prompt("s")
            samples = interleave(prompts, {"ours": lambda: ours.timed_prompt(sid), "bare": lambda: bare.timed_prompt("s")})
        finally:
            ours.stop()
            if bare is not None:
                bare.stop()
    return [Figure(BENCH, f"session/prompt round trip, {updates} updates", median(samples["ours"]) * 1e3,
                   median(samples["bare"]) * 1e3, "ms", floor_name="bare JSON-RPC peer")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=20, help="text chunks streamed per turn")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    parser.add_argument("--bare", nargs=2, type=int, default=None, metavar=("UPDATES", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare_peer(*args.bare)
        return
    emit(measure(args.quick, None if args.quick else args.prompts, args.chunks),
         title="ACP session/prompt over stdio", as_json=args.json)


if __name__ == "__main__":
    main()
