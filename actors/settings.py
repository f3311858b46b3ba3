"""Daemon settings: what a daemon runs with, its defaults and limits.

They come from a JSON settings file (:mod:`actors.settings_file`: its form, reading it, its schema) and
the command line's flags. A value that cannot be used is a :class:`SettingsError` naming the file and the
JSON path of the value (``settings.json: limits.maxSessions: must be a positive integer, got 0``).
"""

from __future__ import annotations

import os
import typing
from typing import Any, Literal

import attrs

from . import checked
from .checked import CheckError, PositiveInt, PositiveNumber
from .permission_rules import RuleLists, RuleSet
from .process.sandbox import SandboxSetting


class SettingsError(CheckError):
    """A settings file or value that cannot be used: ``source`` is the file, ``path`` the JSON path of the
    bad value (both empty when the error is about neither)."""


ApprovalMode = Literal["default", "auto-edit", "yolo", "plan"]
APPROVAL_MODES: tuple[str, ...] = typing.get_args(ApprovalMode)
# What cluster.allowUnauthenticated may name (actors.cluster.exposure), here so a single daemon need not import
# the cluster package to read its settings.
ClusterBackend = Literal["redis", "postgresql"]
CLUSTER_BACKENDS: tuple[str, ...] = typing.get_args(ClusterBackend)


@checked.form("Bounds. A value that is not an object is refused. Unknown keys inside are ignored with a warning.")
@attrs.frozen(kw_only=True)
class Limits:
    max_sessions: PositiveInt = checked.field(256, "Live sessions per daemon (--max-sessions).")
    max_pending_prompts: PositiveInt = checked.field(
        32, "Queued plus running prompts per session; one more is 503 prompt_queue_full (--max-pending-prompts).")
    max_mid_turn_messages: PositiveInt = checked.field(
        32, "Mid-turn messages waiting per session; one more is answered accepted: false, reason queue_full.")
    event_ring_size: PositiveInt = checked.field(8000, "Events kept per session for replay (--event-ring-size).")
    subscriber_queue: PositiveInt = checked.field(
        256, "Frames an event stream may have queued before it is evicted (default of ?maxQueued=).")
    subscriber_queue_bytes: PositiveInt = checked.field(
        2 * 1024 * 1024, "Bytes an event stream may have queued before it is evicted.")
    max_subscribers: PositiveInt = checked.field(
        128, "Event streams open at once on one session; one more is answered 503 too_many_subscribers.")
    replay_bytes: PositiveInt = checked.field(
        4 * 1024 * 1024, "Bytes of the compacted replay of earlier turns kept per session.")
    mailbox_size: int = checked.field(64, internal=True)  # not a setting of the file
    client_grace_seconds: PositiveNumber = checked.field(
        10.0, "How long pending permission requests outlive the session's last subscriber before they are "
              "cancelled.")
    shutdown_seconds: PositiveNumber = checked.field(10.0, "How long a graceful shutdown may take before it is forced.")
    # more get 503 (transport.connections)
    max_connections: PositiveInt = checked.field(
        256, "Open HTTP connections, idle keep-alive ones and event streams included (--max-connections).")
    # as node's http server does
    keep_alive_seconds: PositiveNumber = checked.field(
        5.0, "How long an idle keep-alive HTTP connection stays open; one with a request or an event stream in "
             "flight is never closed for being idle.")


@attrs.frozen(kw_only=True)
class Settings:
    """Everything a daemon reads at start. ``todo_stop_guard`` is read at start only."""

    todo_stop_guard: bool = False
    followup_suggestions: bool = False
    disable_all_hooks: bool = False
    safe_mode: bool = False
    bare: bool = False
    approval_mode: str = "default"
    # allow/ask/deny rules in Claude Code's form (actors.permission_rules), checked when the file is read
    permissions: RuleLists = RuleLists()
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
    # form {"mode", "env", "writable", "network", "maxProcesses"} adds variables to their environment
    # (sandbox.env), directories they may write (sandbox.writable), takes their network away (sandbox.network)
    # or changes how many processes a session's commands may have (sandbox.maxProcesses; actors.process).
    sandbox: str | SandboxSetting = "auto"
    # The model's system prompt (actors.session.system_prompt): None is the built-in default, "" sends none;
    # append_system_prompt is added after it.
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    # The built-in file and fetch tools (actors.tools): web_fetch is offered only when enabled, and connects to
    # loopback and private addresses only when allowed; the file tools stay under a session's cwd unless paths
    # outside it are allowed.
    web_fetch: bool = False
    web_fetch_private_addresses: bool = False
    paths_outside_cwd: bool = False
    # Cluster mode (actors.cluster, docs/cluster.md); the flags --store, --events, ... win over these.
    cluster_store: str | None = None  # cluster.store: postgresql://…
    cluster_events: str | None = None  # cluster.events: redis://…
    cluster_node_id: str | None = None
    cluster_advertise_url: str | None = None
    cluster_lease_seconds: float | None = None
    # cluster.allowUnauthenticated: backends a node may use although they answer without credentials
    cluster_allow_unauthenticated: tuple[str, ...] = ()
    # Checkpoints of a session's cwd at each user turn (actors.checkpoints, docs/how-to/checkpoints.md).
    checkpoints_enabled: bool = True
    checkpoint_max_file_bytes: int = 8 * 1024 * 1024
    checkpoint_max_session_bytes: int = 1024 * 1024 * 1024
    # Traces and metrics (actors.telemetry): spans may carry prompts, model text and tool arguments only when set.
    telemetry_include_content: bool = False
    path: str | None = None  # the settings file read, hidden from sandboxed commands (it may hold model.apiKey)
    warnings: tuple[str, ...] = ()

    @property
    def permission_rules(self) -> RuleSet:
        """The rules of ``permissions``, read; ``/path`` patterns start at the settings file's directory."""
        return RuleSet.of(self.permissions, os.path.dirname(self.path) if self.path else None)

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
