"""What the prompt queue (:mod:`.prompt_queue`, in the FIFO actor :mod:`.fifo`) keeps of each prompt: the pending
entry, its turn record, waiting input."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .. import wire
from .usage import UsageLedger

TurnState = Literal["queued", "running", "completed", "error", "cancelled"]


@attrs.define
class PendingPrompt:
    prompt_id: str
    body: wire.PromptBody
    text: str
    queued_at: int
    client_id: str | None = None
    state: Literal["queued", "running"] = "queued"
    started_at: int | None = None
    aborted: bool = False
    waited: bool = False  # it was admitted behind other work, so it gets pending_prompt_* events
    promoted: bool = False  # mid-turn input run as a prompt of its own (its id is the message's)

    @property
    def meta(self) -> dict[str, Any]:
        return self.body.meta or {}

    @property
    def is_trusted_retry(self) -> bool:
        """A trusted retry/continue (``_meta.retry`` or ``_meta.continueLastTurn``)."""
        m = self.meta
        return m.get("retry") is True or m.get("continueLastTurn") is True

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"promptId": self.prompt_id, "state": self.state, "queuedAt": self.queued_at, "text": self.text}
        if self.started_at is not None:
            out["startedAt"] = self.started_at
        if self.client_id is not None:
            out["originatorClientId"] = self.client_id
        return out


@attrs.define
class TurnRecord:
    prompt_id: str
    state: TurnState
    prompt_text: str
    queued_at: int
    started_at: int | None = None
    ended_at: int | None = None
    stop_reason: str | None = None
    error: str | None = None
    error_code: str | None = None
    usage: UsageLedger | None = None  # the prompt's model calls so far (see actors.session.usage)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"promptId": self.prompt_id, "state": self.state, "promptText": self.prompt_text,
                               "queuedAt": self.queued_at}
        usage = self.usage.summary() if self.usage is not None else None
        for key, value in (("startedAt", self.started_at), ("endedAt", self.ended_at),
                           ("stopReason", self.stop_reason), ("error", self.error), ("errorCode", self.error_code),
                           ("usage", usage)):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> TurnRecord:
        """A turn record as the journal replayed it."""
        return cls(d["promptId"], d.get("state", "queued"), d.get("promptText", ""), d.get("queuedAt") or 0,
                   d.get("startedAt"), d.get("endedAt"), d.get("stopReason"), d.get("error"), d.get("errorCode"),
                   UsageLedger.from_wire(d["usage"]) if isinstance(d.get("usage"), dict) else None)


@attrs.frozen
class MidTurnItem:
    message_id: str
    text: str
    client_id: str | None = None  # the X-Qwen-Client-Id it was sent with (its events' originatorClientId)

    def to_wire(self) -> dict[str, Any]:
        """As a turn takes it (the drain answer, ``mid_turn_message_injected``)."""
        return {"messageId": self.message_id, "displayText": self.text, "content": [{"type": "text", "text": self.text}]}

    def waiting_wire(self) -> dict[str, Any]:
        """As ``GET /session/:id/mid-turn-messages`` lists it while it waits (qwen's form)."""
        return {"messageId": self.message_id, "text": self.text}

    def record(self) -> dict[str, Any]:
        """The journal's ``mid_turn`` record (:mod:`actors.storage.journal`): its sender's client id with it, so
        that after a restart its events still name the client that sent it."""
        out: dict[str, Any] = {"op": "mid_turn", "messageId": self.message_id, "text": self.text}
        if self.client_id is not None:
            out["clientId"] = self.client_id
        return out


def admitted_record(entry: PendingPrompt) -> dict[str, Any]:
    """The journal's ``admitted`` record of ``entry`` (:mod:`actors.storage.journal`)."""
    return {"op": "admitted", "promptId": entry.prompt_id, "body": wire.unstructure(entry.body), "text": entry.text,
            "queuedAt": entry.queued_at, "clientId": entry.client_id, "waited": entry.waited}
