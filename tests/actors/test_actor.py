"""The actor pattern in actors/_actor.py: mailboxes, tell/ask, deadlines, late replies."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from actors._actor import ActorGone, ActorRef, MailboxFull, PendingReply, Reply, open_mailbox, reply_pair


@attrs.frozen
class Add:
    a: int
    b: int
    reply: Reply[int]


@attrs.frozen
class Note:
    text: str


@attrs.frozen
class SlowAdd:
    a: int
    b: int
    delay: float
    reply: Reply[int]


async def adder(inbox: trio.MemoryReceiveChannel[Any], seen: list[Any]) -> None:
    """A tiny actor: one message at a time until its mailbox closes."""
    async with inbox:
        async for message in inbox:
            seen.append(message)
            match message:
                case Add(a, b, reply):
                    reply.send(a + b)
                case SlowAdd(a, b, delay, reply):
                    await trio.sleep(delay)
                    reply.send(a + b)
                case Note():
                    pass


async def test_tell_and_ask_round_trip() -> None:
    ref, inbox = open_mailbox("adder", 4)
    seen: list[Any] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(adder, inbox, seen)
            await ref.tell(Note("hello"))
            assert await ref.ask(lambda reply: Add(2, 3, reply)) == 5
            assert await ref.ask(lambda reply: Add(10, -4, reply), timeout=1) == 6
            ref.close()  # the actor finishes what it has, then stops
    assert [type(m) for m in seen] == [Note, Add, Add]
    assert seen[0] == Note("hello")
    assert ref.name == "adder"


async def test_messages_are_handled_one_at_a_time_in_order() -> None:
    ref, inbox = open_mailbox("adder", 8)
    seen: list[Any] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for i in range(5):
                ref.tell_nowait(Note(str(i)))
            nursery.start_soon(adder, inbox, seen)
            ref.close()
    assert [m.text for m in seen] == ["0", "1", "2", "3", "4"]


async def test_ask_times_out_with_too_slow_error(autojump_clock: trio.testing.MockClock) -> None:
    ref, inbox = open_mailbox("silent", 4)
    kept: list[Any] = []

    async def silent() -> None:
        async for message in inbox:
            kept.append(message)  # never answers

    async with trio.open_nursery() as nursery:
        nursery.start_soon(silent)
        start = trio.current_time()
        with pytest.raises(trio.TooSlowError):
            await ref.ask(lambda reply: Add(1, 1, reply), timeout=3)
        assert trio.current_time() - start == pytest.approx(3)
        assert len(kept) == 1  # the message was delivered; only the answer was late
        nursery.cancel_scope.cancel()


async def test_ask_deadline_covers_waiting_for_mailbox_space(autojump_clock: trio.testing.MockClock) -> None:
    ref, _inbox = open_mailbox("stuck", 1)
    ref.tell_nowait(Note("fills the mailbox"))
    start = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        await ref.ask(lambda reply: Add(1, 1, reply), timeout=2)
    assert trio.current_time() - start == pytest.approx(2)


async def test_ask_nowait_poll_picks_up_a_late_answer(autojump_clock: trio.testing.MockClock) -> None:
    ref, inbox = open_mailbox("slow", 4)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(adder, inbox, [])
        pending = ref.ask_nowait(lambda reply: SlowAdd(20, 22, 5.0, reply))
        assert isinstance(pending, PendingReply)
        assert pending.poll() == (False, None)
        assert not pending.done
        with pytest.raises(trio.TooSlowError):
            await pending.wait(timeout=1)
        assert pending.poll() == (False, None)  # still late
        await trio.sleep(10)  # the actor answers at t=5
        assert pending.poll() == (True, 42)
        assert pending.done
        assert pending.poll() == (True, 42)  # idempotent once done
        with trio.fail_after(0.001):
            assert await pending.wait() == 42  # answers at once, no waiting
        ref.close()


async def test_pending_wait_gets_an_answer_within_its_timeout(autojump_clock: trio.testing.MockClock) -> None:
    ref, inbox = open_mailbox("slow", 4)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(adder, inbox, [])
        pending = ref.ask_nowait(lambda reply: SlowAdd(1, 2, 2.0, reply))
        start = trio.current_time()
        assert await pending.wait(timeout=5) == 3
        assert trio.current_time() - start == pytest.approx(2)
        ref.close()


async def test_full_mailbox_tell_nowait_raises_and_tell_waits_for_space() -> None:
    ref, inbox = open_mailbox("busy", 2)
    ref.tell_nowait(Note("a"))
    ref.tell_nowait(Note("b"))
    with pytest.raises(MailboxFull):
        ref.tell_nowait(Note("c"))
    with pytest.raises(MailboxFull):
        ref.ask_nowait(lambda reply: Add(1, 1, reply))

    delivered = trio.Event()

    async def blocked_teller() -> None:
        await ref.tell(Note("d"))
        delivered.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(blocked_teller)
            await trio.testing.wait_all_tasks_blocked()
            assert not delivered.is_set()  # backpressure: it waits, nothing is dropped
            assert (await inbox.receive()).text == "a"
            await delivered.wait()
            assert [(await inbox.receive()).text for _ in range(2)] == ["b", "d"]
            with pytest.raises(trio.WouldBlock):
                inbox.receive_nowait()


async def test_closed_mailbox_gives_actor_gone() -> None:
    ref, _inbox = open_mailbox("closed", 2)
    ref.close()
    with pytest.raises(ActorGone):
        ref.tell_nowait(Note("x"))
    with pytest.raises(ActorGone):
        await ref.tell(Note("x"))
    with pytest.raises(ActorGone):
        await ref.ask(lambda reply: Add(1, 1, reply), timeout=1)
    with pytest.raises(ActorGone):
        ref.ask_nowait(lambda reply: Add(1, 1, reply))


@pytest.mark.parametrize("timeout", [1.0, math.inf])
async def test_a_cancelled_asker_is_told_it_was_cancelled_before_it_meets_a_stopped_actor(timeout: float) -> None:
    # A session cancelled as its FIFO closes (the daemon shutting down) must see Cancelled, as at any
    # checkpoint, not ActorGone: the ask's send no longer yields, but still checks for cancellation first.
    ref, _inbox = open_mailbox("closing", 2)
    ref.close()
    with trio.CancelScope() as scope:
        scope.cancel()
        await ref.ask(lambda reply: Add(1, 1, reply), timeout=timeout)
    assert scope.cancelled_caught


@pytest.mark.parametrize(("timeout", "own_scope"), [(math.inf, False), (10.0, True)])
async def test_only_an_ask_that_can_time_out_waits_under_a_cancel_scope_of_its_own(timeout: float,
                                                                                     own_scope: bool) -> None:
    ref, inbox = open_mailbox("adder", 2)
    seen: dict[str, object] = {}
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            async def ask() -> None:
                seen["task"] = trio.lowlevel.current_task()
                seen["before"] = seen["task"]._cancel_status  # type: ignore[attr-defined]
                assert await ref.ask(lambda reply: Add(2, 3, reply), timeout=timeout) == 5

            async def answer() -> None:
                message = await inbox.receive()
                seen["while"] = seen["task"]._cancel_status  # type: ignore[attr-defined]  # the asker waits
                message.reply.send(5)

            nursery.start_soon(answer)
            nursery.start_soon(ask)
    assert (seen["while"] is not seen["before"]) is own_scope


async def test_an_ask_that_cannot_time_out_is_answered_or_told_the_actor_stopped() -> None:
    ref, inbox = open_mailbox("adder", 2)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(adder, inbox, [])
            assert await ref.ask(lambda reply: Add(2, 3, reply), timeout=math.inf) == 5
            ref.close()
    with pytest.raises(ActorGone):
        await ref.ask(lambda reply: Add(2, 3, reply), timeout=math.inf)


async def test_an_ask_with_room_in_the_mailbox_is_scheduled_once_for_its_answer() -> None:
    ref, inbox = open_mailbox("adder", 2)
    me = trio.lowlevel.current_task()
    steps = 0

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            nonlocal steps
            steps += task is me

    async def answer() -> None:
        message = await inbox.receive()
        message.reply.send(message.a + message.b)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer)
            await trio.testing.wait_all_tasks_blocked()
            instrument = Steps()
            trio.lowlevel.add_instrument(instrument)
            try:
                assert await ref.ask(lambda reply: Add(2, 3, reply)) == 5
            finally:
                trio.lowlevel.remove_instrument(instrument)
    # Parked until the answer came, then woken once: tell's send would have rescheduled it first as well.
    assert steps == 1


async def test_stopped_actor_gives_actor_gone() -> None:
    ref, inbox = open_mailbox("stopped", 2)
    await inbox.aclose()  # the actor's side went away
    with pytest.raises(ActorGone):
        ref.tell_nowait(Note("x"))
    with pytest.raises(ActorGone):
        await ref.tell(Note("x"))


async def test_pending_reply_raises_actor_gone_when_the_reply_is_closed() -> None:
    reply, pending = reply_pair()
    reply.close()
    with pytest.raises(ActorGone):
        pending.poll()
    with trio.fail_after(1), pytest.raises(ActorGone):
        await pending.wait()


async def test_reply_send_twice_raises() -> None:
    reply, pending = reply_pair()
    reply.send(1)
    with pytest.raises(RuntimeError):
        reply.send(2)
    reply.close()  # closing after an answer changes nothing
    assert pending.poll() == (True, 1)


async def test_reply_to_an_asker_that_went_away_is_silent(autojump_clock: trio.testing.MockClock) -> None:
    reply, pending = reply_pair()
    with trio.move_on_after(1):
        await pending.wait()  # the asker gives up
    reply.send(7)  # nobody waits: no error
    with pytest.raises(RuntimeError):
        reply.send(8)  # but it is still one-shot
    assert pending.poll() == (True, 7)


async def test_a_waiting_asker_is_woken_by_the_answer_or_the_close() -> None:
    async with trio.open_nursery() as nursery:
        reply, pending = reply_pair()
        got: list[object] = []

        async def asker() -> None:
            got.append(await pending.wait())

        nursery.start_soon(asker)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [] and not pending.done
        reply.send("answer")
    assert got == ["answer"]
    reply, pending = reply_pair()
    with pytest.RaisesGroup(ActorGone):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pending.wait)
            await trio.testing.wait_all_tasks_blocked()
            reply.close()


async def test_wait_is_a_checkpoint_even_when_the_answer_is_there() -> None:
    reply, pending = reply_pair()
    reply.send(3)
    with trio.CancelScope() as scope:
        scope.cancel()
        await pending.wait()
    assert scope.cancelled_caught
    assert await pending.wait() == 3


def test_actor_ref_is_the_send_side() -> None:
    ref, inbox = open_mailbox("x", 3)
    assert isinstance(ref, ActorRef)
    ref.tell_nowait(Note("n"))
    assert inbox.receive_nowait() == Note("n")


@attrs.frozen
class Question:
    reply: Reply[Any]


async def test_an_ask_left_in_a_stopping_actors_mailbox_gets_actor_gone() -> None:
    from actors._actor import open_mailbox, serve_mailbox

    ref, inbox = open_mailbox("stopper", 4)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            ref.tell_nowait("stop")
            pending = ref.ask_nowait(Question)

            def handle(message: object) -> None:
                # The actor stops on its first message; the ask behind it is never handled.
                nursery.cancel_scope.cancel()

            nursery.start_soon(serve_mailbox, inbox, handle)
    with pytest.raises(ActorGone):
        pending.poll()


async def test_held_replies_wake_their_askers_only_when_released() -> None:
    from actors._actor import holding_replies, release_replies

    first, first_pending = reply_pair()
    second, second_pending = reply_pair()
    with holding_replies() as held:
        first.send(1)
        second.close()
    assert not first_pending.done and second_pending.poll() == (False, None)
    release_replies(held)
    assert first_pending.poll() == (True, 1)
    with pytest.raises(ActorGone):
        second_pending.poll()
    third, third_pending = reply_pair()
    third.send(3)  # outside a hold: at once
    assert third_pending.poll() == (True, 3)


async def test_with_a_commit_the_answer_waits_for_it_and_the_commit_runs_even_when_the_actor_is_cancelled(
        autojump_clock: trio.testing.MockClock) -> None:
    from actors._actor import serve_mailbox

    order: list[str] = []
    cancel_now = trio.Event()

    class Journal:
        unsynced = True

        async def commit(self) -> None:
            order.append("commit started")
            cancel_now.set()
            await trio.sleep(1)  # a slow sync: the actor's cancellation must not cut it short
            order.append("commit done")

    commit = Journal()

    def handle(message: Add) -> None:
        order.append("handled")
        message.reply.send(message.a + message.b)

    ref, inbox = open_mailbox("adder", 4)
    async with trio.open_nursery() as nursery:
        actor_scope = trio.CancelScope()

        async def actor() -> None:
            with actor_scope:
                await serve_mailbox(inbox, handle, commit)

        nursery.start_soon(actor)

        async def cancel_when_committing() -> None:
            await cancel_now.wait()
            actor_scope.cancel()

        nursery.start_soon(cancel_when_committing)
        with trio.fail_after(5):
            assert await ref.ask(lambda reply: Add(2, 3, reply)) == 5
        order.append("answered")
    assert order == ["handled", "commit started", "commit done", "answered"]


async def test_a_task_started_while_replies_are_held_sends_its_own_at_once() -> None:
    from actors._actor import holding_replies, release_replies

    reply, pending = reply_pair()

    async def answer() -> None:
        reply.send(7)

    async with trio.open_nursery() as nursery:
        with holding_replies() as held:
            nursery.start_soon(answer)  # copies the context, hold and all
        await trio.testing.wait_all_tasks_blocked()
        assert pending.poll() == (True, 7)
        release_replies(held)


async def test_what_arrives_while_a_commit_is_due_is_handled_into_the_same_commit() -> None:
    from actors._actor import serve_mailbox

    commits: list[list[int]] = []  # what each commit made durable

    class Journal:
        def __init__(self) -> None:
            self.written: list[int] = []

        @property
        def unsynced(self) -> bool:
            return bool(self.written)

        async def commit(self) -> None:
            if self.written:
                commits.append(self.written)
                self.written = []
                await trio.sleep(0)

    journal = Journal()
    woken = trio.Event()

    def handle(message: Add) -> None:
        journal.written.append(message.a)
        message.reply.send(message.a + message.b)
        woken.set()  # as an admission wakes its session

    ref, inbox = open_mailbox("adder", 4)
    answers: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_mailbox, inbox, handle, journal)

        async def woken_asker() -> None:  # runs when woken, and asks at once (the session's start)
            await woken.wait()
            answers.append(await ref.ask(lambda reply: Add(2, 0, reply)))

        nursery.start_soon(woken_asker)
        with trio.fail_after(5):
            answers.append(await ref.ask(lambda reply: Add(1, 0, reply)))
            while len(answers) < 2:
                await trio.sleep(0)
        nursery.cancel_scope.cancel()
    assert sorted(answers) == [1, 2]
    assert commits == [[1, 2]]  # one commit for both messages
