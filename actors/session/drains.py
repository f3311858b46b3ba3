"""Mid-turn input: a session's drain of its FIFO within :data:`DRAIN_DEADLINE`, and a late answer kept.

Before a guard send and at a natural stop the turn asks for user input queued
for it: from the session's own FIFO, or from an installed drain source (the
ACP bridge, a replay's slow bridge). A drain that misses its deadline is kept:
when its answer comes later, its messages are injected with the next drain,
but its queued-prompt snapshot is discarded, because it may already be stale.
One answered after its turn ended is handed back to the FIFO, so its input is
not lost (:meth:`MidTurnInput.restore_late`).

Every drain waits the same :data:`DRAIN_DEADLINE`, so the wait is a shared one
(:mod:`actors.timeouts`): one task keeps all drains' deadlines.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from .._actor import ActorGone, ActorRef, MailboxFull, PendingReply
from . import fifo as f

DRAIN_DEADLINE = 2.0  # seconds a mid-turn drain may take before the stop path goes on without it
LATE_DRAIN_WAIT = 30.0  # how long a late drain answer is still awaited once its turn has ended

NOTHING = f.DrainResult((), (), False)

DrainSource = Callable[[bool], PendingReply[f.DrainResult]]


class MidTurnInput:
    """Where a session's turns get mid-turn input, and the one drain answer still on its way."""

    def __init__(self, fifo: Callable[[], ActorRef[f.FifoMessage] | None],
                 tell_fifo: Callable[[f.FifoMessage], Awaitable[None]]) -> None:
        self._fifo = fifo
        self._tell_fifo = tell_fifo
        # A bridge (an ACP client that owns the real queue) may install its own source; None: the FIFO.
        self.source: DrainSource | None = None
        self._late: PendingReply[f.DrainResult] | None = None

    async def drain(self, watch_queued_prompt: bool = False) -> f.DrainResult:
        """Mid-turn input for the running turn (see the module docstring)."""
        recovered: tuple[str, ...] = ()
        if self._late is not None:
            arrived, late = self._late.poll()
            if not arrived:
                return NOTHING  # the earlier drain is still out; don't stack another
            self._late = None
            recovered = late.messages if late is not None else ()
        if self.source is not None:
            pending = self.source(watch_queued_prompt)
        else:
            fifo = self._fifo()
            if fifo is None:
                return f.DrainResult(recovered, (), False)
            try:
                pending = fifo.ask_nowait(lambda r: f.Drain(watch_queued_prompt, r))
            except MailboxFull:
                return f.DrainResult(recovered, (), False)  # the input stays queued for the next drain
            except ActorGone:  # the session is closing (a shielded tool outlived the FIFO): no input
                return f.DrainResult(recovered, (), False)
        try:
            result = await pending.wait(DRAIN_DEADLINE, shared=True)
        except ActorGone:  # the FIFO stopped without answering: the session is closing
            return f.DrainResult(recovered, (), False)
        except trio.TooSlowError:
            self._late = pending
            return f.DrainResult(recovered, (), False)
        except trio.Cancelled:
            self._late = pending  # a cancelled wait keeps the answer too
            raise
        return f.DrainResult(recovered + result.messages, result.items, result.has_queued_prompt)

    def take_late(self) -> PendingReply[f.DrainResult] | None:
        """The work item ended: a drain still out is the FIFO's again (:meth:`restore_late`)."""
        late, self._late = self._late, None
        return late

    async def restore_late(self, pending: PendingReply[f.DrainResult]) -> None:
        """A drain answered after its turn ended: its messages go back to the FIFO, not to waste."""
        try:
            result = await pending.wait(LATE_DRAIN_WAIT)
        except (trio.TooSlowError, ActorGone):
            return
        if result.messages:
            await self._tell_fifo(f.RestoreMidTurn(result.messages))


__all__ = ["DRAIN_DEADLINE", "LATE_DRAIN_WAIT", "DrainSource", "MidTurnInput", "NOTHING"]
