"""Background shells: N concurrent shells in one session, each printing 1,000 lines, against bare Trio processes.

Ours: an in-process daemon whose scripted model starts ``--shells`` background
``shell`` calls in one turn; the time runs from the prompt until every shell
has exited, and every line must be in its output buffer. The floor: the same
commands started with ``trio.lowlevel.open_process`` and their pipes read to
the end, all at once, with nothing else. Both run unsandboxed (``sandbox:
off``; ``bench_sandbox.py`` measures the sandbox). Rounds alternate the two
(A B A B …); medians of the wall time and of this process's own CPU time
(children excluded) compared; lines lost must be 0.

    python bench/bench_background_shells.py [--shells 200] [--lines 1000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import logging
import resource
import subprocess
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Figure, ainterleave, emit, median  # noqa: E402

from actors import CountingIds, Settings, load_script, open_daemon  # noqa: E402

BENCH = "background_shells"


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def command(lines: int) -> str:
    return f'i=0; while [ $i -lt {lines} ]; do i=$((i+1)); echo "line $i"; done'


async def ours(shells: int, lines: int, lost: list[int]) -> tuple[float, float]:
    calls = [{"tool_call": {"name": "shell", "arguments": {"command": command(lines), "run_in_background": True}}}
             for _ in range(shells)]
    model = load_script({"responses": [calls, [{"text": "started"}]], "then": "demo"})
    settings = Settings(approval_mode="yolo", max_tool_calls_per_turn=shells + 10, sandbox="off")
    async with open_daemon(settings, model=model, ids=CountingIds()) as daemon:
        session, _ = await daemon.create_session()
        manager = session._session.background  # the bench reads outputs directly, as shell_output would
        cpu, start = own_cpu(), time.perf_counter()
        await session.prompt("start the shells")
        with trio.fail_after(600):
            while True:
                items = [i for i in manager.registry if i.kind == "shell"]
                if len(items) == shells and not any(i.live for i in items):
                    break
                await trio.sleep(0.01)
        wall, cpu = time.perf_counter() - start, own_cpu() - cpu
        expected = [f"line {n}" for n in range(1, lines + 1)]
        for item in items:
            _, text, dropped = manager.read_output(item.task_id)
            if text.splitlines() != expected or dropped or item.exit_code != 0:
                lost.append(lines - len(text.splitlines()) or 1)
    return wall, cpu


async def bare(shells: int, lines: int) -> tuple[float, float]:
    async def one() -> None:
        process = await trio.lowlevel.open_process(["/bin/sh", "-c", command(lines)], stdout=subprocess.PIPE)
        async with process.stdout:
            while await process.stdout.receive_some(65536):
                pass
        assert await process.wait() == 0

    cpu, start = own_cpu(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(shells):
            nursery.start_soon(one)
    return time.perf_counter() - start, own_cpu() - cpu


async def run(shells: int, lines: int, rounds: int) -> tuple[dict[str, list[float]], list[int]]:
    lost: list[int] = []
    results: dict[str, list[tuple[float, float]]] = {"ours": [], "bare": []}

    def variant(name: str, fn):
        async def timed() -> float:
            results[name].append(await fn())
            return results[name][-1][0]
        return timed

    await bare(min(shells, 10), lines)  # warm up
    await ainterleave(rounds, {"ours": variant("ours", lambda: ours(shells, lines, lost)),
                               "bare": variant("bare", lambda: bare(shells, lines))})
    return {f"{name} {what}": [r[i] for r in rs] for name, rs in results.items()
            for i, what in enumerate(("wall", "cpu"))}, lost


def measure(quick: bool = False, shells: int | None = None, lines: int = 1000, rounds: int | None = None) -> list[Figure]:
    shells = shells or (50 if quick else 200)
    logging.getLogger("trellis.sandbox").setLevel(logging.ERROR)  # off on purpose (see the docstring)
    samples, lost = trio.run(run, shells, lines, rounds or 5)
    floor = "bare trio processes"
    return [
        Figure(BENCH, f"wall time, {shells} shells x {lines} lines", median(samples["ours wall"]),
               median(samples["bare wall"]), "s", floor_name=floor),
        Figure(BENCH, f"own CPU time, {shells} shells x {lines} lines", median(samples["ours cpu"]),
               median(samples["bare cpu"]), "s", floor_name=floor),
        Figure(BENCH, "lines lost (all rounds)", float(sum(lost)), None, "lines", target=0.0, target_is_absolute=True),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shells", type=int, default=200)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.shells, args.lines, args.rounds),
         title="background shells vs bare processes", as_json=args.json)


if __name__ == "__main__":
    main()
