"""actors/timeouts.py: uniform deadlines kept by one task, and PendingReply.wait(shared=True) on them."""

from __future__ import annotations

import logging
import socket
from functools import partial

import pytest
import trio
import trio.testing

from actors._actor import reply_pair
from actors.timeouts import UniformDeadlines, sweep_for, wait_readable_within


async def test_keys_expire_in_order_each_its_timeout_after_it_was_last_added(
        autojump_clock: trio.testing.MockClock) -> None:
    expired: list[tuple[str, float]] = []
    deadlines: UniformDeadlines[str] = UniformDeadlines(2.0, lambda key: expired.append((key, trio.current_time())))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadlines.run)
        deadlines.add("a")
        await trio.sleep(0.5)
        deadlines.add("b")
        deadlines.add("c")
        await trio.sleep(1.0)
        deadlines.add("a")  # again: now the latest
        deadlines.discard("c")
        await trio.sleep(10)
        assert expired == [("b", 2.5), ("a", 3.5)] and len(deadlines) == 0
        nursery.cancel_scope.cancel()


async def test_a_failing_expiry_is_logged_and_the_sweep_goes_on(autojump_clock: trio.testing.MockClock,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    expired: list[str] = []

    def expire(key: str) -> None:
        if key == "bad":
            raise RuntimeError("boom")
        expired.append(key)

    deadlines: UniformDeadlines[str] = UniformDeadlines(1.0, expire)
    with caplog.at_level(logging.ERROR, logger="trellis.timeouts"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deadlines.run)
            deadlines.add("bad")
            deadlines.add("good")
            await trio.sleep(5)
            nursery.cancel_scope.cancel()
    assert expired == ["good"] and "expiring a timeout failed" in caplog.text


def test_a_timeout_must_be_positive() -> None:
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="positive number of seconds"):
            UniformDeadlines(bad, print)


async def test_a_shared_wait_is_too_slow_exactly_at_its_timeout_and_an_answer_before_it_wins(
        autojump_clock: trio.testing.MockClock) -> None:
    _reply, pending = reply_pair()
    start = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        await pending.wait(2.0, shared=True)
    assert trio.current_time() - start == 2.0
    assert len(sweep_for(2.0)) == 0  # the wait left nothing behind

    reply, pending = reply_pair()

    async def answer_later() -> None:
        await trio.sleep(1.5)
        reply.send("yes")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_later)
        assert await pending.wait(2.0, shared=True) == "yes"
    await trio.sleep(5)  # the sweep wakes at the stale deadline and finds nothing to expire
    assert pending.poll() == (True, "yes")


async def test_a_shared_wait_cancelled_from_outside_leaves_the_sweep(autojump_clock: trio.testing.MockClock) -> None:
    _reply, pending = reply_pair()
    with trio.move_on_after(0.5) as scope:
        await pending.wait(2.0, shared=True)
    assert scope.cancelled_caught and len(sweep_for(2.0)) == 0
    assert pending.poll() == (False, None)  # still pending: an answer now is found by poll, as before


def _task_names(task: trio.lowlevel.Task) -> list[str]:
    return [task.name] + [n for nursery in task.child_nurseries for child in nursery.child_tasks
                          for n in _task_names(child)]


async def test_waits_of_one_timeout_share_one_sweep_task() -> None:
    pendings = [reply_pair() for _ in range(5)]
    async with trio.open_nursery() as nursery:
        for _reply, pending in pendings:
            nursery.start_soon(partial(pending.wait, 30.0, shared=True))
        await trio.testing.wait_all_tasks_blocked()
        assert len(sweep_for(30.0)) == 5
        assert _task_names(trio.lowlevel.current_root_task()).count("timeouts of 30 s") == 1
        for reply, _pending in pendings:
            reply.send(1)
    assert len(sweep_for(30.0)) == 0


async def test_a_run_refuses_more_distinct_shared_timeouts_than_constants_would_need() -> None:
    from actors.timeouts import MAX_SWEEPS

    for n in range(MAX_SWEEPS):
        sweep_for(100.0 + n)
    sweep_for(100.0)  # one already kept: fine
    with pytest.raises(RuntimeError, match="a shared timeout must be a constant"):
        sweep_for(99.5)


# ----------------------------------------------------------------- socket reads (the model client's)


def _socket_pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    return ours, theirs


async def test_a_read_wait_ends_false_exactly_at_its_timeout(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = _socket_pair()
    with ours, theirs:
        start = trio.current_time()
        assert await wait_readable_within(ours, 30.0) is False
        assert trio.current_time() - start == 30.0


async def test_a_read_wait_ends_true_when_data_comes_first_and_leaves_the_sweep(
        autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = _socket_pair()
    with ours, theirs:
        async with trio.open_nursery() as nursery:
            async def send_later() -> None:
                await trio.sleep(29)
                theirs.send(b"x")

            nursery.start_soon(send_later)
            assert await wait_readable_within(ours, 30.0) is True
        assert trio.current_time() == 29 and ours.recv(1) == b"x"
        await trio.sleep(60)  # the sweep's old deadline passes: the socket is not touched
        theirs.send(b"y")
        assert await wait_readable_within(ours, 30.0) is True and ours.recv(1) == b"y"


async def test_read_waits_of_one_timeout_share_one_sweep_task() -> None:
    pairs = [_socket_pair() for _ in range(5)]
    async with trio.open_nursery() as nursery:
        for ours, _ in pairs:
            nursery.start_soon(wait_readable_within, ours, 45.0)
        await trio.testing.wait_all_tasks_blocked()
        assert _task_names(trio.lowlevel.current_root_task()).count("read timeouts of 45 s") == 1
        for _, theirs in pairs:
            theirs.send(b"x")
    for ours, theirs in pairs:
        ours.close()
        theirs.close()


async def test_a_socket_closed_by_its_owner_mid_wait_is_an_error_not_a_timeout() -> None:
    ours, theirs = _socket_pair()
    with theirs:
        async def close_soon() -> None:
            await trio.testing.wait_all_tasks_blocked()
            trio.lowlevel.notify_closing(ours)
            ours.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_soon)
            with pytest.raises(trio.ClosedResourceError):
                await wait_readable_within(ours, 30.0)
