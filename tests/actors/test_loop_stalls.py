"""StallWatch: the longest task step, by name, less its run-queue delay, and rate-limited warnings of steps
over the threshold; counted once armed. A thread that holds the GIL between steps is seen as an I/O wait that
came back late, or a gap between one step's end and the next step or wait."""

from __future__ import annotations

import gc
import logging
import math
import re
import time
from functools import partial

import pytest
import trio

from actors.loop_stalls import OUTSIDE_A_STEP, RunDelay, StallWatch, parse_run_delay, parse_schedstat


class SteppedClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Watched(StallWatch):
    """A StallWatch whose steps take what the test says they take (a task named slow-*: 30 ms, of which
    ``delayed`` seconds waiting for a CPU)."""

    def __init__(self, clock: SteppedClock, threshold_ms: float, delayed: float = 0.0, armed: bool = True,
                 on_cpu: float | None = None, blocks: bool = False) -> None:
        """``on_cpu``: seconds of CPU time a slow step uses, its slices counted (without it, none are);
        ``blocks``: each slow step leaves its CPU once (its timeslice count moves on)."""
        self.run_delay = 0.0
        self.cpu = 0.0
        self.slices = 0
        counted = on_cpu is not None
        super().__init__(threshold_ms, clock=clock, run_delay=lambda: self.run_delay, armed=armed,
                         slices=(lambda: self.slices) if counted else None, on_cpu=lambda: self.cpu)
        self.fake = clock
        self.delayed = delayed
        self.step_cpu = on_cpu or 0.0
        self.blocks = blocks

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        slow = task.name.startswith("slow")
        self.fake.now += 0.030 if slow else 0.0001
        self.run_delay += self.delayed if slow else 0.0
        self.cpu += self.step_cpu if slow else 0.0001
        self.slices += 1 if slow and self.blocks else 0
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
    assert watch.report() == ("event loop: longest step 30.00 ms in task slow-worker (30.00 ms wall; longest wall "
                              "step 30.00 ms); 4 step(s) over 20 ms")


def test_steps_under_the_threshold_are_not_stalls(caplog):
    watch = Watched(SteppedClock(), threshold_ms=50)
    with caplog.at_level(logging.WARNING, logger="trellis.loop"):
        run_with(watch, slow_steps=2)
    assert watch.stalls == 0 and not caplog.records
    assert watch.longest_ms == pytest.approx(30.0)


def test_a_negative_threshold_is_refused():
    with pytest.raises(ValueError, match="threshold_ms must be non-negative, got -1"):
        StallWatch(-1)


def test_time_spent_waiting_for_a_cpu_is_not_held(caplog):
    watch = Watched(SteppedClock(), threshold_ms=20, delayed=0.025)  # 25 of each slow step's 30 ms: preempted
    with caplog.at_level(logging.WARNING, logger="trellis.loop"):
        run_with(watch, slow_steps=3)
    assert watch.stalls == 0 and not caplog.records
    assert watch.longest_ms == pytest.approx(5.0)
    assert watch.longest_wall_ms == pytest.approx(30.0) and watch.longest_any_wall_ms == pytest.approx(30.0)
    assert watch.report() == ("event loop: longest step 5.00 ms in task slow-worker (30.00 ms wall; longest wall "
                              "step 30.00 ms); 0 step(s) over 20 ms")


class TwoInABatch(StallWatch):
    """Tasks named delayed-* step for 30 ms all spent waiting for a CPU, busy-* for 30 ms of work."""

    def __init__(self) -> None:
        self.fake = SteppedClock()
        self.run_delay = 0.0
        super().__init__(20, clock=self.fake, run_delay=lambda: self.run_delay)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith(("delayed", "busy")):
            self.fake.now += 0.030
            self.run_delay += 0.030 if task.name.startswith("delayed") else 0.0
        super().after_task_step(task)


def test_a_step_is_not_excused_by_the_cpu_wait_of_an_earlier_step_in_its_batch():
    """Readings are taken once a batch (at the I/O wait's end), not once a step: of the delay since, at most
    the time before a step is put down to the steps before it, so a step's hold is never under-reported."""
    async def main() -> None:
        async with trio.open_nursery() as nursery:  # both first steps run in the same batch, in either order
            nursery.start_soon(trio.lowlevel.checkpoint, name="delayed-one")
            nursery.start_soon(trio.lowlevel.checkpoint, name="busy-one")

    for _ in range(12):  # Trio picks the order at random: both orders, all but surely
        watch = TwoInABatch()
        trio.run(main, instruments=[watch])
        assert (watch.longest_task, watch.longest_ms) == ("busy-one", pytest.approx(30.0))


def test_a_step_that_never_left_its_cpu_held_only_the_cpu_time_it_used():
    # 30 ms of wall time, 2 ms of it on the CPU, the thread never descheduled: the host took the rest (steal).
    watch = Watched(SteppedClock(), threshold_ms=20, on_cpu=0.002)
    run_with(watch, slow_steps=3)
    assert watch.stalls == 0 and watch.longest_ms == pytest.approx(2.0)
    assert watch.longest_wall_ms == pytest.approx(30.0)


def test_a_step_that_blocked_held_its_wall_time_whatever_cpu_it_used():
    # The same 2 ms of CPU, but the thread left its CPU (an fsync, a read from disk): the loop waited on it.
    watch = Watched(SteppedClock(), threshold_ms=20, on_cpu=0.002, blocks=True)
    run_with(watch, slow_steps=3)
    assert watch.stalls == 4 and watch.longest_ms == pytest.approx(30.0)


def test_steps_before_it_is_armed_are_not_counted():
    watch = Watched(SteppedClock(), threshold_ms=20, armed=False)
    run_with(watch, slow_steps=3)
    assert watch.stalls == 0 and watch.longest_ms == 0.0 and watch.longest_any_wall_ms == 0.0
    watch.arm()
    run_with(watch, slow_steps=1)
    assert watch.stalls == 2 and watch.longest_ms == pytest.approx(30.0)


def test_a_schedstat_line_gives_its_run_queue_delay_and_anything_else_is_refused():
    assert parse_run_delay(b"139918 2500000000 2\n") == pytest.approx(2.5)
    assert parse_schedstat(b"139918 2500000000 7\n") == (pytest.approx(2.5), 7)
    with pytest.raises(ValueError, match="not a schedstat line"):
        parse_run_delay(b"139918 -1 2")
    with pytest.raises(ValueError, match="not a schedstat line"):
        parse_run_delay(b"")


@pytest.mark.skipif(not RunDelay().available, reason="no /proc/thread-self/schedstat here")
def test_the_threads_run_queue_delay_is_read_from_schedstat_and_never_goes_back():
    delay = RunDelay()
    try:
        readings = [delay() for _ in range(100)]
    finally:
        delay.close()
    assert readings == sorted(readings) and readings[0] >= 0.0
    assert delay() == 0.0  # closed: nothing more to read


@pytest.mark.skipif(not RunDelay().available, reason="no /proc/thread-self/schedstat here")
def test_a_thread_that_sleeps_runs_a_new_timeslice_when_it_wakes():
    delay = RunDelay()
    try:
        delay()
        before = delay.slices()
        time.sleep(0.01)
        delay()
        assert delay.slices() > before >= 0
    finally:
        delay.close()
    assert delay.slices() == -1  # closed: nothing known


@pytest.mark.skipif(not RunDelay().available, reason="no /proc/thread-self/schedstat here")
def test_a_step_that_computes_is_held_for_its_computing_on_the_real_clocks():
    watch = StallWatch(5)

    async def main() -> None:
        end = time.perf_counter() + 0.030
        while time.perf_counter() < end:  # 30 ms of work in one step, no system call that blocks
            pass

    trio.run(main, instruments=[watch])
    assert watch.longest_ms >= 5.0 and watch.stalls >= 1


def test_the_time_a_step_spent_collecting_garbage_is_said_with_its_generation(caplog):
    """A full collection runs inside whichever step allocated last; the report says how much of the longest
    step it was, so a collector pause is not taken for the task's own work."""
    clock = SteppedClock()
    watch = StallWatch(20, clock=clock, run_delay=lambda: 0.0)

    def collection_of_40_ms(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            clock.now += 0.040

    async def collector() -> None:
        await trio.lowlevel.checkpoint()  # a step without a collection
        gc.callbacks.insert(0, collection_of_40_ms)  # before the watch's own, which reads the clock at "stop"
        try:
            clock.now += 0.005
            gc.collect(2)
        finally:
            gc.callbacks.remove(collection_of_40_ms)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collector, name="collector")

    with caplog.at_level(logging.WARNING, logger="trellis.loop"):
        trio.run(main, instruments=[watch])
    assert watch.longest_ms == pytest.approx(45.0)
    assert (watch.longest_gc_ms, watch.longest_gc_generation) == (pytest.approx(40.0), 2)
    assert "45.00 ms wall; longest wall step 45.00 ms; 40.00 ms of it collecting garbage, generation 2" in \
        watch.report()
    assert [r.getMessage() for r in caplog.records] == [
        "event loop stalled 45.0 ms in task collector (40.0 ms of it collecting garbage, generation 2)"]
    assert watch._on_collection not in gc.callbacks  # removed when the run ends


def test_without_schedstat_held_is_wall_time(tmp_path):
    missing = RunDelay(str(tmp_path / "no-such-file"))
    assert not missing.available and missing() == 0.0
    watch = StallWatch(20, clock=SteppedClock(), run_delay=missing)
    assert not watch.measures_run_delay
    assert watch.report() == ("event loop: longest step 0.00 ms in task - (run-queue delay unknown: wall time); "
                              "0 step(s) over 20 ms")


class HeldBetweenSteps(StallWatch):
    """A StallWatch whose I/O waits come back ``late`` seconds past their timeout, ``delayed`` of it waiting for a
    CPU (the test's clock and run-queue delay)."""

    def __init__(self, threshold_ms: float, late: float, delayed: float = 0.0) -> None:
        self.fake = SteppedClock()
        self.run_delay = 0.0
        super().__init__(threshold_ms, clock=self.fake, run_delay=lambda: self.run_delay)
        self.late = late
        self.delayed = delayed

    def after_io_wait(self, timeout: float) -> None:
        self.fake.now += timeout + self.late
        self.run_delay += self.delayed
        super().after_io_wait(timeout)


def sleep_in_steps(watch: StallWatch) -> None:
    async def main() -> None:
        for _ in range(3):
            await trio.sleep(0.001)

    trio.run(main, instruments=[watch])


def test_an_io_wait_that_came_back_late_is_a_stall_outside_a_task_step(caplog):
    watch = HeldBetweenSteps(threshold_ms=20, late=0.030)
    with caplog.at_level(logging.WARNING, logger="trellis.loop"):
        sleep_in_steps(watch)
    assert watch.stalls >= 3 and watch.longest_task == OUTSIDE_A_STEP
    assert watch.longest_ms == pytest.approx(30.0) and watch.longest_wall_ms == pytest.approx(30.0)
    assert caplog.records[0].getMessage() == \
        "event loop stalled 30.0 ms outside a task step: the loop thread was held (GIL held by another thread?)"
    assert OUTSIDE_A_STEP in watch.report() and " " not in OUTSIDE_A_STEP  # the report's task is one word


def test_an_io_wait_late_only_by_waiting_for_a_cpu_or_by_less_than_the_threshold_is_no_stall():
    preempted = HeldBetweenSteps(threshold_ms=20, late=0.030, delayed=0.025)
    sleep_in_steps(preempted)
    assert preempted.stalls == 0 and preempted.longest_ms == pytest.approx(5.0)
    rounded = HeldBetweenSteps(threshold_ms=20, late=0.001)  # epoll rounds its timeout up to the millisecond
    sleep_in_steps(rounded)
    assert rounded.stalls == 0 and rounded.longest_task != OUTSIDE_A_STEP


class HeldInAReading(StallWatch):
    """A StallWatch whose loop thread is held ``hold`` seconds in its ``reading``-th run-queue delay reading (a
    ``pread`` lets go of the GIL; another thread takes it and keeps it), between steps, outside any I/O wait."""

    def __init__(self, threshold_ms: float, hold: float, reading: int) -> None:
        self.fake = SteppedClock()
        self.readings = 0

        def run_delay() -> float:
            self.readings += 1
            if self.readings == reading:
                self.fake.now += hold
            return 0.0

        super().__init__(threshold_ms, clock=self.fake, run_delay=run_delay)


@pytest.mark.parametrize("reading", [1, 2, 3, 4])  # before a wait, after it (before the next step), alternately
def test_a_hold_between_a_step_and_the_next_step_or_wait_is_a_stall_outside_a_task_step(reading, caplog):
    watch = HeldInAReading(threshold_ms=100, hold=0.5, reading=reading)
    with caplog.at_level(logging.WARNING, logger="trellis.loop"):
        sleep_in_steps(watch)
    assert watch.readings > reading  # the hold came while the loop ran, not at its end
    assert watch.stalls == 1 and watch.longest_task == OUTSIDE_A_STEP, watch.report()
    assert watch.longest_ms == pytest.approx(500.0) and watch.longest_any_wall_ms == pytest.approx(500.0)
    assert [r.getMessage() for r in caplog.records] == [
        "event loop stalled 500.0 ms outside a task step: the loop thread was held (GIL held by another thread?)"]


def gil_holding_input(seconds: float) -> str:
    """A line ``re`` backtracks through for about ``seconds`` with ``(a|aa)+$``, holding the GIL: each ``a``
    more costs about 1.6 times as long (Fibonacci), measured from a short one here."""
    def took() -> float:
        start = time.perf_counter()
        re.search(r"(a|aa)+$", "a" * 22 + "!")
        return time.perf_counter() - start

    base = max(min(took() for _ in range(3)), 1e-5)  # the quickest: the least disturbed by other processes
    more = max(0, math.ceil(math.log(seconds / base) / math.log(1.618)))
    return "a" * min(22 + more, 40) + "!"


def test_a_thread_holding_the_gil_while_the_loop_sleeps_is_reported_on_the_real_clocks(caplog):
    watch = StallWatch(100)
    text = gil_holding_input(0.5)
    held: list[float] = []

    def hold() -> None:
        time.sleep(0.05)  # the loop is back in its I/O wait, between steps, when the hold starts
        start = time.perf_counter()
        re.search(r"(a|aa)+$", text)  # re never lets go of the GIL while it matches
        held.append(time.perf_counter() - start)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(trio.to_thread.run_sync, hold))
            with trio.fail_after(30):
                while not held:
                    await trio.sleep(0.005)  # short steps, and short waits between them

    with caplog.at_level(logging.WARNING, logger="trellis.loop"):
        trio.run(main, instruments=[watch])
    assert held[0] > 0.3, f"the hold took only {held[0]:.2f} s; the test needs a longer one"
    assert watch.stalls >= 1 and watch.longest_ms > 200, watch.report()
    if watch.longest_task == OUTSIDE_A_STEP:
        assert any("outside a task step" in r.getMessage() for r in caplog.records)
    else:  # the thread woke while a step ran, and took the GIL from it mid-step (1 in a few hundred)
        assert watch.longest_task.endswith("<locals>.main"), watch.report()
