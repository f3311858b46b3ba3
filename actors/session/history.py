"""A session's conversation: a list that counts its rewrites.

A turn only appends to it. Anything else that changes it in place (an item
set or deleted, an insert, a pop, a sort) counts as a rewrite, as does
replacing it through :meth:`~.conversation.Conversation.replace` (a compaction, a cut, a
rewind: a new :class:`History`). While its ``rewrites`` holds, its first
``n`` items stay the same objects; a request built from it records that
(:func:`actors.model.prefix.note_build`), so the next request is known to
extend it without comparing the history message by message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, SupportsIndex

from ..model.base import ChatMessage


class History(list[ChatMessage]):
    """A list of messages whose ``rewrites`` counts every change other than an append or an extend."""

    __slots__ = ("rewrites",)

    def __init__(self, messages: Iterable[ChatMessage] = ()) -> None:
        super().__init__(messages)
        self.rewrites = 0

    def __setitem__(self, index: Any, value: Any) -> None:
        self.rewrites += 1
        super().__setitem__(index, value)

    def __delitem__(self, index: Any) -> None:
        self.rewrites += 1
        super().__delitem__(index)

    def __imul__(self, n: SupportsIndex) -> History:
        self.rewrites += 1
        return super().__imul__(n)

    def insert(self, index: SupportsIndex, value: ChatMessage) -> None:
        self.rewrites += 1
        super().insert(index, value)

    def pop(self, index: SupportsIndex = -1) -> ChatMessage:
        self.rewrites += 1
        return super().pop(index)

    def remove(self, value: ChatMessage) -> None:
        self.rewrites += 1
        super().remove(value)

    def clear(self) -> None:
        self.rewrites += 1
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self.rewrites += 1
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self.rewrites += 1
        super().reverse()

    def dangling_answers(self) -> list[ChatMessage]:
        """Error answers to the tool calls of the last assistant message that have none yet (a cancelled
        turn's); only that message can have them, so a long history is not scanned."""
        last = next((i for i in range(len(self) - 1, -1, -1) if self[i].role == "assistant"), None)
        if last is None:
            return []
        answered = {m.tool_call_id for m in self[last + 1:] if m.role == "tool"}
        return [ChatMessage("tool", "Error: not executed (the turn ended first)", tool_call_id=call.id, name=call.name)
                for call in self[last].tool_calls if call.id not in answered]


__all__ = ["History"]
