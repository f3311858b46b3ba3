"""Races: virtual times a scenario leaves open, and the schedule a seed picks for them.

Wherever a scenario gives a time in seconds — a step's ``at``, a model response's ``delay`` or a
``sleep`` step, a hook run's ``delay``, an action's ``finish_at`` or ``delay`` — it may give a
window instead::

    {"at": {"between": [1.5, 3]}, "do": "mid_turn", "text": "also the docs"}

Each window is a :class:`Window` keyed by where it is in the file (``timeline[2].at``,
``model[1].steps[0].sleep``). A :class:`Schedule` picks a value for every window of a scenario
from the replay's seed, with an RNG of its own (Trio's scheduler keeps its own, seeded with the
same seed): the same seed gives the same schedule in any process. Values lie on a grid: whole
milliseconds, or ``step`` seconds apart (``{"between": [1, 3], "step": 0.5}``) — a coarse grid
makes two windows land on the same instant now and then, where the scheduler alone decides what
comes first. Windows are drawn in file order whatever else happens, so overriding one
(``--jitter KEY=VALUE``, which ``--shrink`` prints) leaves the others as the seed drew them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from . import fields as F

MILLISECOND = 0.001  # the default grid: readable traces, and a finite space to shrink in


@attrs.frozen
class Window:
    """A time left open: a value in ``[lo, hi]`` (seconds) on a grid of ``step``, picked per seed.
    ``key`` is where it is in the file."""

    lo: float
    hi: float
    key: str
    step: float = MILLISECOND

    @property
    def points(self) -> int:
        """How many values it can take."""
        return int((self.hi - self.lo) / self.step + 1e-9) + 1

    def value(self, k: int) -> float:
        """Its ``k``-th value from ``lo``."""
        return round(self.lo + k * self.step, 6)


def seconds(value: Any, where: str, ctx: F.ParseContext) -> float | Window:
    """A field check: non-negative seconds, or a window ``{"between": [lo, hi]}`` (recorded in ``ctx``)."""
    if isinstance(value, dict):
        if "between" not in value or set(value) - {"between", "step"}:
            raise ctx.fail(where, 'seconds, or a window {"between": [lo, hi], "step"?: seconds}', value)
        bounds = value["between"]
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise ctx.fail(f"{where}.between", "two numbers [lo, hi]", bounds)
        lo = F.number(bounds[0], f"{where}.between[0]", ctx)
        hi = F.number(bounds[1], f"{where}.between[1]", ctx)
        if hi < lo:
            raise ctx.fail(f"{where}.between", "lo <= hi", bounds)
        step = F.number(value.get("step", MILLISECOND), f"{where}.step", ctx)
        if step < MILLISECOND:
            raise ctx.fail(f"{where}.step", "a grid of at least 0.001 seconds", value["step"])
        window = Window(lo, hi, where, step)
        ctx.windows.append(window)
        return window
    return F.number(value, where, ctx)


def earliest(value: float | Window) -> float:
    return value.lo if isinstance(value, Window) else value


def latest(value: float | Window) -> float:
    return value.hi if isinstance(value, Window) else value


class BadOverride(ValueError):
    """A ``--jitter`` override that names no window, or a value outside its window."""


class Schedule:
    """The value of every window of one scenario for one seed (``values``: key -> seconds)."""

    def __init__(self, windows: Iterable[Window], seed: int, overrides: Mapping[str, float] | None = None) -> None:
        windows = list(windows)
        self.windows = {w.key: w for w in windows}
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.windows))
        if unknown:
            raise BadOverride(f"no window {unknown[0]!r} in this scenario (windows: {sorted(self.windows)})")
        # A string seed is hashed with SHA-512, never with PYTHONHASHSEED: stable across processes.
        rng = random.Random(f"trellis-replay-schedule:{seed}")
        self.values: dict[str, float] = {}
        for w in windows:
            drawn = w.value(rng.randrange(w.points))  # always drawn, so an override leaves the others put
            value = overrides.get(w.key, drawn)
            if not w.lo <= value <= w.hi:
                raise BadOverride(f"{w.key}={value:g} is outside its window [{w.lo:g}, {w.hi:g}]")
            self.values[w.key] = value
        self.overridden = sorted(overrides)

    def resolve(self, value: Any) -> Any:
        """``value`` with every window replaced by its value (through dicts, lists and tuples)."""
        if isinstance(value, Window):
            return self.values[value.key]
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.resolve(v) for v in value)
        return value


def lowest(value: Any) -> Any:
    """``value`` with every window replaced by its lower bound (for checks made before any seed)."""
    if isinstance(value, Window):
        return value.lo
    if isinstance(value, dict):
        return {k: lowest(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(lowest(v) for v in value)
    return value


def parse_override(text: str) -> tuple[str, float]:
    """``KEY=SECONDS`` (as ``--jitter`` takes it)."""
    key, sep, raw = text.rpartition("=")
    if not sep or not key:
        raise BadOverride(f"expected KEY=SECONDS, got {text!r}")
    try:
        value = float(raw)
    except ValueError:
        raise BadOverride(f"expected KEY=SECONDS, got {text!r}") from None
    return key, value
