"""SIGTERM, SIGINT and SIGHUP: the daemon stops gracefully within a bound, then (or at a second signal) by force.

What the HTTP surface refuses meanwhile is :mod:`.shutdown`'s.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

import trio

from actors import Daemon
from actors.process.killer import kill_process_groups

from .logs import say

def shutdown_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop the daemon in order. SIGHUP (the terminal it was started from closed) too, whose
    default ends the process at once, leaving running turns without their end and daemon.json behind — unless
    it is ignored (``nohup``): then the daemon outlives its terminal, as asked."""
    ignored = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    return (signal.SIGTERM, signal.SIGINT) + (() if ignored else (signal.SIGHUP,))
FORCED_EXIT_SECONDS = 3.0  # after a forced shutdown, how long Trio may unwind before the process exits anyway
SERVER_CLOSE_SECONDS = 3.0  # once every session closed, how long the HTTP server may take to close


class Shutdown:
    """SIGTERM and SIGINT: a graceful shutdown within ``bound`` seconds, then (or at a second signal) forced.

    Graceful: :meth:`actors.Daemon.shutdown_gracefully` (admission stops, running
    turns end ``cancelled``, background work is killed, every event stream gets its
    last events), then the HTTP server closes; the process exits 0. Forced:
    every process group below the daemon is killed, everything is cancelled, and the
    process exits 1 (at the latest :data:`FORCED_EXIT_SECONDS` later).
    """

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.daemon: Daemon | None = None
        self.node: Any = None  # cluster mode: drained (its sessions handed over) before the daemon stops
        self.root = trio.CancelScope()
        self.served = trio.Event()  # the HTTP server has closed
        self.signal_name: str | None = None
        self.forced = False
        self._nursery: trio.Nursery | None = None
        self._hard_exit: threading.Timer | None = None

    async def watch(self, signals: Any, nursery: trio.Nursery) -> None:
        """Read signals for the daemon's whole life: the first begins the shutdown, a second forces it."""
        self._nursery = nursery
        async for signum in signals:
            name = signal.Signals(signum).name
            if self.signal_name is None:
                self.signal_name = name
                nursery.start_soon(self._graceful, name)
            else:
                self.force(f"a second signal, {name}")

    async def _graceful(self, name: str) -> None:
        daemon = self.daemon
        assert daemon is not None and self._nursery is not None
        sessions = daemon.session_count
        if self.node is not None:
            say(f"draining ({name}): handing {sessions} session(s) over to the other nodes, running turns "
                f"given {self.bound:g} s to finish (a second signal stops at once)")
            try:
                await self.node.drain(self.bound)
            except OSError as exc:  # the database or Redis is gone: the leases run out instead
                say(f"drain incomplete ({exc}); the other nodes take the sessions once their leases run out",
                    "warning")
            sessions = daemon.session_count
        say(f"shutting down ({name}): refusing new work, cancelling the running turns and background work of "
            f"{sessions} session(s), within {self.bound:g} s (a second signal stops at once)")
        if not await daemon.shutdown_gracefully(self.bound):
            self.force(f"not stopped within {self.bound:g} s")
            return
        # Every session has closed, so nothing is left to kill; the HTTP server gives open requests up
        # to its graceful timeout (1 s) once the event streams had their last events.
        with trio.move_on_after(SERVER_CLOSE_SECONDS):
            await self.served.wait()
            self._nursery.cancel_scope.cancel()  # the signal watcher; the daemon's exit follows
            return
        self.force("the HTTP server did not close")

    def force(self, why: str) -> None:
        if self.forced:
            return
        self.forced = True
        self._hard_exit = threading.Timer(FORCED_EXIT_SECONDS, _exit_now, (1,))
        self._hard_exit.daemon = True
        self._hard_exit.start()
        groups = kill_process_groups()
        say(f"forced ({why}): killed {groups} process group(s); exiting 1")
        if self.daemon is not None:
            self.daemon.shutdown()  # no second graceful round on the way out of open_daemon
        self.root.cancel()

    def finished(self) -> None:
        if self._hard_exit is not None:
            self._hard_exit.cancel()

    def exit_code(self) -> int:
        """After the run: 1 when forced; 0 otherwise (saying ``stopped`` when a signal ended it)."""
        if self.forced:
            return 1
        if self.signal_name is not None:
            say("stopped")
        return 0


def _exit_now(code: int) -> None:
    sys.stderr.flush()
    os._exit(code)
