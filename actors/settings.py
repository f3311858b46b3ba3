"""Daemon settings: defaults, a JSON settings file, and limits.

A settings file may carry keys we do not use (people share one file between
tools): those are reported as warnings, never fatal. A key we know with a value
of the wrong type is a :class:`SettingsError` naming the key.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from pathlib import Path
from typing import Any

import attrs

from .process.sandbox import SandboxSetting

class SettingsError(ValueError):
    """A settings file or value that cannot be used."""


@attrs.frozen(kw_only=True)
class Limits:
    max_sessions: int = 256
    max_pending_prompts: int = 32  # queued + running, per session
    max_mid_turn_messages: int = 32
    event_ring_size: int = 8000
    subscriber_queue: int = 256
    subscriber_queue_bytes: int = 2 * 1024 * 1024  # a subscriber's live queue, in bytes too (as qwen serve)
    replay_bytes: int = 4 * 1024 * 1024  # the compacted replay of earlier turns, per session
    mailbox_size: int = 64
    client_grace_seconds: float = 10.0  # how long pending permissions outlive the last subscriber
    shutdown_seconds: float = 10.0  # how long a graceful shutdown may take before it is forced
    max_connections: int = 256  # open HTTP connections (idle keep-alive ones too); more get 503 (transport.connections)
    keep_alive_seconds: float = 5.0  # an idle keep-alive connection is closed after this long (as node's http server)


@attrs.frozen(kw_only=True)
class Settings:
    """Everything a daemon reads at start. ``todo_stop_guard`` is read at start only."""

    todo_stop_guard: bool = False
    followup_suggestions: bool = False
    disable_all_hooks: bool = False
    safe_mode: bool = False
    bare: bool = False
    approval_mode: str = "default"
    limits: Limits = Limits()
    hooks: dict[str, Any] = attrs.field(factory=dict)
    stop_hook_block_cap: int = 8  # consecutive Stop-hook blocks before the hook is overridden
    max_tool_calls_per_turn: int = 128  # loop protection
    max_repeated_failures: int = 3  # the same failing call (name and arguments) this often in a row is a loop
    model: dict[str, Any] = attrs.field(factory=dict)
    subagents: dict[str, Any] = attrs.field(factory=dict)
    mcp_servers: dict[str, Any] = attrs.field(factory=dict)  # mcpServers, as written (actors.mcp_client.config)
    journal_fsync: str = "always"  # storage.fsync: "always" (before each 202) or "never" (see actors.storage.local)
    # For model-run commands: "auto", "bwrap" (required) or "off", or a SandboxSetting when the file's object
    # form {"mode", "env", "writable", "network"} adds variables to their environment (sandbox.env), directories
    # they may write (sandbox.writable) or takes their network away (sandbox.network; actors.process.sandbox).
    sandbox: str | SandboxSetting = "auto"
    # The model's system prompt (actors.session.system_prompt): None is the built-in default, "" sends none;
    # append_system_prompt is added after it.
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    # The built-in file and fetch tools (actors.tools): web_fetch is offered only when enabled; the file
    # tools stay under a session's cwd unless paths outside it are allowed.
    web_fetch: bool = False
    paths_outside_cwd: bool = False
    # Cluster mode (actors.cluster, docs/cluster.md); the flags --store, --events, ... win over these.
    cluster_store: str | None = None  # cluster.store: postgresql://…
    cluster_events: str | None = None  # cluster.events: redis://…
    cluster_node_id: str | None = None
    cluster_advertise_url: str | None = None
    cluster_lease_seconds: float | None = None
    path: str | None = None  # the settings file read, hidden from sandboxed commands (it may hold model.apiKey)
    warnings: tuple[str, ...] = ()

    @property
    def hook_config(self) -> Any:
        """The parsed ``hooks`` (none at all when ``disableAllHooks``)."""
        from .session.hooks import HooksConfig, parse_hooks

        return HooksConfig() if self.disable_all_hooks else parse_hooks(self.hooks)

    @property
    def mcp_server_configs(self) -> tuple[Any, ...]:
        """The ``mcpServers`` every session starts with (checked when the file was read)."""
        from .mcp_client.config import parse_settings

        return parse_settings(self.mcp_servers)[0] if self.mcp_servers else ()

    @property
    def guard_enabled(self) -> bool:
        """The guard is forced off in safe mode and bare mode (Plan is checked per session)."""
        return self.todo_stop_guard and not self.safe_mode and not self.bare


# dotted key -> (Settings/Limits field, expected type)
_KNOWN: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "experimental.todoStopGuard": ("todo_stop_guard", bool),
    "ui.enableFollowupSuggestions": ("followup_suggestions", bool),
    "disableAllHooks": ("disable_all_hooks", bool),
    "approvalMode": ("approval_mode", str),
    "sandbox": ("sandbox", (str, dict)),  # a mode, or {"mode", "env", "writable", "network"}
    "storage.fsync": ("journal_fsync", str),
    "hooks": ("hooks", dict),
    "stopHookBlockingCap": ("stop_hook_block_cap", int),
    "loopProtection.maxToolCallsPerTurn": ("max_tool_calls_per_turn", int),
    "loopProtection.maxRepeatedFailures": ("max_repeated_failures", int),
    "model": ("model", dict),
    "subagents": ("subagents", dict),
    "mcpServers": ("mcp_servers", dict),
    "systemPrompt": ("system_prompt", str),
    "appendSystemPrompt": ("append_system_prompt", str),
    "tools.enableWebFetch": ("web_fetch", bool),
    "tools.allowPathsOutsideCwd": ("paths_outside_cwd", bool),
    "cluster.store": ("cluster_store", str),
    "cluster.events": ("cluster_events", str),
    "cluster.nodeId": ("cluster_node_id", str),
    "cluster.advertiseUrl": ("cluster_advertise_url", str),
    "cluster.leaseSeconds": ("cluster_lease_seconds", float),
    "limits.maxSessions": ("limits.max_sessions", int),
    "limits.maxPendingPrompts": ("limits.max_pending_prompts", int),
    "limits.maxMidTurnMessages": ("limits.max_mid_turn_messages", int),
    "limits.eventRingSize": ("limits.event_ring_size", int),
    "limits.subscriberQueue": ("limits.subscriber_queue", int),
    "limits.subscriberQueueBytes": ("limits.subscriber_queue_bytes", int),
    "limits.replayBytes": ("limits.replay_bytes", int),
    "limits.clientGraceSeconds": ("limits.client_grace_seconds", float),
    "limits.shutdownSeconds": ("limits.shutdown_seconds", float),
    "limits.maxConnections": ("limits.max_connections", int),
    "limits.keepAliveSeconds": ("limits.keep_alive_seconds", float),
}
APPROVAL_MODES = ("default", "auto-edit", "yolo", "plan")


_JSON_TYPES = {str: "a string", bool: "true or false", int: "an integer", float: "a number", list: "an array",
               dict: "an object", type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


class _NotAGroup(ValueError):
    pass


def _walk(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if dotted in _KNOWN:
            out.append((dotted, value))
        elif any(k.startswith(dotted + ".") for k in _KNOWN):
            if not isinstance(value, dict):  # a group ("limits", "experimental", ...) that is not an object
                raise _NotAGroup(f"{dotted} must be an object, got {_json_type(value)}")
            out.extend(_walk(value, dotted + "."))
        else:
            out.append((dotted, value))
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def settings_from_dict(data: Any, *, source: str = "settings", base: Settings | None = None) -> Settings:
    """Apply a parsed settings document on top of ``base`` (defaults when omitted)."""
    if not isinstance(data, dict):
        raise SettingsError(f"{source}: expected a JSON object at the top level")
    values: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    warnings: list[str] = []
    try:
        walked = _walk(data)
    except _NotAGroup as exc:
        raise SettingsError(f"{source}: {exc}") from None
    for dotted, value in walked:
        if dotted not in _KNOWN:
            warnings.append(f"{source}: unknown key {dotted!r} ignored")
            continue
        field, kind = _KNOWN[dotted]
        if dotted == "sandbox":
            try:
                values[field] = SandboxSetting.parse(value)
            except ValueError as exc:
                raise SettingsError(f"{source}: {exc}") from None
            continue
        if kind is int and (type(value) is not int or value < 1):
            raise SettingsError(f"{source}: {dotted} must be a positive integer, got {value!r}")
        if kind is float and (type(value) not in (int, float) or value <= 0):
            raise SettingsError(f"{source}: {dotted} must be a positive number, got {value!r}")
        if kind not in (int, float) and not isinstance(value, kind):
            raise SettingsError(f"{source}: {dotted} must be {_JSON_TYPES[kind]}, got {_json_type(value)}")
        if dotted == "approvalMode" and value not in APPROVAL_MODES:
            raise SettingsError(f"{source}: approvalMode must be one of {list(APPROVAL_MODES)}, got {value!r}")
        if dotted == "storage.fsync" and value not in ("always", "never"):
            raise SettingsError(f"{source}: storage.fsync must be one of ['always', 'never'], got {value!r}")
        if field.startswith("limits."):
            limits[field.removeprefix("limits.")] = value
        else:
            values[field] = value
    if "hooks" in values:
        from .session.hooks import HookConfigError, parse_hooks, unknown_events

        try:
            parse_hooks(values["hooks"])
        except HookConfigError as exc:
            raise SettingsError(f"{source}: {exc}") from None
        warnings.extend(f"{source}: unknown hook event {e!r} ignored" for e in unknown_events(values["hooks"]))
    if "subagents" in values:
        from .subagents.registry import SubagentConfig
        from .subagents.runners import command_env

        try:
            SubagentConfig.from_settings(SimpleNamespace(subagents=values["subagents"]))
            command_env(values["subagents"])  # subagents.runners.command.env: names, or name -> value
        except ValueError as exc:
            raise SettingsError(f"{source}: {exc}") from None
    if "mcp_servers" in values:
        from .mcp_client.config import McpConfigError, parse_settings

        try:
            warnings.extend(f"{source}: {w}" for w in parse_settings(values["mcp_servers"])[1])
        except McpConfigError as exc:
            raise SettingsError(f"{source}: {exc}") from None
    base = base or Settings()
    if limits:
        values["limits"] = attrs.evolve(base.limits, **limits)
    return attrs.evolve(base, **values, warnings=base.warnings + tuple(warnings))


def load_settings(path: str | Path | None, **overrides: Any) -> Settings:
    """Read a settings file (if any), then apply keyword overrides (command-line flags)."""
    settings = Settings()
    if path is not None:
        source = str(path)
        try:
            data = json.loads(Path(path).read_text(), parse_constant=_refuse_constant)  # no NaN, Infinity
        except OSError as exc:
            raise SettingsError(f"{source}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise SettingsError(f"{source}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{source}: invalid JSON: {exc}") from None
        except ValueError as exc:  # NaN, Infinity
            raise SettingsError(f"{source}: invalid JSON: {exc}") from None
        settings = attrs.evolve(settings_from_dict(data, source=source), path=os.path.abspath(path))
    limit_overrides = {k: v for k, v in overrides.items() if k in attrs.fields_dict(Limits) and v is not None}
    plain = {k: v for k, v in overrides.items() if k not in limit_overrides and v is not None}
    if limit_overrides:
        plain["limits"] = attrs.evolve(settings.limits, **limit_overrides)
    if isinstance(plain.get("sandbox"), str) and isinstance(settings.sandbox, SandboxSetting):
        plain["sandbox"] = attrs.evolve(settings.sandbox, mode=plain["sandbox"])  # --sandbox: the mode, not env
    return attrs.evolve(settings, **plain)
