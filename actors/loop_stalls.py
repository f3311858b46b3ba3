"""Event-loop stalls: how long a single task step, or another thread between steps, held the Trio loop.

A Trio task runs uninterrupted from one checkpoint to the next, so the longest
*task step* is the longest time every other actor, stream and timer of the
daemon waited. :class:`StallWatch` is a :class:`trio.abc.Instrument` that
times each step, keeps the longest with its task's name, and logs a warning
for each step over ``threshold_ms`` — at most one a second, counting the ones
it did not log. ``python -m transport --report-loop-stalls MS`` installs it
and reports the longest at exit; it is off by default (its cost is small but
paid on every step).

What a step *held* is its wall time less the time the kernel kept the loop's
thread waiting for a CPU meanwhile (Linux's run-queue delay, the second field
of ``/proc/thread-self/schedstat``). A step that computes, or blocks in a
system call (an ``fsync``), holds the loop; a step that was runnable but
preempted, because other processes wanted the machine's CPUs, held nothing
the daemon could have done otherwise — on a busy 2-core machine that alone
came to 13 ms for a bare quart-trio server. A step the thread ran through
without once leaving its CPU (the schedstat's third field, its count of
timeslices, unchanged: it neither blocked nor was preempted) held no more
than the CPU time it used (``time.thread_time``): in a virtual machine the
host can stop the whole virtual CPU mid-step, and that time (steal, which
the kernel keeps out of a thread's CPU time) is the host's, not the
daemon's. A step that blocked is held for its wall time less its run-queue
delay, as before. Both are reported; the stall threshold and the longest
step are the held time. Where the schedstat cannot be read (not Linux),
held is wall time.

The loop thread can also be held *between* steps: while it waits for I/O it
lets go of the GIL, and a worker thread that takes the GIL and keeps it (``re``
backtracking through a hostile ``grep`` pattern kept it 4.7 s; a C call that
never lets go) leaves the loop thread unable to return from its wait, however
short its timeout, with no step running to time. So each I/O wait is timed
too: one that returned more than the threshold past its timeout, less the
run-queue delay meanwhile (a thread woken on a busy machine waits for a CPU,
which is not a hold), is a stall "outside a task step"
(:data:`OUTSIDE_A_STEP` in the report; the warning says the GIL may have been
held by another thread). Only waits late past the threshold are counted (an
``epoll`` timeout is rounded up to the millisecond, so a millisecond late is
usual). A wait that ended early, on I/O, and then waited for the GIL is not
seen: only the part past its timeout is. The thread can be held, too, in
the scheduler's own code between a step's end and the next step or wait
(the GIL taken while it reads the run-queue delay, a ``pread`` that lets
go of it): that *gap* is timed from the end of one step or wait to the
start of the next, and one over the threshold, less the run-queue delay
meanwhile, is a stall outside a task step as well. It costs nothing more
a step: both ends are the clock readings the steps already take.

Steps are counted from :meth:`StallWatch.arm` on (the daemon arms it when it
listens): start-up before it — imports done, but the HTTP app's routes
compiled, about 30 ms in one step — is before any client can be waiting.

The thread's readings (its schedstat, its CPU time) are taken once a batch
of steps, when the loop's I/O wait ends, not once a step: a step costs two
``perf_counter`` calls (a reading is system calls and a parse, and a daemon
streaming to many subscribers runs tens of thousands of steps a second). Only a step over
the threshold, or longer than the longest so far, is read again at its end,
and measured against the batch's start: of the run-queue delay since, at
most the time that passed before the step began is put down to the steps
before it, and if the thread never left its CPU since, the step held at most
the CPU time used since. Both bounds err toward reporting a hold, never
toward hiding one; they are exact for a batch's first step, and whenever the
thread was not kept waiting earlier in the batch. Per I/O wait it costs two
``perf_counter`` calls and two ``pread`` calls (one before, for a wait that
comes back late; one after, the batch's readings).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable

import trio

log = logging.getLogger("trellis.loop")

LOG_EVERY_SECONDS = 1.0
SCHEDSTAT = "/proc/thread-self/schedstat"
OUTSIDE_A_STEP = "(outside-a-task-step)"  # the "task" of a hold between steps (one word: the report is parsed)


def parse_schedstat(schedstat: bytes) -> tuple[float, int]:
    """Seconds spent waiting on a run queue and timeslices run, from a schedstat line (``<on cpu ns>
    <waiting ns> <slices>``). ``ValueError`` naming the line if it is not one."""
    fields = schedstat.split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        raise ValueError(f"not a schedstat line (three counts): {schedstat!r}")
    return int(fields[1]) / 1e9, int(fields[2])


def parse_run_delay(schedstat: bytes) -> float:
    """Seconds spent waiting on a run queue, from a schedstat line (see :func:`parse_schedstat`)."""
    return parse_schedstat(schedstat)[0]


class RunDelay:
    """The calling thread's run-queue delay so far, in seconds (:func:`parse_run_delay` of its schedstat).

    Opened by the thread it measures (``/proc/thread-self`` is whichever thread
    opens it); :attr:`available` is false where the file cannot be read, and
    then every reading is 0. :meth:`slices` is the timeslice count of the last
    reading.
    """

    def __init__(self, path: str = SCHEDSTAT) -> None:
        self._fd: int | None = None
        self._slices = 0
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            parse_run_delay(os.pread(fd, 128, 0))
        except (OSError, ValueError):
            os.close(fd)
            return
        self._fd = fd

    @property
    def available(self) -> bool:
        return self._fd is not None

    def __call__(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            delay, self._slices = parse_schedstat(os.pread(self._fd, 128, 0))
        except (OSError, ValueError):
            return 0.0
        return delay

    def slices(self) -> int:
        """The timeslices the thread had run at the last reading (-1 where none could be read)."""
        return self._slices if self._fd is not None else -1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StallWatch(trio.abc.Instrument):
    """Times every task step, and every I/O wait between them; :attr:`longest_ms` and :attr:`longest_task` say
    which held the loop longest (:data:`OUTSIDE_A_STEP` for a wait that came back late, past the threshold).

    ``clock`` is the wall clock; ``run_delay`` the loop thread's run-queue delay so
    far in seconds (by default read from schedstat, opened at the run's start, on
    the loop's thread); ``slices`` its timeslice count as of the last ``run_delay``
    reading and ``on_cpu`` its CPU time (by default the same schedstat's and
    ``time.thread_time``; without ``slices`` a step is never held for its CPU
    time alone); ``armed=False`` leaves steps uncounted until :meth:`arm`.
    """

    def __init__(self, threshold_ms: float, *, clock: Callable[[], float] = time.perf_counter,
                 run_delay: Callable[[], float] | None = None, slices: Callable[[], int] | None = None,
                 on_cpu: Callable[[], float] = time.thread_time, armed: bool = True) -> None:
        if threshold_ms < 0:
            raise ValueError(f"threshold_ms must be non-negative, got {threshold_ms}")
        self.threshold = threshold_ms / 1000
        self.longest_ms = 0.0  # held: wall less run-queue delay
        self.longest_task = ""
        self.longest_wall_ms = 0.0  # the longest step's wall time
        self.longest_any_wall_ms = 0.0  # the longest wall time of any step, however little of it was held
        self.stalls = 0  # steps that held the loop over the threshold
        self._clock = clock
        self._run_delay = run_delay
        self._slices = slices
        self._on_cpu = on_cpu
        self._own_run_delay: RunDelay | None = None
        self._measures_run_delay = run_delay is not None and not (isinstance(run_delay, RunDelay)
                                                                  and not run_delay.available)
        self._started: float | None = None  # the current step's start (None: not timed)
        self._batch_started = 0.0  # the current batch's start (the last I/O wait's end) and readings then
        self._delay_at_batch = 0.0
        self._slices_at_batch = -1
        self._cpu_at_batch = 0.0
        self._wait_started: float | None = None  # the current I/O wait's start (None: not timed)
        self._between_since: float | None = None  # the last step's or wait's end: the current gap's start
        self._delay_at_wait = 0.0
        self._logged_at = float("-inf")
        self._unlogged = 0
        self._gc_started: float | None = None  # the running collection's start
        self._gc_in_step = 0.0  # seconds the current step (or wait) spent in garbage collection
        self._gc_generation = -1  # the oldest generation collected in it (-1: none)
        self.longest_gc_ms = 0.0  # of the longest step, the part spent in garbage collection
        self.longest_gc_generation = -1
        self.armed = armed

    def arm(self) -> None:
        """Count steps from now on (the ones before were start-up)."""
        self.armed = True

    @property
    def measures_run_delay(self) -> bool:
        """Whether steps are measured less their run-queue delay (false: held is wall time)."""
        return self._measures_run_delay

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        """A ``gc.callbacks`` entry: adds each collection's time to the step it ran in (a full collection of
        many tracked objects is a common cause of a long step, and otherwise looks like the task's own work)."""
        if phase == "start":
            self._gc_started = self._clock()
        elif self._gc_started is not None:
            self._gc_in_step += self._clock() - self._gc_started
            self._gc_generation = max(self._gc_generation, info.get("generation", -1))
            self._gc_started = None

    def before_run(self) -> None:
        gc.callbacks.append(self._on_collection)
        self._between_since = self._clock() if self.armed else None  # the first gap: to the first step or wait
        if self._run_delay is None or self._own_run_delay is not None:  # (re)opened by each run's thread
            self._own_run_delay = RunDelay()
            self._run_delay = self._own_run_delay
            self._slices = self._own_run_delay.slices if self._own_run_delay.available else None
            self._measures_run_delay = self._own_run_delay.available

    def after_run(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        if self._own_run_delay is not None:
            self._own_run_delay.close()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if not self.armed:
            return  # start-up: nothing to read
        self._started = now = self._clock()
        self._end_gap(now)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        started = self._started
        if not self.armed or started is None:  # start-up, or armed within this step
            return
        now = self._between_since = self._clock()
        wall = now - started
        if wall * 1000 > self.longest_any_wall_ms:
            self.longest_any_wall_ms = wall * 1000
        if wall <= self.threshold and wall * 1000 <= self.longest_ms:
            self._gc_in_step, self._gc_generation = 0.0, -1  # what follows is the gap's
            return  # held no longer than its wall time: neither a stall nor the longest
        held = max(0.0, wall - self._delayed_since(started))
        if self._slices is not None and self._slices() == self._slices_at_batch >= 0:
            # Ran through on its CPU since the batch began: what it held is at most what was used since.
            held = min(held, max(0.0, self._on_cpu() - self._cpu_at_batch))
        self._held(now, held, wall, task.name)
        self._gc_in_step, self._gc_generation = 0.0, -1  # what follows is the gap's

    def _delayed_since(self, started: float, reading: float | None = None) -> float:
        """The run-queue delay put down to the time since ``started``: read against the batch's start (the
        last I/O wait's end), not ``started``, so that a step costs two clock reads; of the delay since the
        batch began, at most the time that passed before ``started`` can be the earlier steps'."""
        if self._run_delay is None:
            return 0.0
        before = max(0.0, started - self._batch_started)
        return max(0.0, (self._run_delay() if reading is None else reading) - self._delay_at_batch - before)

    def _end_gap(self, now: float, reading: float | None = None) -> None:
        """A step or wait starts at ``now``: the gap since the last one's end is a stall if over the threshold."""
        since, self._between_since = self._between_since, None
        if since is not None and now - since > self.threshold:
            gap = now - since
            if gap * 1000 > self.longest_any_wall_ms:
                self.longest_any_wall_ms = gap * 1000
            self._held(now, max(0.0, gap - self._delayed_since(since, reading)), gap, OUTSIDE_A_STEP)
        self._gc_in_step, self._gc_generation = 0.0, -1

    def before_io_wait(self, timeout: float) -> None:
        if not self.armed:
            return
        self._delay_at_wait = self._run_delay() if self._run_delay is not None else 0.0
        self._wait_started = now = self._clock()
        self._end_gap(now, self._delay_at_wait)  # read first: a hold in the reading is in the gap

    def after_io_wait(self, timeout: float) -> None:
        started = self._wait_started
        if started is None:  # start-up, or armed during the wait
            return
        self._wait_started = None
        now = self._between_since = self._clock()  # the readings below are in the gap that follows
        late = now - started - timeout  # the loop thread could not come back: the GIL, or a stopped process
        if late > self.threshold:
            self._held_in_wait(now, late)
        self._gc_in_step, self._gc_generation = 0.0, -1
        self._batch_started = self._clock()  # the readings the batch's steps are measured against
        self._delay_at_batch = self._run_delay() if self._run_delay is not None else 0.0
        if self._slices is not None:
            self._slices_at_batch = self._slices()
            self._cpu_at_batch = self._on_cpu()

    def _held_in_wait(self, now: float, late: float) -> None:
        delayed = self._run_delay() - self._delay_at_wait if self._run_delay is not None else 0.0
        held = max(0.0, late - max(0.0, delayed))
        if late * 1000 > self.longest_any_wall_ms:
            self.longest_any_wall_ms = late * 1000
        self._held(now, held, late, OUTSIDE_A_STEP)

    def _held(self, now: float, held: float, wall: float, name: str) -> None:
        """Keep ``held`` seconds (of ``wall``) by ``name`` if the longest; count and log it if a stall."""
        in_gc = min(self._gc_in_step, wall) * 1000
        if held * 1000 > self.longest_ms:
            self.longest_ms, self.longest_task, self.longest_wall_ms = held * 1000, name, wall * 1000
            self.longest_gc_ms, self.longest_gc_generation = in_gc, self._gc_generation
        if held > self.threshold:
            self.stalls += 1
            if now - self._logged_at >= LOG_EVERY_SECONDS:
                more = f" ({self._unlogged} more not logged)" if self._unlogged else ""
                more = (f" ({in_gc:.1f} ms of it collecting garbage, generation {self._gc_generation})"
                        if in_gc else "") + more
                if name == OUTSIDE_A_STEP:
                    log.warning("event loop stalled %.1f ms outside a task step: the loop thread was held "
                                "(GIL held by another thread?)%s", held * 1000, more)
                else:
                    log.warning("event loop stalled %.1f ms in task %s%s", held * 1000, name, more)
                self._logged_at, self._unlogged = now, 0
            else:
                self._unlogged += 1

    def report(self) -> str:
        """One line for the end of a run."""
        how = (f"{self.longest_wall_ms:.2f} ms wall; longest wall step {self.longest_any_wall_ms:.2f} ms"
               if self.measures_run_delay else "run-queue delay unknown: wall time")
        if self.longest_gc_ms:
            how += (f"; {self.longest_gc_ms:.2f} ms of it collecting garbage, generation "
                    f"{self.longest_gc_generation}")
        return (f"event loop: longest step {self.longest_ms:.2f} ms in task {self.longest_task or '-'} ({how}); "
                f"{self.stalls} step(s) over {self.threshold * 1000:g} ms")


__all__ = ["OUTSIDE_A_STEP", "RunDelay", "StallWatch", "parse_run_delay", "parse_schedstat"]
