"""StallWatch: the longest task step, by name, and rate-limited warnings of steps over the threshold."""

from __future__ import annotations

import logging

import pytest
import trio

from actors.loop_stalls import StallWatch


class SteppedClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Watched(StallWatch):
    """A StallWatch whose steps take what the test says they take (a task named slow-*: 30 ms)."""

    def __init__(self, clock: SteppedClock, threshold_ms: float) -> None:
        super().__init__(threshold_ms, clock=clock)
        self.fake = clock

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.fake.now += 0.030 if task.name.startswith("slow") else 0.0001
        super().after_task_step(task)


def run_with(watch: StallWatch, slow_steps: int) -> None:
    async def slow() -> None:
        for _ in range(slow_steps):
            await trio.lowlevel.checkpoint()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow, name="slow-worker")

    trio.run(main, instruments=[watch])


def test_the_longest_step_is_kept_with_its_task_and_each_stall_is_counted(caplog):
    watch = Watched(SteppedClock(), threshold_ms=20)
    with caplog.at_level(logging.WARNING, logger="trellis.loop"):
        run_with(watch, slow_steps=3)
    assert watch.longest_ms == pytest.approx(30.0)
    assert watch.longest_task == "slow-worker"
    assert watch.stalls == 4  # the task's first step and its three checkpoints
    # The clock moved 30 ms a slow step: less than a second, so one warning, the rest counted.
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["event loop stalled 30.0 ms in task slow-worker"]
    assert watch.report() == "event loop: longest step 30.00 ms in task slow-worker; 4 step(s) over 20 ms"


def test_steps_under_the_threshold_are_not_stalls(caplog):
    watch = Watched(SteppedClock(), threshold_ms=50)
    with caplog.at_level(logging.WARNING, logger="trellis.loop"):
        run_with(watch, slow_steps=2)
    assert watch.stalls == 0 and not caplog.records
    assert watch.longest_ms == pytest.approx(30.0)


def test_a_negative_threshold_is_refused():
    with pytest.raises(ValueError, match="threshold_ms must be non-negative, got -1"):
        StallWatch(-1)
