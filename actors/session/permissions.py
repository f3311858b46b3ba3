"""Permission requests: ask the client, wait for the first vote.

A request is published as ``permission_request`` and waits — without a
timeout — until a client votes (first responder wins; later votes are
refused), the client goes away, or the work that asked is cancelled. The last
two resolve it as *cancelled*: a disconnected client never implies approval.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal

import attrs
import trio

from .. import wire
from ..events import EventBus
from ..ids import IdSource

OptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


@attrs.frozen
class PermissionOption:
    option_id: str
    name: str
    kind: OptionKind

    def to_wire(self) -> dict[str, str]:
        return {"optionId": self.option_id, "name": self.name, "kind": self.kind}


# Not qwen's "proceed_always": qwen's Web Shell labels an option of that id "Allow All Edits" whatever its name
# says (qwen offers it on edits, to switch to auto-edit), so a shell command's session rule would read as that.
DEFAULT_OPTIONS = (
    PermissionOption("proceed_once", "Allow", "allow_once"),
    PermissionOption("proceed_always_session", "Always allow in this session", "allow_always"),
    PermissionOption("cancel", "Reject", "reject_once"),
    PermissionOption("reject_always", "Always reject in this session", "reject_always"),
)


@attrs.frozen
class Decision:
    """``selected`` with the chosen option, or ``cancelled``."""

    outcome: Literal["selected", "cancelled"]
    option: PermissionOption | None = None

    @property
    def allowed(self) -> bool:
        return self.option is not None and self.option.kind.startswith("allow")

    def to_wire(self) -> dict[str, Any]:
        if self.option is None:
            return {"outcome": "cancelled"}
        return {"outcome": "selected", "optionId": self.option.option_id}


CANCELLED = Decision("cancelled")


class UnknownOption(ValueError):
    """A vote for an option the request did not offer."""


@attrs.define
class _Pending:
    options: tuple[PermissionOption, ...]
    done: trio.Event = attrs.field(factory=trio.Event)
    decision: Decision = CANCELLED


ENDED_KEPT = 64  # resolved requests remembered, so a late vote is told how its request ended


class PermissionBroker:
    """The pending permission requests of one session, and how the last few resolved ones ended."""

    def __init__(self, session_id: str, bus: EventBus, ids: IdSource) -> None:
        self._session_id = session_id
        self._bus = bus
        self._ids = ids
        self._pending: dict[str, _Pending] = {}
        self._ended: OrderedDict[str, str] = OrderedDict()

    def ended(self, request_id: str) -> str | None:
        """How request ``request_id`` ended, when it is one of the last :data:`ENDED_KEPT` resolved."""
        return self._ended.get(request_id)

    @property
    def pending_ids(self) -> list[str]:
        return list(self._pending)

    async def request(self, tool_call: dict[str, Any], options: tuple[PermissionOption, ...] = DEFAULT_OPTIONS,
                      prompt_id: str | None = None) -> Decision:
        request_id = self._ids.new("perm")
        pending = _Pending(options)
        self._pending[request_id] = pending
        self._bus.publish("permission_request", wire.permission_request(
            self._session_id, request_id, tool_call, [o.to_wire() for o in options]), prompt_id)
        try:
            await pending.done.wait()
        finally:
            if request_id in self._pending:  # cancelled while waiting: resolve it as cancelled
                self._resolve(request_id, CANCELLED, "it was cancelled: the work that asked it ended")
        return pending.decision

    def vote(self, request_id: str, outcome: str, option_id: str | None = None) -> bool:
        """Record the first vote; ``False`` when the request is unknown or already resolved."""
        pending = self._pending.get(request_id)
        if pending is None:
            return False
        if outcome == "cancelled":
            self._resolve(request_id, CANCELLED, "it was cancelled by a vote")
            return True
        option = next((o for o in pending.options if o.option_id == option_id), None)
        if option is None:
            raise UnknownOption(f"option {option_id!r} was not offered; expected one of "
                                f"{[o.option_id for o in pending.options]}")
        self._resolve(request_id, Decision("selected", option))
        return True

    def cancel_all(self, why: str = "it was cancelled: the session closed") -> int:
        """Resolve every pending request as cancelled (the client went away, the session closes); ``why`` is
        what a late vote for one of them is told."""
        ids = list(self._pending)
        for request_id in ids:
            self._resolve(request_id, CANCELLED, why)
        return len(ids)

    def _resolve(self, request_id: str, decision: Decision, why: str | None = None) -> None:
        pending = self._pending.pop(request_id)
        pending.decision = decision
        pending.done.set()
        option = decision.option
        self._ended[request_id] = why or (f"it was answered ({option.option_id})" if option else "it was cancelled")
        while len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)
        self._bus.publish("permission_resolved",
                          wire.permission_resolved(self._session_id, request_id, decision.to_wire()))
