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

from typing import Any

import attrs

DEFAULT_CALL_TIMEOUT = 600.0  # seconds (qwen-code's default: 10 minutes)
STDIO_START_TIMEOUT = 30.0  # seconds to start, initialize and list the tools of a stdio server
REMOTE_START_TIMEOUT = 10.0  # ... of a server at a URL
TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "sse": "sse"}

_STDIO_MEMBERS = {"command", "args", "env", "cwd", "sandbox"}
_REMOTE_MEMBERS = {"url", "httpUrl", "headers"}
_COMMON_MEMBERS = {"type", "timeout", "discoveryTimeoutMs", "trust", "includeTools", "excludeTools", "disabled",
                   "description"}


class McpConfigError(ValueError):
    """An MCP server configuration that cannot be used: ``path`` names the member, ``detail`` says why."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path} {detail}")
        self.path = path
        self.detail = detail


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


# ----------------------------------------------------------------- checks shared by both formats

_JSON = {str: "a string", bool: "true or false", int: "a number", float: "a number", list: "an array",
         dict: "an object", type(None): "null"}


def _kind(value: Any) -> str:
    return _JSON.get(type(value), type(value).__name__)


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise McpConfigError(path, f"must be a non-empty string, got {_kind(value)}")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise McpConfigError(path, f"must be an array of strings, got {_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise McpConfigError(f"{path}[{i}]", f"must be a string, got {_kind(item)}")
    return tuple(value)


def _url(value: Any, path: str) -> str:
    from urllib.parse import urlsplit

    url = _string(value, path)
    try:
        parts = urlsplit(url)
        ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise McpConfigError(path, f"must be an http:// or https:// URL with a host, got {url[:200]!r}")
    return url


def _seconds_from_ms(value: Any, path: str) -> float:
    if type(value) not in (int, float) or value <= 0:
        raise McpConfigError(path, f"must be a positive number of milliseconds, got {value!r}")
    return value / 1000


# ----------------------------------------------------------------- the settings key


def parse_settings(value: Any, path: str = "mcpServers") -> tuple[tuple[ServerConfig, ...], list[str]]:
    """The servers of the settings key ``mcpServers`` and the warnings about it (unknown members).

    Raises :class:`McpConfigError` for a shape that cannot be used.
    """
    if not isinstance(value, dict):
        raise McpConfigError(path, f"must be an object {{name: server}}, got {_kind(value)}")
    servers: list[ServerConfig] = []
    warnings: list[str] = []
    for name, entry in value.items():
        where = f"{path}.{name}"
        if not name.strip():
            raise McpConfigError(f'{path}[""]', "a server needs a non-empty name")
        server = _settings_server(name, entry, where, warnings)
        if server is not None:
            servers.append(server)
    return tuple(servers), warnings


def _settings_server(name: str, entry: Any, where: str, warnings: list[str]) -> ServerConfig | None:
    if not isinstance(entry, dict):
        raise McpConfigError(where, f"must be an object, got {_kind(entry)}")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise McpConfigError(f"{where}.disabled", f"must be true or false, got {_kind(disabled)}")
    kind = entry.get("type")
    if "type" in entry and kind not in TYPES:
        raise McpConfigError(f"{where}.type", f"must be one of {sorted(TYPES)}, got {kind!r}")
    given = [key for key in ("command", "httpUrl", "url") if key in entry]
    if "tcp" in entry and not given:
        raise McpConfigError(where, "uses the websocket transport (tcp), which is not supported; "
                                    "give command, httpUrl or url")
    if len(given) > 1:
        raise McpConfigError(where, f"must give one of command, httpUrl or url, not {' and '.join(given)}")
    if not given:
        raise McpConfigError(where, "needs command (a stdio server), httpUrl (Streamable HTTP) or url")
    transport = TYPES[kind] if kind is not None else ("stdio" if given[0] == "command" else "http")
    if (transport == "stdio") != (given[0] == "command"):
        raise McpConfigError(where, f"has type {kind!r} but gives {given[0]}")
    fields: dict[str, Any] = {"name": name, "transport": transport}
    members = _STDIO_MEMBERS if transport == "stdio" else _REMOTE_MEMBERS
    for key, value in entry.items():
        if key in members or key in _COMMON_MEMBERS:
            continue
        other = key in _STDIO_MEMBERS or key in _REMOTE_MEMBERS
        label = "stdio" if transport == "stdio" else "URL"
        warnings.append(f"{where}.{key} ignored" + (f" (a {label} server has none)" if other else " (unknown member)"))
    if transport == "stdio":
        fields["command"] = _string(entry["command"], f"{where}.command")
        if "args" in entry:
            fields["args"] = _strings(entry["args"], f"{where}.args")
        if "env" in entry:
            fields["env"] = _pairs(entry["env"], f"{where}.env")
        if "cwd" in entry:
            fields["cwd"] = _string(entry["cwd"], f"{where}.cwd")
        if "sandbox" in entry:
            if not isinstance(entry["sandbox"], bool):
                raise McpConfigError(f"{where}.sandbox", f"must be true or false, got {_kind(entry['sandbox'])}")
            fields["sandbox"] = entry["sandbox"]
    else:
        key = given[0]
        fields["url"] = _url(entry[key], f"{where}.{key}")
        fields["sse_fallback"] = kind is None and key == "url"
        if "headers" in entry:
            fields["headers"] = _pairs(entry["headers"], f"{where}.headers")
    if "timeout" in entry:
        fields["call_timeout"] = _seconds_from_ms(entry["timeout"], f"{where}.timeout")
    if "discoveryTimeoutMs" in entry:
        fields["start_timeout"] = _seconds_from_ms(entry["discoveryTimeoutMs"], f"{where}.discoveryTimeoutMs")
    trust = entry.get("trust", False)
    if not isinstance(trust, bool):
        raise McpConfigError(f"{where}.trust", f"must be true or false, got {_kind(trust)}")
    fields["trust"] = trust
    if "includeTools" in entry:
        fields["include_tools"] = _strings(entry["includeTools"], f"{where}.includeTools")
    if "excludeTools" in entry:
        fields["exclude_tools"] = _strings(entry["excludeTools"], f"{where}.excludeTools")
    if "description" in entry and not isinstance(entry["description"], str):
        raise McpConfigError(f"{where}.description", f"must be a string, got {_kind(entry['description'])}")
    return None if disabled else ServerConfig(**fields)


def _pairs(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    """An object of strings (``env``, ``headers``)."""
    if not isinstance(value, dict):
        raise McpConfigError(path, f"must be an object of strings, got {_kind(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise McpConfigError(f"{path}.{key}", f"must be a string, got {_kind(item)}")
    return tuple(value.items())


# ----------------------------------------------------------------- ACP's session/new and session/load


def parse_acp(value: Any, path: str = "$.mcpServers") -> tuple[ServerConfig, ...]:
    """ACP's ``mcpServers`` (a list, ``None`` for none); :class:`McpConfigError` names the JSON path."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise McpConfigError(path, f"must be an array, got {_kind(value)}")
    servers: list[ServerConfig] = []
    names: set[str] = set()
    for i, entry in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(entry, dict):
            raise McpConfigError(where, f"must be an object, got {_kind(entry)}")
        name = _string(entry.get("name"), f"{where}.name")
        if name in names:
            raise McpConfigError(f"{where}.name", f"{name!r} is given twice")
        names.add(name)
        kind = entry.get("type", "stdio")
        if kind == "stdio":
            env = entry.get("env")
            servers.append(ServerConfig(
                name=name, transport="stdio", source="acp",
                command=_string(entry.get("command"), f"{where}.command"),
                args=_strings([] if entry.get("args") is None else entry["args"], f"{where}.args"),
                env=_acp_pairs([] if env is None else env, f"{where}.env")))
        elif kind in ("http", "sse"):
            servers.append(ServerConfig(
                name=name, transport=kind, source="acp", url=_url(entry.get("url"), f"{where}.url"),
                headers=_acp_pairs([] if entry.get("headers") is None else entry["headers"], f"{where}.headers")))
        else:
            raise McpConfigError(f"{where}.type", f'must be "http" or "sse" (or absent, for stdio), got {kind!r}')
    return tuple(servers)


def _acp_pairs(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    """ACP's ``[{name, value}]`` (``env``, ``headers``)."""
    if not isinstance(value, list):
        raise McpConfigError(path, f"must be an array of {{name, value}}, got {_kind(value)}")
    pairs = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise McpConfigError(f"{path}[{i}]", f"must be an object {{name, value}}, got {_kind(item)}")
        name = _string(item.get("name"), f"{path}[{i}].name")
        if not isinstance(item.get("value"), str):
            raise McpConfigError(f"{path}[{i}].value", f"must be a string, got {_kind(item.get('value'))}")
        pairs.append((name, item["value"]))
    return tuple(pairs)


__all__ = ["DEFAULT_CALL_TIMEOUT", "McpConfigError", "ServerConfig", "merge_servers", "parse_acp", "parse_settings"]
