"""Trellis: a Trio structured-concurrency actor runtime hosting LLM agent sessions.

Embed it in a Trio program::

    async with actors.open_daemon() as daemon:
        session, _ = await daemon.create_session()
        admitted = await session.prompt("Plan a picnic")
        async with session.subscribe(last_event_id=admitted.last_event_id) as events:
            async for event in events:
                if event.type == "turn_complete":
                    break

The model is the one the settings name (:func:`provider_from_settings`; the demo model when they name
none), unless ``open_daemon(model=...)`` gives one. Everything not re-exported here is private.
"""

from ._actor import ActorGone, MailboxFull
from .daemon import (Daemon, DeletionUnavailable, InvalidCwd, InvalidSessionId, NotStartedHere, SessionStarting, TooManySessions,
                     UnknownSession, open_daemon)
from .events import EventBus, Subscription, TooManySubscribers
from .ids import CountingIds, IdSource
from .process import Sandbox, SandboxUnavailable
from .model import ModelError, ScriptedModel, ScriptError, load_script, provider_from_settings
from .session.fifo import Admitted, QueueFull
from .session.handle import SessionHandle
from .session.tools import Tool, ToolContext, ToolRegistry, ToolResult
from .settings import Limits, Settings, SettingsError
from .settings_file import load_settings
from .wire import Event, WireError

__all__ = [
    "ActorGone", "Admitted", "CountingIds", "Daemon", "DeletionUnavailable", "Event", "EventBus", "IdSource", "InvalidCwd", "InvalidSessionId",
    "Limits", "MailboxFull", "ModelError", "QueueFull", "Sandbox", "SandboxUnavailable", "ScriptError", "ScriptedModel", "SessionHandle",
    "NotStartedHere", "SessionStarting", "Settings", "SettingsError", "Subscription", "Tool", "ToolContext", "ToolRegistry", "ToolResult",
    "TooManySessions", "TooManySubscribers", "UnknownSession", "WireError", "load_script", "load_settings",
    "open_daemon", "provider_from_settings",
]
