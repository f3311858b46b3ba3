"""Event-loop stalls: how long a single task step held the Trio loop.

A Trio task runs uninterrupted from one checkpoint to the next, so the longest
*task step* is the longest time every other actor, stream and timer of the
daemon waited. :class:`StallWatch` is a :class:`trio.abc.Instrument` that
times each step (two ``perf_counter`` calls), keeps the longest with its
task's name, and logs a warning for each step over ``threshold_ms`` — at most
one a second, counting the ones it did not log. ``python -m transport
--report-loop-stalls MS`` installs it and reports the longest at exit; it is
off by default (its cost is small but paid on every step).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

log = logging.getLogger("trellis.loop")

LOG_EVERY_SECONDS = 1.0


class StallWatch(trio.abc.Instrument):
    """Times every task step; :attr:`longest_ms` and :attr:`longest_task` say which held the loop longest."""

    def __init__(self, threshold_ms: float, *, clock: Callable[[], float] = time.perf_counter) -> None:
        if threshold_ms < 0:
            raise ValueError(f"threshold_ms must be non-negative, got {threshold_ms}")
        self.threshold = threshold_ms / 1000
        self.longest_ms = 0.0
        self.longest_task = ""
        self.stalls = 0  # steps over the threshold
        self._clock = clock
        self._started = 0.0
        self._logged_at = float("-inf")
        self._unlogged = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = self._clock()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        now = self._clock()
        took = now - self._started
        if took * 1000 > self.longest_ms:
            self.longest_ms = took * 1000
            self.longest_task = task.name
        if took > self.threshold:
            self.stalls += 1
            if now - self._logged_at >= LOG_EVERY_SECONDS:
                more = f" ({self._unlogged} more not logged)" if self._unlogged else ""
                log.warning("event loop stalled %.1f ms in task %s%s", took * 1000, task.name, more)
                self._logged_at, self._unlogged = now, 0
            else:
                self._unlogged += 1

    def report(self) -> str:
        """One line for the end of a run."""
        return (f"event loop: longest step {self.longest_ms:.2f} ms in task {self.longest_task or '-'}; "
                f"{self.stalls} step(s) over {self.threshold * 1000:g} ms")


__all__ = ["StallWatch"]
