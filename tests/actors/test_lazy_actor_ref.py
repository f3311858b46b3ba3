"""LazyActorRef: an actor whose mailbox and task start with its first message, and stay bounded until then."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from actors._actor import ActorGone, LazyActorRef, MailboxFull, Reply, serve_mailbox


class Ask:
    def __init__(self, text: str, reply: Reply[str]) -> None:
        self.text = text
        self.reply = reply


def echo_actor(nursery: trio.Nursery, started: list[str]) -> Any:
    def handle(message: Any) -> None:
        if isinstance(message, Ask):
            message.reply.send(message.text.upper())
        else:
            started.append(f"told {message}")

    def start(inbox: trio.MemoryReceiveChannel[Any]) -> None:
        started.append("started")
        try:
            nursery.start_soon(serve_mailbox, inbox, handle)
        except RuntimeError:
            raise ActorGone("the nursery is closed") from None

    return start


async def test_nothing_starts_until_the_first_message_then_it_answers_in_order():
    log: list[str] = []
    async with trio.open_nursery() as nursery:
        ref = LazyActorRef("echo", 4, echo_actor(nursery, log))
        await trio.testing.wait_all_tasks_blocked()
        assert not ref.started and log == []
        ref.tell_nowait("first")
        assert ref.started and log == ["started"]
        assert await ref.ask(lambda r: Ask("hi", r)) == "HI"
        assert log == ["started", "told first"]
        ref.close()


async def test_a_mailbox_whose_task_has_not_run_yet_is_still_bounded():
    log: list[str] = []
    async with trio.open_nursery() as nursery:
        ref = LazyActorRef("echo", 2, echo_actor(nursery, log))
        ref.tell_nowait(1)
        ref.tell_nowait(2)  # the task is started but has not run: the two wait in the mailbox
        with pytest.raises(MailboxFull):
            ref.tell_nowait(3)
        await ref.tell(3)  # waits for room, as any mailbox
        ref.close()
    assert log == ["started", "told 1", "told 2", "told 3"]


async def test_closed_before_it_started_it_never_starts():
    log: list[str] = []
    async with trio.open_nursery() as nursery:
        ref = LazyActorRef("echo", 2, echo_actor(nursery, log))
        ref.close()
        with pytest.raises(ActorGone):
            ref.tell_nowait("late")
        with pytest.raises(ActorGone):
            await ref.ask(lambda r: Ask("late", r))
    assert log == []


async def test_an_actor_that_can_no_longer_start_is_gone_for_every_message():
    log: list[str] = []
    async with trio.open_nursery() as nursery:
        start = echo_actor(nursery, log)
    ref = LazyActorRef("echo", 2, start)  # its nursery has closed
    with pytest.raises(ActorGone):
        ref.tell_nowait("late")
    with pytest.raises(ActorGone):
        await ref.ask(lambda r: Ask("late", r))
    assert log == ["started"]  # one attempt
