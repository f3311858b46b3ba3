"""How daemon events and settings read in ACP terms: stop reasons, turn errors, modes, permission options."""

from __future__ import annotations

from typing import Any

from actors.settings import APPROVAL_MODES

from .jsonrpc import INTERNAL_ERROR, RpcError

META_PREFIX = "trellis.dev/"  # our `_meta` keys are namespaced, as ACP asks

STOP_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})
# Model errors that are a refusal to answer, not a failure: ACP reports them as a stop reason.
REFUSAL_CODES = frozenset({"refusal", "content_filter"})

MODES = {
    "default": ("Default", "Ask before running commands"),
    "auto-edit": ("Auto edit", "Edit files without asking; ask before running commands"),
    "yolo": ("YOLO", "Run everything without asking"),
    "plan": ("Plan", "Plan only: tools that change anything are refused"),
}
assert set(MODES) == set(APPROVAL_MODES)

# Offered to ACP clients besides the session's own options when the session has none of this kind:
# choosing it rejects this call and, for the rest of the binding, every call of the same tool kind.
REJECT_ALWAYS_ID = "reject_always"


def prompt_result(stop_reason: str, prompt_id: str) -> dict[str, Any]:
    """The ``session/prompt`` answer for a ``turn_complete``.

    A stop reason ACP does not know (the runtime may grow new ones) reads as
    ``end_turn``; the original travels in ``_meta``.
    """
    meta: dict[str, Any] = {META_PREFIX + "promptId": prompt_id}
    if stop_reason not in STOP_REASONS:
        meta[META_PREFIX + "stopReason"] = stop_reason
        stop_reason = "end_turn"
    return {"stopReason": stop_reason, "_meta": meta}


def turn_error_outcome(data: dict[str, Any], prompt_id: str) -> dict[str, Any] | RpcError:
    """A ``turn_error``: a refusal is a stop reason, anything else a JSON-RPC error with its code and message."""
    code = str(data.get("code") or "internal_error")
    if code in REFUSAL_CODES:
        return {"stopReason": "refusal", "_meta": {META_PREFIX + "promptId": prompt_id,
                                                   META_PREFIX + "message": data.get("message")}}
    return RpcError(INTERNAL_ERROR, str(data.get("message") or "the turn failed"),
                    {"code": code, "promptId": prompt_id})


def session_modes(current: str) -> dict[str, Any]:
    """The ``modes`` of ``session/new`` and ``session/load``: the approval modes."""
    return {
        "currentModeId": current,
        "availableModes": [{"id": mode, "name": name, "description": description}
                           for mode, (name, description) in MODES.items()],
    }


def permission_options(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session's options, plus a ``reject_always`` when it offers none (ACP has all four kinds)."""
    out = [dict(o) for o in options]
    kinds = {o.get("kind") for o in out}
    if "reject_always" not in kinds and "reject_once" in kinds:
        out.append({"optionId": REJECT_ALWAYS_ID, "name": "Always reject in this session", "kind": "reject_always"})
    return out


def reject_option(options: list[dict[str, Any]]) -> str | None:
    """The session's own option that rejects once (what a ``reject_always`` votes)."""
    return next((o["optionId"] for o in options if o.get("kind") == "reject_once"), None)


def session_update(data: dict[str, Any]) -> dict[str, Any]:
    """A ``session_update`` event's data as ``session/update`` params. A daemon's discrete message (a notice, a
    guard line: ``_meta.qwenDiscreteMessage``) is set apart by blank lines: ACP clients join an agent
    message's chunks into one text, where it ran into the model's next sentence."""
    update = data.get("update")
    if not (isinstance(update, dict) and update.get("sessionUpdate") == "agent_message_chunk"
            and isinstance(update.get("_meta"), dict) and update["_meta"].get("qwenDiscreteMessage") is True):
        return data
    content = update.get("content")
    if not (isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str)):
        return data
    text = content["text"].strip("\n")
    return {**data, "update": {**update, "content": {**content, "text": f"\n\n{text}\n\n"}}}
