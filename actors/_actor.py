"""The actor pattern: a bounded mailbox, one message at a time, ask with a deadline.

An actor is a Trio task (tree) started in its parent's nursery. Its mailbox is a
bounded memory channel: ``tell`` waits when it is full (backpressure, never a
silent drop), ``tell_nowait`` raises :class:`MailboxFull`. ``ask`` sends a
message that carries a one-shot :class:`Reply` and waits for the answer under a
deadline; an answer that arrives after the deadline stays in the returned
:class:`PendingReply`, so the caller decides on purpose what survives of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Generic, Protocol, TypeVar

import trio

from .timeouts import UniformDeadlines, Waiter, sweep_for

T = TypeVar("T")
M = TypeVar("M")


class MailboxFull(Exception):
    """An actor's mailbox is full and the caller chose not to wait."""


class ActorGone(Exception):
    """The actor has stopped; its mailbox no longer accepts messages."""


class _Slot:
    """Where one answer waits: the state an ask's :class:`Reply` and :class:`PendingReply` share.

    ``pending`` → ``answered`` (:meth:`Reply.send`) or ``closed`` (:meth:`Reply.close`);
    neither changes again. A task parked in :meth:`PendingReply.wait` is woken by
    either. A memory channel did the same job, but three objects and a channel
    state a message cost more than the answer itself, several times a turn.
    """

    __slots__ = ("state", "value", "waiter")

    def __init__(self) -> None:
        self.state = _PENDING
        self.value: Any = None
        self.waiter: trio.lowlevel.Task | None = None

    def settle(self, state: int, value: Any = None) -> None:
        self.state = state
        self.value = value
        waiter, self.waiter = self.waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)


_PENDING, _ANSWERED, _CLOSED = range(3)


class Reply(Generic[T]):
    """One-shot reply slot carried inside a message. Sending twice is a bug."""

    __slots__ = ("_slot", "_sent")

    def __init__(self, slot: _Slot) -> None:
        self._slot = slot
        self._sent = False

    def close(self) -> None:
        """Answer nothing, on purpose: the asker gets :class:`ActorGone` at once (or when held replies go)."""
        if not self._sent:
            self._sent = True
            _settle_or_hold(self._slot, _CLOSED)

    def send(self, value: T) -> None:
        """Answer; an asker that stopped waiting (a deadline) finds it with :meth:`PendingReply.poll`.
        Inside :func:`holding_replies` the answer waits until the hold ends."""
        if self._sent:
            raise RuntimeError("reply already sent")
        self._sent = True
        _settle_or_hold(self._slot, _ANSWERED, value)


# The replies a handler sends while its actor holds them (see holding_replies), with the task holding them:
# a task started meanwhile copies the context, and must not have its own replies held (and never released).
_held: ContextVar[tuple[Any, list[tuple[_Slot, int, Any]]] | None] = ContextVar("held_replies", default=None)


def _settle_or_hold(slot: _Slot, state: int, value: Any = None) -> None:
    held = _held.get()
    if held is None or held[0] is not trio.lowlevel.current_task():
        slot.settle(state, value)
    else:
        held[1].append((slot, state, value))


class holding_replies:  # noqa: N801 (used as a function: ``with holding_replies() as held``)
    """Replies sent in the body (by this task) are kept, not delivered; :func:`release_replies` sends them.

    What an actor answers after something it must finish first (a journal
    record made durable off the event loop) is held so: the askers wake only
    once it is done. (A class, not a ``@contextmanager``: entered for every
    message of an actor with commits, where a generator per message showed.)
    """

    __slots__ = ("_token",)

    def __enter__(self) -> list[tuple[_Slot, int, Any]]:
        held: list[tuple[_Slot, int, Any]] = []
        self._token = _held.set((trio.lowlevel.current_task(), held))
        return held

    def __exit__(self, *exc_info: object) -> None:
        _held.reset(self._token)


def release_replies(held: list[tuple[_Slot, int, Any]]) -> None:
    """Deliver replies kept by :func:`holding_replies`, in the order they were sent."""
    for slot, state, value in held:
        slot.settle(state, value)
    held.clear()


class PendingReply(Generic[T]):
    """The receiving side of an ``ask``: wait with a deadline, or poll later. One task waits at a time
    (a second is a ``RuntimeError``)."""

    __slots__ = ("_slot",)

    def __init__(self, slot: _Slot) -> None:
        self._slot = slot

    @property
    def done(self) -> bool:
        return self._slot.state == _ANSWERED

    def poll(self) -> tuple[bool, T | None]:
        """Return ``(True, value)`` if the answer has arrived, else ``(False, None)``."""
        state = self._slot.state
        if state == _PENDING:
            return False, None
        if state == _CLOSED:
            raise ActorGone("the actor stopped without answering")
        return True, self._slot.value

    async def wait(self, timeout: float = math.inf, *, shared: bool = False) -> T:
        """Wait for the answer (a checkpoint even if it is there); :class:`trio.TooSlowError` past ``timeout``.

        ``shared``: ``timeout`` is a constant that many waits share (``DRAIN_DEADLINE``); a per-run sweep
        task keeps it (:mod:`actors.timeouts`) instead of a cancel scope with a deadline for each wait.
        """
        if timeout == math.inf:  # no cancel scope to enter and leave when nothing can expire
            await self._answer()
        elif shared and timeout > 0:
            await self._answer(sweep_for(timeout))
        else:
            with trio.CancelScope(relative_deadline=timeout):  # trio.fail_after, without its generator
                await self._answer()
                return self.poll()[1]  # type: ignore[return-value]
            raise trio.TooSlowError
        return self.poll()[1]  # type: ignore[return-value]

    async def _answer(self, sweep: UniformDeadlines[Waiter] | None = None) -> None:
        slot = self._slot
        if slot.state != _PENDING:
            await trio.lowlevel.checkpoint()
            return
        if slot.waiter is not None:
            raise RuntimeError("another task is already waiting for this answer")
        task = slot.waiter = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            slot.waiter = None
            return trio.lowlevel.Abort.SUCCEEDED

        if sweep is None:
            await trio.lowlevel.wait_task_rescheduled(abort)
            return
        waiter = Waiter(task, slot)
        sweep.add(waiter)  # past its time, the sweep wakes us with TooSlowError
        try:
            await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            sweep.discard(waiter)


def reply_pair() -> tuple[Reply[Any], PendingReply[Any]]:
    """A one-shot answer: the :class:`Reply` to put in a message and the :class:`PendingReply` to wait on."""
    slot = _Slot()
    return Reply(slot), PendingReply(slot)


class ActorRef(Generic[M]):
    """The address of an actor: the sending side of its mailbox."""

    __slots__ = ("name", "_send")

    def __init__(self, name: str, send: trio.MemorySendChannel[M]) -> None:
        self.name = name
        self._send = send

    async def tell(self, message: M) -> None:
        try:
            await self._send.send(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ActorGone(f"{self.name} has stopped") from None

    def tell_nowait(self, message: M) -> None:
        try:
            self._send.send_nowait(message)
        except trio.WouldBlock:
            raise MailboxFull(f"{self.name}'s mailbox is full") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ActorGone(f"{self.name} has stopped") from None

    def ask_nowait(self, make: Callable[[Reply[T]], M]) -> PendingReply[T]:
        """Send ``make(reply)`` without waiting for mailbox space; return the pending answer."""
        reply, pending = reply_pair()
        self.tell_nowait(make(reply))
        return pending

    async def ask(self, make: Callable[[Reply[T]], M], timeout: float = 10.0) -> T:
        """Send ``make(reply)`` and wait for the answer, at most ``timeout`` seconds in all.

        An ask that cannot time out (``math.inf``: a session's take-next) and finds room in the mailbox
        enters no cancel scope at all. (A constant timeout is not handed to the run's shared sweep, as
        mid-turn drains are: the sweep's wake-ups would move the replay library's seeded schedules.)
        """
        reply, pending = reply_pair()
        if timeout == math.inf:
            message = make(reply)
            await trio.lowlevel.checkpoint_if_cancelled()  # as tell's send: a cancelled asker is told first
            try:
                self.tell_nowait(message)
            except MailboxFull:
                await self.tell(message)
            return await pending.wait()
        # trio.fail_after without its generator (an ask is a few a turn): only our own deadline is caught
        # here, so reaching the raise means it expired.
        with trio.CancelScope(relative_deadline=timeout):
            message = make(reply)
            await trio.lowlevel.checkpoint_if_cancelled()  # as tell's send: a cancelled asker is told first
            try:
                # Room in the mailbox: no yield to the scheduler before waiting for the answer, which yields
                # anyway (tell's send would reschedule us at once, only to park us in the wait).
                self.tell_nowait(message)
            except MailboxFull:
                await self.tell(message)
            return await pending.wait()
        raise trio.TooSlowError

    def close(self) -> None:
        """Close the mailbox: the actor finishes the messages it has, then stops."""
        self._send.close()


class LazyActorRef(ActorRef[M]):
    """The address of an actor that starts with the first message sent to it.

    On the first ``tell`` or ``ask`` its mailbox is made (bounded, as any) and ``start(inbox)`` starts the task
    that serves it: until then an actor that may never be needed (an idle session's prompt FIFO) costs neither
    a task nor a channel. ``start`` raises :class:`ActorGone` when the actor can no longer start (its owner has
    ended); so does every message after it.
    """

    __slots__ = ("_capacity", "_start")

    def __init__(self, name: str, capacity: int, start: Callable[[trio.MemoryReceiveChannel[M]], None]) -> None:
        self.name = name
        self._send = None  # type: ignore[assignment]  # no mailbox yet
        self._capacity = capacity
        self._start: Callable[[trio.MemoryReceiveChannel[M]], None] | None = start

    @property
    def started(self) -> bool:
        return self._send is not None

    def _open(self) -> None:
        if self._send is not None:
            return
        start, self._start = self._start, None  # one attempt: an actor that could not start never will
        if start is None:
            raise ActorGone(f"{self.name} has stopped")
        send, inbox = trio.open_memory_channel[Any](self._capacity)
        start(inbox)
        self._send = send

    async def tell(self, message: M) -> None:
        self._open()
        await super().tell(message)

    def tell_nowait(self, message: M) -> None:
        self._open()
        super().tell_nowait(message)

    def close(self) -> None:
        if self._send is None:
            self._start = None  # never started: it never will
        else:
            super().close()


def open_mailbox(name: str, capacity: int) -> tuple[ActorRef[Any], trio.MemoryReceiveChannel[Any]]:
    """A bounded mailbox: the reference to hand out and the channel the actor reads."""
    send, receive = trio.open_memory_channel[Any](capacity)
    return ActorRef(name, send), receive


def _handle_arrived(inbox: trio.MemoryReceiveChannel[M], handle: Callable[[M], None]) -> None:
    """Handle the messages waiting in ``inbox`` now, without waiting for more (at most :data:`GROUP_LIMIT`)."""
    for _ in range(GROUP_LIMIT):
        try:
            message = inbox.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return
        handle(message)


def refuse_unhandled(inbox: trio.MemoryReceiveChannel[Any]) -> None:
    """Close the replies of messages still in a stopping actor's mailbox (their askers get ActorGone)."""
    while True:
        try:
            message = inbox.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return
        reply = getattr(message, "reply", None)
        if isinstance(reply, Reply):
            reply.close()


class Commits(Protocol):
    """What an actor's handler writes and :func:`serve_mailbox` makes durable after it (a FIFO's journal, a
    session's record)."""

    @property
    def unsynced(self) -> bool:
        """Something written since the last commit waits for it."""

    async def commit(self) -> None:
        """Make what was written durable (called only while something is unsynced)."""


GROUP_CHECKPOINTS = 2  # a task woken by the handler (a session told of a prompt) runs within two
GROUP_LIMIT = 64  # messages handled into one commit, at most (a mailbox's capacity)


async def serve_mailbox(inbox: trio.MemoryReceiveChannel[M], handle: Callable[[M], None],
                        commits: Commits | None = None) -> None:
    """Hand each message to ``handle``, one at a time, until the mailbox closes or the actor is cancelled.

    With ``commits``, the replies ``handle`` sends are held until
    ``commits.commit()`` (shielded: it finishes even if the actor is cancelled)
    has run after it, and the next message waits for both; ``handle`` stays
    synchronous. When a handler left something unsynced, the actor first
    yields twice and handles what arrived meanwhile (a group commit: the
    session an admission woke asks for its start before the admission's sync,
    and one sync makes both durable). A commit that fails is the committer's to
    report (a journal logs it): the replies it held still go, as the changes
    they answer were made. Whatever way it stops, messages it never handled
    get their replies closed.
    """
    try:
        async for message in inbox:
            if commits is None:
                handle(message)
                continue
            with holding_replies() as held:
                try:
                    handle(message)
                    if commits.unsynced:
                        for _ in range(GROUP_CHECKPOINTS):
                            await trio.lowlevel.cancel_shielded_checkpoint()
                        _handle_arrived(inbox, handle)
                finally:
                    try:
                        if commits.unsynced:  # most messages write nothing to sync: no scope to enter and leave
                            with trio.CancelScope(shield=True):
                                await commits.commit()
                    finally:
                        release_replies(held)
    finally:
        refuse_unhandled(inbox)
        inbox.close()
