"""The guard's words: model-facing continuation prompts and its telemetry (never todo text)."""

from __future__ import annotations

from typing import Any

from .. import wire
from .state import MAX_ATTEMPTS, Continue, Exhausted

SOURCE = "todo_stop_guard"
PREFIX = "[Todo Stop Guard]"


def continuation_prompt(attempt: int, unfinished: int) -> str:
    """The user part sent with guard stream ``attempt`` (exactly the spec's wording)."""
    text = (
        f"{PREFIX} {unfinished} todo item(s) are still pending or in progress. Continue executing the current "
        "task now. Do not ask the user whether to continue. If progress requires user input, use the structured "
        "question or permission flow. If progress depends on external state, report the blocker explicitly."
    )
    if attempt >= MAX_ATTEMPTS:
        text += (" This is the final automatic continuation. Before ending, either complete/update the todos or "
                 "report the completed progress and the exact blocker.")
    return text


def is_continuation_prompt(text: str) -> bool:
    """Exactly a guard prompt (so rewind does not count it as a user turn)."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        head = continuation_prompt(attempt, 0).split(" 0 todo item(s)")
        if text.startswith(head[0] + " ") and text.endswith(head[1]):
            middle = text[len(head[0]) + 1: len(text) - len(head[1])]
            count = middle[: -len(" todo item(s)")] if middle.endswith(" todo item(s)") else ""
            if count == str(int(count)) if count.isascii() and count.isdigit() else False:
                return True
    return False


def _meta(attempt: int, unfinished: int) -> dict[str, Any]:
    return {"source": SOURCE, "qwenDiscreteMessage": True, "attempt": attempt, "maxAttempts": MAX_ATTEMPTS,
            "unfinishedCount": unfinished}


def continuation_update(decision: Continue) -> dict[str, Any]:
    text = (f"{PREFIX} Automatic continuation {decision.attempt}/{decision.max_attempts} started; "
            f"{decision.unfinished_count} todo item(s) remain unfinished.")
    return wire.text_update("agent_message_chunk", text, _meta(decision.attempt, decision.unfinished_count))


def exhaustion_update(decision: Exhausted) -> dict[str, Any]:
    text = (f"{PREFIX} Automatic continuation stopped after {decision.attempt} attempts; "
            f"{decision.unfinished_count} todo item(s) remain unfinished.")
    return wire.text_update("agent_message_chunk", text, _meta(decision.attempt, decision.unfinished_count))


def is_guard_update(update: dict[str, Any] | None) -> bool:
    meta = (update or {}).get("_meta") or {}
    return meta.get("source") == SOURCE and meta.get("qwenDiscreteMessage") is True
