"""Monitors: follow a command's (or a background shell's) output and deliver new lines.

Lines that arrive within :data:`MERGE_WINDOW` of each other are delivered as one
batch. At most :data:`FLOOD_LINES` lines a second get through; the rest are
counted and reported as suppressed, and after :data:`FLOOD_STOP` seconds of
continuous flooding the monitor stops itself. It also stops at its timeout.
It says exactly once that the stream ended, and why.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio

from .._actor import ActorRef, Reply, open_mailbox, serve_mailbox

MERGE_WINDOW = 0.2
FLOOD_LINES = 100  # lines per second before suppression
FLOOD_STOP = 30.0  # seconds of flooding before the monitor stops itself
DEFAULT_TIMEOUT = 300.0
MAX_LINE = 4096  # characters of one line delivered


class LineBatcher:
    """Turns text chunks into complete lines, rate-limited per one-second window."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._partial = ""
        self._now = now
        self.pending: list[str] = []
        self.suppressed = 0
        self._window_start = -1.0
        self._window_count = 0
        self.flood_since: float | None = None

    def feed(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._admit(line)
        if len(self._partial) > MAX_LINE:
            # Output without newlines: deliver what there is as a (cut) line rather than hoard it.
            self._admit(self._partial[:MAX_LINE] + f" [{len(self._partial) - MAX_LINE} characters cut]")
            self._partial = ""

    def finish(self) -> None:
        if self._partial:
            self._admit(self._partial)
            self._partial = ""

    def _admit(self, line: str) -> None:
        now = self._now()
        if now - self._window_start >= 1.0:
            # The flood goes on only if the window that just closed was flooded and came right before this one.
            flooded = self._window_count > FLOOD_LINES and now - self._window_start < 2.0
            if not flooded:
                self.flood_since = None
            self._window_start, self._window_count = now, 0
        self._window_count += 1
        if self._window_count > FLOOD_LINES:
            self.suppressed += 1
            if self.flood_since is None:
                self.flood_since = self._window_start
            return
        self.pending.append(line)

    def take(self) -> str | None:
        if not self.pending and not self.suppressed:
            return None
        parts = list(self.pending)
        if self.suppressed:
            parts.append(f"[{self.suppressed} line(s) suppressed: output flood]")
        self.pending.clear()
        self.suppressed = 0
        return "\n".join(parts)


@attrs.frozen
class Stop:
    reply: Reply[bool]


class Monitor:
    """The monitor actor. ``feed`` receives output; ``deliver`` gets each batch and the end notice."""

    def __init__(self, task_id: str, *, timeout: float, deliver: Callable[[str, bool], None]) -> None:
        self.task_id = task_id
        self.timeout = timeout
        self._deliver = deliver
        self._batcher = LineBatcher(trio.current_time)
        self._arrived = trio.lowlevel.ParkingLot()
        self._source_ended = False
        self._stop_scope = trio.CancelScope()
        self.end_reason: str | None = None

    def feed(self, text: str) -> None:
        self._batcher.feed(text)
        self._arrived.unpark_all()

    def source_ended(self) -> None:
        self._batcher.finish()
        self._source_ended = True
        self._arrived.unpark_all()

    async def run(self, *, task_status: trio.TaskStatus[ActorRef[Stop]] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"monitor:{self.task_id}", 8)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_mailbox, inbox, self._handle)
            task_status.started(ref)
            reason = "stopped"
            with self._stop_scope:
                with trio.move_on_after(self.timeout) as timeout_scope:
                    reason = await self._pump()
                if timeout_scope.cancelled_caught:
                    reason = f"timed out after {self.timeout:g} s"
            self._flush()
            self.end_reason = reason
            self._deliver(f"[monitor {self.task_id}] stream ended ({reason}).", True)
            nursery.cancel_scope.cancel()

    async def _pump(self) -> str:
        while True:
            if not self._batcher.pending and not self._batcher.suppressed:
                if self._source_ended:
                    return "the command exited"
                await self._arrived.park()
                continue
            await trio.sleep(MERGE_WINDOW)  # let a burst gather into one delivery
            self._flush()
            since = self._batcher.flood_since
            if since is not None and trio.current_time() - since >= FLOOD_STOP:
                return f"output flood for {FLOOD_STOP:g} s"

    def _flush(self) -> None:
        batch = self._batcher.take()
        if batch is not None:
            self._deliver(batch, False)

    def _handle(self, message: Stop) -> None:
        match message:
            case Stop(reply):
                self._stop_scope.cancel()
                reply.send(True)
