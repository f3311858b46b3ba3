"""An MCP server's tools as tools of the session: ``mcp__<server>__<tool>``.

Names. OpenAI-compatible tool names must match ``^[a-zA-Z0-9_-]{1,64}$``, so
every other character of the server's and the tool's names becomes ``_``,
and a name longer than 64 characters keeps its first 55 and ends with ``_``
and 8 hex digits of a SHA-256 of the original ``server\\0tool`` pair. A name
that is taken already (two tools that sanitize alike) gets that hashed form
too; a tool whose name is still taken is left out, with a log warning.

Parameters are the server's ``inputSchema`` (without ``$schema``; an
object schema, as MCP requires). Calls go through the session's permission
flow like ``shell``: asked in the ``default`` and ``auto-edit`` approval
modes, run in ``yolo``, refused in ``plan``. Annotations such as
``readOnlyHint`` are the server's own claims (the spec: never base a
decision on those of an untrusted server), so they change nothing; only
``trust: true`` in the settings skips the question (not in ``plan``). The
kind is ``other``, and "always allow" / "always reject" remember the one
tool, not every tool of that kind. A failure of any sort — the server's
error, a crash, a timeout, an ``isError`` result — is the call's error, for
the model to read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Any, Protocol

from ..session.tools import ToolContext, ToolResult
from .config import ServerConfig

log = logging.getLogger("trellis.mcp")

MAX_NAME = 64
MAX_RESULT_CHARS = 200_000  # of a result's text given to the model; the rest is cut with a note
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


class ToolServer(Protocol):
    """What a server's tools need of it: :class:`.server.McpServer` registers them here once it is ready."""

    config: ServerConfig
    tools: list[Any]  # mcp.types.Tool, as listed

    @property
    def name(self) -> str: ...

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """What the call came to: its ``result`` (a ``CallToolResult``), or the ``error`` why there is none."""
        ...


def _digest(server: str, tool: str) -> str:
    return hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]


def tool_name(server: str, tool: str, *, hashed: bool = False) -> str:
    """``mcp__<server>__<tool>``, sanitized to ``^[a-zA-Z0-9_-]{1,64}$`` (see the module docstring)."""
    name = f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME and not hashed:
        return name
    return f"{name[:MAX_NAME - 9]}_{_digest(server, tool)}"


def input_schema(tool: Any) -> dict[str, Any]:
    schema = dict(tool.input_schema or {})
    schema.pop("$schema", None)
    schema.setdefault("type", "object")
    if schema.get("type") == "object":
        schema.setdefault("properties", {})
    return schema


def register_tools(registry: Any, server: ToolServer) -> list[str]:
    """Put ``server``'s tools into the session's registry; the names they got."""
    names = []
    for tool in server.tools:
        adapter = McpTool(server, tool)
        taken = registry.get(adapter.name)
        if taken is not None and not _same(taken, adapter):
            adapter.name = tool_name(server.name, tool.name, hashed=True)
            taken = registry.get(adapter.name)
            if taken is not None and not _same(taken, adapter):
                log.warning("MCP server %r: tool %r left out, its name %s is taken", server.name, tool.name,
                            adapter.name)
                continue
        registry.replace(adapter)
        names.append(adapter.name)
    return names


def _same(tool: Any, adapter: McpTool) -> bool:
    return isinstance(tool, McpTool) and (tool.server.name, tool.tool) == (adapter.server.name, adapter.tool)


class McpTool:
    """One tool of an MCP server, callable by the model."""

    builtin = False
    kind = "other"
    asks_permission = True  # it asks through services.authorize itself

    def __init__(self, server: ToolServer, tool: Any) -> None:
        self.server = server
        self.tool: str = tool.name
        self.name = tool_name(server.name, tool.name)
        text = (tool.description or tool.title or "").strip() or f"The {tool.name} tool."
        self.description = f"{text}\n(Tool {tool.name!r} of the MCP server {server.name!r}.)"
        self.parameters = input_schema(tool)

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return ToolResult.failure("arguments must be an object")
        services = context.services
        assert services is not None, "MCP tools need a session"
        trusted = self.server.config.trust and context.permission != "ask"
        if getattr(services, "approval_mode", None) == "plan" or not trusted:
            denied = await services.authorize(context, title=f"{self.tool} (MCP server {self.server.name})",
                                              kind=self.kind, raw_input=arguments,
                                              rule=self.name)  # type: ignore[call-arg]
            if denied is not None:
                return ToolResult.failure(denied)
        outcome = await self.server.call(self.tool, arguments)
        if outcome.error is not None:
            return ToolResult.failure(outcome.error)
        return self._result(outcome.result)

    def _result(self, result: Any) -> ToolResult:
        text = result_text(result)
        display = {"server": self.server.name, "tool": self.tool, "isError": bool(result.is_error)}
        if result.structured_content is not None:
            display["structuredContent"] = result.structured_content
        if result.is_error:
            message = text or "the tool reported an error"
            return ToolResult(f"Error: {message}", display, error=message)
        return ToolResult(text, display)


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as text for the model: text blocks as they are, other blocks described."""
    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} content: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[binary resource: {resource.uri}]")
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[{len(text) - MAX_RESULT_CHARS} characters cut]"
    return text


__all__ = ["McpTool", "input_schema", "register_tools", "result_text", "tool_name"]
