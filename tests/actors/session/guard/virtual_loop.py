"""A Trio run in a thread of its own whose virtual clock moves only when told: for stateful tests.

Hypothesis' stateful rules are plain functions, called one by one; a session lives in a Trio run.
:class:`VirtualLoop` runs that run in a thread with the scheduler seeded (``actors.replay``'s
determinism) on a ``MockClock`` that neither runs nor autojumps: between two rules every task is
blocked and no time passes, so a rule always lands at a well-defined point. :meth:`call` runs an
async function in the loop (with a real-time watchdog, so a hang fails instead of hanging);
:meth:`advance` lets virtual time pass, deadline by deadline, as the autojump clock would.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

from actors.replay import run_deterministic

WATCHDOG = 60.0  # real seconds a call may take before the test fails as hung


class VirtualLoop:
    """Run ``body(loop)`` in a Trio run of its own thread; it returns when :meth:`close` is called."""

    def __init__(self, body: Callable[[VirtualLoop], Awaitable[None]], *, seed: int) -> None:
        self.clock = trio.testing.MockClock()  # rate 0, autojump off: virtual time moves by jump() only
        self._body = body
        self._seed = seed
        self._ready = threading.Event()
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._token: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="virtual-loop", daemon=True)
        self._thread.start()
        if not self._ready.wait(WATCHDOG) or self.error is not None:
            raise AssertionError(f"the Trio loop did not start: {self.error!r}")

    def _run(self) -> None:
        try:
            run_deterministic(self._main, seed=self._seed, clock=self.clock)
        except BaseException as exc:  # reported by start or close, in the test's thread
            self.error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._body, self)
            await self._stop.wait()
            # Shutting down may wait on timers (grace periods, shielded shutdown bounds): let them run out.
            self.clock.autojump_threshold = 0

    def ready(self) -> None:
        """The body says it is set up (call it from the body)."""
        self._ready.set()

    async def stopped(self) -> None:
        """Wait, in the body, until :meth:`close` is called."""
        assert self._stop is not None
        await self._stop.wait()

    def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run ``fn(*args)`` in the loop and return its result (or raise its exception), then let every
        task run until all are blocked again — no virtual time passes."""
        done = threading.Event()
        box: dict[str, Any] = {}

        async def runner() -> None:
            try:
                box["value"] = await fn(*args)
                await trio.testing.wait_all_tasks_blocked()
            except BaseException as exc:
                box["error"] = exc
            finally:
                done.set()

        def start() -> None:
            assert self._nursery is not None
            self._nursery.start_soon(runner)

        self._token.run_sync_soon(start)
        if not done.wait(WATCHDOG):
            raise AssertionError(f"{getattr(fn, '__name__', fn)} did not return within {WATCHDOG:g} real seconds")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, waking each deadline on the way as the autojump clock would."""
        self.call(self._advance, seconds)

    async def _advance(self, seconds: float) -> None:
        target = trio.current_time() + seconds
        while True:
            await trio.testing.wait_all_tasks_blocked()
            now = trio.current_time()
            wait = trio.lowlevel.current_statistics().seconds_to_next_deadline
            if math.isinf(wait) or now + wait > target:
                self.clock.jump(max(0.0, target - now))
                return
            self.clock.jump(wait)

    def close(self) -> None:
        if self._token is not None and self._thread.is_alive():
            assert self._stop is not None
            self._token.run_sync_soon(self._stop.set)
        self._thread.join(WATCHDOG)
        if self._thread.is_alive():
            raise AssertionError("the Trio loop did not stop")
        if self.error is not None:
            raise self.error
