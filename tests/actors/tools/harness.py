"""What the file-tool tests share: the session's side of a call (ToolServices), and calling a tool."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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
