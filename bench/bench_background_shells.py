"""200 concurrent background shells in one session, each printing 1,000 lines.

Reports wall time, the daemon's own CPU time (children excluded) and lines lost.

    python bench/bench_background_shells.py [--shells 200] [--lines 1000]
"""

from __future__ import annotations

import argparse
import resource
import time

import trio

from actors import CountingIds, Settings, load_script, open_daemon


async def measure(shells: int, lines: int) -> tuple[float, float, int, int]:
    command = f'i=0; while [ $i -lt {lines} ]; do i=$((i+1)); echo "line $i"; done'
    calls = [{"tool_call": {"name": "shell", "arguments": {"command": command, "run_in_background": True}}}
             for _ in range(shells)]
    model = load_script({"responses": [calls, [{"text": "started"}]], "then": "demo"})
    settings = Settings(approval_mode="yolo", max_tool_calls_per_turn=shells + 10)  # all started by one turn
    async with open_daemon(settings, model=model, ids=CountingIds()) as daemon:
        session, _ = await daemon.create_session()
        manager = session._session.background  # the bench reads outputs directly, as shell_output would
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        await session.prompt("start the shells")
        with trio.fail_after(600):
            while True:
                items = [i for i in manager.registry if i.kind == "shell"]
                if len(items) == shells and not any(i.live for i in items):
                    break
                await trio.sleep(0.01)
        wall = time.perf_counter() - start
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        received = 0
        failed = 0
        for item in items:
            _, text, lost = manager.read_output(item.task_id)
            got = text.splitlines()
            received += len(got)
            if got != [f"line {n}" for n in range(1, lines + 1)] or lost or item.exit_code != 0:
                failed += 1
        cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        return wall, cpu, shells * lines - received, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shells", type=int, default=200)
    parser.add_argument("--lines", type=int, default=1000)
    args = parser.parse_args()
    wall, cpu, lost, failed = trio.run(measure, args.shells, args.lines)
    print(f"{'shells':>7}{'lines each':>12}{'wall s':>9}{'daemon CPU s':>14}{'lines lost':>12}{'bad shells':>12}")
    print(f"{args.shells:>7}{args.lines:>12}{wall:>9.2f}{cpu:>14.2f}{lost:>12}{failed:>12}")


if __name__ == "__main__":
    main()
