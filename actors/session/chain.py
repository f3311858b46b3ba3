"""The session's side of the Todo Stop Guard: the work chain around the pure guard state.

The guard itself (:mod:`actors.guard`) knows nothing of prompts, background
work or queues. :class:`WorkChain` applies the spec's rules that need them:
what a new prompt or an automatic turn does to the chain, the chain's
background *baseline*, which background input is *relevant* to it, which
automatic item may run while it can still resume, FIFO priority, and what a
lifecycle event (rewind, restore, fork, cwd change, Plan mode) clears.
"""

from __future__ import annotations

from ..background.automatic import AutomaticItem
from ..background.manager import BackgroundManager
from ..background.registry import Baseline
from ..guard import TodoStopGuard

RELEVANT_LIVE_KINDS = frozenset({"agent", "shell", "monitor", "wakeup"})
RELEVANT_QUEUED_SOURCES = frozenset({"notification", "wakeup", "loop"})


class WorkChain:
    """Guard state plus the chain's baseline and FIFO priority."""

    def __init__(self, guard: TodoStopGuard, background: BackgroundManager) -> None:
        self.guard = guard
        self.background = background
        self.baseline = Baseline()
        self.queued_prompt_priority = False  # the chain yielded to a complete queued prompt

    # ------------------------------------------------------------- new work

    def prepare_for_prompt(self, *, trusted_retry: bool, plan: bool) -> None:
        """A foreground prompt starts: a new unarmed chain, unless a trusted retry can keep this one."""
        guard = self.guard
        self.queued_prompt_priority = False
        if plan:
            guard.block_until_ordinary_prompt_starts()
            return
        if trusted_retry and guard.has_trusted_unfinished_state:
            guard.resume_trusted_prompt()  # same chain, same stage budget
            return
        guard.start_ordinary_prompt()
        self.baseline = self.background.snapshot()

    def prepare_for_automatic_turn(self, item: AutomaticItem, *, plan: bool) -> None:
        """An automatic turn starts: a related result continues the chain, anything else starts a new one."""
        guard = self.guard
        related = self.is_related(item)
        if plan:
            guard.block_until_ordinary_prompt_starts()
        elif related and guard.is_hard_suspended:
            pass  # a related result cannot revive a hard-stopped chain
        elif related and guard.has_trusted_unfinished_state:
            guard.resume_trusted_prompt()  # keeps the budget; lifts an API retry pause
        else:
            guard.clear_trust()
            self.baseline = self.background.snapshot()

    # ------------------------------------------------------------- background relationships

    def is_related(self, item: AutomaticItem) -> bool:
        """Background results of work the current chain started (not in its baseline).

        Ordinary cron fires are never related: they wait until the chain can no longer resume.
        """
        return item.source in RELEVANT_QUEUED_SOURCES and item.task_id not in self.baseline

    def has_relevant_background_input(self) -> bool:
        """New live agents, shells, monitors and @wakeups, or queued notifications and wakeups of them."""
        baseline = self.baseline
        for item in self.background.registry.live():
            if item.kind in RELEVANT_LIVE_KINDS and item.task_id not in baseline:
                return True
        return any(q.source in RELEVANT_QUEUED_SOURCES and q.task_id not in baseline
                   for q in self.background.queue.items)

    def select_automatic(self) -> AutomaticItem | None:
        """Nothing while a queued prompt has priority; the head, unless a resumable chain holds
        unrelated work back; then only the first related item."""
        if self.queued_prompt_priority:
            return None
        if not self.guard.blocks_unrelated_automatic_turns:
            return self.background.queue.peek()
        return self.background.queue.peek(self.is_related)

    def yield_to_queued_prompt(self, has_queued_prompt: bool) -> bool:
        """A drain saw a complete queued prompt: the chain yields to it (FIFO priority), if it can.

        Asking the guard again here, after the drain, means a release that arrived while the
        drain's answer was on its way (trust cleared) leaves no priority behind.
        """
        if has_queued_prompt and self.guard.await_queued_prompt():
            self.queued_prompt_priority = True
            return True
        return False

    @property
    def suggestions_allowed(self) -> bool:
        """Follow-up suggestions would compete with a chain that can still resume or a prioritised prompt."""
        return not (self.guard.blocks_unrelated_automatic_turns or self.queued_prompt_priority)

    # ------------------------------------------------------------- lifecycle

    def invalidate(self, *, turn_running: bool) -> None:
        """A trust-clearing lifecycle event. A running turn's late todo writes may not re-arm; what
        the old chain started is no longer related to any chain (a fresh boundary)."""
        if turn_running:
            self.guard.block_until_ordinary_prompt_starts()
        else:
            self.guard.clear_trust()
        self.baseline = self.background.snapshot()

    def release_queued_prompt_wait(self, *, turn_running: bool) -> bool:
        """The queued prompt the chain yielded to was aborted: end the chain and release the queues.

        Ending the chain never lifts a block a lifecycle event put on a running turn.
        """
        if not (self.queued_prompt_priority or self.guard.awaiting_queued_prompt):
            return False
        self.queued_prompt_priority = False
        if self.guard.is_hard_suspended:
            self.guard.resume_trusted_prompt()  # only stops awaiting; the suspension stays
        else:
            self.invalidate(turn_running=turn_running)
        return True
