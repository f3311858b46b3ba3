"""A session's conversation: a list that counts its rewrites.

A turn only appends to it. Anything else that changes it in place (an item
set or deleted, an insert, a pop, a sort) counts as a rewrite, as does
assigning a new list to ``Session.history`` (a compaction, a cut, a
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


__all__ = ["History"]
