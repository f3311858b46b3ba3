"""What the file-tool tests share: the session's side of a call (ToolServices), and calling a tool."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from actors.model import ScriptedModel
from actors.runtime import Runtime
from actors.session.tools import ToolContext, ToolRegistry, ToolResult
from actors.settings import Settings


class Services:
    """The session's side of a tool call, as ``ToolServices`` defines it: every question recorded, one answer.

    ``runtime`` is a real :class:`Runtime` (its settings and state directory), as a session lends it;
    ``while_asked`` runs while a request waits (a user changing the file meanwhile, say).
    """

    def __init__(self, *, deny: str | None = None, runtime: Runtime | None = None, files: Any = None,
                 while_asked: Callable[[], None] | None = None) -> None:
        self.deny = deny
        self.runtime = runtime
        self.files = files
        self.while_asked = while_asked
        self.asked: list[dict[str, Any]] = []

    async def authorize(self, context: ToolContext, *, title: str, kind: str, raw_input: Any,
                        plan_refuses: bool = True, details: dict[str, Any] | None = None,
                        always_ask: str | None = None) -> str | None:
        self.asked.append({"title": title, "kind": kind, "rawInput": raw_input, "planRefuses": plan_refuses,
                           "alwaysAsk": always_ask, **(details or {})})
        if self.while_asked is not None:
            self.while_asked()
        return self.deny


def runtime(state_dir: Path | None = None, **settings: Any) -> Runtime:
    return Runtime(settings=Settings(**settings), provider=ScriptedModel(), state_dir=state_dir)


async def call(tool: Any, cwd: Path, arguments: Any, services: Services | None = None) -> ToolResult:
    """``tool`` (a class or an instance) run once in ``cwd``, as a session runs it: its arguments checked first."""
    instance = tool() if isinstance(tool, type) else tool
    context = ToolContext("sess-1", str(cwd), "prompt-1", "call-1", services or Services())
    return await ToolRegistry([instance]).execute(instance, context, arguments)


class Valve:
    """What :func:`fifo_valve` found: ``stuck`` counts the times a reader was blocked on one of its FIFOs."""

    stuck = 0


@asynccontextmanager
async def fifo_valve(*fifos: Path, every: float = 5.0) -> AsyncIterator[Valve]:
    """Every ``every`` seconds while the body runs, open each FIFO at both ends and close it again.

    A reader or writer blocked in ``open`` on one of them (the defect these tests look for: it holds a worker
    thread that no cancel reaches) then returns, so a test of code with the defect fails instead of hanging;
    a reader found holding the FIFO is counted (``Valve.stuck``), for the test to assert there was none.
    """
    valve = Valve()

    async def release() -> None:
        while True:
            await trio.sleep(every)
            for fifo in fifos:
                try:  # succeeds only while someone has the FIFO open to read: a reader stuck in it
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                    valve.stuck += 1
                except OSError:
                    pass
                try:
                    os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))  # Linux: never blocks; frees a writer
                except OSError:
                    pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(release)
        yield valve
        nursery.cancel_scope.cancel()
