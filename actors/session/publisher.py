"""What a session says to its clients: its events, on its bus, in the one wire form (:mod:`actors.wire`)."""

from __future__ import annotations

from typing import Any

from .. import wire
from ..events import EventBus
from ..telemetry import Telemetry


class Publisher:
    """Publishes one session's events; the turn, the stop path and the hooks say things through it."""

    def __init__(self, session_id: str, bus: EventBus, telemetry: Telemetry | None = None) -> None:
        self.session_id = session_id
        self.bus = bus
        # The daemon's metrics: its turns and tokens observed on the bus, the rest counted by direct calls.
        self.telemetry = telemetry or Telemetry.NONE
        if telemetry is not None:
            bus.observers.append(telemetry.observe)
            bus.on_evicted = telemetry.sse_evicted

    def event(self, kind: str, payload: dict[str, Any], prompt_id: str | None = None,
              originator: str | None = None) -> None:
        self.bus.publish(kind, payload, prompt_id, originator)

    def update(self, update: dict[str, Any], prompt_id: str | None = None, originator: str | None = None) -> None:
        """A ``session_update`` (ACP's ``session/update`` payload)."""
        self.bus.publish("session_update", wire.session_update(self.session_id, update), prompt_id, originator)

    def notice(self, text: str, prompt_id: str | None) -> None:
        """A discrete message from the daemon itself to the client (never merged with model text)."""
        self.update(wire.text_update("agent_message_chunk", text,
                                     {"source": "daemon", "qwenDiscreteMessage": True}), prompt_id)


__all__ = ["Publisher"]
