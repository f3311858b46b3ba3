"""Exploring seeds and shrinking a failing one: what ``--explore`` and ``--shrink`` do.

A seed fixes two things: Trio's scheduling choices and the value of each window (``jitter.py``).
:func:`explore` replays fresh seeds and reports how many distinct traces (and distinct orders of
what happened, times aside) they produced, and which seeds failed. :func:`shrink` keeps a
failing seed's scheduling and moves each window's value as close to the window's start as it can
while the replay still fails the same way, giving the smallest schedule that shows the failure;
the result replays with ``--seed S --jitter KEY=VALUE ...``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any

import attrs
import orjson

from .determinism import SEED_CYCLE
from .jitter import Window
from .runner import Result, replay
from .scenario import Scenario
from .trace import Trace, update_kind

FRESH_SEEDS_FROM = 1000  # explored seeds start above the ones CI replays (0..19)
MIN_RACE_TRACES = 5  # a scenario built on a race must show at least this many traces over 20 seeds


def _skeleton(r: dict[str, Any]) -> Any:
    """What a record says happened, without when or with which time-derived values (``queuedAt``)."""
    kind = r["kind"]
    if kind == "event":
        return [kind, r["session"], r["gen"], r["type"], update_kind(r), r["promptId"]]
    if kind == "model":
        last = r["messages"][-1] if r["messages"] else {}
        return [kind, r.get("session"), r.get("promptId"), last.get("role"), last.get("origin"), "refused" in r]
    if kind in ("action", "result"):
        value = r.get("value")
        shape = sorted(value) if isinstance(value, dict) else type(value).__name__
        return [kind, r["step"], r["do"], shape, value.get("accepted") if isinstance(value, dict) else None]
    if kind in ("guard", "hook", "bridge", "signal"):
        return [kind, r.get("session"), r.get("changed"), r.get("what"), r.get("tool")]
    return [kind]


def order_digest(trace: Trace) -> str:
    """The digest of what happened in which order — events, model calls, steps — without virtual times
    or anything derived from them: two traces that differ only in timing have the same order."""
    lines = [orjson.dumps(_skeleton(r)) for r in trace.records if r["kind"] not in ("schedule", "status", "client")]
    return hashlib.sha256(b"\n".join(lines)).hexdigest()


def fresh_base(rng: random.Random | None = None) -> int:
    """A random first seed for an exploration (printed, so the run can be repeated with ``--from``), within one
    cycle of seeds (``determinism.SEED_CYCLE``: seeds beyond it repeat the interleavings of the ones below)."""
    return (rng or random.SystemRandom()).randrange(FRESH_SEEDS_FROM, SEED_CYCLE)


@attrs.frozen
class Exploration:
    scenario: Scenario
    seeds: list[int]
    results: list[Result]

    @property
    def traces(self) -> int:
        return len({r.digest for r in self.results})

    @property
    def orders(self) -> int:
        return len({order_digest(r.trace) for r in self.results})

    @property
    def failing(self) -> list[Result]:
        return [r for r in self.results if r.failures]

    @property
    def invariant_failures(self) -> int:
        return sum(1 for r in self.failing if any(f.startswith("invariant ") for f in r.failures))


def explore(scenario: Scenario, seeds: list[int],
            run: Callable[[Scenario, int], Result] = lambda s, seed: replay(s, seed)) -> Exploration:
    """Replay ``scenario`` with each seed (expectations and invariants checked; no goldens)."""
    return Exploration(scenario, seeds, [run(scenario, seed) for seed in seeds])


def failure_kind(failure: str) -> str:
    """What failed, without the details: ``invariant fifo_order``, ``expect.model_calls``, ``crashed``."""
    return failure.split(":", 1)[0]


@attrs.frozen
class Shrunk:
    seed: int
    kind: str  # the failure kept while shrinking
    before: dict[str, float]  # the seed's own schedule
    after: dict[str, float]  # the smallest schedule found that still fails that way
    replays: int  # how many replays the shrink took

    @property
    def changed(self) -> dict[str, tuple[float, float]]:
        return {k: (self.before[k], v) for k, v in self.after.items() if v != self.before[k]}


def shrink(scenario: Scenario, seed: int, *, kind: str | None = None, max_replays: int = 400) -> Shrunk:
    """Move each window of ``seed``'s schedule toward its start while the replay keeps failing with
    ``kind`` (default: its first failure's). Greedy per window — first the start itself, then a
    bisection on the window's grid — repeated until nothing moves."""
    first = replay(scenario, seed)
    if not first.failures:
        raise ValueError(f"seed {seed} does not fail; nothing to shrink")
    kind = kind or failure_kind(first.failures[0])
    before = dict(first.schedule)
    current = dict(before)
    replays = 1

    def fails(values: dict[str, float]) -> bool:
        nonlocal replays
        replays += 1
        return any(failure_kind(f) == kind for f in replay(scenario, seed, jitters=values).failures)

    windows: dict[str, Window] = {w.key: w for w in scenario.windows}
    moved = True
    while moved and replays < max_replays:
        moved = False
        for key, window in windows.items():
            if current[key] == window.lo or replays >= max_replays:
                continue
            if fails({**current, key: window.lo}):
                current[key], moved = window.lo, True
                continue
            # Bisect on the window's grid: point lo passes, point hi (the current value) fails.
            lo, hi = 0, round((current[key] - window.lo) / window.step)
            while hi - lo > 1 and replays < max_replays:
                mid = (lo + hi) // 2
                if fails({**current, key: window.value(mid)}):
                    hi = mid
                else:
                    lo = mid
            if window.value(hi) < current[key]:
                current[key], moved = window.value(hi), True
    return Shrunk(seed, kind, before, current, replays)
