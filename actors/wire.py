"""The wire form of every message and event, in one place.

Everything that crosses a process boundary — REST bodies, SSE frames, ACP
``session/update`` payloads, transcript lines — is shaped here. The event data
mirror qwen-code's daemon (see PROTOCOL.md) so its clients work unchanged.

Decoding is strict: unknown fields, wrong scalar types (no ``"7"`` for 7) and
unknown content-block types are refused with a :class:`WireError` naming the
JSON path of the first problem.
"""

from __future__ import annotations

import time
import typing
from typing import Any, Literal, TypeVar

import attrs
import cattrs
import orjson
from cattrs.cols import list_structure_factory
from cattrs.gen import make_dict_structure_fn, override
from cattrs.preconf.orjson import make_converter

T = TypeVar("T")

WIRE_VERSION = 1


# --------------------------------------------------------------------------- errors


EXCERPT_CHARS = 64  # at most this much of a client's value is quoted back in an error
MAX_MESSAGE_CHARS = 300  # and an error sentence (or path) is at most about this long


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A bounded ``repr`` of ``value``: an error never echoes more than a short excerpt of the input."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + f"… ({len(value)} chars)"
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "<a huge integer>"
    elif isinstance(value, (dict, list, tuple)):
        text = f"<{type(value).__name__} of {len(value)} items>"
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "…"


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail around an ellipsis."""
    if len(text) <= limit:
        return text
    tail = limit // 3
    return text[: limit - tail - 1] + "…" + text[-tail:]


class WireError(ValueError):
    """Input that does not have the expected wire form."""

    def __init__(self, message: str, path: str = "$", code: str = "invalid_request") -> None:
        message, path = shorten(message), shorten(path)
        super().__init__(f"{message} @ {path}")
        self.message = message
        self.path = path
        self.code = code


# --------------------------------------------------------------------------- events


class Event:
    """One bus event: a daemon event or an ACP ``session/update`` carried in one.

    ``id`` is ``None`` for synthetic frames (replay markers, warnings), which are
    never stored in the ring. The JSON frame is encoded once and shared by every
    subscriber.
    """

    __slots__ = ("id", "type", "data", "prompt_id", "ts_ms", "_json")

    def __init__(
        self,
        type: str,
        data: dict[str, Any],
        prompt_id: str | None = None,
        id: int | None = None,
        ts_ms: int = 0,
    ) -> None:
        self.id = id
        self.type = type
        self.data = data
        self.prompt_id = prompt_id
        self.ts_ms = ts_ms
        self._json: bytes | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.id is not None:
            out["id"] = self.id
        out["v"] = WIRE_VERSION
        out["type"] = self.type
        if self.prompt_id is not None:
            out["promptId"] = self.prompt_id
        out["data"] = self.data
        if self.ts_ms:
            out["_meta"] = {"serverTimestamp": self.ts_ms}
        return out

    def json(self) -> bytes:
        if self._json is None:
            self._json = orjson.dumps(self.to_dict())
        return self._json

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> Event:
        """An event back from its wire form (as :meth:`to_dict` wrote it); ``ValueError`` naming ``where``."""
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str) or not isinstance(raw.get("data"), dict):
            raise ValueError(f"{where}: not an event (an object with a string type and an object data)")
        prompt_id = raw.get("promptId")
        meta = raw.get("_meta")
        ts = meta.get("serverTimestamp") if isinstance(meta, dict) else 0
        event_id = raw.get("id")
        return cls(raw["type"], raw["data"], prompt_id if isinstance(prompt_id, str) else None,
                   event_id if isinstance(event_id, int) else None, ts if isinstance(ts, int) else 0)

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
) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": kind, "toolCallId": tool_call_id, "status": status}
    if title is not None:
        update["title"] = title
    if tool_kind is not None:
        update["kind"] = tool_kind
    if raw_input is not None:
        update["rawInput"] = raw_input
    if content is not None:
        update["content"] = content
    return update


def turn_complete(session_id: str, prompt_id: str, stop_reason: str,
                  usage: dict[str, Any] | None = None, token_limit: dict[str, Any] | None = None,
                  hook_stop_reason: str | None = None) -> dict[str, Any]:
    """``usage``: the turn's :func:`usage_summary`, when its model reported any; ``token_limit``: why a
    ``max_tokens`` turn stopped (:func:`token_limit`); ``hook_stop_reason``: a hook ended the turn
    (``continue: false``'s ``stopReason``, or a UserPromptSubmit block's reason)."""
    data = {"sessionId": session_id, "stopReason": stop_reason, "promptId": prompt_id}
    if hook_stop_reason is not None:
        data["hookStopReason"] = hook_stop_reason
    if usage is not None:
        data["usage"] = usage
    if token_limit is not None:
        data["tokenLimit"] = token_limit
    return data


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
    return {"sessionId": session_id, "promptId": prompt_id, "suggestions": suggestions}


def mode_update(mode: str) -> dict[str, Any]:
    return {"sessionUpdate": "current_mode_update", "currentModeId": mode}


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


def history_truncated(truncated_events: int, retained_events: int, *, max_bytes: int | None = None,
                      truncated_turns: int = 0, max_events: int | None = None, scope: str | None = None) -> Event:
    """The compacted replay (or, ``scope="live_journal"``, the running turn) lost its oldest events."""
    data: dict[str, Any] = {"reason": "replay_window_exceeded", "truncatedEvents": truncated_events,
                            "retainedEvents": retained_events, "fullTranscriptAvailable": True}
    if max_bytes is not None:
        data["maxBytes"] = max_bytes
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


# --------------------------------------------------------------------------- content blocks

# The longest accepted value of each free-text request field, in characters. A body may be up to
# 10 MB (transport.app.MAX_BODY), but no model name, path or id needs to be anywhere near that, and
# each is kept for the session's life (memory, journal, session record, events). A longer value is
# refused with 400 ``value_too_long`` naming the field (README, *Limits on input*). Session ids are
# checked where they are used (at most 128, ``invalid_session_id``); ``data``/``blob`` (base64) and
# ``_meta`` are bounded only by the body.
MAX_TEXT_CHARS = 1_000_000  # a prompt's text block or embedded resource text, a mid-turn message
MAX_PATH_CHARS = 4096  # cwd (PATH_MAX on Linux)
MAX_SYSTEM_PROMPT_CHARS = 200_000  # a session's systemPrompt / appendSystemPrompt (the default is ~2,400)
MAX_URI_CHARS = 8192
MAX_LABEL_CHARS = 4096  # a resource link's name, title, description
MAX_MODEL_CHARS = 256
MAX_ID_CHARS = 128  # messageId, optionId
MAX_MIME_CHARS = 256
MAX_JSON_DEPTH = 32  # free-form objects (_meta, annotations): their own nesting, far under orjson's 254
_MAX_CHARS = "trellis.wire.max_chars"  # attrs metadata key: the field's limit, enforced when structuring


def bounded(limit: int, **kwargs: Any) -> Any:
    """An attrs field holding a string of at most ``limit`` characters on the wire."""
    return attrs.field(metadata={_MAX_CHARS: limit}, **kwargs)


class TooLong(ValueError):
    """A value over its limit: a :class:`WireError` with code ``value_too_long`` (a string) or
    ``value_too_deep`` (a free-form object nested too deeply)."""

    def __init__(self, message: str, code: str = "value_too_long") -> None:
        super().__init__(message)
        self.code = code


@attrs.frozen(kw_only=True)
class TextBlock:
    type: Literal["text"]
    text: str = bounded(MAX_TEXT_CHARS)
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ImageBlock:
    type: Literal["image"]
    data: str
    mimeType: str = bounded(MAX_MIME_CHARS)
    uri: str | None = bounded(MAX_URI_CHARS, default=None)
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class AudioBlock:
    type: Literal["audio"]
    data: str
    mimeType: str = bounded(MAX_MIME_CHARS)
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ResourceLinkBlock:
    type: Literal["resource_link"]
    uri: str = bounded(MAX_URI_CHARS)
    name: str = bounded(MAX_LABEL_CHARS)
    mimeType: str | None = bounded(MAX_MIME_CHARS, default=None)
    title: str | None = bounded(MAX_LABEL_CHARS, default=None)
    description: str | None = bounded(MAX_LABEL_CHARS, default=None)
    size: int | None = None
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class EmbeddedResource:
    uri: str = bounded(MAX_URI_CHARS)
    text: str | None = bounded(MAX_TEXT_CHARS, default=None)
    blob: str | None = None
    mimeType: str | None = bounded(MAX_MIME_CHARS, default=None)
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ResourceBlock:
    type: Literal["resource"]
    resource: EmbeddedResource
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


ContentBlock = TextBlock | ImageBlock | AudioBlock | ResourceLinkBlock | ResourceBlock
_BLOCKS: dict[str, type] = {
    "text": TextBlock,
    "image": ImageBlock,
    "audio": AudioBlock,
    "resource_link": ResourceLinkBlock,
    "resource": ResourceBlock,
}


def block_text(block: ContentBlock) -> str:
    """The plain text a person would read for a content block."""
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ResourceLinkBlock):
        return f"[{block.name}]({block.uri})"
    if isinstance(block, ResourceBlock):
        return block.resource.text if block.resource.text is not None else f"[resource {block.resource.uri}]"
    return f"[{block.type}]"


# --------------------------------------------------------------------------- request bodies


@attrs.frozen(kw_only=True)
class CreateSessionBody:
    cwd: str | None = bounded(MAX_PATH_CHARS, default=None)
    sessionId: str | None = None
    # This session's system prompt: replace the base, and/or add to it (actors.session.system_prompt).
    systemPrompt: str | None = bounded(MAX_SYSTEM_PROMPT_CHARS, default=None)
    appendSystemPrompt: str | None = bounded(MAX_SYSTEM_PROMPT_CHARS, default=None)
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class PromptBody:
    prompt: list[ContentBlock]
    meta: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "\n".join(block_text(b) for b in self.prompt)


@attrs.frozen(kw_only=True)
class MidTurnMessageBody:
    message: str = bounded(MAX_TEXT_CHARS)
    messageId: str | None = bounded(MAX_ID_CHARS, default=None)


@attrs.frozen(kw_only=True)
class LoadBody:
    cwd: str | None = bounded(MAX_PATH_CHARS, default=None)
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class SelectedOutcome:
    outcome: Literal["selected"]
    optionId: str = bounded(MAX_ID_CHARS)


@attrs.frozen(kw_only=True)
class CancelledOutcome:
    outcome: Literal["cancelled"]


@attrs.frozen(kw_only=True)
class PermissionVoteBody:
    outcome: SelectedOutcome | CancelledOutcome


@attrs.frozen(kw_only=True)
class RewindBody:
    turn: int


@attrs.frozen(kw_only=True)
class ForkBody:
    sessionId: str | None = None


@attrs.frozen(kw_only=True)
class CwdBody:
    cwd: str = bounded(MAX_PATH_CHARS)


@attrs.frozen(kw_only=True)
class ModelBody:
    model: str = bounded(MAX_MODEL_CHARS)


@attrs.frozen(kw_only=True)
class ApprovalModeBody:
    mode: Literal["default", "auto-edit", "yolo", "plan"]


# --------------------------------------------------------------------------- the converter


def _strict(kind: type) -> Any:
    names = {int: "an integer", str: "a string", bool: "a boolean", float: "a number"}

    def hook(value: Any, _: Any) -> Any:
        ok = type(value) is kind or (kind is float and type(value) is int)
        if not ok:
            raise ValueError(f"expected {names[kind]}")
        return value

    return hook


def _tagged(conv: cattrs.Converter, options: dict[str, type], what: str, field: str) -> Any:
    """A union told apart by one tag field, with a clear error for a bad tag."""

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected a {what} object")
        tag = value.get(field)
        if tag not in options:
            raise ValueError(f"unknown {what} {field} {excerpt(tag)}; expected one of {sorted(options)}")
        return conv.structure(value, options[tag])

    return hook


def _strict_list(type_: Any, conv: cattrs.Converter) -> Any:
    inner = list_structure_factory(type_, conv)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError("expected a JSON array")
        return inner(value, _)

    return hook


def _bounded_str(name: str, limit: int, nullable: bool) -> Any:
    """The structure hook of a :func:`bounded` field (strict like ``_strict(str)``, plus the limit)."""

    def hook(value: Any, _: Any) -> Any:
        if value is None and nullable:
            return None
        if type(value) is not str:
            raise ValueError("expected a string")
        if len(value) > limit:
            raise TooLong(f"{name} is longer than {limit:,} characters ({len(value):,} given)")
        return value

    return hook


def _overrides(cls: type) -> dict[str, Any]:
    """cattrs overrides of ``cls``: ``_meta`` on the wire for ``meta``, and the limits of bounded fields."""
    out: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name == "meta":
            out["meta"] = override(rename="_meta")
        elif _MAX_CHARS in field.metadata:
            out[field.name] = override(struct_hook=_bounded_str(field.name, field.metadata[_MAX_CHARS],
                                                                field.default is None))
    return out


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests arrays and objects (a scalar is 0), counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _dict_hook(value: Any, _: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    if json_depth(value) > MAX_JSON_DEPTH:
        # Free-form objects (_meta, annotations) are journalled and published as they came; orjson writes
        # at most 254 levels, and a deeper prompt _meta crashed the session's FIFO at its journal write.
        raise TooLong(f"nests deeper than {MAX_JSON_DEPTH} levels", "value_too_deep")
    return value


def _make_converter() -> cattrs.Converter:
    conv = make_converter(forbid_extra_keys=True)
    for kind in (int, str, bool, float):
        conv.register_structure_hook(kind, _strict(kind))
    conv.register_structure_hook_func(lambda t: t == dict[str, Any], _dict_hook)
    conv.register_structure_hook_func(lambda t: t == ContentBlock, _tagged(conv, _BLOCKS, "content block", "type"))
    outcomes = SelectedOutcome | CancelledOutcome
    conv.register_structure_hook_func(
        lambda t: t == outcomes,
        _tagged(conv, {"selected": SelectedOutcome, "cancelled": CancelledOutcome}, "permission", "outcome"),
    )
    conv.register_structure_hook_factory(lambda t: typing.get_origin(t) is list, _strict_list)
    for cls in (
        TextBlock, ImageBlock, AudioBlock, ResourceLinkBlock, EmbeddedResource, ResourceBlock,  # inner classes first
        CreateSessionBody, PromptBody, LoadBody,
    ):
        # `_meta` on the wire, `meta` in Python; and the limits of bounded fields.
        conv.register_structure_hook(
            cls, make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **_overrides(cls))
        )
        conv.register_unstructure_hook(
            cls, cattrs.gen.make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True, meta=override(rename="_meta"))
        )
    for cls in (MidTurnMessageBody, SelectedOutcome, CwdBody, ModelBody):  # bounded fields, no `_meta`
        conv.register_structure_hook(
            cls, make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **_overrides(cls))
        )
    return conv


converter = _make_converter()


def _format(exc: BaseException, type_: Any) -> str:
    if typing.get_origin(type_) is Literal:
        return f"must be one of {list(typing.get_args(type_))}"
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        first, *more = sorted(exc.extra_fields)
        return f"unknown field {excerpt(first)}" + (f" (and {len(more)} more)" if more else "")
    if isinstance(exc, ValueError) and not isinstance(exc, cattrs.BaseValidationError):
        return shorten(str(exc))
    return shorten(cattrs.v.format_exception(exc, type_))


def _member(path: str, key: str) -> str:
    """``path`` extended by the object member ``key``: ``$.a.key``, or ``$.a["odd key"]``."""
    if key.isascii() and key.isidentifier():
        return f"{path}.{shorten(key, EXCERPT_CHARS)}"
    return f"{path}[{shorten(orjson.dumps(key).decode(), EXCERPT_CHARS)}]"


def structure(value: Any, cls: type[T]) -> T:
    """Structure already-parsed JSON into ``cls``, raising :class:`WireError`.

    The path names the offending field itself, an unknown one included
    (``$.prompt[0].bogus``).
    """
    if not isinstance(value, dict):
        raise WireError(f"expected a JSON object, got {type(value).__name__}")
    try:
        return converter.structure(value, cls)
    except cattrs.BaseValidationError as exc:
        leaves: list[BaseException] = []  # transform_error formats each leaf once, in output order

        def format_leaf(leaf: BaseException, type_: Any) -> str:
            leaves.append(leaf)
            return _format(leaf, type_)

        first = cattrs.transform_error(exc, path="$", format_exception=format_leaf)[0]
        message, _, path = first.rpartition(" @ ")
        path = path.replace(".meta", "._meta")  # the Python name of the `_meta` fields
        if leaves and isinstance(leaves[0], cattrs.ForbiddenExtraKeysError):
            path = _member(path, min(leaves[0].extra_fields))
        code = leaves[0].code if leaves and isinstance(leaves[0], TooLong) else "invalid_request"
        raise WireError(message, path, code) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(_format(exc, cls)) from None


def decode(body: bytes, cls: type[T]) -> T:
    """Parse a JSON body and structure it into ``cls``, raising :class:`WireError`."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"invalid JSON: {exc}", "$", "invalid_json") from None
    return structure(value, cls)


def unstructure(value: Any) -> Any:
    return converter.unstructure(value)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)
