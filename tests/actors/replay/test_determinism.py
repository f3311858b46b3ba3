"""Replays' seeded scheduling (actors/replay/determinism.py): public APIs only, and it holds.

Trio's interleaving is fixed through Trio's own Hypothesis plugin and a seed applied inside the run. These
tests fail if a Trio or Hypothesis release stops that from working: the golden digests and the seed
exploration would mean nothing then.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from actors.replay import NotDeterministic, run_deterministic

ROOT = Path(__file__).resolve().parents[3]


class StepRecorder(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps: list[tuple[float, str]] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps.append((trio.current_time(), task.name))


async def tiny_program(recorder: StepRecorder, log: list[str]) -> None:
    """Racers through checkpoints, tied sleeps and claimers: plenty of same-batch choices."""
    trio.lowlevel.add_instrument(recorder)
    jobs = list(range(6))

    async def racer(name: str) -> None:
        for i in range(3):
            log.append(f"{name}{i}")
            await trio.lowlevel.checkpoint()

    async def sleeper(name: str) -> None:
        for _ in range(2):
            await trio.sleep(1.0)  # equal deadlines: ties
            log.append(name)

    async def claimer(name: str) -> None:
        while jobs:
            log.append(f"{name}:{jobs.pop(0)}")
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(racer, f"r{n}", name=f"racer{n}")
            nursery.start_soon(sleeper, f"s{n}", name=f"sleeper{n}")
            nursery.start_soon(claimer, f"c{n}", name=f"claimer{n}")


def seeded_trace(seed: int) -> tuple[list[tuple[float, str]], list[str]]:
    recorder, log = StepRecorder(), []
    run_deterministic(tiny_program, recorder, log, seed=seed)
    return recorder.steps, log


def test_a_seeded_trace_is_stable() -> None:
    first = seeded_trace(5)
    _junk = [object() for _ in range(10_000)]  # moves the memory layout, which must not matter
    seeded_trace(1), seeded_trace(2)  # nor what ran before
    assert seeded_trace(5) == first
    assert len({repr(seeded_trace(s)) for s in range(10)}) > 1, "seeds no longer change the interleaving"


def test_nearby_seeds_give_different_interleavings() -> None:
    traces = [repr(seeded_trace(s)) for s in range(12)]
    assert len(set(traces)) >= 6, "seeds barely change the interleaving"
    assert repr(seeded_trace(5000)) not in traces[:1]  # a large seed applies too


PRINT_TRACES = (
    "import sys; sys.path.insert(0, {root!r})\n"
    "from tests.actors.replay.test_determinism import seeded_trace\n"
    "print([seeded_trace(s) for s in (0, 3, 7)])\n"
)


def test_another_process_replays_the_same_interleavings() -> None:
    code = PRINT_TRACES.format(root=str(ROOT))
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONHASHSEED": str(n)}) for n in (1, 2)]
    assert all(r.returncode == 0 for r in runs), runs
    assert runs[0].stdout == runs[1].stdout == f"{[seeded_trace(s) for s in (0, 3, 7)]}\n"


def test_without_trios_hypothesis_plugin_a_replay_refuses_to_run() -> None:
    code = ("from actors.replay import run_deterministic\n"
            "async def nothing(): pass\n"
            "run_deterministic(nothing)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "HYPOTHESIS_NO_PLUGINS": "1"})
    assert done.returncode == 1
    assert "NotDeterministic: Trio's scheduler is not deterministic under Hypothesis here" in done.stderr
    assert "HYPOTHESIS_NO_PLUGINS" in done.stderr


def test_an_exception_of_the_run_reaches_the_caller_as_it_was() -> None:
    async def fails() -> None:
        raise KeyError("from the run")

    with pytest.raises(KeyError, match="from the run") as caught:
        run_deterministic(fails, seed=3)
    assert not getattr(caught.value, "__notes__", None)  # not wrapped in Hypothesis's report
    with pytest.raises(ValueError, match="a replay seed is 0 or more, not -1"):
        run_deterministic(fails, seed=-1)
    assert isinstance(NotDeterministic("x"), RuntimeError)


def test_replays_run_on_virtual_time() -> None:
    async def sleepy() -> float:
        await trio.sleep(3600)
        return trio.current_time()

    assert run_deterministic(sleepy, seed=0) == 3600.0
