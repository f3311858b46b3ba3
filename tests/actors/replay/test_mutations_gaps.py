"""The scenarios for issue 16's gaps fail when the behaviour each names is broken.

Like ``test_mutations.py``: each mutation monkeypatches the real runtime in this process (the
replay runs here, so it sees it) and the scenario must then fail with the named failure — an
expectation or, better, an invariant, never only a changed digest. A scenario built on a race
is replayed with CI's 20 seeds: the mutation must be caught on some of them (the race is what
finds it), and the unaltered runtime passes all of them (``test_library.py``).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import actors.guard.state
from actors.events.bus import EventBus
from actors.guard import TodoStopGuard
from actors.replay import replay
from actors.session import stop, turn
from actors.session.fifo import DrainResult
from actors.session.handle import SessionHandle
from actors.session.outcomes import Send
from actors.session.todo import (
    TODO_WRITE,
    Todo,
    TodoWriteTool,
    parse_todo_envelope,
    unfinished_count,
)

SCENARIOS = Path(__file__).resolve().parents[3] / "actors" / "replay" / "scenarios"
SEEDS = range(20)

ORIGINAL_RUN_TOOL = turn.Turn.run_tool
ORIGINAL_AFTER_TOOLS = turn.Turn.after_tools
ORIGINAL_AT_STOP = turn.at_natural_stop
ORIGINAL_DRAIN_FOR_STOP = stop.drain_for_stop


# ----------------------------------------------------------------- activation


async def trust_todo_write_by_name(self: turn.Turn, call: Any) -> Any:
    """Any tool answering to the wire name todo_write is trusted: a discovered shadow arms the guard."""
    result = await ORIGINAL_RUN_TOOL(self, call)
    tool = self.ports.tools.get(call.name)
    if call.name == TODO_WRITE and tool is not None and not tool.builtin and result.error is None:
        todos = parse_todo_envelope(result.display)
        if todos is not None:
            self.ports.chain.guard.observe_todo_write(unfinished_count(todos))
    return result


async def execute_repeated_call_ids(self: turn.Turn, call: Any) -> Any:
    """A tool call id the provider repeats is executed again."""
    self.seen_call_ids.discard(call.id)
    return await ORIGINAL_RUN_TOOL(self, call)


async def arm_from_failed_arguments(self: turn.Turn, call: Any) -> Any:
    """A failed todo_write still arms the guard from the todos its arguments carry."""
    result = await ORIGINAL_RUN_TOOL(self, call)
    if call.name == TODO_WRITE and result.error is not None and isinstance(call.arguments, dict):
        todos = [Todo(**t) for t in call.arguments.get("todos", [])]
        self.ports.chain.guard.observe_todo_write(unfinished_count(todos))
    return result


# The built-in's schema lets arguments it does not know through (its registry checks calls against it),
# so the call succeeds.
LENIENT_TODO_WRITE = {**TodoWriteTool.parameters, "additionalProperties": True}


# ----------------------------------------------------------------- budget and stop ordering


async def send_results_after_the_budget(self: turn.Turn, previous: Send) -> Send | None:
    """Guard stream 2's tool results are sent after all: a third guard stream, unannounced."""
    send = await ORIGINAL_AFTER_TOOLS(self, previous)
    return Send() if send is None and previous.guard is not None else send


async def stop_hooks_before_the_fifo(ports: Any, t: Any) -> Any:
    """Step 3 before step 2: the Stop hook runs before the drain that would find the queued prompt."""
    chain = ports.chain
    if t.foreground and chain.guard.needs_stop_inspection and not chain.queued_prompt_priority:
        await stop.stop_hooks(ports, t)
    return await ORIGINAL_AT_STOP(ports, t)


async def fifo_before_mid_turn_input(ports: Any, t: Any) -> DrainResult:
    """Step 2 before step 1: with a queued prompt seen, the drained mid-turn messages are dropped."""
    drained = await ORIGINAL_DRAIN_FOR_STOP(ports, t)
    return DrainResult((), (), True) if drained.has_queued_prompt and drained.messages else drained


# ----------------------------------------------------------------- the event ring


async def _async_nothing(self: Any) -> None:
    """The child session keeps the guard its settings give it."""


def replay_skipping_one(self: EventBus, cursor: int) -> list[Any]:
    """A replay from a cursor starts one event late."""
    if not self.ring:
        return []
    return list(itertools.islice(self.ring, max(0, cursor + 2 - self.ring[0].id), None))


MUTATIONS: list[tuple[str, Any, str, Any, str]] = [
    # (scenario, object, attribute, replacement, a failure it must cause)
    ("guard_stop_loop_protection", turn.Turn, "note_failure", lambda self, call, result: None,
     "expect.prompts.work"),
    ("guard_stop_loop_protection", TodoStopGuard, "suspend", lambda self: None, "invariant no_guard_after_hard_stop"),
    ("guard_shadowed_todo_write", turn.Turn, "run_tool", trust_todo_write_by_name, "expect.model_calls"),
    ("guard_duplicate_todo_write", turn.Turn, "run_tool", execute_repeated_call_ids, "expect.model_calls"),
    ("guard_failed_write_extra_argument", turn.Turn, "run_tool", arm_from_failed_arguments, "expect.model_calls"),
    ("guard_failed_write_extra_argument", TodoWriteTool, "parameters", LENIENT_TODO_WRITE, "expect.model_calls"),
    ("guard_no_third_stream", actors.guard.state, "MAX_ATTEMPTS", 3, "invariant guard_streams_bounded"),
    ("guard_no_third_stream", turn.Turn, "after_tools", send_results_after_the_budget,
     "invariant guard_streams_bounded"),
    ("guard_fifo_skips_stop_hook", turn, "at_natural_stop", stop_hooks_before_the_fifo, "expect.model_calls"),
    ("subagent_child_no_guard", SessionHandle, "turn_off_todo_stop_guard", _async_nothing, "expect.model_calls"),
]

RACE_MUTATIONS: list[tuple[str, Any, str, Any, str]] = [
    ("guard_reconnect_during_continuation", EventBus, "events_after", replay_skipping_one,
     "invariant cursor_replay_equals_live"),
    ("guard_mid_turn_races_queued_prompt", stop, "drain_for_stop", fifo_before_mid_turn_input,
     "invariant mid_turn_first"),
    ("guard_fifo_priority_race", TodoStopGuard, "await_queued_prompt", lambda self: False, "invariant fifo_priority"),
    ("guard_cancel_race", TodoStopGuard, "suspend", lambda self: None, "invariant no_guard_after_hard_stop"),
]


def _ids(mutations: list[tuple[str, Any, str, Any, str]]) -> list[str]:
    return [f"{m[0]}-{m[2]}" for m in mutations]


@pytest.mark.parametrize(("name", "owner", "attribute", "replacement", "failure"), MUTATIONS, ids=_ids(MUTATIONS))
def test_breaking_the_behaviour_fails_the_scenario(monkeypatch: pytest.MonkeyPatch, name: str, owner: Any,
                                                   attribute: str, replacement: Any, failure: str) -> None:
    path = SCENARIOS / f"{name}.json"
    assert replay(path).ok
    monkeypatch.setattr(owner, attribute, replacement)
    failures = replay(path).failures
    assert any(f.startswith(failure) for f in failures), failures


@pytest.mark.parametrize(("name", "owner", "attribute", "replacement", "failure"), RACE_MUTATIONS,
                         ids=_ids(RACE_MUTATIONS))
def test_the_race_finds_the_broken_behaviour(monkeypatch: pytest.MonkeyPatch, name: str, owner: Any,
                                             attribute: str, replacement: Any, failure: str) -> None:
    path = SCENARIOS / f"{name}.json"
    monkeypatch.setattr(owner, attribute, replacement)
    caught = [seed for seed in SEEDS if any(f.startswith(failure) for f in replay(path, seed).failures)]
    assert caught, f"no seed of {list(SEEDS)} caught the mutation with {failure!r}"
