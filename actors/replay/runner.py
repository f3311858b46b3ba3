"""Replaying one scenario with one seed: drive the timeline, let the work settle, check.

The real daemon and actors run in process under virtual time with Trio's
scheduler seeded (``determinism.py``). One driver task performs the timeline's
steps at their virtual times; then it waits until every task is blocked and no
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

from .actions import ACTIONS
from .determinism import run_deterministic
from .expect import check_expectations
from .hooks import ScriptedHooks
from .invariants import check_invariants
from .scenario import Scenario, load_scenario
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

    @property
    def ok(self) -> bool:
        return not self.failures


def replay(scenario: Scenario | str | Path, seed: int = 0) -> Result:
    """Replay a scenario (a :class:`Scenario` or a file path) with ``seed``; never raises for a failing run.

    Synchronous: it runs its own ``trio.run``, so call it outside any Trio run.
    Raises :class:`~actors.replay.ScenarioError` for a file that is not a valid scenario.
    """
    _refuse_inside_trio()
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trellis-replay-", dir=_scratch_root()) as tmp:
        state_dir = Path(tmp)
        # Longest first, so a path that contains the other (macOS's /private/var/...) is replaced whole.
        paths = sorted({str(state_dir), str(state_dir.resolve())}, key=len, reverse=True)
        trace = Trace(scrub_paths=tuple(paths))
        hooks = ScriptedHooks(scenario.hooks, trace) if scenario.hooks else None
        try:
            settled = run_deterministic(_drive, scenario, trace, state_dir, hooks, seed=seed)
            if not settled:
                failures.append(f"did not settle within {scenario.timeout:g} virtual seconds")
        except Exception as exc:  # a crash of the runtime is a finding, reported like any failure
            failures.append("crashed: " + "".join(traceback.format_exception_only(exc)).strip())
    failures += check_expectations(scenario.expect, scenario.timeline, trace)
    failures += check_invariants(scenario.invariants, trace)
    return Result(scenario, seed, trace, trace.digest(), failures)


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


async def _drive(scenario: Scenario, trace: Trace, state_dir: Path, hooks: ScriptedHooks | None) -> bool:
    """The driver task: the timeline, then settling; returns whether it settled before the timeout."""
    with trio.move_on_after(scenario.timeout) as scope:
        async with World(scenario.settings, scenario.build_model(), trace, state_dir,
                         hook_runner=hooks.run_one if hooks else None) as world:
            for step in scenario.timeline:
                await trio.sleep_until(step.at)
                trace.action(step.index, step.do, step.args)
                try:
                    value = await ACTIONS[step.do].run(world, dict(step.args))
                except Exception as exc:  # recorded, so a scenario can expect an action to fail
                    value = {"error": type(exc).__name__, "message": str(exc)}
                trace.result(step.index, step.do, value)
                world.note_guard_changes()
            await settle(world)
            world.note_guard_changes()
            trace.settled()
            for slot in world.live_sessions():
                session = slot.handle._session
                trace.status(slot.label, slot.gen, {**session.status(), **session.fifo.statistics()})
            record_runs(world.subagents, trace)
    return not scope.cancelled_caught


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
