"""Events: the bus event and the one builder of each event's data (qwen serve's shapes)."""

from __future__ import annotations

import datetime
import time
from typing import Any

import orjson

WIRE_VERSION = 1


def kept_json(value: Any) -> bytes:
    """``orjson.dumps(value)`` for bytes that are kept (a ring, a cache): copied to their size.

    orjson returns its output in the buffer it wrote into, which keeps at least
    1 KiB (4 KiB from orjson 3.12) whatever the length: a ring of 8,000 small
    events held 32 MiB instead of about 2. The copy costs a fraction of a
    microsecond.
    """
    return bytes(memoryview(orjson.dumps(value)))


# --------------------------------------------------------------------------- events


class Event:
    """One bus event: a daemon event or an ACP ``session/update`` carried in one.

    ``id`` is ``None`` for synthetic frames (replay markers, warnings), which are
    never stored in the ring. The JSON frame is encoded once and shared by every
    subscriber.
    """

    __slots__ = ("id", "type", "_data", "prompt_id", "ts_ms", "originator", "_json")

    def __init__(
        self,
        type: str,
        data: dict[str, Any],
        prompt_id: str | None = None,
        id: int | None = None,
        ts_ms: int = 0,
        originator: str | None = None,
    ) -> None:
        self.id = id
        self.type = type
        self._data: dict[str, Any] | None = data
        self.prompt_id = prompt_id
        self.ts_ms = ts_ms
        # The client id (X-Qwen-Client-Id) that admitted the prompt, on its echo: qwen's Web Shell drops the
        # echo of its own prompt by it (it showed the prompt already), as it does with qwen serve's.
        self.originator = originator
        self._json: bytes | None = None

    @property
    def data(self) -> dict[str, Any]:
        """The event's data; read back from its encoded frame once :meth:`release_data` dropped it."""
        data = self._data
        if data is None:
            return orjson.loads(self._json)["data"]  # type: ignore[arg-type]
        return data

    def release_data(self) -> None:
        """Keep only the encoded frame (a ring's finished turn: read again only by replays). A dict or two
        per kept event were most of what CPython's cyclic collector walks on each full pass, a pause of
        the event loop that grows with every session's ring."""
        if self._json is not None:
            self._data = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.id is not None:
            out["id"] = self.id
        out["v"] = WIRE_VERSION
        out["type"] = self.type
        if self.prompt_id is not None:
            out["promptId"] = self.prompt_id
        out["data"] = self.data
        if self.originator is not None:
            out["originatorClientId"] = self.originator
        if self.ts_ms:
            out["_meta"] = {"serverTimestamp": self.ts_ms}
        return out

    def json(self) -> bytes:
        if self._json is None:
            self._json = kept_json(self.to_dict())
        return self._json

    @classmethod
    def encoded(cls, type: str, id: int | None, json: bytes, prompt_id: str | None = None) -> Event:
        """An event known only by its encoded frame (a cluster's Redis stream): sent as it is, never re-encoded."""
        event = cls(type, {}, prompt_id, id)
        event._json = json
        return event

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> Event:
        """An event back from its wire form (as :meth:`to_dict` wrote it); ``ValueError`` naming ``where``."""
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str) or not isinstance(raw.get("data"), dict):
            raise ValueError(f"{where}: not an event (an object with a string type and an object data)")
        prompt_id = raw.get("promptId")
        meta = raw.get("_meta")
        ts = meta.get("serverTimestamp") if isinstance(meta, dict) else 0
        event_id = raw.get("id")
        originator = raw.get("originatorClientId")
        return cls(raw["type"], raw["data"], prompt_id if isinstance(prompt_id, str) else None,
                   event_id if isinstance(event_id, int) else None, ts if isinstance(ts, int) else 0,
                   originator if isinstance(originator, str) else None)

    @property
    def update(self) -> dict[str, Any] | None:
        """The ACP update of a ``session_update`` event, else ``None``."""
        if self.type == "session_update":
            return self.data.get("update")
        return None

    def __repr__(self) -> str:
        return f"Event(id={self.id!r}, type={self.type!r}, prompt_id={self.prompt_id!r}, data={self.data!r})"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


# Daemon event data. Each builder is the one definition of that event's shape.


def session_update(session_id: str, update: dict[str, Any]) -> dict[str, Any]:
    return {"sessionId": session_id, "update": update}


def text_update(kind: str, text: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """``agent_message_chunk`` / ``agent_thought_chunk`` / ``user_message_chunk``."""
    update: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if meta:
        update["_meta"] = meta
    return update


def background_notification_update(text: str, task: dict[str, Any]) -> dict[str, Any]:
    """A background item's result as clients are shown it when its automatic turn starts, in qwen serve's form:
    a discrete ``agent_message_chunk``, ``_meta.source: "background_notification"``, the item in
    ``_meta.backgroundTask`` (``{taskId, kind, status?, commandLabel? | description?}``). The model reads the
    ``<task-notification>`` text; qwen's Web Shell shows this as a notice, not as the user's message."""
    return text_update("agent_message_chunk", text, {"source": "background_notification", "qwenDiscreteMessage": True,
                                                     "backgroundTask": task})


def content_update(kind: str, block: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": kind, "content": block}
    if meta:
        update["_meta"] = meta
    return update


def plan_update(todos: list[dict[str, Any]]) -> dict[str, Any]:
    """Todos as an ACP ``plan``; the todo id travels in ``_meta``."""
    return {
        "sessionUpdate": "plan",
        "entries": [
            {"content": t["content"], "status": t["status"], "priority": "medium", "_meta": {"todoId": t["id"]}}
            for t in todos
        ],
    }


def tool_call_update(
    kind: str, tool_call_id: str, *, title: str | None = None, status: str, raw_input: Any = None,
    content: list[dict[str, Any]] | None = None, tool_kind: str | None = None,
    locations: list[dict[str, Any]] | None = None, tool_name: str | None = None, rule: str | None = None,
) -> dict[str, Any]:
    """An ACP ``tool_call`` or ``tool_call_update``; ``locations``: ``[{path, line?}]`` (absent when empty).

    ``tool_name``: the tool the model called, as ``_meta.toolName`` (qwen serve's ``tool_call`` and
    ``tool_call_update`` carry it there; qwen's Web Shell labels a tool card by it, else ``unknown``);
    ``rule``: the permission rule that refused the call, as ``_meta.rule``. :class:`event_data.ToolCallMeta`.
    """
    update: dict[str, Any] = {"sessionUpdate": kind, "toolCallId": tool_call_id, "status": status}
    if title is not None:
        update["title"] = title
    if tool_kind is not None:
        update["kind"] = tool_kind
    if raw_input is not None:
        update["rawInput"] = raw_input
    if content is not None:
        update["content"] = content
    if locations:
        update["locations"] = locations
    meta: dict[str, Any] = {}
    if tool_name is not None:
        meta["toolName"] = tool_name
    if rule is not None:
        meta["rule"] = rule
    if meta:
        update["_meta"] = meta
    return update


def turn_complete(session_id: str, prompt_id: str, stop_reason: str,
                  usage: dict[str, Any] | None = None, token_limit: dict[str, Any] | None = None,
                  hook_stop_reason: str | None = None,
                  prompt_cancelled: dict[str, Any] | None = None) -> dict[str, Any]:
    """``usage``: the turn's :func:`usage_summary`, when its model reported any; ``token_limit``: why a
    ``max_tokens`` turn stopped (:func:`token_limit`); ``hook_stop_reason``: a hook ended the turn
    (``continue: false``'s ``stopReason``, or a UserPromptSubmit block's reason); ``prompt_cancelled``: when a
    cancelled turn that had started was cancelled (:func:`prompt_cancelled`)."""
    data = {"sessionId": session_id, "stopReason": stop_reason, "promptId": prompt_id}
    if hook_stop_reason is not None:
        data["hookStopReason"] = hook_stop_reason
    if usage is not None:
        data["usage"] = usage
    if token_limit is not None:
        data["tokenLimit"] = token_limit
    if prompt_cancelled is not None:
        data["promptCancelled"] = prompt_cancelled
    return data


def prompt_cancelled(cancelled_at: int, started_at: int) -> dict[str, Any]:
    """``turn_complete.promptCancelled`` of a cancelled turn, qwen serve's shape: ``cancelledAt``, when the
    cancel came (epoch milliseconds), and ``elapsedMs``, how long the turn had run by then (never negative).
    qwen's Web Shell shows it as "You cancelled this request after N seconds"."""
    return {"cancelledAt": cancelled_at, "elapsedMs": max(0, cancelled_at - started_at)}


def token_limit(cause: str, *, answer_cut: bool, message: str, limit: int | None = None,
                finish_reason: str | None = None) -> dict[str, Any]:
    """``turn_complete.tokenLimit`` of a turn that stopped ``max_tokens`` (actors/session/context.py).

    ``cause``: ``max_tokens`` (the answer limit, ``model.maxTokens``) or ``context_window``;
    ``answerCut``: the model's answer was cut short (``finishReason`` as the server said it, e.g.
    ``length``) — else the next request was not sent at all; ``limit``: that answer limit or the
    context window, when known; ``message``: the same words as the notice the client was shown.
    """
    out: dict[str, Any] = {"cause": cause, "answerCut": answer_cut, "limit": limit, "message": message}
    if finish_reason is not None:
        out["finishReason"] = finish_reason
    return out


def context_status(*, window: int | None, source: str | None, base_tokens: int, estimated: int | None,
                   reported: int | None, calibration: float | None) -> dict[str, Any]:
    """``status.context``: the context window compaction aims at (``windowSource``: ``configured`` or
    ``server``, learnt from an overflow answer or a cut answer), the estimate of a request with no
    conversation (``baseTokens``: system prompt and tool schemas), the estimate of the last request
    sent (``estimatedTokens``) and the server's count of it (``reportedTokens``, ``null`` if it gave
    none), and ``calibration``: real over estimated tokens of the last request the server counted."""
    return {"window": window, "windowSource": source, "baseTokens": base_tokens, "estimatedTokens": estimated,
            "reportedTokens": reported, "calibration": calibration}


def turn_error(session_id: str, prompt_id: str, message: str, code: str,
               usage: dict[str, Any] | None = None) -> dict[str, Any]:
    data = {"sessionId": session_id, "message": message, "code": code, "promptId": prompt_id}
    if usage is not None:
        data["usage"] = usage
    return data


# Usage accounting (counted by actors/session/usage.py). One model call's figures use the names of
# ACP's ``Usage``, as qwen-code's session puts them in ``_meta.usage``; sums add ``calls``.

USAGE_SOURCES = ("primary", "todo_stop_guard", "compaction", "suggestion")


def call_usage(input_tokens: int, output_tokens: int, total_tokens: int,
               cached_read_tokens: int | None) -> dict[str, Any]:
    """One call's ``Usage``; ``cachedReadTokens`` only when the server reported caching."""
    out: dict[str, Any] = {"inputTokens": input_tokens, "outputTokens": output_tokens, "totalTokens": total_tokens}
    if cached_read_tokens is not None:
        out["cachedReadTokens"] = cached_read_tokens
    return out


def usage_update(usage: dict[str, Any], source: str, duration_ms: int) -> dict[str, Any]:
    """A model call's usage as qwen-code's ACP session emits it (``MessageEmitter.emitUsageMetadata``):
    an empty ``agent_message_chunk`` with ``_meta.usage`` and ``_meta.durationMs``. ``usageSource``
    (one of :data:`USAGE_SOURCES`) is ours: what caused the call."""
    return text_update("agent_message_chunk", "", {"usage": usage, "durationMs": duration_ms, "usageSource": source})


def usage_tally(calls: int, input_tokens: int, output_tokens: int, cached_read_tokens: int,
                total_tokens: int) -> dict[str, Any]:
    """Summed calls: every committed stream is a call, whether or not its server reported tokens."""
    return {"calls": calls, "inputTokens": input_tokens, "outputTokens": output_tokens,
            "cachedReadTokens": cached_read_tokens, "totalTokens": total_tokens}


def usage_summary(total: dict[str, Any], by_source: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A :func:`usage_tally` of everything, plus ``bySource``: one tally per source that made a call."""
    return {**total, "bySource": by_source}


def pending_prompt_added(session_id: str, prompt_id: str, text: str, queued_at: int) -> dict[str, Any]:
    return {"sessionId": session_id, "promptId": prompt_id, "text": text, "queuedAt": queued_at}


def pending_prompt_started(session_id: str, prompt_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "promptId": prompt_id, "text": text}


def pending_prompt_completed(session_id: str, prompt_id: str, state: str) -> dict[str, Any]:
    return {"sessionId": session_id, "promptId": prompt_id, "state": state}


def mid_turn_message_injected(session_id: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "sessionId": session_id,
        "messages": [i["displayText"] for i in items],
        "messageIds": [i["messageId"] for i in items],
        "items": items,
    }


def permission_request(session_id: str, request_id: str, tool_call: dict[str, Any],
                       options: list[dict[str, str]]) -> dict[str, Any]:
    return {"requestId": request_id, "sessionId": session_id, "toolCall": tool_call, "options": options}


def permission_resolved(session_id: str, request_id: str, outcome: dict[str, Any]) -> dict[str, Any]:
    return {"requestId": request_id, "sessionId": session_id, "outcome": outcome}


def background_task(session_id: str, task_id: str, status: str, **fields: Any) -> dict[str, Any]:
    """``status``: started, output, finished, or notification_dropped."""
    return {"sessionId": session_id, "taskId": task_id, "status": status, **fields}


def hook_result(session_id: str, hook_event: str, system_messages: list[str], failures: list[str],
                stop_reason: str | None = None) -> dict[str, Any]:
    """``stopReason``: a hook's ``continue: false`` ended the turn, and said why (or a default)."""
    data = {"sessionId": session_id, "hookEvent": hook_event, "systemMessages": system_messages,
            "failures": failures}
    if stop_reason is not None:
        data["stopReason"] = stop_reason
    return data


def followup_suggestion(session_id: str, prompt_id: str, suggestions: list[str]) -> dict[str, Any]:
    """``suggestion``: the first, as qwen serve sends its one (qwen's Web Shell reads only that); ``suggestions``:
    all of them (at least one), for Trellis's own clients."""
    return {"sessionId": session_id, "promptId": prompt_id, "suggestion": suggestions[0], "suggestions": suggestions}


def mode_update(mode: str) -> dict[str, Any]:
    return {"sessionUpdate": "current_mode_update", "currentModeId": mode}


def iso_time(ms: int) -> str:
    """A daemon timestamp (ms since the epoch) as ISO 8601 in UTC, as ACP writes times: ``2026-12-04T19:36:51.123Z``."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def session_info_update(title: str | None, updated_at_ms: int) -> dict[str, Any]:
    """ACP's ``session_info_update``: the session's title changed (``None``: it has none now)."""
    return {"sessionUpdate": "session_info_update", "title": title, "updatedAt": iso_time(updated_at_ms)}


def session_metadata_updated(session_id: str, title: str | None, *, automatic: bool) -> dict[str, Any]:
    """qwen serve's ``session_metadata_updated``, published with :func:`session_info_update`: the title as qwen's
    ``displayName`` (``None``: cleared), and ``titleSource`` — ``auto`` (from the first prompt) or ``manual``
    (a client set it) — when there is one. qwen's Web Shell reads only this event for a title change."""
    data: dict[str, Any] = {"sessionId": session_id, "displayName": title}
    if title is not None:
        data["titleSource"] = "auto" if automatic else "manual"
    return data


def approval_mode_changed(session_id: str, previous: str, next_mode: str) -> dict[str, Any]:
    """qwen serve's ``approval_mode_changed``, published with :func:`mode_update` (qwen's Web Shell reads only
    this one): ``persisted`` is ``false``, as Trellis never writes the mode into a settings file."""
    return {"sessionId": session_id, "previous": previous, "next": next_mode, "persisted": False}


def model_switched(session_id: str, model_id: str) -> dict[str, Any]:
    """qwen serve's ``model_switched``: the session calls ``modelId`` from its next model call on."""
    return {"sessionId": session_id, "modelId": model_id}


def conversation_rewound(session_id: str, turn: int, history_length: int, undo_id: str | None) -> dict[str, Any]:
    """User turn ``turn`` (from 0, as a rewind counts them) and everything after it left the conversation;
    ``undoId`` when the files went back too (the undo that reverses both)."""
    return {"sessionId": session_id, "turn": turn, "historyLength": history_length, "undoId": undo_id}


def rewind_undone(session_id: str, undo_id: str, history_length: int, new_undo_id: str) -> dict[str, Any]:
    """The undo ``undoId`` put the conversation and the files back; ``newUndoId`` undoes this undo."""
    return {"sessionId": session_id, "undoId": undo_id, "historyLength": history_length, "newUndoId": new_undo_id}


def session_closed(session_id: str, reason: str) -> dict[str, Any]:
    return {"sessionId": session_id, "reason": reason}


def state_resync_required(reason: str, last_delivered_id: int, earliest_available_id: int) -> Event:
    return Event(
        "state_resync_required",
        {"reason": reason, "lastDeliveredId": last_delivered_id, "earliestAvailableId": earliest_available_id},
    )


def replay_complete(replayed_count: int, last_replayed_event_id: int, last_event_id: int) -> Event:
    return Event(
        "replay_complete",
        {"replayedCount": replayed_count, "lastReplayedEventId": last_replayed_event_id, "lastEventId": last_event_id},
    )


def history_truncated(truncated_events: int, retained_events: int, *, max_bytes: int,
                      truncated_turns: int = 0, max_events: int | None = None, scope: str | None = None) -> Event:
    """The compacted replay (or, ``scope="live_journal"``, the running turn) lost its oldest events.
    ``maxBytes``, the bound that dropped them, is always there: qwen serve always sends it, and qwen's Web
    Shell refuses the frame without it."""
    data: dict[str, Any] = {"reason": "replay_window_exceeded", "truncatedEvents": truncated_events,
                            "retainedEvents": retained_events, "fullTranscriptAvailable": True,
                            "maxBytes": max_bytes}
    if max_events is not None:
        data["maxEvents"] = max_events
    if truncated_turns:
        data["truncatedTurns"] = truncated_turns
    if scope is not None:
        data["scope"] = scope
    return Event("history_truncated", data)


def slow_client_warning(queued: int, limit: int, queued_bytes: int, max_bytes: int, last_event_id: int,
                        threshold: str) -> Event:
    """A subscriber's live queue is three quarters full, in frames or in bytes (``threshold`` says which)."""
    return Event("slow_client_warning", {
        "queueSize": queued, "maxQueued": limit, "queuedBytes": queued_bytes, "maxQueuedBytes": max_bytes,
        "lastEventId": last_event_id, "threshold": threshold,
        "queued": queued, "limit": limit})  # the names of our first version, still read by older clients


def client_evicted(reason: str, queued: int, limit: int, queued_bytes: int, max_bytes: int, dropped_after: int,
                   event_bytes: int | None = None) -> Event:
    """A subscriber fell too far behind (``reason``: ``queue_overflow`` or ``queue_bytes_overflow``)."""
    data: dict[str, Any] = {"reason": reason, "droppedAfter": dropped_after, "queueSize": queued,
                            "maxQueued": limit, "queuedBytes": queued_bytes, "maxQueuedBytes": max_bytes,
                            "queued": queued, "limit": limit}
    if event_bytes is not None:
        data["eventBytes"] = event_bytes
    return Event("client_evicted", data)
