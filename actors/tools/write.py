"""``write_file`` and ``edit``: whole-file writes and exact string replacement, each shown as a diff.

Rules:

* Paths are resolved and checked by :mod:`.paths`; text goes through the
  session's :class:`~.access.FileAccess`, as UTF-8, line endings untouched.
* Both ask permission (ACP kind ``edit``) through ``services.authorize``: in
  ``default`` mode the client is asked with a ``permission_request`` whose
  tool call carries the diff and the location; ``auto-edit`` and ``yolo`` do
  not ask; ``plan`` refuses. A user's "always" answer covers every ``edit``-kind
  call of the session, as it does for its kind elsewhere. A write under
  ``.git/``, to another of git's control paths, to a file a hook command runs
  or outside the cwd is asked for in every mode, ``yolo`` included, each time
  (:meth:`.paths.Scope.ask_always`).
* The file is read before asking and again after the answer: if it changed
  while the user looked, nothing is written (the diff they approved is no
  longer what would happen) and the model is told to read it again.
* ``write_file`` creates missing parent directories, and creates or
  overwrites; it does not overwrite a binary (or non-UTF-8) file.
* ``edit`` replaces ``old_string`` with ``new_string`` exactly (no whitespace
  or line-ending folding). ``old_string`` must occur in the file; more than
  once it is refused, naming the count, unless ``replace_all`` is true. It
  does not create files (``write_file`` does).
* Neither writes a file over :data:`~.common.MAX_FILE_BYTES` (the limit
  reads have), refused before the user is asked. ``edit`` computes its
  result's size from the counts before it builds the text: a ``replace_all``
  of one character by 200 in a 10 MiB file would be 2 GB of memory.
* The result's ``tool_call_update`` carries ACP ``diff`` content (whole old
  and new texts, see :func:`~.common.diff_content`) and the location
  (``{path, line}`` of the first change).
"""

from __future__ import annotations

from typing import Any

from ..session.tools import ToolContext, ToolResult
from .access import FileAccess, FileAccessError, TooLarge, describe_os_error, files_of
from .common import MAX_FILE_BYTES, BadArguments, diff_content, done, plural
from .paths import PathRefused, location, scope_of
from .read import locate_path, split_lines


class Refused(Exception):
    """The call fails with this message (for the model)."""


async def current_text(files: FileAccess, path: str, shown: str) -> str | None:
    """The file's text now, or None when it does not exist; :class:`Refused` when it cannot be used."""
    try:
        return await files.read_text(path, max_bytes=MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except TooLarge as exc:
        raise Refused(f"{shown} is {exc.size:,} bytes; the file tools handle files up to {exc.limit:,} bytes") \
            from None
    except FileAccessError as exc:
        raise Refused(f"{shown} cannot be changed as text: {exc}") from None
    except OSError as exc:
        raise Refused(describe_os_error(exc, shown)) from None


def utf8_size(text: str) -> int:
    """``text``'s size in UTF-8 bytes, as it is written (a lone surrogate passed through, 3 bytes)."""
    return len(text.encode("utf-8", "surrogatepass"))


async def approve_and_write(context: ToolContext, files: FileAccess, *, path: str, shown: str, old: str | None,
                            new: str, line: int, raw_input: dict[str, Any], title: str,
                            always_ask: str | None = None) -> list[dict[str, Any]]:
    """Ask (in every mode when ``always_ask`` says why), check the file did not change meanwhile, write;
    returns the diff content (empty when too big). A ``new`` over :data:`MAX_FILE_BYTES` is refused before
    anyone is asked: the file tools write no file they would refuse to read."""
    size = utf8_size(new)
    if size > MAX_FILE_BYTES:
        raise Refused(f"the new text of {shown} would be {size:,} bytes; the file tools handle files up to "
                      f"{MAX_FILE_BYTES:,} bytes; nothing was written")
    diff = diff_content(path, old, new) or []
    locations = [location(path, line)]
    assert context.services is not None, "file edits need a session"
    denied = await context.services.authorize(context, title=title, kind="edit", raw_input=raw_input,
                                              details={"content": diff, "locations": locations},
                                              always_ask=always_ask)
    if denied is not None:
        raise Refused(denied)
    if await current_text(files, path, shown) != old:
        raise Refused(f"{shown} changed while the call waited for approval; nothing was written. "
                      f"Read it again before changing it")
    try:
        await files.write_text(path, new)
    except FileAccessError as exc:  # not a regular file any more (a FIFO swapped in since the read)
        raise Refused(f"cannot write {shown}: {exc}") from None
    except OSError as exc:
        raise Refused(describe_os_error(exc, shown)) from None
    vouch = getattr(context.services, "vouch_for", None)
    if always_ask is not None and vouch is not None:
        vouch(path)  # the user approved this text: a hook that runs the file may run it
    return diff


def _diff_note(diff: list[dict[str, Any]]) -> str:
    return "" if diff else "\n[no diff shown: the texts are too large]"


class WriteFileTool:
    name = "write_file"
    kind = "edit"
    builtin = True
    asks_permission = True
    description = (
        "Create or overwrite a text file with `content` (parent directories are created). The path is relative "
        "to the working directory, or absolute. Asks the user's permission. To change part of a file, use edit."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "relative to the working directory, or absolute"},
            "content": {"type": "string", "description": "the whole new text of the file"},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def locate(self, cwd: str, arguments: Any) -> list[dict[str, Any]] | None:
        return locate_path(cwd, arguments)

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        scope = scope_of(context)
        content = arguments["content"]
        try:
            path = scope.resolve(arguments["path"])
            if len(content.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
                raise BadArguments(f"content is over {MAX_FILE_BYTES:,} bytes")
        except (BadArguments, PathRefused) as exc:
            return ToolResult.failure(str(exc))
        shown = scope.shown(path)
        files = files_of(context.services)
        try:
            old = await current_text(files, path, shown)
            diff = await approve_and_write(context, files, path=path, shown=shown, old=old, new=content, line=1,
                                           raw_input=arguments, title=f"write_file {shown}",
                                           always_ask=scope.ask_always(path))
        except Refused as exc:
            return ToolResult.failure(str(exc))
        lines = plural(len(split_lines(content)), "line")
        text = f"Created {shown} ({lines})." if old is None else \
            f"Overwrote {shown} ({lines}; it had {plural(len(split_lines(old)), 'line')})."
        return done(text + _diff_note(diff), display={"path": path, "created": old is None},
                    locations=[location(path, 1)], acp_content=diff)


class EditTool:
    name = "edit"
    kind = "edit"
    builtin = True
    asks_permission = True
    description = (
        "Replace text in a file: `old_string` (copied exactly from the file, whitespace and indentation "
        "included) becomes `new_string`. old_string must occur exactly once, unless replace_all is true; give "
        "more surrounding lines to make it unique. Asks the user's permission. Read the file first."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "relative to the working directory, or absolute"},
            # No minLength: an empty old_string is refused by the tool, saying what to use instead.
            "old_string": {"type": "string", "description": "the exact text to replace"},
            "new_string": {"type": "string", "description": "the text to put in its place"},
            "replace_all": {"type": "boolean", "description": "replace every occurrence (default false)"},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }

    def locate(self, cwd: str, arguments: Any) -> list[dict[str, Any]] | None:
        return locate_path(cwd, arguments)

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        scope = scope_of(context)
        old_string, new_string = arguments["old_string"], arguments["new_string"]
        replace_all = arguments.get("replace_all", False)
        try:
            path = scope.resolve(arguments["path"])
            if not old_string:
                raise BadArguments("old_string is empty; to create a file or replace all of it, use write_file")
            if old_string == new_string:
                raise BadArguments("old_string and new_string are the same; there is nothing to change")
        except (BadArguments, PathRefused) as exc:
            return ToolResult.failure(str(exc))
        shown = scope.shown(path)
        files = files_of(context.services)
        try:
            old = await current_text(files, path, shown)
            if old is None:
                raise Refused(f"{shown} does not exist; create it with write_file")
            count = old.count(old_string)
            if count == 0:
                raise Refused(f"old_string was not found in {shown}; read the file again and copy the text "
                              f"exactly, whitespace and indentation included")
            if count > 1 and not replace_all:
                raise Refused(f"old_string occurs {count} times in {shown}; include more surrounding text so it "
                              f"occurs once, or set replace_all to true to replace all {count}")
            replaced = count if replace_all else 1
            # From the counts, before the new text is built: replace_all of a 1-character old_string in a
            # 10 MiB file by a 200-character new_string would be 2 GB of str, whether or not the user approves.
            size = utf8_size(old) + replaced * (utf8_size(new_string) - utf8_size(old_string))
            if size > MAX_FILE_BYTES:
                raise Refused(f"replacing {plural(replaced, 'occurrence')} would make {shown} {size:,} bytes; "
                              f"the file tools handle files up to {MAX_FILE_BYTES:,} bytes; nothing was written")
            new = old.replace(old_string, new_string) if replace_all else old.replace(old_string, new_string, 1)
            line = old.count("\n", 0, old.index(old_string)) + 1
            diff = await approve_and_write(context, files, path=path, shown=shown, old=old, new=new, line=line,
                                           raw_input=arguments, title=f"edit {shown}",
                                           always_ask=scope.ask_always(path))
        except Refused as exc:
            return ToolResult.failure(str(exc))
        text = f"Replaced {plural(replaced, 'occurrence')} in {shown} (first at line {line})."
        return done(text + _diff_note(diff), display={"path": path, "replacements": replaced},
                    locations=[location(path, line)], acp_content=diff)


__all__ = ["EditTool", "WriteFileTool", "approve_and_write", "current_text"]
