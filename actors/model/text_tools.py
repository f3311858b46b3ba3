"""Tool calls written as text, for servers that do not parse them (``textToolCalls``).

Small local models often write a tool call into the message text instead of
the structured ``tool_calls`` field, and a server without a tool-call parser
for that model passes it on as content. Two styles are recognised:

- ``"hermes"``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  (the Hermes/Qwen chat-template form, with its tags left in the text);
- ``"json"``: a JSON object ``{"name": ..., "arguments": {...}}`` on its own,
  bare or in a fenced block (three backticks, with ``json`` or no language),
  starting at the beginning of a line.

Either way the object must name a tool the request offered; ``parameters`` is
accepted for ``arguments`` (Llama's wording), ``arguments`` may also be a JSON
string holding an object, and no other key may appear. Anything else — another
name, a broken object, a tag never closed before more text — stays text, as
it was written.

:class:`TextToolCalls` works on a stream: :meth:`~TextToolCalls.feed` returns
the text that is safe to show now, holding back only what may still turn out
to be a call (from a ``<`` that could open the tag, or from a line that starts
with ``{`` or a fence) until it is decided, so plain text is not delayed
beyond the chunk it came in. :meth:`~TextToolCalls.finish` releases the rest
at the end of the stream; :attr:`~TextToolCalls.calls` are the calls found,
in order. Pure: no I/O, ids come from the ``new_id`` the caller gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from .base import ToolCall
from .tool_calls import kept_arguments

STYLES = ("off", "hermes", "json")

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
FENCE = "```"
FENCE_LANGUAGES = ("", "json")
ARGUMENT_KEYS = ("arguments", "parameters")
MAX_CALL_CHARS = 32_000  # a candidate still undecided at this length is not a call: it is shown

# What a candidate resolves to: still open, a call spanning [start, end), or not a call.
_OPEN = "open"
_NOT_A_CALL = "text"


def parse_call(text: str, tools: Iterable[str]) -> tuple[str, Any] | None:
    """``(name, arguments)`` when ``text`` is one JSON tool-call object naming one of ``tools``, else ``None``;
    arguments nesting too deep come as their JSON text (:func:`~.tool_calls.kept_arguments`)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or value["name"] not in set(tools):
        return None
    present = [k for k in ARGUMENT_KEYS if k in value]
    if set(value) - {"name", *ARGUMENT_KEYS} or len(present) > 1:
        return None
    arguments = value[present[0]] if present else {}
    if isinstance(arguments, str):  # some models write the arguments as a JSON string, as the API does
        try:
            arguments = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return value["name"], kept_arguments(arguments)


def json_object_end(text: str, start: int) -> int | None:
    """The index just past the JSON object that begins at ``text[start]`` (a ``{``), or ``None`` if
    the text ends first. Only braces outside strings count; validity is :func:`parse_call`'s business."""
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


class TextToolCalls:
    """Finds text tool calls of one style in a streamed message (see the module doc)."""

    def __init__(self, style: str, tools: Iterable[str], new_id: Callable[[], str]) -> None:
        if style not in STYLES or style == "off":
            raise ValueError(f"text tool-call style must be one of {list(STYLES[1:])}, got {style!r}")
        self.style = style
        self.tools = frozenset(tools)
        self.calls: list[ToolCall] = []
        self._new_id = new_id
        self._held = ""  # text not shown yet: it may be (the start of) a call
        self._line_start = True  # the last character consumed (shown or taken) ended a line, or none was

    def feed(self, text: str) -> str:
        """Take the next chunk; returns the text that can be shown now (possibly empty)."""
        self._held += text
        return self._drain(final=False)

    def finish(self) -> str:
        """The stream ended: decide what is still held; returns the text left to show."""
        return self._drain(final=True)

    # ------------------------------------------------------------- scanning

    def _drain(self, *, final: bool) -> str:
        shown: list[str] = []
        text = self._held
        pos = 0
        while pos < len(text):
            start = self._next_candidate(text, pos, final)
            if start is None:
                shown.append(text[pos:])
                pos = len(text)
                break
            shown.append(text[pos:start])
            outcome = self._resolve(text, start, final)
            if outcome == _OPEN:
                pos = start
                break
            if outcome == _NOT_A_CALL:  # show its first character and look again after it
                shown.append(text[start])
                pos = start + 1
                continue
            name, arguments, end = outcome
            self.calls.append(ToolCall(self._new_id(), name, arguments))
            pos = end
        if pos:  # what was shown or taken as a call ended a line, or not
            self._line_start = text[pos - 1] == "\n"
        self._held = text[pos:]
        return "".join(shown)

    def _next_candidate(self, text: str, pos: int, final: bool) -> int | None:
        """Where the next possible call begins at or after ``pos`` (``None``: nothing there can be one)."""
        if self.style == "hermes":
            i = text.find("<", pos)
            while i != -1:
                rest = text[i:]
                if rest.startswith(OPEN_TAG) or (not final and OPEN_TAG.startswith(rest)):
                    return i
                i = text.find("<", i + 1)
            return None
        # json: only at the start of a line, after optional indentation
        i = pos
        at_line_start = self._line_start if pos == 0 else text[pos - 1] == "\n"
        while i < len(text):
            if at_line_start:
                j = i
                while j < len(text) and text[j] in " \t":
                    j += 1
                if j == len(text):
                    return None if final else i  # only indentation so far: wait for what follows
                if text[j] == "{" or text[j] == "`":
                    return i
            nl = text.find("\n", i)
            if nl == -1:
                return None
            i, at_line_start = nl + 1, True
        return None

    def _resolve(self, text: str, start: int, final: bool) -> Any:
        """``_OPEN``, ``_NOT_A_CALL``, or ``(name, arguments, end)`` for the candidate at ``start``."""
        if self.style == "hermes":
            return self._resolve_tag(text, start, final)
        return self._resolve_json(text, start, final)

    def _resolve_tag(self, text: str, start: int, final: bool) -> Any:
        if not text.startswith(OPEN_TAG, start):
            return _NOT_A_CALL if final else _OPEN  # a partial "<tool_c" at the end, so far
        body = _skip(text, start + len(OPEN_TAG), " \t\r\n")
        return self._object_then(text, body, CLOSE_TAG, " \t\r\n", final)

    def _resolve_json(self, text: str, start: int, final: bool) -> Any:
        i = _skip(text, start, " \t")  # the indentation the candidate began with
        if i == len(text):  # only indentation so far (a chunk ended in blanks): wait for what follows
            return _NOT_A_CALL if final else _OPEN
        if text[i] == "{":  # bare: the object is the rest of its line
            return self._object_then(text, i, "\n", " \t\r", final)
        # fenced: ``` and a language we accept on its line, then the object, then ```
        head = text[i:i + len(FENCE)]
        if not FENCE.startswith(head) or (final and len(head) < len(FENCE)):
            return _NOT_A_CALL
        if len(head) < len(FENCE):
            return _OPEN
        newline = text.find("\n", i + len(FENCE))
        language = text[i + len(FENCE): newline if newline != -1 else len(text)].strip().lower()
        if newline == -1:
            if final or not any(known.startswith(language) for known in FENCE_LANGUAGES):
                return _NOT_A_CALL
            return _OPEN
        if language not in FENCE_LANGUAGES:
            return _NOT_A_CALL
        body = _skip(text, newline + 1, " \t\r\n")
        return self._object_then(text, body, FENCE, " \t\r\n", final)

    def _object_then(self, text: str, i: int, closer: str, space: str, final: bool) -> Any:
        """A call object at ``text[i]``, then (after ``space``) ``closer``.

        At the end of the stream a missing closer is forgiven (a model may stop right after the
        object); before it, text after the object that cannot begin the closer makes it text.
        """
        if i == len(text):
            return _NOT_A_CALL if final else _OPEN
        if text[i] != "{":
            return _NOT_A_CALL
        end = json_object_end(text, i)
        if end is None:
            # Unbalanced so far: wait, but not forever (a brace in code that never closes).
            return _NOT_A_CALL if final or len(text) - i > MAX_CALL_CHARS else _OPEN
        parsed = parse_call(text[i:end], self.tools)
        if parsed is None:
            return _NOT_A_CALL
        after = _skip(text, end, space)
        rest = text[after:]
        if rest.startswith(closer):
            return (*parsed, after + len(closer))
        if not final and closer.startswith(rest):
            return _OPEN  # the closer may still come
        if final and not rest.strip():
            return (*parsed, len(text))
        return _NOT_A_CALL


def _skip(text: str, i: int, chars: str) -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


__all__ = ["STYLES", "TextToolCalls", "json_object_end", "parse_call"]
