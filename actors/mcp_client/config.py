"""Which MCP servers a session uses: the settings key ``mcpServers`` and ACP's ``mcpServers`` param.

Settings take the format Claude Code, qwen-code and gemini-cli share,
``{"mcpServers": {"<name>": {...}}}``, one entry per server:

- stdio: ``command`` (and ``args``, ``env``, ``cwd``, and Trellis's own
  ``sandbox``: ``false`` runs it outside the sandbox, see :mod:`.server`);
- Streamable HTTP: ``httpUrl`` (qwen-code, gemini-cli), or ``url`` with
  ``"type": "http"`` (Claude Code); ``headers`` for both;
- SSE: ``url`` with ``"type": "sse"``;
- a bare ``url`` without ``type`` — SSE for qwen-code and gemini-cli,
  Streamable HTTP for other clients — is tried as Streamable HTTP first,
  then as SSE if that does not connect;
- common members: ``timeout`` (a call's timeout, in milliseconds, as in
  qwen-code; default 10 minutes), ``discoveryTimeoutMs`` (connecting and
  listing the tools; default 30 s for stdio, 10 s for a URL), ``trust``
  (its calls never ask for permission), ``includeTools`` / ``excludeTools``
  (tool names), ``disabled`` (skip it), ``description`` (ignored).

A shape that fits none of those (no ``command`` or URL, two of them, a
websocket ``tcp`` server, a member of the wrong type) is a
:class:`McpConfigError` naming the member (``mcpServers.fs.args``); a member
we do not know (``oauth``, say) is a warning, and ignored.

ACP's format (``session/new``, ``session/load``) is a list:
``{name, command, args, env: [{name, value}]}`` for stdio and
``{type: "http" | "sse", name, url, headers: [{name, value}]}``; its errors
name the JSON path (``$.mcpServers[0].command``).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .. import checked
from ..checked import CheckError, HttpUrl, Invalid, NonEmpty

DEFAULT_CALL_TIMEOUT = 600.0  # seconds (qwen-code's default: 10 minutes)
STDIO_START_TIMEOUT = 30.0  # seconds to start, initialize and list the tools of a stdio server
REMOTE_START_TIMEOUT = 10.0  # ... of a server at a URL
TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "sse": "sse"}

_STDIO_MEMBERS = {"command", "args", "env", "cwd", "sandbox"}
_REMOTE_MEMBERS = {"url", "httpUrl", "headers"}


class McpConfigError(CheckError):
    """An MCP server configuration that cannot be used: ``path`` names the member, ``detail`` says why."""


@attrs.frozen(kw_only=True)
class ServerConfig:
    """One MCP server of a session. ``transport`` is ``"stdio"``, ``"http"`` or ``"sse"``."""

    name: str
    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None  # relative to the session's cwd; None: the session's cwd
    sandbox: bool = True  # False: a stdio server the settings run outside the sandbox (never a client's)
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    sse_fallback: bool = False  # a bare `url`: Streamable HTTP first, SSE if that does not connect
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    start_timeout: float | None = None  # None: by transport (STDIO_START_TIMEOUT, REMOTE_START_TIMEOUT)
    trust: bool = False
    include_tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] = ()
    source: str = "settings"  # or "acp": where the session got it

    @property
    def connect_timeout(self) -> float:
        if self.start_timeout is not None:
            return self.start_timeout
        return STDIO_START_TIMEOUT if self.transport == "stdio" else REMOTE_START_TIMEOUT

    def offers(self, tool: str) -> bool:
        """Whether the tool named ``tool`` is kept (``includeTools``, ``excludeTools``)."""
        if self.include_tools is not None and tool not in self.include_tools:
            return False
        return tool not in self.exclude_tools


def merge_servers(base: tuple[ServerConfig, ...], extra: tuple[ServerConfig, ...]) -> list[ServerConfig]:
    """``base`` (the settings') with ``extra`` (a client's) added; a client's server replaces one of its name."""
    names = {server.name for server in extra}
    return [*(server for server in base if server.name not in names), *extra]


# ----------------------------------------------------------------- the settings key

Milliseconds = checked.constrained("Milliseconds", float, "a positive number of milliseconds", lambda v: v > 0,
                                   schema={"exclusiveMinimum": 0})
ServerName = checked.constrained("ServerName", str, "a non-empty name", lambda v: bool(v.strip()),
                                 schema={"pattern": r"\S"})


@checked.form(
    "One MCP server: exactly one of command, httpUrl and url. Other members are ignored with a warning.",
    schema={"oneOf": [{"required": ["command"]}, {"required": ["httpUrl"]}, {"required": ["url"]}],
            "allOf": [{"if": {"required": ["type"], "properties": {"type": {"const": "stdio"}}},
                       "then": {"required": ["command"]}},
                      {"if": {"required": ["type"], "properties": {"type": {"enum": ["http", "streamable-http", "sse"]}}},
                       "then": {"not": {"required": ["command"]}}}]})
@attrs.frozen(kw_only=True)
class SettingsServer:
    """One entry of the settings key ``mcpServers``, as written (:meth:`server` is what a session starts)."""

    type: Literal["stdio", "http", "streamable-http", "sse"] | None = checked.field(
        None, "The transport; without it, command means stdio, httpUrl Streamable HTTP, and url Streamable HTTP "
              "with SSE as the fallback.")
    command: NonEmpty | None = checked.field(
        None, "The program of a stdio server, started in the session's cwd, in the sandbox, with a minimal "
              "environment plus env.")
    args: tuple[str, ...] = checked.field((), "Its arguments.")
    env: dict[str, str] = checked.field(
        factory=dict, doc="Variables given to the stdio server; $VAR and ${VAR} are expanded from the daemon's "
                          "environment (never its token or API key).")
    cwd: NonEmpty | None = checked.field(
        None, "The stdio server's working directory, relative to the session's cwd (default: the session's cwd).")
    sandbox: bool = checked.field(
        True, "false runs this stdio server outside the sandbox (as hooks run): with the real home, writable "
              "wherever the daemon's user can write. Only the settings can say so; a client's servers (ACP "
              "session/new) always run in the sandbox when there is one.")
    http_url: HttpUrl | None = checked.field(None, "A Streamable HTTP server's URL.")
    url: HttpUrl | None = checked.field(
        None, "A server's URL: Streamable HTTP with type \"http\", SSE with type \"sse\", both (HTTP first) "
              "without a type.")
    headers: dict[str, str] = checked.field(
        factory=dict, doc="HTTP headers sent to a URL server; $VAR and ${VAR} are expanded as in env.")
    timeout: Milliseconds | None = checked.field(
        None, "Milliseconds a tool call may take before it is cancelled and fails (default 600000).")
    discovery_timeout_ms: Milliseconds | None = checked.field(
        None, "Milliseconds to connect, initialize and list the tools (default 30000 for stdio, 10000 for a URL).")
    trust: bool = checked.field(
        False, "Its tool calls never ask for permission (the plan mode still refuses them).")
    include_tools: tuple[str, ...] | None = checked.field(None, "Only these of its tools are offered.")
    exclude_tools: tuple[str, ...] = checked.field((), "These of its tools are not offered.")
    disabled: bool = checked.field(False, "Not started.")
    description: str | None = checked.field(None, "For people; ignored.")
    tcp: Any = checked.field(
        None, "gemini-cli's websocket transport, which is not supported: an entry with nothing else is refused.")

    def __attrs_post_init__(self) -> None:
        given = self.given
        if self.tcp is not None and not given:
            raise Invalid("uses the websocket transport (tcp), which is not supported; give command, httpUrl or url")
        if len(given) > 1:
            raise Invalid(f"must give one of command, httpUrl or url, not {' and '.join(given)}")
        if not given:
            raise Invalid("needs command (a stdio server), httpUrl (Streamable HTTP) or url")
        if self.type is not None and (TYPES[self.type] == "stdio") != (given[0] == "command"):
            raise Invalid(f"has type {checked.shown(self.type)} but gives {given[0]}")

    @property
    def given(self) -> list[str]:
        """Which of ``command``, ``httpUrl`` and ``url`` it gives."""
        return [key for key, value in (("command", self.command), ("httpUrl", self.http_url), ("url", self.url))
                if value is not None]

    @property
    def transport(self) -> str:
        if self.type is not None:
            return TYPES[self.type]
        return "stdio" if self.command is not None else "http"

    def server(self, name: str) -> ServerConfig:
        """The server this entry describes."""
        fields: dict[str, Any] = {"name": name, "transport": self.transport, "trust": self.trust,
                                  "include_tools": self.include_tools, "exclude_tools": self.exclude_tools}
        if self.transport == "stdio":
            fields.update(command=self.command, args=self.args, env=tuple(self.env.items()), cwd=self.cwd,
                          sandbox=self.sandbox)
        else:
            fields.update(url=self.http_url or self.url, headers=tuple(self.headers.items()),
                          sse_fallback=self.type is None and self.url is not None)
        if self.timeout is not None:
            fields["call_timeout"] = self.timeout / 1000
        if self.discovery_timeout_ms is not None:
            fields["start_timeout"] = self.discovery_timeout_ms / 1000
        return ServerConfig(**fields)

    def ignored(self, where: str, written: dict[str, Any]) -> list[str]:
        """Warnings about the members of the other transport (``args`` on a URL server), and ``tcp``."""
        stdio = self.transport == "stdio"
        other, label = (_REMOTE_MEMBERS, "stdio") if stdio else (_STDIO_MEMBERS, "URL")
        out = [f"{where}.{key} ignored (a {label} server has none)" for key in written if key in other]
        if "tcp" in written:
            out.append(f"{where}.tcp ignored (the websocket transport is not supported)")
        return out


SettingsServers = dict[ServerName, SettingsServer]


def parse_settings(value: Any, path: str = "mcpServers") -> tuple[tuple[ServerConfig, ...], list[str]]:
    """The servers of the settings key ``mcpServers`` and the warnings about it (members it ignores).

    Raises :class:`McpConfigError` for a shape that cannot be used, naming the JSON path of the bad value.
    """
    entries: dict[str, SettingsServer] = checked.structure(value, SettingsServers, path, McpConfigError)
    warnings = [f"unknown key {p!r} ignored" for p in checked.unknown_keys(value, SettingsServers, path)]
    warnings += ignored_members(entries, value, path)
    return tuple(entry.server(name) for name, entry in entries.items() if not entry.disabled), warnings


def ignored_members(entries: dict[str, SettingsServer], written: dict[str, Any], path: str = "mcpServers") -> list[str]:
    """Warnings about members that a server's transport has no use for (its unknown keys aside)."""
    return [w for name, entry in entries.items() for w in entry.ignored(checked.member(path, name), written[name])]


# ----------------------------------------------------------------- ACP's session/new and session/load


@checked.form(unknown=checked.IGNORE)
@attrs.frozen(kw_only=True)
class AcpPair:
    """ACP's ``{name, value}`` (``env``, ``headers``)."""

    name: NonEmpty
    value: str


@checked.form(unknown=checked.IGNORE)
@attrs.frozen(kw_only=True)
class AcpServer:
    """One server of ACP's ``mcpServers``."""

    name: NonEmpty
    type: Literal["stdio", "http", "sse"] = "stdio"
    command: NonEmpty | None = None
    args: tuple[str, ...] | None = checked.field(None, nullable=True)
    env: tuple[AcpPair, ...] | None = checked.field(None, nullable=True)
    url: HttpUrl | None = None
    headers: tuple[AcpPair, ...] | None = checked.field(None, nullable=True)

    def __attrs_post_init__(self) -> None:
        if self.type == "stdio" and self.command is None:
            raise Invalid(f"must be {checked.wanted(NonEmpty)}", None, at="command")
        if self.type != "stdio" and self.url is None:
            raise Invalid(f"must be {checked.wanted(HttpUrl)}", None, at="url")

    def server(self) -> ServerConfig:
        if self.type == "stdio":
            return ServerConfig(name=self.name, transport="stdio", source="acp", command=self.command,
                                args=self.args or (), env=tuple((p.name, p.value) for p in self.env or ()))
        return ServerConfig(name=self.name, transport=self.type, source="acp", url=self.url,
                            headers=tuple((p.name, p.value) for p in self.headers or ()))


def parse_acp(value: Any, path: str = "$.mcpServers") -> tuple[ServerConfig, ...]:
    """ACP's ``mcpServers`` (a list, ``None`` for none); :class:`McpConfigError` names the JSON path."""
    if value is None:
        return ()
    entries: tuple[AcpServer, ...] = checked.structure(value, tuple[AcpServer, ...], path, McpConfigError)
    names: set[str] = set()
    for i, entry in enumerate(entries):
        if entry.name in names:
            raise McpConfigError(f"{checked.shown(entry.name)} is given twice", path=f"{path}[{i}].name")
        names.add(entry.name)
    return tuple(entry.server() for entry in entries)


__all__ = ["DEFAULT_CALL_TIMEOUT", "McpConfigError", "ServerConfig", "SettingsServer", "SettingsServers",
           "merge_servers", "parse_acp", "parse_settings"]
