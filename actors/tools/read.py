"""``read_file``: a text file's lines, a range of them at a time.

Rules:

* The path is resolved and checked by :mod:`.paths` (under the cwd unless
  allowed otherwise; never the daemon's state); the text comes from the
  session's :class:`~.access.FileAccess`.
* ``offset`` is the first line to show (1-based, default 1), ``limit`` how many
  (default :data:`DEFAULT_LIMIT`). The text is returned as it is, without line
  numbers, ``\r`` of CRLF lines kept, so it can be copied into ``edit``'s
  ``old_string``.
* Bounds: a file over :data:`~.common.MAX_FILE_BYTES` is refused (use
  ``grep``, or ``shell`` with ``head``/``sed``); a line over
  :data:`~.common.MAX_LINE_CHARS` characters is cut, saying how much; at most
  :data:`MAX_CHARS` characters are returned, whole lines only. Whatever was
  left out after the shown range is named at the end, with the ``offset`` that
  reads on: ``[lines 201–950 of 950 not shown; read them with offset=201]``.
* A binary file (a NUL byte in its first 8 KiB) or one that is not UTF-8 is
  refused with a message saying so; nothing of it is returned.
* It never asks permission (ACP kind ``read``), in any approval mode, Plan
  included: reading is how a plan is made.
"""

from __future__ import annotations

import os
from typing import Any

from ..session.tools import ToolContext, ToolResult
from .access import FileAccessError, TooLarge, describe_os_error, files_of
from .common import MAX_FILE_BYTES, MAX_LINE_CHARS, cut_line, done, plural
from .paths import PathRefused, location, scope_of

DEFAULT_LIMIT = 2000
MAX_CHARS = 100_000


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` split at ``\\n`` only (as editors and ``grep -n`` count them), without it."""
    if not text:
        return []
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


class ReadFileTool:
    name = "read_file"
    kind = "read"
    builtin = True
    description = (
        "Read a text file: the path relative to the working directory (or absolute). Returns up to 2000 lines "
        "from line `offset` (1-based, default 1); `limit` sets how many. The text comes back exactly as in the "
        "file (no line numbers); a note at the end says which lines were not shown and the offset to read them. "
        "Binary files are refused."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "relative to the working directory, or absolute"},
            "offset": {"type": "integer", "minimum": 1, "description": "first line to read (1-based)"},
            "limit": {"type": "integer", "minimum": 1, "description": f"lines to read (default {DEFAULT_LIMIT})"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def locate(self, cwd: str, arguments: Any) -> list[dict[str, Any]] | None:
        return locate_path(cwd, arguments, line_from="offset")

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        scope = scope_of(context)
        try:
            path = scope.resolve(arguments["path"])
        except PathRefused as exc:
            return ToolResult.failure(str(exc))
        offset = int(arguments.get("offset", 1))  # 10.0 is an integer too (some models write it)
        limit = int(arguments.get("limit", DEFAULT_LIMIT))
        shown = scope.shown(path)
        try:
            text = await files_of(context.services).read_text(path, max_bytes=MAX_FILE_BYTES)
        except TooLarge as exc:
            return ToolResult.failure(f"{shown} is {exc.size:,} bytes; read_file reads files up to "
                                      f"{exc.limit:,} bytes. Search it with grep, or read parts with shell "
                                      f"(head, tail, sed -n)")
        except FileAccessError as exc:
            return ToolResult.failure(f"cannot read {shown}: {exc}")
        except OSError as exc:
            return ToolResult.failure(describe_os_error(exc, shown))
        return render(text, shown, path, offset, limit)


def render(text: str, shown: str, path: str, offset: int, limit: int) -> ToolResult:
    """Lines ``offset``.. of ``text``, bounded, with the note on what was left out."""
    lines = split_lines(text)
    total = len(lines)
    if total == 0:
        return done(f"[{shown} is empty]", display={"path": path, "lines": 0}, locations=[location(path)])
    if offset > total:
        return ToolResult.failure(f"offset {offset} is past the end of {shown}, which has {plural(total, 'line')}")
    out: list[str] = []
    size = 0
    end = offset - 1  # index of the first line not shown
    cut = 0
    for n, line in enumerate(lines[offset - 1:offset - 1 + limit], offset):
        bounded = cut_line(line) + ("\n" if n < total or text.endswith("\n") else "")
        if out and size + len(bounded) > MAX_CHARS:
            break  # whole lines only; the first one always goes (it is itself bounded)
        cut += len(line) > MAX_LINE_CHARS
        out.append(bounded)
        size += len(bounded)
        end += 1
    body = "".join(out)  # the file's own text when nothing was cut: its last newline too
    notes = []
    if end < total:
        why = f" (the output is capped at {MAX_CHARS:,} characters)" if end < offset - 1 + limit else ""
        span = f"line {total}" if end + 1 == total else f"lines {end + 1}–{total}"
        notes.append(f"[{span} of {total} not shown{why}; read {'it' if end + 1 == total else 'them'} "
                     f"with offset={end + 1}]")
    if cut:
        notes.append(f"[{plural(cut, 'line')} over {MAX_LINE_CHARS:,} characters cut short]")
    content = body + (("" if body.endswith("\n") else "\n") + "\n" + "\n".join(notes) if notes else "")
    return done(content, display={"path": path, "offset": offset, "lines": end - offset + 1, "totalLines": total},
                locations=[location(path, offset)])


def locate_path(cwd: str, arguments: Any, *, line_from: str | None = None) -> list[dict[str, Any]] | None:
    """The location a call's ``path`` argument names (for its ``tool_call``), or None; never raises."""
    if not isinstance(arguments, dict) or not isinstance(arguments.get("path"), str) or not arguments["path"]:
        return None
    path = os.path.normpath(os.path.join(cwd, os.path.expanduser(arguments["path"])))
    line = arguments.get(line_from) if line_from else None
    return [location(path, line if type(line) is int and line >= 1 else None)]


__all__ = ["DEFAULT_LIMIT", "MAX_CHARS", "ReadFileTool", "locate_path", "render", "split_lines"]
