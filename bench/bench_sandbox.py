"""The added cost of starting a sandboxed command: `true` through the shell path, bwrap against none.

Each round starts `/bin/sh -c true` once unsandboxed and once in the daemon's
bubblewrap sandbox (as a session's `shell` tool does: spawned from the Trio
thread, output read to the end, exit reaped), alternating which goes first, so
both see the same machine. Prints the median, p90 and the added cost.

    python bench/bench_sandbox.py [--runs 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import trio

from actors.background.shell import OutputBuffer, ShellProcess
from actors.process import NO_SANDBOX, Sandbox, resolve_sandbox


async def one(sandbox: Sandbox, cwd: str) -> float:
    start = time.perf_counter()
    process = ShellProcess("true", cwd, OutputBuffer(), sandbox=sandbox)
    await process.start()
    code = await process.run()
    elapsed = time.perf_counter() - start
    assert code == 0, f"true exited {code} under {sandbox.kind}"
    return elapsed


async def measure(runs: int, sandbox: Sandbox, cwd: str) -> tuple[list[float], list[float]]:
    plain: list[float] = []
    boxed: list[float] = []
    for _ in range(3):  # warm the page cache for both
        await one(NO_SANDBOX, cwd)
        await one(sandbox, cwd)
    for i in range(runs):
        order = [(NO_SANDBOX, plain), (sandbox, boxed)]
        for box, out in (order if i % 2 == 0 else order[::-1]):
            out.append(await one(box, cwd))
    return plain, boxed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        sandbox = resolve_sandbox("auto", [f"{root}/state"])
        if not sandbox.active:
            print(f"no sandbox here: {sandbox.reason}", file=sys.stderr)
            return 1
        plain, boxed = trio.run(measure, args.runs, sandbox, root)

    def row(name: str, xs: list[float]) -> str:
        q = statistics.quantiles(xs, n=10)
        return f"{name:<14}{statistics.median(xs) * 1e3:>12.2f}{q[-1] * 1e3:>10.2f}"

    print(f"{'`true`, ' + str(args.runs) + ' runs':<14}{'median ms':>12}{'p90 ms':>10}")
    print(row("unsandboxed", plain))
    print(row("bwrap", boxed))
    added = statistics.median(boxed) - statistics.median(plain)
    print(f"added by the sandbox: {added * 1e3:.2f} ms per command "
          f"({statistics.median(boxed) / statistics.median(plain):.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
