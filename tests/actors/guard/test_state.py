"""The Todo Stop Guard state machine, h11-style: every transition from every relevant starting state.

Each table row names a starting state, applies one transition and asserts the *whole* state after it (via
``attrs.asdict``), plus the transition's return value where it has one. Scenario tests below follow the
qwen-code ``daemon-todo-stop-guard.test.ts`` list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from actors.guard import DEFERRED, INACTIVE, MAX_ATTEMPTS, Continue, Deferred, Exhausted, Inactive, TodoStopGuard

# ----------------------------------------------------------------- named starting states

FRESH: dict[str, Any] = dict(enabled=True, armed=False, unfinished_count=0, attempts=0, suspended=False,
                             retry_paused=False, awaiting_queued_prompt=False, exhaustion_reported=False)


def st(**changes: Any) -> dict[str, Any]:
    """A whole guard state: FRESH with ``changes``."""
    unknown = set(changes) - set(FRESH)
    assert not unknown, unknown
    return {**FRESH, **changes}


STATES: dict[str, dict[str, Any]] = {
    "fresh": st(),
    "armed": st(armed=True, unfinished_count=3),
    "armed_a1": st(armed=True, unfinished_count=3, attempts=1),
    "armed_a2": st(armed=True, unfinished_count=3, attempts=2),
    # guard stream 1 completed every todo through a tool call
    "completed_a1": st(unfinished_count=0, attempts=1),
    "completed_a2": st(unfinished_count=0, attempts=2),
    "paused": st(armed=True, unfinished_count=3, attempts=1, retry_paused=True),
    "awaiting": st(armed=True, unfinished_count=3, attempts=1, awaiting_queued_prompt=True),
    "exhausted": st(armed=True, unfinished_count=3, attempts=2, suspended=True, exhaustion_reported=True),
    "suspended_unarmed": st(suspended=True),
    "suspended_armed": st(armed=True, unfinished_count=3, attempts=1, suspended=True),
}


def guard(name_or_state: str | dict[str, Any]) -> TodoStopGuard:
    fields = STATES[name_or_state] if isinstance(name_or_state, str) else name_or_state
    return TodoStopGuard(**fields)


def state(g: TodoStopGuard) -> dict[str, Any]:
    return attrs.asdict(g)


def test_the_named_states_cover_every_field() -> None:
    assert set(FRESH) == {f.name for f in attrs.fields(TodoStopGuard)}
    assert state(TodoStopGuard(enabled=True)) == FRESH
    assert state(TodoStopGuard()) == {**FRESH, "enabled": False}
    for name in STATES:
        assert state(guard(name)) == STATES[name]


# ----------------------------------------------------------------- transitions with no result


def _same(name: str) -> dict[str, Any]:
    return STATES[name]


TRANSITIONS: list[tuple[str, Callable[[TodoStopGuard], Any], str, dict[str, Any], Any]] = []


def row(transition: str, call: Callable[[TodoStopGuard], Any], start: str, after: dict[str, Any],
        result: Any = None) -> None:
    TRANSITIONS.append((transition, call, start, after, result))


# clear_trust / start_ordinary_prompt: everything back to the initial state
for _name in STATES:
    row("clear_trust", TodoStopGuard.clear_trust, _name, st())
    row("start_ordinary_prompt", TodoStopGuard.start_ordinary_prompt, _name, st())
    row("block_until_ordinary_prompt_starts", TodoStopGuard.block_until_ordinary_prompt_starts, _name,
        st(suspended=True))

# resume_trusted_prompt: awaiting=False, retry_paused=False
for _name in STATES:
    _after = {**STATES[_name], "awaiting_queued_prompt": False, "retry_paused": False}
    row("resume_trusted_prompt", TodoStopGuard.resume_trusted_prompt, _name, _after)
assert TRANSITIONS[-1][3] == STATES["suspended_armed"]  # a hard stop is not lifted by a retry

# accept_mid_turn_user_input
_mid = TodoStopGuard.accept_mid_turn_user_input
row("accept_mid_turn_user_input", _mid, "fresh", _same("fresh"))  # unarmed, nothing committed: no chain
row("accept_mid_turn_user_input", _mid, "armed", _same("armed"))
row("accept_mid_turn_user_input", _mid, "armed_a1", STATES["armed"])
row("accept_mid_turn_user_input", _mid, "armed_a2", STATES["armed"])
row("accept_mid_turn_user_input", _mid, "completed_a1", st())
row("accept_mid_turn_user_input", _mid, "completed_a2", st())
row("accept_mid_turn_user_input", _mid, "paused", STATES["armed"])
row("accept_mid_turn_user_input", _mid, "awaiting", STATES["armed"])
row("accept_mid_turn_user_input", _mid, "exhausted", _same("exhausted"))  # cannot revive a hard stop
row("accept_mid_turn_user_input", _mid, "suspended_unarmed", _same("suspended_unarmed"))
row("accept_mid_turn_user_input", _mid, "suspended_armed", _same("suspended_armed"))


# observe_todo_write(2): count replaced, exhaustion_reported cleared, armed unless suspended; attempts untouched
def _write(n: int | None, allow_arm: bool = True) -> Callable[[TodoStopGuard], bool]:
    def call(g: TodoStopGuard) -> bool:
        return g.observe_todo_write(n, allow_arm=allow_arm)
    return call


for _name, _s in STATES.items():
    _armed = _s["armed"] or not _s["suspended"]
    row("observe_todo_write(2)", _write(2), _name,
        {**_s, "unfinished_count": 2, "armed": _armed, "exhaustion_reported": False}, True)
    row("observe_todo_write(0)", _write(0), _name,
        {**_s, "unfinished_count": 0, "armed": False, "exhaustion_reported": False}, True)
    row("observe_todo_write(None)", _write(None), _name, _s, False)
    row("observe_todo_write(None, allow_arm=False)", _write(None, allow_arm=False), _name, _s, False)
    row("observe_todo_write(2, allow_arm=False)", _write(2, allow_arm=False), _name, st(suspended=True), True)
    row("observe_todo_write(0, allow_arm=False)", _write(0, allow_arm=False), _name, st(suspended=True), True)

# suspend: suspended=True, awaiting=False
for _name, _s in STATES.items():
    row("suspend", TodoStopGuard.suspend, _name, {**_s, "suspended": True, "awaiting_queued_prompt": False})

# pause_for_trusted_retry: only an armed chain pauses
for _name, _s in STATES.items():
    _after = {**_s, "retry_paused": True, "awaiting_queued_prompt": False} if _s["armed"] else _s
    row("pause_for_trusted_retry", TodoStopGuard.pause_for_trusted_retry, _name, _after)

# await_queued_prompt
_await = TodoStopGuard.await_queued_prompt
row("await_queued_prompt", _await, "fresh", _same("fresh"), False)
row("await_queued_prompt", _await, "armed", {**STATES["armed"], "awaiting_queued_prompt": True}, True)
row("await_queued_prompt", _await, "armed_a1", {**STATES["armed_a1"], "awaiting_queued_prompt": True}, True)
row("await_queued_prompt", _await, "armed_a2", {**STATES["armed_a2"], "awaiting_queued_prompt": True}, True)
row("await_queued_prompt", _await, "completed_a1", {**STATES["completed_a1"], "awaiting_queued_prompt": True}, True)
row("await_queued_prompt", _await, "paused", {**STATES["paused"], "awaiting_queued_prompt": True}, True)
row("await_queued_prompt", _await, "awaiting", _same("awaiting"), True)
row("await_queued_prompt", _await, "exhausted", _same("exhausted"), False)
row("await_queued_prompt", _await, "suspended_unarmed", _same("suspended_unarmed"), False)
row("await_queued_prompt", _await, "suspended_armed", _same("suspended_armed"), False)


# commit_continuation(a)
def _commit(a: int) -> Callable[[TodoStopGuard], bool]:
    def call(g: TodoStopGuard) -> bool:
        return g.commit_continuation(a)
    return call


row("commit_continuation(1)", _commit(1), "armed", {**STATES["armed"], "attempts": 1}, True)
row("commit_continuation(2)", _commit(2), "armed_a1", {**STATES["armed_a1"], "attempts": 2}, True)
row("commit_continuation(2)", _commit(2), "completed_a1", {**STATES["completed_a1"], "attempts": 2}, True)
for _name, _bad in [
    ("fresh", [0, 1, 2]),  # nothing armed and nothing to close
    ("armed", [0, 2, 3]),  # wrong attempt numbers
    ("armed_a1", [0, 1, 3]),
    ("armed_a2", [1, 2, 3]),  # budget spent: 3 > MAX_ATTEMPTS
    ("completed_a1", [1, 3]),
    ("completed_a2", [2, 3]),
    ("paused", [1, 2]),
    ("awaiting", [1, 2]),
    ("exhausted", [2, 3]),
    ("suspended_unarmed", [1]),
    ("suspended_armed", [1, 2]),
]:
    for _a in _bad:
        row(f"commit_continuation({_a})", _commit(_a), _name, _same(_name), False)

# mark_exhaustion_reported: the first time only, and it hard-suspends (awaiting is left alone)
for _name, _s in STATES.items():
    if _s["exhaustion_reported"]:
        row("mark_exhaustion_reported", TodoStopGuard.mark_exhaustion_reported, _name, _s, False)
    else:
        row("mark_exhaustion_reported", TodoStopGuard.mark_exhaustion_reported, _name,
            {**_s, "exhaustion_reported": True, "suspended": True}, True)


@pytest.mark.parametrize(("transition", "call", "start", "after", "result"), TRANSITIONS,
                         ids=[f"{t[0]}-from-{t[2]}" for t in TRANSITIONS])
def test_transition(transition: str, call: Callable[[TodoStopGuard], Any], start: str, after: dict[str, Any],
                    result: Any) -> None:
    g = guard(start)
    assert call(g) == result
    assert state(g) == after


# ----------------------------------------------------------------- disabled: every transition is a no-op

ALL_CALLS: list[tuple[str, Callable[[TodoStopGuard], Any]]] = [
    ("clear_trust", TodoStopGuard.clear_trust),
    ("start_ordinary_prompt", TodoStopGuard.start_ordinary_prompt),
    ("block_until_ordinary_prompt_starts", TodoStopGuard.block_until_ordinary_prompt_starts),
    ("resume_trusted_prompt", TodoStopGuard.resume_trusted_prompt),
    ("accept_mid_turn_user_input", TodoStopGuard.accept_mid_turn_user_input),
    ("observe_todo_write(2)", _write(2)),
    ("observe_todo_write(0)", _write(0)),
    ("observe_todo_write(None)", _write(None)),
    ("observe_todo_write(2, allow_arm=False)", _write(2, allow_arm=False)),
    ("suspend", TodoStopGuard.suspend),
    ("pause_for_trusted_retry", TodoStopGuard.pause_for_trusted_retry),
    ("await_queued_prompt", TodoStopGuard.await_queued_prompt),
    ("commit_continuation(0)", _commit(0)),
    ("commit_continuation(1)", _commit(1)),
    ("commit_continuation(2)", _commit(2)),
    ("mark_exhaustion_reported", TodoStopGuard.mark_exhaustion_reported),
]

DISABLED_RESULTS = {"observe_todo_write(2)": False, "observe_todo_write(0)": False,
                    "observe_todo_write(None)": False, "observe_todo_write(2, allow_arm=False)": False,
                    "await_queued_prompt": False, "commit_continuation(0)": False,
                    "commit_continuation(1)": False, "commit_continuation(2)": False,
                    "mark_exhaustion_reported": False}


@pytest.mark.parametrize("start", list(STATES))
@pytest.mark.parametrize(("name", "call"), ALL_CALLS, ids=[c[0] for c in ALL_CALLS])
def test_every_transition_is_a_no_op_when_disabled(name: str, call: Callable[[TodoStopGuard], Any],
                                                   start: str) -> None:
    before = {**STATES[start], "enabled": False}
    g = TodoStopGuard(**before)
    assert call(g) == DISABLED_RESULTS.get(name)
    assert state(g) == before
    assert not g.has_trusted_unfinished_state
    assert not g.blocks_unrelated_automatic_turns
    assert not g.needs_stop_inspection
    assert not g.is_hard_suspended
    assert not g.has_committed_continuation
    assert g.decide(False) == INACTIVE
    assert g.decide(True) == INACTIVE
    for current in (0, 1, 2):
        assert g.decide_tool_closure(current, False) == INACTIVE
        assert g.decide_tool_closure(current, True) == INACTIVE
    assert state(g) == before


def test_disabled_guard_stays_inert_through_a_whole_run() -> None:
    g = TodoStopGuard(enabled=False)
    g.start_ordinary_prompt()
    assert g.observe_todo_write(3) is False
    assert g.decide(False) == INACTIVE
    assert g.commit_continuation(1) is False
    assert g.mark_exhaustion_reported() is False
    g.accept_mid_turn_user_input()
    g.suspend()
    assert state(g) == {**FRESH, "enabled": False}


# ----------------------------------------------------------------- predicates per state

PREDICATES = {
    # name: (has_trusted_unfinished_state, needs_stop_inspection, is_hard_suspended, has_committed_continuation)
    "fresh": (False, False, False, False),
    "armed": (True, True, False, False),
    "armed_a1": (True, True, False, True),
    "armed_a2": (True, True, False, True),
    "completed_a1": (False, False, False, True),
    "completed_a2": (False, False, False, True),
    "paused": (True, False, False, True),
    "awaiting": (True, False, False, True),
    "exhausted": (False, False, True, True),
    "suspended_unarmed": (False, False, True, False),
    "suspended_armed": (False, False, True, True),
}


@pytest.mark.parametrize("start", list(STATES))
def test_predicates(start: str) -> None:
    g = guard(start)
    trusted, inspect, hard, committed = PREDICATES[start]
    assert g.has_trusted_unfinished_state is trusted
    assert g.blocks_unrelated_automatic_turns is trusted
    assert g.needs_stop_inspection is inspect
    assert g.is_hard_suspended is hard
    assert g.has_committed_continuation is committed
    assert state(g) == STATES[start]


def test_armed_with_zero_count_is_not_trusted_unfinished_state() -> None:
    g = TodoStopGuard(**st(armed=True, unfinished_count=0))
    assert not g.has_trusted_unfinished_state
    assert not g.needs_stop_inspection
    assert g.decide(False) == INACTIVE


# ----------------------------------------------------------------- decisions per state (pure)

DECISIONS = {
    # name: (decide(False), decide(True))
    "fresh": (INACTIVE, INACTIVE),
    "armed": (Continue(1, 3), DEFERRED),
    "armed_a1": (Continue(2, 3), DEFERRED),
    "armed_a2": (Exhausted(2, 3), DEFERRED),
    "completed_a1": (INACTIVE, INACTIVE),
    "completed_a2": (INACTIVE, INACTIVE),
    "paused": (INACTIVE, INACTIVE),
    "awaiting": (INACTIVE, INACTIVE),
    "exhausted": (INACTIVE, INACTIVE),
    "suspended_unarmed": (INACTIVE, INACTIVE),
    "suspended_armed": (INACTIVE, INACTIVE),
}


@pytest.mark.parametrize("start", list(STATES))
def test_decide(start: str) -> None:
    g = guard(start)
    without_bg, with_bg = DECISIONS[start]
    assert g.decide(False) == without_bg
    assert g.decide(True) == with_bg
    assert state(g) == STATES[start]


def test_decision_shapes() -> None:
    assert Continue(1, 3) == Continue(attempt=1, unfinished_count=3, max_attempts=MAX_ATTEMPTS, tool_closure=False)
    assert Exhausted(2, 3).max_attempts == MAX_ATTEMPTS == 2
    assert isinstance(INACTIVE, Inactive) and isinstance(DEFERRED, Deferred)


TOOL_CLOSURES = [
    # (start, current_attempt, has_bg, expected)
    ("completed_a1", 1, False, Continue(2, 0, tool_closure=True)),
    ("completed_a1", 1, True, DEFERRED),
    ("completed_a1", 2, False, INACTIVE),  # attempts != current
    ("completed_a2", 2, False, INACTIVE),  # no attempt left
    ("completed_a2", 2, True, DEFERRED),  # background still takes priority over "nothing"
    ("completed_a2", 1, False, INACTIVE),
    # unfinished items: the ordinary decision
    ("armed_a1", 1, False, Continue(2, 3)),
    ("armed_a1", 1, True, DEFERRED),
    ("armed_a2", 2, False, Exhausted(2, 3)),
    ("paused", 1, False, INACTIVE),
    ("awaiting", 1, False, INACTIVE),
    ("suspended_armed", 1, False, INACTIVE),
]


@pytest.mark.parametrize(("start", "current", "bg", "expected"), TOOL_CLOSURES)
def test_decide_tool_closure(start: str, current: int, bg: bool, expected: Any) -> None:
    g = guard(start)
    assert g.decide_tool_closure(current, bg) == expected
    assert state(g) == STATES[start]


@pytest.mark.parametrize("flag", ["suspended", "retry_paused", "awaiting_queued_prompt"])
@pytest.mark.parametrize("bg", [False, True])
def test_no_tool_closure_when_stopped_paused_or_awaiting(flag: str, bg: bool) -> None:
    s = {**STATES["completed_a1"], flag: True}
    g = TodoStopGuard(**s)
    assert g.decide_tool_closure(1, bg) == INACTIVE
    assert g.commit_continuation(2) is False
    assert state(g) == s


# ----------------------------------------------------------------- scenarios (qwen unit-test list)


def test_arms_only_from_a_recognised_list() -> None:
    g = TodoStopGuard(enabled=True)
    assert g.observe_todo_write(None) is False
    assert state(g) == st()
    assert g.decide(False) == INACTIVE
    assert g.observe_todo_write(2) is True
    assert state(g) == st(armed=True, unfinished_count=2)
    assert g.decide(False) == Continue(1, 2)
    # an unrecognised write afterwards changes nothing (does not disarm either)
    assert g.observe_todo_write(None) is False
    assert state(g) == st(armed=True, unfinished_count=2)


@pytest.mark.parametrize("start", ["armed", "armed_a1", "armed_a2", "paused"])
def test_disarms_on_completed_or_empty_list(start: str) -> None:
    g = guard(start)
    assert g.observe_todo_write(0) is True
    assert state(g) == {**STATES[start], "armed": False, "unfinished_count": 0}
    assert g.decide(False) == INACTIVE
    assert not g.blocks_unrelated_automatic_turns


def test_newest_write_replaces_the_count() -> None:
    g = TodoStopGuard(enabled=True)
    g.observe_todo_write(5)
    g.observe_todo_write(1)
    assert g.decide(False) == Continue(1, 1)
    g.observe_todo_write(4)
    assert g.decide(False) == Continue(1, 4)


def test_commits_exactly_two_attempts_only_when_told() -> None:
    g = TodoStopGuard(enabled=True)
    g.start_ordinary_prompt()
    g.observe_todo_write(2)
    # decide is idempotent until commit
    assert g.decide(False) == Continue(1, 2)
    assert g.decide(False) == Continue(1, 2)
    assert g.attempts == 0
    assert g.commit_continuation(1) is True
    assert g.decide(False) == Continue(2, 2)
    assert g.decide(False) == Continue(2, 2)
    assert g.commit_continuation(1) is False  # committing the same attempt twice
    assert g.commit_continuation(2) is True
    assert g.decide(False) == Exhausted(2, 2)
    assert g.commit_continuation(3) is False
    assert state(g) == st(armed=True, unfinished_count=2, attempts=2)


def test_exhaustion_reported_once_and_hard_suspends() -> None:
    g = guard("armed_a2")
    assert g.decide(False) == Exhausted(2, 3)
    assert g.mark_exhaustion_reported() is True
    assert state(g) == {**STATES["armed_a2"], "suspended": True, "exhaustion_reported": True}
    assert g.mark_exhaustion_reported() is False
    assert g.decide(False) == INACTIVE
    assert g.is_hard_suspended
    # later writes cannot re-arm or re-open the stage
    assert g.observe_todo_write(4) is True
    assert g.decide(False) == INACTIVE
    assert not g.blocks_unrelated_automatic_turns
    assert g.commit_continuation(3) is False
    assert g.suspended and g.attempts == 2


def test_tool_closure_uses_the_remaining_attempt_after_completion() -> None:
    g = TodoStopGuard(enabled=True)
    g.observe_todo_write(2)
    assert g.commit_continuation(1)
    g.observe_todo_write(0)  # guard stream 1 completed every todo through a tool call
    assert g.decide(False) == INACTIVE  # no unfinished-todo prompt
    assert g.decide_tool_closure(1, True) == DEFERRED
    g.await_queued_prompt()
    assert g.decide_tool_closure(1, False) == INACTIVE
    g.resume_trusted_prompt()
    decision = g.decide_tool_closure(1, False)
    assert decision == Continue(2, 0, max_attempts=2, tool_closure=True)
    assert g.commit_continuation(decision.attempt) is True
    assert state(g) == st(unfinished_count=0, attempts=2)
    assert g.decide_tool_closure(2, False) == INACTIVE  # no third guard-attributable stream
    assert g.commit_continuation(3) is False


def test_no_tool_closure_after_a_hard_stop() -> None:
    g = guard("completed_a1")
    g.suspend()
    assert g.decide_tool_closure(1, False) == INACTIVE
    assert g.commit_continuation(2) is False
    assert state(g) == {**STATES["completed_a1"], "suspended": True}


def test_ordinary_prompt_resets_while_retry_preserves_the_budget() -> None:
    g = guard("armed_a1")
    g.pause_for_trusted_retry()
    g.resume_trusted_prompt()
    assert state(g) == STATES["armed_a1"]
    assert g.decide(False) == Continue(2, 3)  # only the final attempt remains
    g.start_ordinary_prompt()
    assert state(g) == st()
    assert g.decide(False) == INACTIVE  # cannot inherit activation
    g.observe_todo_write(3)
    assert g.decide(False) == Continue(1, 3)


def test_api_failure_pauses_until_trusted_retry() -> None:
    g = guard("armed_a1")
    g.pause_for_trusted_retry()
    assert state(g) == STATES["paused"]
    assert g.decide(False) == INACTIVE
    assert g.commit_continuation(2) is False
    assert g.blocks_unrelated_automatic_turns  # still resumable
    assert not g.is_hard_suspended
    g.resume_trusted_prompt()
    assert g.decide(False) == Continue(2, 3)


def test_pause_for_trusted_retry_is_a_no_op_when_unarmed() -> None:
    for start in ("fresh", "completed_a1", "suspended_unarmed"):
        g = guard(start)
        g.pause_for_trusted_retry()
        assert state(g) == STATES[start]


def test_rejects_late_writes_after_block_until_ordinary_prompt_starts() -> None:
    g = guard("armed_a1")
    g.block_until_ordinary_prompt_starts()
    assert state(g) == st(suspended=True)
    assert g.observe_todo_write(3) is True
    assert state(g) == st(suspended=True, unfinished_count=3)
    assert g.decide(False) == INACTIVE
    assert not g.blocks_unrelated_automatic_turns
    g.accept_mid_turn_user_input()
    assert g.decide(False) == INACTIVE
    g.start_ordinary_prompt()
    g.observe_todo_write(3)
    assert g.decide(False) == Continue(1, 3)


def test_mid_turn_input_retains_activation_and_resets_the_budget() -> None:
    g = guard("armed_a2")
    assert g.decide(False) == Exhausted(2, 3)
    g.accept_mid_turn_user_input()
    assert state(g) == STATES["armed"]
    assert g.decide(False) == Continue(1, 3)
    assert g.commit_continuation(1) and g.commit_continuation(2)
    assert g.decide(False) == Exhausted(2, 3)


def test_mid_turn_input_clears_retry_pause_and_awaiting() -> None:
    for start in ("paused", "awaiting"):
        g = guard(start)
        g.accept_mid_turn_user_input()
        assert state(g) == STATES["armed"]


def test_mid_turn_reactivation_after_completion_gets_a_fresh_budget() -> None:
    g = TodoStopGuard(enabled=True)
    g.observe_todo_write(1)
    assert g.commit_continuation(1) and g.commit_continuation(2)
    g.observe_todo_write(0)
    assert state(g) == st(attempts=2)
    g.accept_mid_turn_user_input()  # attempts > 0: a chain to hold even though disarmed
    assert state(g) == st()
    g.observe_todo_write(2)
    assert g.decide(False) == Continue(1, 2)


def test_mid_turn_input_cannot_revive_a_hard_suspended_chain() -> None:
    g = guard("exhausted")
    g.accept_mid_turn_user_input()
    assert state(g) == STATES["exhausted"]
    assert g.decide(False) == INACTIVE
    g2 = guard("armed_a1")
    g2.suspend()
    g2.accept_mid_turn_user_input()
    assert state(g2) == STATES["suspended_armed"]


def test_mid_turn_input_on_an_unarmed_chain_changes_nothing() -> None:
    g = TodoStopGuard(**st(unfinished_count=0, retry_paused=True, exhaustion_reported=True))
    before = state(g)
    g.accept_mid_turn_user_input()
    assert state(g) == before


def test_hard_stop_recorded_even_when_unarmed() -> None:
    g = TodoStopGuard(enabled=True)
    g.suspend()
    assert state(g) == st(suspended=True)
    assert g.is_hard_suspended
    g.observe_todo_write(2)  # a late write cannot arm a hard-stopped chain
    assert not g.armed
    assert g.decide(False) == INACTIVE


def test_defers_for_background_and_keeps_the_budget() -> None:
    g = guard("armed_a1")
    assert g.decide(True) == DEFERRED
    assert state(g) == STATES["armed_a1"]
    assert g.decide(False) == Continue(2, 3)


def test_a_suspended_chain_stops_blocking_automatic_turns() -> None:
    g = guard("armed_a1")
    assert g.blocks_unrelated_automatic_turns
    g.suspend()
    assert not g.blocks_unrelated_automatic_turns


@pytest.mark.parametrize("start", ["armed", "armed_a1", "armed_a2", "paused", "awaiting"])
def test_blocks_unrelated_automatic_turns_while_resumable(start: str) -> None:
    assert guard(start).blocks_unrelated_automatic_turns


def test_blocks_unrelated_automatic_turns_while_retry_paused() -> None:
    g = guard("armed")
    g.pause_for_trusted_retry()
    assert g.retry_paused
    assert g.blocks_unrelated_automatic_turns
    assert not g.needs_stop_inspection


def test_automatic_writes_cannot_revive_an_awaiting_chain() -> None:
    g = guard("awaiting")
    assert g.observe_todo_write(5) is True
    assert state(g) == {**STATES["awaiting"], "unfinished_count": 5}
    assert g.decide(False) == INACTIVE
    assert g.commit_continuation(2) is False


def test_allow_arm_false_blocks_until_an_ordinary_prompt() -> None:
    g = guard("armed_a1")
    assert g.observe_todo_write(3, allow_arm=False) is True
    assert state(g) == st(suspended=True)
    assert g.observe_todo_write(3) is True
    assert not g.armed
    g.resume_trusted_prompt()
    g.accept_mid_turn_user_input()
    assert g.decide(False) == INACTIVE
    g.start_ordinary_prompt()
    g.observe_todo_write(3)
    assert g.decide(False) == Continue(1, 3)


def test_awaiting_chain_ends_when_trust_is_cleared() -> None:
    g = TodoStopGuard(enabled=True)
    g.observe_todo_write(2)
    assert g.await_queued_prompt() is True
    assert g.blocks_unrelated_automatic_turns
    assert g.decide(False) == INACTIVE
    g.clear_trust()  # the last queued prompt was aborted
    assert state(g) == st()
    assert not g.blocks_unrelated_automatic_turns


def test_await_queued_prompt_on_an_unarmed_chain_with_no_attempts() -> None:
    g = TodoStopGuard(**st(unfinished_count=0, retry_paused=True))
    before = state(g)
    assert g.await_queued_prompt() is False
    assert state(g) == before


def test_awaiting_chain_resumes_with_a_trusted_prompt() -> None:
    g = guard("armed_a1")
    assert g.await_queued_prompt() is True
    assert g.decide(False) == INACTIVE
    g.resume_trusted_prompt()
    assert state(g) == STATES["armed_a1"]


def test_suspend_clears_awaiting_but_pause_keeps_hard_stop() -> None:
    g = guard("awaiting")
    g.suspend()
    assert state(g) == {**STATES["awaiting"], "awaiting_queued_prompt": False, "suspended": True}
    g.resume_trusted_prompt()
    assert g.is_hard_suspended
    assert g.decide(False) == INACTIVE


def test_commit_continuation_with_a_wrong_attempt_number_changes_nothing() -> None:
    for start in STATES:
        for a in (-1, 0, 3, 4):
            g = guard(start)
            assert g.commit_continuation(a) is False
            assert state(g) == STATES[start]


def test_summary_has_counts_and_flags_only() -> None:
    g = TodoStopGuard(enabled=True)
    g.observe_todo_write(2)
    g.commit_continuation(1)
    summary = g.summary()
    assert summary == {"enabled": True, "armed": True, "unfinishedCount": 2, "attempts": 1, "maxAttempts": 2,
                       "suspended": False, "retryPaused": False, "awaitingQueuedPrompt": False,
                       "exhaustionReported": False}
    assert all(isinstance(v, (bool, int)) for v in summary.values())
    assert TodoStopGuard().summary()["enabled"] is False
