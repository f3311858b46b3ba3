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
from typing import Any, Generic, TypeVar

import trio

T = TypeVar("T")
M = TypeVar("M")


class MailboxFull(Exception):
    """An actor's mailbox is full and the caller chose not to wait."""


class ActorGone(Exception):
    """The actor has stopped; its mailbox no longer accepts messages."""


class Reply(Generic[T]):
    """One-shot reply slot carried inside a message. Sending twice is a bug."""

    __slots__ = ("_send", "_sent")

    def __init__(self, send: trio.MemorySendChannel[T]) -> None:
        self._send = send
        self._sent = False

    def close(self) -> None:
        """Answer nothing, on purpose: the asker gets :class:`ActorGone` at once."""
        if not self._sent:
            self._sent = True
            self._send.close()

    def send(self, value: T) -> None:
        if self._sent:
            raise RuntimeError("reply already sent")
        self._sent = True
        try:
            self._send.send_nowait(value)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the asker went away; nothing waits for this answer


class PendingReply(Generic[T]):
    """The receiving side of an ``ask``: wait with a deadline, or poll later."""

    __slots__ = ("_receive", "_value", "_done")

    def __init__(self, receive: trio.MemoryReceiveChannel[T]) -> None:
        self._receive = receive
        self._done = False
        self._value: Any = None

    @property
    def done(self) -> bool:
        return self._done

    def poll(self) -> tuple[bool, T | None]:
        """Return ``(True, value)`` if the answer has arrived, else ``(False, None)``."""
        if not self._done:
            try:
                self._value = self._receive.receive_nowait()
                self._done = True
            except trio.WouldBlock:
                return False, None
            except trio.EndOfChannel:
                raise ActorGone("the actor stopped without answering") from None
        return True, self._value

    async def wait(self, timeout: float = math.inf) -> T:
        """Wait for the answer; raises :class:`trio.TooSlowError` past ``timeout``."""
        if not self._done:
            if timeout == math.inf:  # no cancel scope to enter and leave when nothing can expire
                self._value = await self._answer()
            else:
                with trio.fail_after(timeout):
                    self._value = await self._answer()
            self._done = True
        return self._value

    async def _answer(self) -> T:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            raise ActorGone("the actor stopped without answering") from None


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
        send, receive = trio.open_memory_channel[T](1)
        self.tell_nowait(make(Reply(send)))
        return PendingReply(receive)

    async def ask(self, make: Callable[[Reply[T]], M], timeout: float = 10.0) -> T:
        """Send ``make(reply)`` and wait for the answer, at most ``timeout`` seconds in all."""
        send, receive = trio.open_memory_channel[T](1)
        with trio.fail_after(timeout):
            await self.tell(make(Reply(send)))
            return await PendingReply(receive).wait()

    def close(self) -> None:
        """Close the mailbox: the actor finishes the messages it has, then stops."""
        self._send.close()


def open_mailbox(name: str, capacity: int) -> tuple[ActorRef[Any], trio.MemoryReceiveChannel[Any]]:
    """A bounded mailbox: the reference to hand out and the channel the actor reads."""
    send, receive = trio.open_memory_channel[Any](capacity)
    return ActorRef(name, send), receive


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


async def serve_mailbox(inbox: trio.MemoryReceiveChannel[M], handle: Callable[[M], None]) -> None:
    """Hand each message to ``handle``, one at a time, until the mailbox closes or the actor is cancelled.

    Whatever way it stops, messages it never handled get their replies closed.
    """
    try:
        async for message in inbox:
            handle(message)
    finally:
        refuse_unhandled(inbox)
        inbox.close()
