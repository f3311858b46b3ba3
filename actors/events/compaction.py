"""Turn-boundary compaction beside the ring: a small replay of earlier turns, bounded in bytes.

The ring itself stays raw: live delivery and a replay from any cursor inside it
are the same events, ids and payloads. When a cursor predates the ring (after
``state_resync_required``), or the session was restored from disk, the ring
cannot serve; the compacted replay does. As in qwen serve's
``TurnBoundaryCompactionEngine``, each event is classified into a *slot* as it
is published, and at the turn's boundary (``turn_complete``/``turn_error``) the
slots are folded into one *segment*:

    event                                         slot
    ────────────────────────────────────────────  ─────────────────────────────────
    text/thought chunk after one of its kind      merged into that chunk's slot
    text/thought chunk (any other)                a new text slot
    discrete chunk (``qwenDiscreteMessage``:      its own slot, never merged: each
      the guard's, a notice), usage chunk           attempt (each call's usage) keeps
      (``_meta.usage``)                             its ``_meta``
    ``tool_call``/``tool_call_update``            one ``tool_call`` per toolCallId,
                                                    fields merged, latest wins
    ``available_commands_update``,                one slot per kind, latest wins
      ``current_mode_update``
    transient frames (warnings, markers)          dropped
    anything else                                 its own slot

A folded event takes the id of the last event it folds and sits where that
event was, so ids in a compacted replay still rise: a client's
``Last-Event-ID`` is a valid cursor at every point of it. Work per event is
constant; the fold is linear in the turn's events.

Segments are kept oldest first and dropped from the front while their bytes
exceed the limit (the newest always stays, itself trimmed to the limit); a
:func:`~actors.wire.history_truncated` marker then heads the replay. A turn
still running is not folded: its raw events come from the ring.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from .. import wire
from ..wire import Event

DEFAULT_MAX_BYTES = 4 * 1024 * 1024  # as qwen serve's compacted replay
BOUNDARY_TYPES = frozenset({"turn_complete", "turn_error"})
TRANSIENT_TYPES = frozenset({"history_truncated", "slow_client_warning", "client_evicted", "replay_complete",
                             "stream_error", "state_resync_required"})
LATEST_WINS = frozenset({"available_commands_update", "current_mode_update"})
TEXT_KINDS = frozenset({"agent_message_chunk", "agent_thought_chunk"})


def is_discrete(update: dict[str, Any]) -> bool:
    """A chunk that is never merged: a discrete message (``_meta.qwenDiscreteMessage``: the guard's, a daemon
    notice), or a model call's usage (an empty chunk carrying ``_meta.usage``). A notice merged with the model's
    text would have labelled that text a notice."""
    meta = update.get("_meta")
    if not isinstance(meta, dict):
        return False
    return meta.get("qwenDiscreteMessage") is True or "usage" in meta


class _Text:
    """Consecutive text (or thought) chunks of one kind, joined only when the turn is folded."""

    __slots__ = ("kind", "chunks", "last", "bytes")

    def __init__(self, kind: str, event: Event, text: str) -> None:
        self.kind = kind
        self.chunks = [text]
        self.last = event
        self.bytes = len(event.json())

    def add(self, event: Event, text: str) -> None:
        self.chunks.append(text)
        self.last = event
        self.bytes += len(text)

    def fold(self) -> Event:
        last = self.last
        update = last.data["update"]
        merged = {**update, "content": {**update["content"], "text": "".join(self.chunks)}}
        return Event(last.type, {**last.data, "update": merged}, last.prompt_id, last.id, last.ts_ms)


class _Whole:
    """A slot holding one event: a tool call folded so far, a latest-wins update, or anything else."""

    __slots__ = ("event", "bytes")

    def __init__(self, event: Event) -> None:
        self.event = event
        self.bytes = len(event.json())

    def fold(self) -> Event:
        return self.event


def _merge_tool_call(first: Event, update_event: Event) -> Event:
    """``first``'s tool call with ``update_event``'s fields laid over it (absent and null fields keep theirs)."""
    old, new = first.data["update"], update_event.data["update"]
    merged = {**old, **{k: v for k, v in new.items() if v is not None}, "sessionUpdate": "tool_call"}
    if isinstance(old.get("_meta"), dict) and isinstance(new.get("_meta"), dict):
        merged["_meta"] = {**old["_meta"], **new["_meta"]}
    data = {**first.data, **update_event.data, "update": merged}
    return Event(update_event.type, data, update_event.prompt_id or first.prompt_id, update_event.id,
                 update_event.ts_ms)


_NO_SEGMENTS: deque[tuple[list[Event], int]] = deque(maxlen=0)  # a compactor's that has folded nothing yet


class TurnCompactor:
    """Folds each finished turn into a segment; keeps the newest segments within ``max_bytes``.

    ``ingest`` every published event in order; it returns the new segment when
    the event ends a turn (so it can be written to disk), else ``None``.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self.max_bytes = max_bytes
        self._segments: deque[tuple[list[Event], int]] | None = None  # made by the first turn folded
        self.bytes = 0
        self.truncated_events = 0  # folded events dropped to stay within max_bytes
        self.truncated_turns = 0
        self.turn_start_id: int | None = None  # first id of the turn being gathered
        self._slots: list[_Text | _Whole | None] = []
        self._slot_bytes = 0
        self._tool_slots: dict[str, int] = {}  # toolCallId -> index in _slots
        self._latest_slots: dict[str, int] = {}  # sessionUpdate kind -> index in _slots

    @property
    def segments(self) -> deque[tuple[list[Event], int]]:
        """The kept segments, ``(events, bytes)``, oldest first (read-only: :meth:`add_segment` adds)."""
        return self._segments if self._segments is not None else _NO_SEGMENTS

    # -- gathering a turn

    def ingest(self, event: Event) -> list[Event] | None:
        if event.type in TRANSIENT_TYPES or event.id is None:
            return None
        if self.turn_start_id is None:
            self.turn_start_id = event.id
        if event.type in BOUNDARY_TYPES:
            return self._fold(event)
        self._classify(event)
        if self._slot_bytes > 2 * self.max_bytes:  # a turn that never ends must not grow without bound
            self._shed()
        return None

    def _classify(self, event: Event) -> None:
        update = event.data.get("update") if event.type == "session_update" else None
        kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        if kind in TEXT_KINDS and not is_discrete(update):  # type: ignore[arg-type]
            content = update.get("content")  # type: ignore[union-attr]
            if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
                last = self._slots[-1] if self._slots else None
                if isinstance(last, _Text) and last.kind == kind:
                    last.add(event, content["text"])
                    self._slot_bytes += len(content["text"])
                else:
                    self._push(_Text(kind, event, content["text"]))
                return
        if kind in ("tool_call", "tool_call_update") and isinstance(update.get("toolCallId"), str):  # type: ignore[union-attr]
            call_id = update["toolCallId"]  # type: ignore[index]
            at = self._tool_slots.get(call_id)
            if at is not None:
                earlier = self._take(at)
                event = _merge_tool_call(earlier.event, event)
            elif kind == "tool_call_update":
                event = Event(event.type, {**event.data, "update": {**update, "sessionUpdate": "tool_call"}},
                              event.prompt_id, event.id, event.ts_ms)
            self._tool_slots[call_id] = len(self._slots)
            self._push(_Whole(event))
            return
        if kind in LATEST_WINS:
            at = self._latest_slots.get(kind)
            if at is not None:
                self._take(at)
            self._latest_slots[kind] = len(self._slots)
        self._push(_Whole(event))

    def _push(self, slot: _Text | _Whole) -> None:
        self._slots.append(slot)
        self._slot_bytes += slot.bytes

    def _take(self, index: int) -> _Whole:
        """Empty slot ``index`` (its event moves to the end, where its latest event is)."""
        slot = self._slots[index]
        assert isinstance(slot, _Whole)
        self._slots[index] = None
        self._slot_bytes -= slot.bytes
        return slot

    def _shed(self) -> None:
        """Drop the turn's oldest slots until it fits ``max_bytes`` again (counted as truncated)."""
        kept = [s for s in self._slots if s is not None]
        while self._slot_bytes > self.max_bytes and len(kept) > 1:
            dropped = kept.pop(0)
            self._slot_bytes -= dropped.bytes
            self.truncated_events += 1
        self._reindex(kept)

    def _reindex(self, kept: list[_Text | _Whole]) -> None:
        self._slots = list(kept)
        self._tool_slots = {}
        self._latest_slots = {}
        for i, slot in enumerate(kept):
            if isinstance(slot, _Whole):
                update = slot.event.data.get("update") if slot.event.type == "session_update" else None
                if isinstance(update, dict):
                    if update.get("sessionUpdate") == "tool_call" and isinstance(update.get("toolCallId"), str):
                        self._tool_slots[update["toolCallId"]] = i
                    elif update.get("sessionUpdate") in LATEST_WINS:
                        self._latest_slots[update["sessionUpdate"]] = i

    def _fold(self, boundary: Event) -> list[Event]:
        segment = [slot.fold() for slot in self._slots if slot is not None]
        segment.append(boundary)
        self._slots, self._slot_bytes = [], 0
        self._tool_slots, self._latest_slots = {}, {}
        self.turn_start_id = None
        self.add_segment(segment, turns=1)
        return segment

    # -- the kept segments

    def add_segment(self, events: list[Event], turns: int = 1) -> None:
        """Keep one folded turn (or one restored event, ``turns=0``), dropping the oldest past ``max_bytes``."""
        size = sum(len(e.json()) for e in events)
        while size > self.max_bytes and len(events) > 1:  # one turn alone over the limit: its start goes
            size -= len(events.pop(0).json())
            self.truncated_events += 1
        if self._segments is None:
            self._segments = deque()
        self._segments.append((events, size))
        self.bytes += size
        while self.bytes > self.max_bytes and len(self._segments) > 1:
            dropped, dropped_size = self._segments.popleft()
            self.bytes -= dropped_size
            self.truncated_events += len(dropped)
            self.truncated_turns += 1 if any(e.type in BOUNDARY_TYPES for e in dropped) else 0

    def seed(self, segments: Iterable[list[Event]]) -> None:
        """Start from segments restored from disk (oldest first), each a turn or a lone event.

        A segment that is a lone ``history_truncated`` marker (see :meth:`kept`)
        carries the counts of what an earlier daemon dropped.
        """
        for events in segments:
            if len(events) == 1 and events[0].type == "history_truncated":
                self.truncated_events += int(events[0].data.get("truncatedEvents") or 0)
                self.truncated_turns += int(events[0].data.get("truncatedTurns") or 0)
                continue
            self.add_segment(list(events), turns=1 if events and events[-1].type in BOUNDARY_TYPES else 0)

    def kept(self) -> list[list[Event]]:
        """The kept segments, as written to disk: behind a lone marker segment when some were dropped."""
        segments = [events for events, _ in self.segments]
        if self.truncated_events:
            segments.insert(0, [wire.history_truncated(self.truncated_events, 0, max_bytes=self.max_bytes,
                                                       truncated_turns=self.truncated_turns)])
        return segments

    def compacted(self) -> list[Event]:
        """The kept segments, oldest first, behind a ``history_truncated`` marker when some were dropped."""
        events = [e for segment, _ in self.segments for e in segment]
        if self.truncated_events:
            marker = wire.history_truncated(self.truncated_events, len(events), max_bytes=self.max_bytes,
                                            truncated_turns=self.truncated_turns)
            events.insert(0, marker)
        return events
