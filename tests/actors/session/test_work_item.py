"""The work item's state machine (actors/session/work_item.py): its table, row by row, and its rules under
random sequences (a hypothesis state machine over the pure core: no Trio, no session).

The rules: a cancel between the hand-over and the start is kept, so the item is cancelled as it begins
(never run, never lost); a cancel of a running item cancels its scope once; a begun item settles exactly
once and a cancelled one suspends the chain; a cancel for another prompt, or with nothing running, changes
nothing; anything the table lacks raises.
"""

from __future__ import annotations

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.session.work_item import CancelOutcome, Phase, WorkItem, WorkItemError


def test_a_cancel_before_the_start_is_kept_and_cancels_the_item_as_it_begins():
    work = WorkItem()
    work.hand_over("p1")
    assert work.cancel() is CancelOutcome.KEPT and not work.running
    assert work.begin("p1", "prompt") is True  # the shell cancels its scope at once
    assert work.running and work.phase is Phase.CANCEL_PENDING
    assert work.settle(cancelled=True) is True and work.phase is Phase.SETTLED and not work.running


def test_the_fifo_abort_of_the_handed_over_prompt_is_kept_too():
    work = WorkItem()
    work.hand_over("p1")
    assert work.cancel("p1") is CancelOutcome.KEPT
    assert work.begin("p1", "prompt") is True


def test_a_cancel_of_a_running_item_cancels_its_scope_once():
    work = WorkItem()
    work.hand_over("p1")
    assert work.begin("p1", "prompt") is False
    assert work.cancel() is CancelOutcome.CANCEL_SCOPE
    assert work.cancel("p1") is CancelOutcome.ALREADY and work.cancel().accepted


def test_nothing_to_cancel_and_stale_cancels_change_nothing():
    work = WorkItem()
    assert work.cancel() is CancelOutcome.NOTHING and not work.cancel().accepted
    work.hand_over("p1")
    assert work.cancel("p0") is CancelOutcome.NOTHING and work.phase is Phase.HANDED_OVER
    work.begin("p1", "prompt")
    work.settle(cancelled=False)
    assert work.cancel() is CancelOutcome.NOTHING and work.phase is Phase.SETTLED


def test_an_automatic_turn_begins_without_a_hand_over_and_an_uncancelled_exit_does_not_suspend():
    work = WorkItem()
    assert work.begin("auto-1", "automatic") is False
    assert work.running and work.kind == "automatic" and work.prompt_id == "auto-1"
    assert work.settle(cancelled=False) is False
    assert work.begin("p1", "suggestion") is False  # a suggestion after its prompt settled


@pytest.mark.parametrize("steps", [
    [("begin", "p1")],  # the hand-over left p1 waiting: nothing else begins
    [("begin", "p2")],
    [("hand_over", "p2")],
    [("settle", None)],  # not begun: nothing to settle
    [("begin", "p1"), ("hand_over", "p2")],  # one work item at a time
    [("begin", "p1"), ("begin", "p1")],
    [("begin", "p1"), ("settle", None), ("settle", None)],  # settles once
])
def test_transitions_the_table_lacks_raise(steps):
    work = WorkItem()
    work.hand_over("p1")
    *allowed, (last, argument) = steps
    if steps[0] == ("begin", "p1") and len(steps) == 1:
        work.begin("p1", "prompt")  # legal once: begin again below is not
        last = "begin"
    for name, arg in allowed:
        _step(work, name, arg)
    with pytest.raises(WorkItemError):
        _step(work, last, argument)


def _step(work: WorkItem, name: str, argument: str | None) -> None:
    if name == "begin":
        work.begin(argument or "", "prompt")
    elif name == "hand_over":
        work.hand_over(argument or "")
    else:
        work.settle(cancelled=False)


class WorkItemMachine(RuleBasedStateMachine):
    """Random hand-overs, starts, cancels and exits, checked against a model of what the shell sees."""

    def __init__(self) -> None:
        super().__init__()
        self.work = WorkItem()
        self.n = 0
        self.handed: str | None = None  # handed over, not begun
        self.cancel_kept = False
        self.running: str | None = None
        self.scope_cancels = 0  # of the running item
        self.cancelled = False
        self.suspends = 0
        self.settled: list[str] = []

    @precondition(lambda self: self.handed is None and self.running is None)
    @rule()
    def hand_over(self) -> None:
        self.n += 1
        self.handed = f"p{self.n}"
        self.cancel_kept = False
        self.work.hand_over(self.handed)

    @precondition(lambda self: self.handed is None and self.running is None)
    @rule()
    def begin_automatic(self) -> None:
        self.n += 1
        assert self.work.begin(f"auto{self.n}", "automatic") is False
        self.running, self.scope_cancels, self.cancelled = f"auto{self.n}", 0, False

    @precondition(lambda self: self.handed is not None)
    @rule()
    def begin_handed_over(self) -> None:
        prompt, self.handed = self.handed, None
        cancel_now = self.work.begin(prompt, "prompt")
        assert cancel_now is self.cancel_kept  # a kept cancel, and only that, cancels it as it begins
        self.running, self.scope_cancels, self.cancelled = prompt, int(cancel_now), cancel_now

    @rule(which=st.sampled_from(["any", "current", "other"]))
    def cancel(self, which: str) -> None:
        current = self.running or self.handed
        prompt = None if which == "any" else current if which == "current" else "stranger"
        outcome = self.work.cancel(prompt)
        if current is None or prompt == "stranger":
            assert outcome is CancelOutcome.NOTHING
        elif self.running is not None:
            if outcome is CancelOutcome.CANCEL_SCOPE:
                self.scope_cancels += 1
                self.cancelled = True
            else:
                assert outcome is CancelOutcome.ALREADY and self.cancelled
        else:
            assert outcome in (CancelOutcome.KEPT, CancelOutcome.ALREADY)
            assert (outcome is CancelOutcome.ALREADY) == self.cancel_kept
            self.cancel_kept = True

    @precondition(lambda self: self.running is not None)
    @rule(by_itself=st.booleans())
    def exit(self, by_itself: bool) -> None:
        # A scope that was cancelled may still exit normally (its body finished first): the shell passes
        # what Trio says, cancelled_caught.
        cancelled = self.cancelled and not by_itself
        assert self.work.settle(cancelled=cancelled) is cancelled
        self.suspends += cancelled
        self.settled.append(self.running or "")
        self.running = None

    @invariant()
    def the_scope_is_cancelled_at_most_once(self) -> None:
        assert self.scope_cancels <= 1

    @invariant()
    def running_means_begun_and_not_settled(self) -> None:
        assert self.work.running is (self.running is not None)
        if self.running is not None:
            assert self.work.prompt_id == self.running

    @invariant()
    def each_item_settles_once(self) -> None:
        assert len(self.settled) == len(set(self.settled))
        assert self.suspends <= len(self.settled)


TestWorkItemMachine = WorkItemMachine.TestCase
TestWorkItemMachine.settings = settings(max_examples=300, stateful_step_count=30, derandomize=True,
                                        database=None, deadline=None)
