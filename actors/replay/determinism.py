"""Making Trio's scheduler replayable: the private flag and the seeded RNG.

Trio picks the order of each batch of runnable tasks with a module-level
``random.Random`` (``trio._core._run._r``). With the private flag
``_ALLOW_DETERMINISTIC_SCHEDULING`` on, every batch is first sorted by task
creation order and then shuffled with ``_r``, so a seed fixes the interleaving —
in this process and in any other (see ``reference/trio-notes.md`` section 2).
With the flag off, ties are broken partly by memory addresses and seeds do not
replay. Both names are private: ``tests/actors/replay/test_determinism.py``
fails loudly if a Trio upgrade removes or changes them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import trio
import trio.testing
from trio._core import _run as _trio_run

T = TypeVar("T")

FLAG = "_ALLOW_DETERMINISTIC_SCHEDULING"


def scheduler_rng() -> Any:
    """Trio's scheduler RNG (private API; guarded by a test)."""
    return _trio_run._r


@contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """Make every ``trio.run`` in the body schedule deterministically from ``seed``.

    Saves and restores the RNG state and the flag, so it nests inside test
    suites that have turned the flag on themselves (importing hypothesis does).
    Not for use while another Trio run is live in another thread: the RNG is global.
    """
    rng = scheduler_rng()
    saved_flag = getattr(_trio_run, FLAG)
    saved_state = rng.getstate()
    setattr(_trio_run, FLAG, True)
    rng.seed(seed)  # an int seed does not depend on PYTHONHASHSEED
    try:
        yield
    finally:
        rng.setstate(saved_state)
        setattr(_trio_run, FLAG, saved_flag)


def run_deterministic(async_fn: Callable[..., Awaitable[T]], *args: Any, seed: int = 0) -> T:
    """``trio.run(async_fn, *args)`` under virtual time with the scheduler seeded by ``seed``.

    The clock is ``MockClock(autojump_threshold=0)``: it starts at 0 and jumps to
    the next deadline whenever every task is blocked, so sleeps cost nothing.
    """
    with deterministic(seed):
        return trio.run(async_fn, *args, clock=trio.testing.MockClock(autojump_threshold=0))
