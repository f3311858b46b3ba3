"""Complete tool calls from a stream's ``delta.tool_calls`` fragments (the openai provider's module doc says
how fragments are joined: by ``index``, else by ``id``, else onto the last call), and the bound on how deep
a call's arguments may nest.

**Nesting.** Arguments that nest more than :data:`MAX_ARGUMENT_DEPTH` levels are
never kept as a parsed value: such a call keeps its arguments as JSON text (a
string), which every encoder of the daemon takes as it is, and the turn refuses
the call to the model naming the depth (:func:`arguments_problem`). A parsed
value that deep would break the encoders (``orjson.dumps`` refuses more than 254
levels, Python's ``json`` about 1,000) wherever the history is written: every
later request of the session, the transcript, the events.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import orjson

from .base import ToolCall

MAX_ARGUMENT_DEPTH = 64  # levels of arrays and objects in one call's arguments (the schemas offered need a few)
# A string, or an unclosed one to the end of the text: without the end as a way out, an unclosed quote made
# the engine retry from every later quote, quadratic in the text, on the event loop (a model's arguments).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\Z)', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def value_depth(value: Any) -> int:
    """How many levels of arrays and objects ``value`` nests (0 for a scalar), a level at a time: no recursion."""
    depth = 0
    level = [value]
    while level := [v for v in level if isinstance(v, (dict, list, tuple))]:
        depth += 1
        level = [child for c in level for child in (c.values() if isinstance(c, dict) else c)]
    return depth


def text_depth(text: str) -> int:
    """How many levels of brackets the JSON text ``text`` nests, strings aside; without parsing it."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def arguments_problem(arguments: Any) -> str | None:
    """Why a call's arguments (a parsed value, or JSON text) cannot be taken: they nest too deep; else None."""
    depth = text_depth(arguments) if isinstance(arguments, str) else value_depth(arguments)
    if depth > MAX_ARGUMENT_DEPTH:
        return (f"arguments nest {depth:,} levels deep, more than the limit of {MAX_ARGUMENT_DEPTH}: "
                "send them flatter")
    return None


def _arguments_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # deeper than orjson writes
        return encode_json(value)


class _Text(str):
    """JSON text :func:`encode_json` writes as it is (brackets, commas, keys), told apart from string values."""


def encode_json(value: Any) -> str:
    """``value`` (as ``orjson.loads`` gives it) as JSON text, at any depth: ``orjson.dumps`` refuses more than
    254 levels and Python's ``json`` recurses, so the containers are walked with a stack of their own."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item)
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_Text("}"))
            for n, (key, child) in reversed(list(enumerate(item.items()))):
                stack += [child, _Text(("," if n else "") + orjson.dumps(str(key)).decode() + ":")]
        elif isinstance(item, (list, tuple)):
            out.append("[")
            stack.append(_Text("]"))
            for n, child in reversed(list(enumerate(item))):
                stack += [child, _Text(",")] if n else [child]
        else:
            out.append(orjson.dumps(item).decode())
    return "".join(out)


def kept_arguments(arguments: Any) -> Any:
    """``arguments`` as a call keeps them: a parsed value nesting too deep becomes its JSON text."""
    if isinstance(arguments, str) or value_depth(arguments) <= MAX_ARGUMENT_DEPTH:
        return arguments
    return encode_json(arguments)


@attrs.define
class _Slot:
    id: str | None
    name: str = ""
    parts: list[str] = attrs.field(factory=list)
    obj: Any = None


class ToolCallAccumulator:
    """Builds complete tool calls from streamed ``delta.tool_calls`` fragments (see the openai module doc)."""

    def __init__(self) -> None:
        self.slots: list[_Slot] = []
        self._by_index: dict[int, _Slot] = {}

    def add(self, fragment: dict[str, Any]) -> int:
        """Join ``fragment`` to its call; how many characters of it were kept (id, name, arguments), which the
        provider counts against the response's bound."""
        index = fragment.get("index")
        call_id = fragment.get("id") or None
        if index is not None:
            slot = self._by_index.get(index)
            if slot is None or (call_id and slot.id and call_id != slot.id):
                slot = self._by_index[index] = self._open(call_id)
        elif not self.slots or (call_id and call_id != self.slots[-1].id):
            slot = self._open(call_id)
        else:
            slot = self.slots[-1]
        kept = 0
        if call_id and not slot.id:
            slot.id = call_id
            kept += len(str(call_id))
        function = fragment.get("function") or {}
        if function.get("name") and not slot.name:
            slot.name = function["name"]
            kept += len(str(slot.name))
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            slot.parts.append(arguments)
            kept += len(arguments)
        elif arguments is not None:
            slot.obj = arguments
            kept += len(_arguments_text(arguments))
        return kept

    def _open(self, call_id: str | None) -> _Slot:
        slot = _Slot(call_id)
        self.slots.append(slot)
        return slot

    def calls(self) -> list[ToolCall]:
        out = []
        for n, slot in enumerate(self.slots, 1):
            raw = "".join(slot.parts)
            if slot.obj is not None and not raw.strip():
                arguments = slot.obj
            elif not raw.strip():
                arguments = {}
            else:
                try:
                    arguments = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    arguments = raw
                else:
                    if value_depth(arguments) > MAX_ARGUMENT_DEPTH:
                        arguments = raw  # the model's own text: the turn refuses it, naming the depth
            out.append(ToolCall(slot.id or f"call_{n}", slot.name, kept_arguments(arguments)))
        return out
