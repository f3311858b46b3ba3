"""The Daemon Todo Stop Guard as a pure state machine: state fields, transitions, decisions.

No I/O, no clock, no Trio — the session calls a transition when the spec's
event happens and asks for a decision at a natural stop. Theory of operation:

* A **work chain** is *armed* only by a trusted todo list with unfinished items
  (:meth:`observe_todo_write`); an empty or completed list disarms it.
* A **stage** is an uninterrupted run of automatic continuations. It may open
  at most :data:`MAX_ATTEMPTS` guard-attributable model streams; ``attempts``
  counts the *committed* ones (a stream was returned). New user input
  mid-turn starts a fresh stage; retry/continue and related background results
  keep the stage's budget.
* **Suspended** is a hard stop (cancellation, PostToolUse stop, loop
  protection, token limits, the Stop-hook cap, exhaustion): nothing but a new
  ordinary prompt revives the chain. **Retry-paused** is the soft stop after an
  API or network error, lifted by a trusted retry or a related background
  result. **Awaiting** means the chain yielded to a complete queued prompt.

Transitions (``-`` = unchanged; every transition is a no-op when disabled):

=============================  ===========================================================
transition                     effect
=============================  ===========================================================
clear_trust                    everything back to the initial state
start_ordinary_prompt          same as clear_trust (an unarmed chain, fresh stage)
block_until_ordinary_prompt    clear_trust, then suspended (late writes cannot re-arm)
resume_trusted_prompt          awaiting=False, retry_paused=False
accept_mid_turn_user_input     if armed or attempts>0, and not suspended: attempts=0,
                               retry_paused=awaiting=exhaustion_reported=False
observe_todo_write(todos)      strict list -> unfinished=count, exhaustion_reported=False,
                               armed = count>0 and not suspended (allow_arm=False: block)
suspend                        suspended=True, awaiting=False
pause_for_trusted_retry        if armed: retry_paused=True, awaiting=False
await_queued_prompt            if (armed or attempts>0) and not suspended: awaiting=True
commit_continuation(a)         if a == attempts+1 <= MAX and inspection/closure allowed:
                               attempts=a
mark_exhaustion_reported       first time only: exhaustion_reported=True, suspended=True
=============================  ===========================================================
"""

from __future__ import annotations

from typing import Any

import attrs

MAX_ATTEMPTS = 2


# ----------------------------------------------------------------- decisions


@attrs.frozen
class Inactive:
    """The guard has nothing to say about this stop."""


@attrs.frozen
class Deferred:
    """Relevant background input is pending: let it, not the guard, continue the chain."""


@attrs.frozen
class Continue:
    """Open guard-attributable stream number ``attempt``."""

    attempt: int
    unfinished_count: int
    max_attempts: int = MAX_ATTEMPTS
    tool_closure: bool = False  # only sends tool results of the previous guard stream; no guard prompt


@attrs.frozen
class Exhausted:
    """The stage's budget is spent with todos still unfinished."""

    attempt: int
    unfinished_count: int
    max_attempts: int = MAX_ATTEMPTS


Decision = Inactive | Deferred | Continue | Exhausted
INACTIVE = Inactive()
DEFERRED = Deferred()


# ----------------------------------------------------------------- the machine


@attrs.define
class TodoStopGuard:
    """One session's guard state. ``enabled`` is fixed at construction (read at start only)."""

    enabled: bool = False
    armed: bool = False
    unfinished_count: int = 0
    attempts: int = 0
    suspended: bool = False
    retry_paused: bool = False
    awaiting_queued_prompt: bool = False
    exhaustion_reported: bool = False

    # ------------------------------------------------------------- predicates

    @property
    def has_trusted_unfinished_state(self) -> bool:
        return self.enabled and self.armed and not self.suspended and self.unfinished_count > 0

    @property
    def blocks_unrelated_automatic_turns(self) -> bool:
        """A chain that can still resume holds unrelated automatic work back (also while retry-paused)."""
        return self.has_trusted_unfinished_state

    @property
    def needs_stop_inspection(self) -> bool:
        return self.has_trusted_unfinished_state and not self.retry_paused and not self.awaiting_queued_prompt

    @property
    def is_hard_suspended(self) -> bool:
        return self.enabled and self.suspended

    @property
    def has_committed_continuation(self) -> bool:
        return self.enabled and self.attempts > 0

    @property
    def _can_close_tools(self) -> bool:
        return (self.enabled and self.unfinished_count == 0 and self.attempts > 0 and not self.suspended
                and not self.retry_paused and not self.awaiting_queued_prompt)

    # ------------------------------------------------------------- transitions

    def clear_trust(self) -> None:
        if self.enabled:
            self._reset()

    def start_ordinary_prompt(self) -> None:
        self.clear_trust()

    def block_until_ordinary_prompt_starts(self) -> None:
        if self.enabled:
            self._reset()
            self.suspended = True

    def resume_trusted_prompt(self) -> None:
        if self.enabled:
            self.awaiting_queued_prompt = False
            self.retry_paused = False

    def accept_mid_turn_user_input(self) -> None:
        """New user input mid-turn keeps the activation and opens a fresh stage."""
        if not self.enabled or self.suspended or (not self.armed and self.attempts == 0):
            return
        self.attempts = 0
        self.retry_paused = False
        self.awaiting_queued_prompt = False
        self.exhaustion_reported = False

    def observe_todo_write(self, unfinished: int | None, *, allow_arm: bool = True) -> bool:
        """A trusted todo list with ``unfinished`` open items was written (``None``: not a strict list).

        Returns whether the write was recognised. ``allow_arm=False`` (Plan mode) blocks the chain.
        """
        if not self.enabled or unfinished is None:
            return False
        if not allow_arm:
            self.block_until_ordinary_prompt_starts()
            return True
        self.unfinished_count = unfinished
        self.exhaustion_reported = False
        if unfinished == 0:
            self.armed = False
        elif not self.suspended:
            self.armed = True
        return True

    def suspend(self) -> None:
        if self.enabled:
            self.suspended = True
            self.awaiting_queued_prompt = False

    def pause_for_trusted_retry(self) -> None:
        if self.enabled and self.armed:
            self.retry_paused = True
            self.awaiting_queued_prompt = False

    def await_queued_prompt(self) -> bool:
        """Yield to a complete queued prompt; ``False`` when there is no chain to hold."""
        if not self.enabled or (not self.armed and self.attempts == 0) or self.suspended:
            return False
        self.awaiting_queued_prompt = True
        return True

    def commit_continuation(self, attempt: int) -> bool:
        """Count guard stream ``attempt`` once its response stream exists."""
        allowed = (self.needs_stop_inspection or self._can_close_tools) and attempt == self.attempts + 1
        if not allowed or attempt > MAX_ATTEMPTS:
            return False
        self.attempts = attempt
        return True

    def mark_exhaustion_reported(self) -> bool:
        """Report exhaustion once; doing so hard-suspends the chain."""
        if not self.enabled or self.exhaustion_reported:
            return False
        self.exhaustion_reported = True
        self.suspended = True
        return True

    # ------------------------------------------------------------- decisions

    def decide(self, has_relevant_background_input: bool) -> Decision:
        """What the guard does at a natural stop."""
        if not self.needs_stop_inspection:
            return INACTIVE
        if has_relevant_background_input:
            return DEFERRED
        if self.attempts >= MAX_ATTEMPTS:
            return Exhausted(self.attempts, self.unfinished_count)
        return Continue(self.attempts + 1, self.unfinished_count)

    def decide_tool_closure(self, current_attempt: int, has_relevant_background_input: bool) -> Decision:
        """After guard stream ``current_attempt`` returned tool calls: may the next send be guard-sponsored?"""
        if self.unfinished_count > 0:
            return self.decide(has_relevant_background_input)
        if (current_attempt < 1 or not self.enabled or self.suspended or self.retry_paused or self.awaiting_queued_prompt
                or self.attempts != current_attempt):
            return INACTIVE
        if has_relevant_background_input:
            return DEFERRED
        if current_attempt >= MAX_ATTEMPTS:
            return INACTIVE
        return Continue(current_attempt + 1, 0, tool_closure=True)

    # ------------------------------------------------------------- helpers

    def summary(self) -> dict[str, Any]:
        """For status: counts and flags, never todo text."""
        return {
            "enabled": self.enabled, "armed": self.armed, "unfinishedCount": self.unfinished_count,
            "attempts": self.attempts, "maxAttempts": MAX_ATTEMPTS, "suspended": self.suspended,
            "retryPaused": self.retry_paused, "awaitingQueuedPrompt": self.awaiting_queued_prompt,
            "exhaustionReported": self.exhaustion_reported,
        }

    def _reset(self) -> None:
        self.armed = False
        self.unfinished_count = 0
        self.attempts = 0
        self.suspended = False
        self.retry_paused = False
        self.awaiting_queued_prompt = False
        self.exhaustion_reported = False
