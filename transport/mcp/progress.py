"""Progress notifications for one request, and a heartbeat that sends them while work runs.

A request asks for progress with ``params._meta.progressToken``; the answer
can carry ``notifications/progress`` only when it is an SSE stream (see
``streaming.py``), so a :class:`Progress` without somewhere to send is a
no-op and tools call it unconditionally. The spec's rules are kept here
rather than by each tool: ``progress`` must increase with every
notification, and none may follow the response.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import trio

from actors.wire import jsonrpc

Notify = Callable[[dict[str, Any]], Awaitable[None]]
T = TypeVar("T")


class Progress:
    """``notifications/progress`` for one request (a no-op when the client cannot receive them)."""

    def __init__(self, token: str | int | None = None, notify: Notify | None = None) -> None:
        self._token = token
        self._notify = notify
        self._last: float | None = None
        self._finished = False

    @property
    def enabled(self) -> bool:
        """Whether a notification sent now reaches the client."""
        return self._token is not None and self._notify is not None and not self._finished

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> bool:
        """Send one notification; ``False`` (nothing sent) when disabled, finished, or not increasing."""
        if not self.enabled or (self._last is not None and progress <= self._last):
            return False
        self._last = progress
        params: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message:
            params["message"] = message
        assert self._notify is not None
        await self._notify(jsonrpc.notification("notifications/progress", params))
        return True

    def finish(self) -> None:
        """The request is answered: nothing more may be sent for its token."""
        self._finished = True


@attrs.frozen
class ToolContext:
    """What a tool handler gets besides its arguments."""

    progress: Progress = attrs.field(factory=Progress)


async def with_heartbeat(work: Callable[[], Awaitable[T]], beat: Callable[[float], Awaitable[Any]],
                         every: float) -> T:
    """Run ``work()``; call ``beat(elapsed_seconds)`` at once and every ``every`` s until it returns.

    ``work`` must not raise an ``Exception`` (it would come out wrapped in an ``ExceptionGroup``).
    """
    outcome: list[T] = []

    async def run(cancel: trio.CancelScope) -> None:
        outcome.append(await work())
        cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, nursery.cancel_scope)
        started = trio.current_time()
        while True:
            await beat(trio.current_time() - started)
            await trio.sleep(every)
    return outcome[0]
