"""The work item's lifecycle: a pure state machine (no Trio, no I/O, no clock).

A *work item* is one piece of work the session runs at a time: a foreground
prompt the FIFO handed over, an automatic turn, or a follow-up suggestion. The
actor shell owns its Trio cancel scope; this machine decides, from what
happened, whether that scope must be cancelled and what its exit means. Every
transition is below; anything else raises :class:`WorkItemError`.

    phase                 event                    next                  the shell does
    --------------------  -----------------------  --------------------  -----------------------------
    idle, settled         hand_over(p)             handed_over(p)        (the FIFO took p for us)
    idle, settled         begin(q)   [automatic,   running(q)            enter q's scope
                                     suggestion]
    handed_over(p)        begin(p)                 running(p)            enter p's scope
    handed_over(p)        cancel / cancel(p)       cancel_pending(p)     nothing yet: p has no scope
    cancel_pending(p)*    begin(p)                 cancel_pending(p)     enter p's scope, cancel it at once
    running(p)            cancel / cancel(p)       cancel_pending(p)     cancel p's scope
    cancel_pending(p)     cancel / cancel(p)       cancel_pending(p)     (already cancelled: accepted)
    running, c._pending   settle(cancelled)        settled               suspend the chain if cancelled;
                                                                         release what waited for the item
    idle, settled         cancel                   (unchanged)           nothing: "nothing to cancel"
    any                   cancel(q), q not p       (unchanged)           nothing: a stale cancel

    * not begun yet

``cancel`` is a user's cancellation of whatever runs; ``cancel(p)`` is the
FIFO's abort of prompt ``p`` once it was handed over. A cancel that comes
between the hand-over and the start of the work item is kept, so the prompt
ends cancelled as soon as it begins (never run, never lost). Whatever way a
begun item ends, it settles exactly once; a cancelled exit suspends the Todo
Stop Guard's chain (spec 000: every cancellation path suspends it).
"""

from __future__ import annotations

import enum

import attrs


class Phase(enum.Enum):
    IDLE = "idle"
    HANDED_OVER = "handed_over"
    RUNNING = "running"
    CANCEL_PENDING = "cancel_pending"
    SETTLED = "settled"


class WorkItemError(RuntimeError):
    """A transition the table does not have: a bug in the shell, never the user's doing."""


class CancelOutcome(enum.Enum):
    NOTHING = "nothing"  # nothing runs (or the cancel was for another prompt): refused
    KEPT = "kept"  # handed over, not begun: it is cancelled as it begins
    CANCEL_SCOPE = "cancel_scope"  # running: the shell cancels its scope now
    ALREADY = "already"  # its cancel was already asked

    @property
    def accepted(self) -> bool:
        return self is not CancelOutcome.NOTHING


@attrs.define
class WorkItem:
    """The session's one work item, from the hand-over (or start) to its settlement."""

    phase: Phase = Phase.IDLE
    prompt_id: str | None = None
    kind: str | None = None  # "prompt", "automatic", "suggestion" (its prompt's id again); set when it begins
    begun: bool = False

    @property
    def running(self) -> bool:
        """A work item has begun and not settled: the session is busy."""
        return self.begun and self.phase in (Phase.RUNNING, Phase.CANCEL_PENDING)

    def hand_over(self, prompt_id: str) -> None:
        self._expect(Phase.IDLE, Phase.SETTLED, event=f"hand_over({prompt_id})")
        self.phase, self.prompt_id, self.kind, self.begun = Phase.HANDED_OVER, prompt_id, None, False

    def begin(self, prompt_id: str, kind: str) -> bool:
        """The work item begins; ``True`` when the shell must cancel its scope at once."""
        if self.phase in (Phase.IDLE, Phase.SETTLED):
            self.phase, self.prompt_id = Phase.RUNNING, prompt_id
        elif self.phase in (Phase.HANDED_OVER, Phase.CANCEL_PENDING) and not self.begun and self.prompt_id == prompt_id:
            self.phase = Phase.RUNNING if self.phase is Phase.HANDED_OVER else Phase.CANCEL_PENDING
        else:
            raise WorkItemError(f"begin({prompt_id}) in phase {self.phase.value} of {self.prompt_id}")
        self.kind, self.begun = kind, True
        return self.phase is Phase.CANCEL_PENDING

    def cancel(self, prompt_id: str | None = None) -> CancelOutcome:
        """A cancel of what runs (``prompt_id`` ``None``) or of one prompt; see the table."""
        if self.phase in (Phase.IDLE, Phase.SETTLED):
            return CancelOutcome.NOTHING
        if prompt_id is not None and prompt_id != self.prompt_id:
            return CancelOutcome.NOTHING
        if self.phase is Phase.CANCEL_PENDING:
            return CancelOutcome.ALREADY
        was = self.phase
        self.phase = Phase.CANCEL_PENDING
        return CancelOutcome.CANCEL_SCOPE if was is Phase.RUNNING else CancelOutcome.KEPT

    def settle(self, *, cancelled: bool) -> bool:
        """The begun item exited (``cancelled``: by its scope's cancellation); ``True``: suspend the chain."""
        if not self.running:
            raise WorkItemError(f"settle in phase {self.phase.value} (begun: {self.begun})")
        self.phase, self.begun = Phase.SETTLED, False
        return cancelled

    def _expect(self, *phases: Phase, event: str) -> None:
        if self.phase not in phases:
            raise WorkItemError(f"{event} in phase {self.phase.value} of {self.prompt_id}")


__all__ = ["CancelOutcome", "Phase", "WorkItem", "WorkItemError"]
