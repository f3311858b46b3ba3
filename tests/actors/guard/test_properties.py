"""Property tests for the Todo Stop Guard: random operation sequences keep the spec's bounds.

The driver plays the Session's part: ``decide`` at a natural stop, committing a ``Continue`` once its stream
"exists" and reporting an ``Exhausted`` decision; ``decide_tool_closure`` after the last committed guard stream.
Raw ``commit_continuation``/``mark_exhaustion_reported`` calls with arbitrary arguments are mixed in as well.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.guard import MAX_ATTEMPTS, Continue, Deferred, Exhausted, Inactive, TodoStopGuard

RESETS = {"clear_trust", "start_ordinary_prompt", "block_until_ordinary_prompt_starts"}
NEW_USER_INPUT = {"accept_mid_turn_user_input", "start_ordinary_prompt"}

counts = st.none() | st.integers(min_value=0, max_value=5)
ops = st.one_of(
    st.tuples(st.just("observe_todo_write"), counts, st.sampled_from([True, True, True, False])),
    st.tuples(st.sampled_from([
        "suspend", "pause_for_trusted_retry", "resume_trusted_prompt", "await_queued_prompt", "clear_trust",
        "start_ordinary_prompt", "block_until_ordinary_prompt_starts", "accept_mid_turn_user_input",
        "mark_exhaustion_reported",
    ])),
    st.tuples(st.just("decide"), st.booleans()),
    st.tuples(st.just("decide"), st.just(False)),  # weight natural stops without background
    st.tuples(st.just("decide_tool_closure"), st.booleans()),
    st.tuples(st.just("commit_continuation"), st.integers(min_value=-1, max_value=4)),
)
programs = st.lists(ops, max_size=40)
enabled = st.sampled_from([True, True, True, True, False])


def check_decision(g: TodoStopGuard, decision: Any) -> None:
    """(c) and the decision's shape, for any decision the guard returns."""
    assert isinstance(decision, (Inactive, Deferred, Continue, Exhausted))
    if not g.enabled or g.suspended:
        assert isinstance(decision, Inactive)
    if g.retry_paused or g.awaiting_queued_prompt:
        assert isinstance(decision, Inactive)
    if isinstance(decision, Continue):
        assert 1 <= decision.attempt <= MAX_ATTEMPTS
        assert decision.attempt == g.attempts + 1
        assert decision.max_attempts == MAX_ATTEMPTS
        assert decision.unfinished_count == g.unfinished_count
        assert decision.tool_closure == (g.unfinished_count == 0)
    if isinstance(decision, Exhausted):
        assert decision.attempt == g.attempts == MAX_ATTEMPTS
        assert decision.unfinished_count == g.unfinished_count > 0


class Driver:
    def __init__(self, enabled: bool) -> None:
        self.g = TodoStopGuard(enabled=enabled)
        self.commits_in_stage = 0
        self.reports_in_stage = 0
        self.last_committed: int | None = None

    def new_stage(self) -> None:
        self.commits_in_stage = 0
        self.reports_in_stage = 0

    def commit(self, attempt: int) -> bool:
        ok = self.g.commit_continuation(attempt)
        if ok:
            self.commits_in_stage += 1
            self.last_committed = attempt
        return ok

    def natural_stop(self, decision: Any) -> None:
        check_decision(self.g, decision)
        if isinstance(decision, Continue):
            assert self.commit(decision.attempt), "a Continue decision must be committable"
        elif isinstance(decision, Exhausted):
            if self.g.mark_exhaustion_reported():
                self.reports_in_stage += 1

    def run(self, op: tuple[Any, ...]) -> None:
        g, name = self.g, op[0]
        was_suspended = g.suspended
        before = attrs.asdict(g)
        was_reported = g.exhaustion_reported
        if name == "observe_todo_write":
            recognised = g.observe_todo_write(op[1], allow_arm=op[2])
            assert recognised == (g.enabled and op[1] is not None)
            if recognised and not op[2]:
                self.new_stage()  # blocks until an ordinary prompt: a trust reset
        elif name == "decide":
            self.natural_stop(g.decide(op[1]))
        elif name == "decide_tool_closure":
            current = self.last_committed if self.last_committed is not None else 1
            self.natural_stop(g.decide_tool_closure(current, op[1]))
        elif name == "commit_continuation":
            ok = self.commit(op[1])
            assert not ok or op[1] == before["attempts"] + 1
        elif name == "mark_exhaustion_reported":
            assert g.mark_exhaustion_reported() == (g.enabled and not was_reported)
        elif name == "await_queued_prompt":
            held = g.await_queued_prompt()
            if not held:
                assert attrs.asdict(g) == before
        else:
            getattr(g, name)()
        if name in NEW_USER_INPUT or name in RESETS:
            self.new_stage()

        after = attrs.asdict(g)
        # disabled: nothing ever changes
        if not g.enabled:
            assert after == before
        # (a) at most two committed guard streams without new user input or a trust reset
        assert self.commits_in_stage <= MAX_ATTEMPTS
        # (b)
        assert 0 <= g.attempts <= MAX_ATTEMPTS
        # (d) only a trust reset lifts a hard stop
        if was_suspended and not g.suspended:
            assert name in {"clear_trust", "start_ordinary_prompt"}
        if name == "block_until_ordinary_prompt_starts" and g.enabled:
            assert g.suspended
        # (e) exhaustion reported at most once per stage, and a reported chain is hard-suspended
        assert self.reports_in_stage <= 1
        if g.exhaustion_reported:
            assert g.suspended
        self.check_pure_queries()

    def check_pure_queries(self) -> None:
        """``decide`` and ``decide_tool_closure`` never mutate and always obey (c)."""
        g = self.g
        before = attrs.asdict(g)
        for bg in (False, True):
            check_decision(g, g.decide(bg))
            for current in range(0, MAX_ATTEMPTS + 2):
                check_decision(g, g.decide_tool_closure(current, bg))
        assert attrs.asdict(g) == before
        assert g.blocks_unrelated_automatic_turns == g.has_trusted_unfinished_state
        assert not g.needs_stop_inspection or g.has_trusted_unfinished_state
        assert not g.has_trusted_unfinished_state or (g.armed and not g.suspended and g.unfinished_count > 0)


@settings(max_examples=500, deadline=None)
@given(enabled, programs)
def test_random_operation_sequences_keep_the_bounds(on: bool, program: list[tuple[Any, ...]]) -> None:
    driver = Driver(on)
    for op in program:
        driver.run(op)


@settings(max_examples=300, deadline=None)
@given(programs)
def test_at_most_two_streams_between_user_inputs(program: list[tuple[Any, ...]]) -> None:
    """Stress the bound from an armed chain: natural stops after every operation."""
    driver = Driver(True)
    driver.g.observe_todo_write(3)
    for op in program:
        driver.run(op)
        driver.run(("decide", False))
        driver.run(("decide_tool_closure", False))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([
    ("observe_todo_write", 2, True), ("observe_todo_write", 0, True), ("observe_todo_write", None, True),
    ("pause_for_trusted_retry",), ("resume_trusted_prompt",), ("await_queued_prompt",), ("suspend",),
    ("accept_mid_turn_user_input",), ("decide", False), ("decide", True), ("decide_tool_closure", False),
    ("commit_continuation", 1), ("commit_continuation", 2), ("commit_continuation", 3),
    ("mark_exhaustion_reported",), ("block_until_ordinary_prompt_starts",),
]), max_size=30))
def test_once_suspended_only_an_ordinary_prompt_or_trust_reset_revives(program: list[tuple[Any, ...]]) -> None:
    driver = Driver(True)
    driver.g.observe_todo_write(3)
    driver.g.suspend()
    for op in program:
        driver.run(op)
        assert driver.g.suspended
        assert not driver.g.blocks_unrelated_automatic_turns
        assert driver.g.decide(False) == Inactive()
    driver.run(("start_ordinary_prompt",))
    assert not driver.g.suspended
