"""transport/keep_alive.py: one sweep closes each idle keep-alive connection when its timeout is up."""

from __future__ import annotations

from types import SimpleNamespace

import trio
import trio.testing

from transport.keep_alive import IdleSweep, IdleTimer


class Connections:
    """Timers as hypercorn's TCPServer holds them, each closing a named connection (the time it was closed)."""

    def __init__(self, nursery: trio.Nursery, sweep: IdleSweep) -> None:
        self.group = SimpleNamespace(_nursery=nursery)  # hypercorn's TaskGroup: only its nursery is used
        self.sweep = sweep
        self.closed: dict[str, float] = {}

    def timer(self, name: str) -> IdleTimer:
        async def close() -> None:
            await trio.sleep(0)  # shielded: it runs to the end even from a cancelled scope
            self.closed[name] = trio.current_time()
        return IdleTimer(self.sweep, close)


async def test_each_idle_connection_is_closed_when_its_own_timeout_is_up(autojump_clock: trio.testing.MockClock) -> None:
    sweep = IdleSweep(5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweep.run)
        conns = Connections(nursery, sweep)
        a, b, c = conns.timer("a"), conns.timer("b"), conns.timer("c")
        await a.restart(conns.group)  # idle from 0
        await trio.sleep(1)
        await b.restart(conns.group)  # idle from 1
        await c.restart(conns.group)
        await trio.sleep(2)
        await c.stop()  # a request on c at 3: not timed while busy
        await trio.sleep(1)
        await c.restart(conns.group)  # idle again from 4
        await trio.sleep(20)
        assert conns.closed == {"a": 5.0, "b": 6.0, "c": 9.0}
        assert len(sweep) == 0
        nursery.cancel_scope.cancel()


async def test_a_request_between_the_expiry_and_the_close_keeps_the_connection(
        autojump_clock: trio.testing.MockClock) -> None:
    sweep = IdleSweep(5.0)
    async with trio.open_nursery() as nursery:
        conns = Connections(nursery, sweep)
        timer = conns.timer("a")
        await timer.restart(conns.group)
        timer.expire()  # the sweep's decision; the close task has not run yet
        await timer.stop()  # a request arrives first
        await trio.sleep(1)
        assert conns.closed == {}


async def test_at_shutdown_idle_connections_close_at_once_and_so_does_one_idle_later(
        autojump_clock: trio.testing.MockClock) -> None:
    sweep = IdleSweep(600.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweep.run)
        conns = Connections(nursery, sweep)
        idle, busy = conns.timer("idle"), conns.timer("busy")
        await idle.restart(conns.group)
        await trio.sleep(1)
        sweep.close_all()
        await trio.sleep(0.5)
        assert conns.closed == {"idle": 1.0}
        await busy.restart(conns.group)  # its request ended during the shutdown
        await trio.sleep(0.5)
        assert conns.closed == {"idle": 1.0, "busy": 1.5}
        nursery.cancel_scope.cancel()


async def test_the_sweep_sleeps_without_a_deadline_while_nothing_is_idle(autojump_clock: trio.testing.MockClock) -> None:
    sweep = IdleSweep(5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweep.run)
        await trio.testing.wait_all_tasks_blocked()
        assert trio.lowlevel.current_statistics().seconds_to_next_deadline == float("inf")
        conns = Connections(nursery, sweep)
        timer = conns.timer("a")
        await timer.restart(conns.group)
        await trio.testing.wait_all_tasks_blocked()
        assert trio.lowlevel.current_statistics().seconds_to_next_deadline == 5.0
        await timer.stop()
        await trio.sleep(10)  # woken at 5 for nothing, then parked again
        assert trio.lowlevel.current_statistics().seconds_to_next_deadline == float("inf")
        nursery.cancel_scope.cancel()


async def test_an_ended_connection_reported_idle_again_is_not_timed_and_the_sweep_survives(
        autojump_clock: trio.testing.MockClock) -> None:
    # After a client's reset, a request task still finishing reports its connection idle (hypercorn's
    # _maybe_recycle) when the connection's task group is gone: hypercorn's TaskGroup drops its nursery.
    sweep = IdleSweep(1.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweep.run)
        conns = Connections(nursery, sweep)
        ended, other = conns.timer("ended"), conns.timer("other")
        await ended.restart(conns.group)
        ended.close()  # _read_data's finally
        await ended.restart(SimpleNamespace(_nursery=None))
        assert len(sweep) == 0
        gone = conns.timer("gone")  # one that reached the sweep before its group went: expiring it is a no-op
        await gone.restart(SimpleNamespace(_nursery=None))
        await other.restart(conns.group)
        await trio.sleep(5)
        assert conns.closed == {"other": 1.0}  # the sweep went on past the connection without a group
        nursery.cancel_scope.cancel()
