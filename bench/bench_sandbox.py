"""The added cost of starting a sandboxed command: `true` through the shell path, bwrap against none.

Each round starts `/bin/sh -c true` once in the daemon's bubblewrap sandbox
and once unsandboxed (the floor), as a session's `shell` tool does: spawned
from the Trio thread, output read to the end, exit reaped. Rounds alternate
(A B A B …) so both see the same machine; medians compared. Where bubblewrap
cannot run, there is no figure (a note on stderr).

    python bench/bench_sandbox.py [--runs 50] [--json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Figure, ainterleave, emit, median  # noqa: E402

from actors.background.shell import OutputBuffer, ShellProcess  # noqa: E402
from actors.process import NO_SANDBOX, Sandbox, resolve_sandbox  # noqa: E402

BENCH = "sandbox"


async def one(sandbox: Sandbox, cwd: str) -> float:
    start = time.perf_counter()
    process = ShellProcess("true", cwd, OutputBuffer(), sandbox=sandbox)
    await process.start()
    code = await process.run()
    elapsed = time.perf_counter() - start
    assert code == 0, f"true exited {code} under {sandbox.kind}"
    return elapsed


async def run(runs: int, sandbox: Sandbox, cwd: str) -> dict[str, list[float]]:
    for _ in range(3):  # warm the page cache for both
        await one(NO_SANDBOX, cwd)
        await one(sandbox, cwd)
    return await ainterleave(runs, {"bwrap": lambda: one(sandbox, cwd), "none": lambda: one(NO_SANDBOX, cwd)})


def measure(quick: bool = False, runs: int | None = None) -> list[Figure]:
    runs = runs or (20 if quick else 50)
    with tempfile.TemporaryDirectory() as root:
        sandbox = resolve_sandbox("auto", [f"{root}/state"])
        if not sandbox.active:
            print(f"{BENCH}: no figure, no sandbox here: {sandbox.reason}", file=sys.stderr)
            return []
        samples = trio.run(run, runs, sandbox, root)
    return [Figure(BENCH, "starting `true` through the shell path, in bwrap", median(samples["bwrap"]) * 1e3,
                   median(samples["none"]) * 1e3, "ms", floor_name="unsandboxed")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.runs), title="the sandbox's cost per command",
         as_json=args.json)


if __name__ == "__main__":
    main()
