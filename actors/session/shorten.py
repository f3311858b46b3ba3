"""Making messages fit a token budget: cut long ones in the middle, drop the oldest when even that fails.

A message that is too long keeps its head and its tail, and says in between
how much was cut (``[... 81,204 of 96,000 characters cut here to fit the
context window ...]``): the start of a prompt or file and the end of a log are
what a reader needs most. Long string arguments of a tool call are cut the same
way, so the call stays valid JSON. When a conversation is so long that even
every message cut to :data:`MIN_KEEP` tokens does not fit, its oldest messages
are dropped (never a tool result without the call it answers) behind one note
saying how many.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ..model import ChatMessage, ToolCall
from ..model.estimate import message_tokens, text_tokens

MIN_KEEP = 48  # tokens a cut message keeps at the least (its head, its tail and the note between)
NOTE_ORIGIN = "summary"  # notes stand where earlier conversation was; rewind does not count them as turns


def cut_text(text: str, budget: int) -> str:
    """``text`` in at most about ``budget`` estimated tokens: its head and tail, and a note of the cut."""
    total = text_tokens(text)
    if total <= budget:
        return text
    keep = int(len(text) * budget / total)
    while True:
        head, tail = text[: keep // 2], text[len(text) - (keep - keep // 2):] if keep > 1 else ""
        note = (f"\n[... {len(text) - len(head) - len(tail):,} of {len(text):,} characters cut here "
                "to fit the context window ...]\n")
        out = head + note + tail
        if text_tokens(out) <= budget or keep == 0:
            return out
        keep = int(keep * 0.8)


def _cut_value(value: Any, budget: int) -> Any:
    """Each string inside ``value`` in at most ``budget`` tokens (the structure stays valid JSON)."""
    if isinstance(value, str):
        return cut_text(value, budget)
    if isinstance(value, dict):
        return {k: _cut_value(v, budget) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_value(v, budget) for v in value]
    return value


def _cut_call(call: ToolCall, budget: int) -> ToolCall:
    return attrs.evolve(call, arguments=_cut_value(call.arguments, max(16, budget)))


def shorten(message: ChatMessage, budget: int) -> ChatMessage:
    """``message`` in about ``budget`` estimated tokens (its role, ids and origin kept)."""
    cost = message_tokens(message)
    if cost <= budget:
        return message
    calls = message.tool_calls
    if calls:
        share = max(MIN_KEEP // 2, budget // (2 * len(calls)))
        calls = tuple(_cut_call(c, share) for c in calls)
    rest = message_tokens(attrs.evolve(message, content="", tool_calls=calls))
    return attrs.evolve(message, content=cut_text(message.content, max(8, budget - rest)), tool_calls=calls)


def dropped_note(count: int) -> ChatMessage:
    return ChatMessage("user", f"[{count} earlier message{'s' if count != 1 else ''} of this conversation "
                               "were dropped to fit the context window]", origin=NOTE_ORIGIN)


def fit_messages(messages: Sequence[ChatMessage], budget: int) -> list[ChatMessage]:
    """``messages`` in at most about ``budget`` estimated tokens, cutting the longest first.

    Every message over a common cap is cut to it, the cap as high as the budget allows
    (so short messages stay whole); if even :data:`MIN_KEEP` each is too much, the oldest
    go first.
    """
    costs = [message_tokens(m) for m in messages]
    if sum(costs) <= budget:
        return list(messages)
    note_cost = message_tokens(dropped_note(len(messages)))
    start = 0
    while start < len(messages) and sum(min(c, MIN_KEEP) for c in costs[start:]) + (note_cost if start else 0) > budget:
        start += 1
        while start < len(messages) and messages[start].role == "tool":
            start += 1  # a tool result goes with the call it answers
    kept, kept_costs = messages[start:], costs[start:]
    room = budget - (note_cost if start else 0)
    low, high = MIN_KEEP, max(kept_costs, default=MIN_KEEP)
    while low < high:  # the highest cap whose cut messages fit the room
        mid = (low + high + 1) // 2
        if sum(min(c, mid) for c in kept_costs) <= room:
            low = mid
        else:
            high = mid - 1
    out = [shorten(m, low) if c > low else m for m, c in zip(kept, kept_costs)]
    return [dropped_note(start), *out] if start else out


__all__ = ["MIN_KEEP", "cut_text", "dropped_note", "fit_messages", "shorten"]
