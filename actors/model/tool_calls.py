"""Complete tool calls from a stream's ``delta.tool_calls`` fragments (the openai provider's module doc says
how fragments are joined: by ``index``, else by ``id``, else onto the last call)."""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from .base import ToolCall


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

    def add(self, fragment: dict[str, Any]) -> None:
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
        if call_id and not slot.id:
            slot.id = call_id
        function = fragment.get("function") or {}
        if function.get("name") and not slot.name:
            slot.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            slot.parts.append(arguments)
        elif arguments is not None:
            slot.obj = arguments

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
            out.append(ToolCall(slot.id or f"call_{n}", slot.name, arguments))
        return out
