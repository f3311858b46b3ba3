"""What the file, search and fetch tools share: bounds, ACP content, the failure of a bad argument.

Rules:

* Arguments arrive matching the tool's ``parameters`` (the registry checks
  them first, :mod:`actors.session.tool_arguments`): a tool refuses only what
  a schema cannot say, with :class:`BadArguments` naming the argument (the
  model reads it and tries again).
* Every result is bounded, and a result that left something out ends with a
  bracketed note saying what and how to get it (``[lines 201–950 not shown;
  read them with offset=201]``).
* A diff is ACP's ``{"type": "diff", "path", "oldText", "newText"}`` content
  (``oldText`` null for a new file), whole texts — unless together they are
  over :data:`MAX_DIFF_CHARS`, when the tool call carries no diff and its text
  says so (events are bounded too).
"""

from __future__ import annotations

from typing import Any

from ..session.tools import ToolResult

MAX_FILE_BYTES = 10 * 1024 * 1024  # read_file, edit and write_file refuse files larger than this
MAX_LINE_CHARS = 2000  # a longer line is cut, and the cut says how much
MAX_DIFF_CHARS = 256 * 1024


class BadArguments(ValueError):
    """Arguments the tool cannot use; the message is for the model."""


def cut_line(line: str, limit: int = MAX_LINE_CHARS) -> str:
    """``line`` at most ``limit`` characters, saying how many were cut."""
    if len(line) <= limit:
        return line
    return f"{line[:limit]}… [{len(line) - limit:,} characters cut]"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def diff_content(path: str, old: str | None, new: str) -> list[dict[str, Any]] | None:
    """ACP diff content for a change of ``path`` from ``old`` (None: a new file) to ``new``; None when too big."""
    if len(old or "") + len(new) > MAX_DIFF_CHARS:
        return None
    return [{"type": "diff", "path": path, "oldText": old, "newText": new}]


def done(text: str, *, display: Any = None, locations: list[dict[str, Any]] | None = None,
         acp_content: list[dict[str, Any]] | None = None, error: str | None = None) -> ToolResult:
    return ToolResult(text, display, error, locations=tuple(locations or ()), acp_content=tuple(acp_content or ()))


__all__ = ["BadArguments", "MAX_DIFF_CHARS", "MAX_FILE_BYTES", "MAX_LINE_CHARS", "cut_line", "diff_content", "done",
           "plural"]
