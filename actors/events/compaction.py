"""Replay compaction: at a turn's end, fold its events in the ring so replays stay small.

Consecutive text (or thought) chunks of the turn merge into one chunk; a tool
call and its updates merge into one ``tool_call`` at the position of its last
update. A merged event takes the id of the last event it folds (so a cursor
anywhere before it still gets it) and records the first in
``_meta.compactedFrom``. Discrete messages — the Todo Stop Guard's attempts
above all — are never merged, so each keeps its own metadata after the live
events have rolled over.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..wire import Event

MERGEABLE_TEXT = frozenset({"agent_message_chunk", "agent_thought_chunk"})


def _text_kind(event: Event, prompt_id: str) -> str | None:
    if event.prompt_id != prompt_id or event.type != "session_update":
        return None
    update = event.data.get("update") or {}
    kind = update.get("sessionUpdate")
    meta = update.get("_meta") or {}
    if kind in MERGEABLE_TEXT and (update.get("content") or {}).get("type") == "text" \
            and not meta.get("qwenDiscreteMessage"):
        return kind
    return None


def _with(event: Event, update: dict[str, Any], event_id: int, first_id: int) -> Event:
    meta = dict(update.get("_meta") or {})
    meta["compactedFrom"] = first_id
    update = {**update, "_meta": meta}
    return Event(event.type, {**event.data, "update": update}, event.prompt_id, event_id, event.ts_ms)


def compact(events: Iterable[Event], prompt_id: str) -> list[Event]:
    """The ring's events with one turn's events folded."""
    out: list[Event] = []
    run_first: int | None = None  # id of the first chunk of the text run that ends ``out``
    tool_calls: dict[str, tuple[int, dict[str, Any]]] = {}  # toolCallId -> (index in out, merged update)
    for event in events:
        kind = _text_kind(event, prompt_id)
        if kind is not None and out and run_first is not None and _text_kind(out[-1], prompt_id) == kind:
            previous = out[-1].data["update"]
            text = previous["content"]["text"] + event.data["update"]["content"]["text"]
            merged = {**previous, "content": {"type": "text", "text": text}}
            out[-1] = _with(event, merged, event.id, run_first)  # type: ignore[arg-type]
            continue
        run_first = event.id if kind is not None else None
        update = event.data.get("update") if event.type == "session_update" and event.prompt_id == prompt_id else None
        if update and update.get("sessionUpdate") == "tool_call":
            tool_calls[update.get("toolCallId")] = (len(out), update)
        elif update and update.get("sessionUpdate") == "tool_call_update" and update.get("toolCallId") in tool_calls:
            index, first = tool_calls[update["toolCallId"]]
            merged = {**first, **{k: v for k, v in update.items() if k != "sessionUpdate"}}
            merged["sessionUpdate"] = "tool_call"
            first_id = out[index].data["update"].get("_meta", {}).get("compactedFrom", out[index].id)
            out[index] = None  # type: ignore[call-overload]  # moved to where the call finished
            tool_calls[update["toolCallId"]] = (len(out), merged)
            out.append(_with(event, merged, event.id, first_id))  # type: ignore[arg-type]
            continue
        out.append(event)
    return [e for e in out if e is not None]
