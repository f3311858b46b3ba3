"""Making Trio's scheduler replayable from a seed, through public APIs only.

Trio runs each batch of runnable tasks in an order it draws from a random
number generator of its own. Trio registers itself as a Hypothesis plugin:
importing Hypothesis makes that order depend on nothing but the generator
(each batch sorted by task creation order, then shuffled), and hands the
generator to Hypothesis, which seeds it to the same state whenever it runs a
test case. So a replay runs as one Hypothesis test case (an explicit example:
nothing is generated), and the seed is applied inside the run:

    state       how it is set                                         public API
    ----------  ----------------------------------------------------  -------------------------------
    base        Hypothesis seeds Trio's generator at the case's start  trio's Hypothesis plugin;
                                                                       @given, @example, settings
    seed N      the run's first batches shuffle tasks that do          trio.open_nursery, start_soon,
                nothing: N % 4096 + 1 draws in all, so each N up to   trio.lowlevel.checkpoint
                4,096 leaves the generator in a state of its own
    the rest    every later batch is shuffled from there: the same
                seed, the same interleaving, in any process

Applying a seed costs a task step a draw (35 ms at most); seeds N and
N + 4,096 give the same interleaving. A seed replays the same interleaving
only with the same Trio and Hypothesis releases, as the goldens already
assumed of Trio. :func:`check_deterministic` runs a probe once a process and
refuses to replay when the plugin is not in force (``HYPOTHESIS_NO_PLUGINS``
set, or a Trio without it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
import trio.testing

T = TypeVar("T")

SEED_CYCLE = 4096  # seeds N and N + SEED_CYCLE replay the same interleaving
SPINNERS = 64  # tasks that checkpoint together to apply a seed: a draw costs a task step, not a task
PROBE_RUNS = 12  # a probe without determinism repeats by chance with odds of about 1 in 2**11


class NotDeterministic(RuntimeError):
    """Trio's scheduler cannot be seeded here (the message says why)."""


def _hypothesis() -> Any:
    try:
        import hypothesis  # loads Trio's plugin on first import
    except ImportError:
        raise NotDeterministic("replays need the hypothesis package (pip install hypothesis): Trio's scheduler "
                               "is seeded through its Hypothesis plugin") from None
    return hypothesis


def _as_test_case(fn: Callable[[], T]) -> T:
    """``fn()`` run as one explicit Hypothesis test case: Trio's generator starts from the same state."""
    hypothesis = _hypothesis()
    from hypothesis import strategies as st

    box: list[tuple[bool, Any]] = []

    @hypothesis.settings(database=None, phases=(hypothesis.Phase.explicit,), deadline=None,
                         suppress_health_check=list(hypothesis.HealthCheck), print_blob=False,
                         report_multiple_bugs=False)
    @hypothesis.example(None)
    @hypothesis.given(st.none())
    def case(_: None) -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # raised below, not wrapped in Hypothesis's report
            box.append((False, exc))

    case()
    ok, value = box[0]
    if not ok:
        raise value
    return value


async def _nothing() -> None:
    pass


async def _spin(rounds: int) -> None:
    for _ in range(rounds):
        await trio.lowlevel.checkpoint()


async def apply_seed(seed: int) -> None:
    """Move Trio's scheduler generator on by ``seed % SEED_CYCLE + 1`` draws (in a run started by
    :func:`run_deterministic`, or in any run inside a Hypothesis test case)."""
    if seed < 0:
        raise ValueError(f"a replay seed is 0 or more, not {seed}")
    rounds, rest = divmod(seed % SEED_CYCLE, SPINNERS - 1)
    async with trio.open_nursery() as nursery:  # each round one batch of SPINNERS tasks: SPINNERS - 1 draws
        for _ in range(SPINNERS if rounds else 0):
            nursery.start_soon(_spin, rounds)
    async with trio.open_nursery() as nursery:  # then one batch of rest + 2 tasks: rest + 1 draws
        for _ in range(rest + 2):
            nursery.start_soon(_nothing)


async def _probe(log: list[int]) -> None:
    async def racer(n: int) -> None:
        for _ in range(2):
            log.append(n)
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for n in range(6):
            nursery.start_soon(racer, n)


_checked: list[bool] = []


def check_deterministic() -> None:
    """Raise :class:`NotDeterministic` unless a seed fixes Trio's interleaving here (probed once a process)."""
    if _checked:
        return
    runs = set()
    for _ in range(PROBE_RUNS):
        log: list[int] = []
        _as_test_case(lambda: trio.run(_probe, log))  # noqa: B023 (called at once)
        runs.add(tuple(log))
    if len(runs) > 1:
        raise NotDeterministic("Trio's scheduler is not deterministic under Hypothesis here: its Hypothesis "
                               "plugin did not load (is HYPOTHESIS_NO_PLUGINS set?), so a seed cannot fix an "
                               "interleaving and goldens cannot be compared")
    _checked.append(True)


def run_deterministic(async_fn: Callable[..., Awaitable[T]], *args: Any, seed: int = 0,
                      clock: trio.abc.Clock | None = None) -> T:
    """``trio.run(async_fn, *args)`` with the interleaving fixed by ``seed``, on virtual time.

    The clock is ``clock``, else ``MockClock(autojump_threshold=0)``: it starts at 0 and jumps to the next
    deadline whenever every task is blocked, so sleeps cost nothing.
    """
    check_deterministic()

    async def seeded() -> T:
        await apply_seed(seed)
        return await async_fn(*args)

    return _as_test_case(lambda: trio.run(seeded, clock=clock or trio.testing.MockClock(autojump_threshold=0)))
