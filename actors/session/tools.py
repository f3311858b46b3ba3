"""Tools the model can call, and the registry a session offers it.

A tool returns a :class:`ToolResult`; what a result *means* (for the plan shown
to clients, for the Todo Stop Guard) is the session's decision, not the tool's.
``builtin`` marks the daemon's own tools, so a discovered tool that shadows a
built-in name is never mistaken for it. A built-in's arguments are checked
against its declared ``parameters`` by the registry before it runs
(:mod:`.tool_arguments`), so the tool checks only what a schema cannot say; a
discovered or MCP tool's schema is its server's, and that server checks it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import attrs

from ..model import ToolSpec
from .tool_arguments import ArgumentCheck


@attrs.frozen
class ToolResult:
    """What a tool produced: model-facing ``content``, client-facing ``display``, or an ``error``.

    ``locations`` (ACP ``ToolCallLocation`` objects: ``{path, line?}``) and ``acp_content`` (ACP tool
    call content beyond the text, e.g. a ``diff``) go on the call's ``tool_call_update`` for clients.
    """

    content: str
    display: Any = None
    error: str | None = None
    locations: tuple[dict[str, Any], ...] = ()
    acp_content: tuple[dict[str, Any], ...] = ()

    @classmethod
    def failure(cls, message: str) -> ToolResult:
        return cls(content=f"Error: {message}", display=message, error=message)


class ToolServices(Protocol):
    """What the session lends its tools."""

    @property
    def background(self) -> Any: ...

    async def authorize(self, context: ToolContext, *, title: str, kind: str, raw_input: Any,
                        plan_refuses: bool = True, details: dict[str, Any] | None = None,
                        always_ask: str | None = None) -> str | None:
        """``None`` when the call may run, else the reason it may not; raises :class:`PermissionCancelled`.

        ``plan_refuses=False``: Plan mode asks instead of refusing. ``details``: more ACP tool-call
        fields for the permission request to show (an edit's diff ``content``, its ``locations``).
        ``always_ask``: why this call is asked in every approval mode (no "always" answer offered).
        """
        ...


@attrs.define
class ToolContext:
    """What a running tool may know about its surroundings."""

    session_id: str
    cwd: str
    prompt_id: str | None
    tool_call_id: str
    services: ToolServices | None = None
    permission: str | None = None  # "allow" or "ask": a PreToolUse hook's permissionDecision, or a permission rule's
    rule: str | None = None  # the permission rule that decided (it goes with a permission request as _meta.rule)
    tool_name: str | None = None  # the tool called (an "always" answer becomes a rule about it)


class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]
    builtin: bool
    kind: str  # ACP tool kind: read, edit, search, fetch, execute, think, ...
    # Optional: ``asks_permission`` (it calls services.authorize itself), and
    # ``locate(cwd, arguments)`` -> ACP locations known before it runs (shown on its ``tool_call``).

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        """Run with ``arguments``; a built-in's already match its ``parameters`` (see :meth:`ToolRegistry.execute`)."""
        ...


class ToolRegistry:
    """Tools by name. Registering a second tool under a taken name is refused."""

    __slots__ = ("_tools", "_checks", "_specs", "_names", "_shared")

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._checks: dict[str, tuple[Tool, ArgumentCheck]] = {}  # a built-in's, built as it is registered
        self._specs: dict[str, ToolSpec] = {}  # kept, so each request offers the same specs (their memo holds)
        self._names: tuple[str, ...] | None = None  # kept until a tool is registered or replaced
        self._shared = False  # the tables above are another registry's too (see copy)
        for tool in tools or []:
            self.register(tool)

    def copy(self) -> ToolRegistry:
        """A registry of the same tools that shares this one's tables until either registers or replaces one.

        A daemon's sessions start from one set of built-in tools (stateless objects): built once and copied,
        an idle session does not carry its own tables and argument checks (some 3 KiB each).
        """
        other = ToolRegistry()
        other._tools, other._checks, other._specs = self._tools, self._checks, self._specs
        other._shared = self._shared = True
        return other

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self.replace(tool)

    def replace(self, tool: Tool) -> None:
        """Put ``tool`` under its name, replacing what was there (a discovered tool may shadow)."""
        if self._shared:  # this registry's change is its own
            self._tools, self._checks, self._specs = dict(self._tools), dict(self._checks), dict(self._specs)
            self._shared = False
        self._tools[tool.name] = tool
        self._checks.pop(tool.name, None)
        if tool.builtin:
            self._checks[tool.name] = (tool, ArgumentCheck.of(tool.parameters))
        self._names = None

    def names(self) -> tuple[str, ...]:
        """The tools' names, in registration order (built once per change: every request's prompt asks)."""
        if self._names is None:
            self._names = tuple(self._tools)
        return self._names

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def specs(self) -> tuple[ToolSpec, ...]:
        out = []
        for t in self._tools.values():
            spec = self._specs.get(t.name)
            if spec is None or spec.description != t.description or (
                    spec.parameters is not t.parameters and spec.parameters != t.parameters):
                spec = self._specs[t.name] = ToolSpec(t.name, t.description, t.parameters)
            out.append(spec)
        return tuple(out)

    async def execute(self, tool: Tool, context: ToolContext, arguments: Any) -> ToolResult:
        """Run ``tool`` (got from this registry) with ``arguments``, once they match its declared schema.

        A built-in's arguments that miss it are the call's failure, naming each problem by its path
        (``read_file: arguments.offset: expected integer, got "3"``), and the tool does not run.
        """
        if tool.builtin:
            held = self._checks.get(tool.name)
            if held is None or held[0] is not tool or held[1].schema is not tool.parameters:
                held = (tool, ArgumentCheck.of(tool.parameters))  # replaced meanwhile: check what this one declares
            problem = held[1].failure_message(tool.name, arguments)
            if problem is not None:
                return ToolResult.failure(problem)
        return await tool.execute(context, arguments)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools
