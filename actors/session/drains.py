"""Mid-turn input: a session's drain of its FIFO within :data:`DRAIN_DEADLINE`, and a late answer kept.

Before a guard send and at a natural stop the session asks its FIFO (or an
installed drain source: the ACP bridge, a replay's slow bridge) for user input
queued for the running turn. A drain that misses its deadline is kept: when
its answer comes later, its messages are injected with the next drain, but its
queued-prompt snapshot is discarded, because it may already be stale. One
answered after its turn ended is handed back to the FIFO, so its input is not
lost (:func:`restore_late_drain`).

Every drain waits the same :data:`DRAIN_DEADLINE`, so the wait is a shared one
(:mod:`actors.timeouts`): one task keeps all drains' deadlines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from .._actor import ActorGone, MailboxFull, PendingReply
from . import fifo as f

if TYPE_CHECKING:
    from .session import Session

DRAIN_DEADLINE = 2.0  # seconds a mid-turn drain may take before the stop path goes on without it
LATE_DRAIN_WAIT = 30.0  # how long a late drain answer is still awaited once its turn has ended


async def drain(session: Session, watch_queued_prompt: bool) -> f.DrainResult:
    """What :meth:`Session.drain_mid_turn` does (see the module docstring)."""
    assert session.fifo_ref is not None
    fifo_ref = session.fifo_ref
    recovered: tuple[str, ...] = ()
    if session._late_drain is not None:
        arrived, late = session._late_drain.poll()
        if not arrived:
            return f.DrainResult((), (), False)  # the earlier drain is still out; don't stack another
        session._late_drain = None
        recovered = late.messages if late is not None else ()
    if session.drain_source is not None:
        pending = session.drain_source(watch_queued_prompt)
    else:
        try:
            pending = fifo_ref.ask_nowait(lambda r: f.Drain(watch_queued_prompt, r))
        except MailboxFull:
            return f.DrainResult(recovered, (), False)  # the input stays queued for the next drain
        except ActorGone:  # the session is closing (a shielded tool outlived the FIFO): no input
            return f.DrainResult(recovered, (), False)
    try:
        result = await pending.wait(DRAIN_DEADLINE, shared=True)
    except ActorGone:  # the FIFO stopped without answering: the session is closing
        return f.DrainResult(recovered, (), False)
    except trio.TooSlowError:
        session._late_drain = pending
        return f.DrainResult(recovered, (), False)
    except trio.Cancelled:
        session._late_drain = pending  # a cancelled wait keeps the answer too
        raise
    return f.DrainResult(recovered + result.messages, result.items, result.has_queued_prompt)


async def restore_late_drain(session: Session, pending: PendingReply[f.DrainResult]) -> None:
    """A drain answered after its turn ended: its messages go back to the FIFO, not to waste."""
    try:
        result = await pending.wait(LATE_DRAIN_WAIT)
    except (trio.TooSlowError, ActorGone):
        return
    if result.messages:
        await session._tell_fifo(f.RestoreMidTurn(result.messages))
