"""Replaying one scenario with one seed: drive the timeline, let the work settle, check.

The real daemon and actors run in process under virtual time with Trio's
scheduler seeded (``determinism.py``). The seed also picks a value for every
window the scenario leaves open (``jitter.py``): step times, model latencies,
hook and background delays. One driver task performs the timeline's steps in
the order of their times (file order among equal ones); a ``together`` group's
actions each get a task of their own, started at the same instant, so the
scheduler orders them. Then the driver waits until every task is blocked and no
session has running or pending work, letting the clock jump to the next
deadline whenever something is still waiting on a timer. The daemon is then
closed, and the trace is checked against the scenario's expectations and
invariants.
"""

from __future__ import annotations

import math
import os
import tempfile
import traceback
from pathlib import Path

import attrs
import trio
import trio.testing

from .cursors import record_clients
from .determinism import run_deterministic
from .expect import check_expectations
from .hooks import ScriptedHooks
from .invariants import check_invariants
from .jitter import Schedule
from .registry import ACTIONS
from .scenario import Scenario, Step, load_scenario
from .subagents import record_runs
from .trace import Trace
from .world import World


@attrs.frozen
class Result:
    """The outcome of one replay: its trace, the trace's digest, and what failed (empty when it passed)."""

    scenario: Scenario
    seed: int
    trace: Trace
    digest: str
    failures: list[str]
    schedule: dict[str, float] = attrs.field(factory=dict)  # the value of each window in this replay

    @property
    def ok(self) -> bool:
        return not self.failures


def replay(scenario: Scenario | str | Path, seed: int = 0, *, jitters: dict[str, float] | None = None) -> Result:
    """Replay a scenario (a :class:`Scenario` or a file path) with ``seed``; never raises for a failing run.

    ``jitters`` overrides the values the seed picks for some windows (key -> seconds), as
    ``--jitter`` and ``--shrink`` do. Synchronous: it runs its own ``trio.run``, so call it outside
    any Trio run. Raises :class:`~actors.replay.ScenarioError` for a file that is not a valid
    scenario, :class:`~actors.replay.jitter.BadOverride` for a jitter that names no window.
    """
    _refuse_inside_trio()
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    schedule = scenario.schedule(seed, jitters)
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trellis-replay-", dir=_scratch_root()) as tmp:
        state_dir = Path(tmp)
        # Longest first, so a path that contains the other (macOS's /private/var/...) is replaced whole.
        paths = sorted({str(state_dir), str(state_dir.resolve())}, key=len, reverse=True)
        trace = Trace(scrub_paths=tuple(paths))
        if scenario.windows:  # only then: a scenario without windows keeps the trace it always had
            trace.schedule(schedule.values, schedule.overridden)
        hooks = ScriptedHooks(scenario.hooks, trace, schedule) if scenario.hooks else None
        try:
            settled = run_deterministic(_drive, scenario, schedule, trace, state_dir, hooks, seed=seed)
            if not settled:
                failures.append(f"did not settle within {scenario.timeout:g} virtual seconds")
        except Exception as exc:  # a crash of the runtime is a finding, reported like any failure
            failures.append("crashed: " + "".join(traceback.format_exception_only(exc)).strip())
    failures += check_expectations(scenario.expect, scenario.timeline, trace)
    failures += check_invariants(scenario.invariants, trace)
    return Result(scenario, seed, trace, trace.digest(), failures, dict(schedule.values))


def _scratch_root() -> str | None:
    """Where replays keep their state directory: memory-backed ``/dev/shm`` where there is one
    (transcripts are written and removed on every replay), else the system's temporary directory."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _refuse_inside_trio() -> None:
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return  # no Trio run in this thread: good
    # Nor from a worker thread of a live run: the scheduler RNG and flag are process-wide.
    raise RuntimeError("replay() runs its own trio.run under a mock clock; call it outside any Trio run")


def plan(timeline: tuple[Step, ...], schedule: Schedule) -> list[tuple[float, list[Step]]]:
    """The timeline in the order it runs: ``(time, steps)``, a group's members together, by time
    and then file order (a window can move a step past its neighbours)."""
    entries: list[tuple[float, int, list[Step]]] = []
    for step in timeline:
        if step.group is not None and entries and entries[-1][2][0].group == step.group:
            entries[-1][2].append(step)
            continue
        entries.append((schedule.resolve(step.at), step.index, [step]))
    entries.sort(key=lambda e: (e[0], e[1]))
    return [(at, steps) for at, _, steps in entries]


async def _drive(scenario: Scenario, schedule: Schedule, trace: Trace, state_dir: Path,
                 hooks: ScriptedHooks | None) -> bool:
    """The driver task: the timeline, then settling; returns whether it settled before the timeout."""
    with trio.move_on_after(scenario.timeout) as scope:
        async with World(scenario.settings, scenario.build_model(schedule), trace, state_dir,
                         hook_runner=hooks.run_one if hooks else None,
                         tool_results=scenario.tool_results) as world:
            for at, steps in plan(scenario.timeline, schedule):
                await trio.sleep_until(at)
                if len(steps) == 1:
                    await _run_step(world, steps[0], schedule)
                else:  # a group: one task each, started together; the seeded scheduler orders them
                    async with trio.open_nursery() as nursery:
                        for step in steps:
                            nursery.start_soon(_run_step, world, step, schedule, name=f"step {step.index}")
            await settle(world)
            world.note_guard_changes()
            trace.settled()
            for slot in world.live_sessions():
                session = slot.handle._session
                trace.status(slot.label, slot.gen, {**session.status(), **session.fifo.statistics()})
            record_runs(world.subagents, trace)
            record_clients(world, trace)
    return not scope.cancelled_caught


async def _run_step(world: World, step: Step, schedule: Schedule) -> None:
    args = schedule.resolve(step.args)
    world.trace.action(step.index, step.do, args)
    try:
        value = await ACTIONS[step.do].run(world, dict(args))
    except Exception as exc:  # recorded, so a scenario can expect an action to fail
        value = {"error": type(exc).__name__, "message": str(exc)}
    world.trace.result(step.index, step.do, value)
    world.note_guard_changes()


async def settle(world: World) -> None:
    """Return once every task is blocked and no session has work, advancing virtual time as needed."""
    while True:
        # With a zero cushion this wakes before MockClock's autojump: time has not moved yet.
        await trio.testing.wait_all_tasks_blocked()
        if world.is_quiet():
            return
        wait = trio.lowlevel.current_statistics().seconds_to_next_deadline
        # Something waits on a timer (a model delay, a sleep): jump to it. Our own timeout is
        # always a deadline, so a real stall ends there instead of looping.
        await trio.sleep(0 if math.isinf(wait) else wait)
