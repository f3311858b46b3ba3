"""The private Trio API the replays stand on (actors/replay/determinism.py).

Replays need Trio's scheduler to be replayable from a seed, which only the
private flag ``trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING`` and the RNG
``trio._core._run._r`` provide. These tests are meant to fail loudly on a Trio
upgrade that removes or changes them: if one fails, the golden digests and the
seed exploration can no longer be trusted.
"""

from __future__ import annotations

import random

import trio
import trio.testing
from trio._core import _run

from actors.replay import deterministic, run_deterministic


def test_the_private_flag_and_rng_exist() -> None:
    assert hasattr(_run, "_ALLOW_DETERMINISTIC_SCHEDULING"), "Trio removed _ALLOW_DETERMINISTIC_SCHEDULING"
    assert isinstance(_run._ALLOW_DETERMINISTIC_SCHEDULING, bool)
    assert isinstance(_run._r, random.Random), "Trio's scheduler RNG _r is gone or changed type"


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


def test_the_flag_and_rng_state_are_restored() -> None:
    flag = _run._ALLOW_DETERMINISTIC_SCHEDULING
    state = _run._r.getstate()
    with deterministic(7):
        assert _run._ALLOW_DETERMINISTIC_SCHEDULING is True
        inside = _run._r.random()
    assert _run._ALLOW_DETERMINISTIC_SCHEDULING is flag
    assert _run._r.getstate() == state
    with deterministic(7):
        assert _run._r.random() == inside  # the seed alone decides


def test_replays_run_on_virtual_time() -> None:
    async def sleepy() -> float:
        await trio.sleep(3600)
        return trio.current_time()

    assert run_deterministic(sleepy, seed=0) == 3600.0
