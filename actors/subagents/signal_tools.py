"""A child session's two signal tools, ``goal_reached`` and ``need_help``: MCP-client tools.

Each call reads the signal URL from the run's own MCP config file and calls it
over HTTP. Neither takes a name — the token in that URL is the only identity
there is. The endpoint that serves them (:mod:`transport.mcp`) offers the same
schemas and descriptions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..session.tools import ToolContext, ToolResult
from .client import SignalRefused, SignalUnreachable, call_signal_tool
from .files import read_signal_url

GOAL_REACHED_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "maxLength": 8000, "description": "what was done"},
        "report_file": {"type": "string", "maxLength": 4096, "description": "where you wrote a report, if you did"},
    },
    "additionalProperties": False,
}
NEED_HELP_SCHEMA = {
    "type": "object",
    "properties": {"question": {"type": "string", "minLength": 1, "maxLength": 8000}},
    "required": ["question"],
    "additionalProperties": False,
}
GOAL_REACHED_DESCRIPTION = (
    "Report that the goal is reached (self-reported: the parent is told it is your claim). Ends the run after "
    "this turn. Name the report file if you wrote one."
)
NEED_HELP_DESCRIPTION = "Say you are blocked and ask the parent a question. Ends the run after this turn."


class SignalClientTool:
    """``goal_reached`` or ``need_help``, called on the URL from this run's MCP config file."""

    builtin = False  # an MCP tool, served by the signal endpoint; not a daemon built-in
    kind = "other"

    def __init__(self, name: str, description: str, parameters: dict[str, Any], config_path: Path,
                 call: Callable[[str, str, dict[str, Any]], Awaitable[tuple[bool, str]]] | None = None) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters
        self._config_path = config_path
        self._call = call or call_signal_tool  # a replay answers in process (no HTTP server there)

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        if not isinstance(arguments, dict):
            return ToolResult.failure("arguments must be an object")
        try:
            url = read_signal_url(self._config_path)  # a few hundred bytes: no thread hop (see report.py)
        except (OSError, ValueError) as exc:
            return ToolResult.failure(f"cannot read the MCP config file: {exc}")
        try:
            is_error, text = await self._call(url, self.name, arguments)
        except SignalRefused as exc:
            return ToolResult.failure(str(exc))
        except SignalUnreachable as exc:
            return ToolResult.failure(f"the signal endpoint could not be reached: {exc}")
        except ValueError as exc:  # an answer that is not a JSON-RPC result
            return ToolResult.failure(f"the signal endpoint could not be reached: {type(exc).__name__}: {exc}")
        return ToolResult.failure(text) if is_error else ToolResult(text, {"signal": self.name})


def signal_client_tools(config_path: Path, call: Any = None) -> list[SignalClientTool]:
    """The two signal tools for the child session of the run whose config file is ``config_path``.

    ``call(url, tool, arguments)`` sends a call (default: over HTTP, :func:`call_signal_tool`).
    """
    return [SignalClientTool("goal_reached", GOAL_REACHED_DESCRIPTION, GOAL_REACHED_SCHEMA, config_path, call),
            SignalClientTool("need_help", NEED_HELP_DESCRIPTION, NEED_HELP_SCHEMA, config_path, call)]
