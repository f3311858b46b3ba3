"""MCP server configurations: the settings key ``mcpServers`` and ACP's ``mcpServers``, good and bad."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actors.mcp_client.config import McpConfigError, ServerConfig, merge_servers, parse_acp, parse_settings
from actors.mcp_client.server import expand
from actors.settings import SettingsError
from actors.settings_file import load_settings


def one(entry: dict[str, Any]) -> ServerConfig:
    servers, warnings = parse_settings({"s": entry})
    assert warnings == []
    [server] = servers
    return server


def test_the_settings_shapes_of_claude_code_qwen_code_and_gemini_cli():
    stdio = one({"command": "python", "args": ["-m", "srv"], "env": {"A": "1"}, "cwd": "tools", "timeout": 1500,
                 "trust": True, "includeTools": ["add"], "excludeTools": ["rm"], "description": "x"})
    assert (stdio.transport, stdio.command, stdio.args, stdio.env, stdio.cwd) == (
        "stdio", "python", ("-m", "srv"), (("A", "1"),), "tools")
    assert (stdio.call_timeout, stdio.trust, stdio.connect_timeout) == (1.5, True, 30.0)
    assert stdio.offers("add") and not stdio.offers("rm") and not stdio.offers("other")
    assert one({"type": "stdio", "command": "x"}).transport == "stdio"
    http = one({"httpUrl": "http://127.0.0.1:3000/mcp", "headers": {"Authorization": "Bearer t"},
                "discoveryTimeoutMs": 2000})
    assert (http.transport, http.url, http.headers, http.sse_fallback, http.connect_timeout) == (
        "http", "http://127.0.0.1:3000/mcp", (("Authorization", "Bearer t"),), False, 2.0)
    claude = one({"type": "http", "url": "https://example.com/mcp"})
    assert (claude.transport, claude.sse_fallback) == ("http", False)
    assert one({"type": "sse", "url": "http://h/sse"}).transport == "sse"
    assert one({"type": "streamable-http", "url": "http://h/mcp"}).transport == "http"
    bare = one({"url": "http://h/sse"})  # qwen-code's SSE, others' HTTP: HTTP first, then SSE
    assert (bare.transport, bare.sse_fallback, bare.connect_timeout) == ("http", True, 10.0)
    assert parse_settings({"off": {"command": "x", "disabled": True}}) == ((), [])
    assert parse_settings({}) == ((), [])


def test_unknown_and_misplaced_members_are_warnings():
    servers, warnings = parse_settings({"s": {"httpUrl": "http://h/mcp", "oauth": {"enabled": True},
                                              "args": ["x"]}})
    assert len(servers) == 1
    assert warnings == ["unknown key 'mcpServers.s.oauth' ignored", "mcpServers.s.args ignored (a URL server has none)"]


@pytest.mark.parametrize(("value", "path", "detail"), [
    ([], "mcpServers", "must be an object, got an array"),
    ({"s": "python"}, "mcpServers.s", 'must be an object, got "python"'),
    ({"s": {}}, "mcpServers.s", "needs command (a stdio server), httpUrl (Streamable HTTP) or url"),
    ({"s": {"tcp": "localhost:9"}}, "mcpServers.s", "uses the websocket transport (tcp), which is not supported; "
                                                    "give command, httpUrl or url"),
    ({"s": {"command": "x", "url": "http://h"}}, "mcpServers.s", "must give one of command, httpUrl or url, "
                                                                 "not command and url"),
    ({"s": {"type": "ws", "url": "http://h"}}, "mcpServers.s.type",
     'must be one of ["stdio", "http", "streamable-http", "sse"], got "ws"'),
    ({"s": {"type": "sse", "command": "x"}}, "mcpServers.s", 'has type "sse" but gives command'),
    ({"s": {"command": ""}}, "mcpServers.s.command", 'must be a non-empty string, got ""'),
    ({"s": {"command": 5}}, "mcpServers.s.command", "must be a non-empty string, got 5"),
    ({"s": {"command": "x", "args": "-v"}}, "mcpServers.s.args", 'must be an array of strings, got "-v"'),
    ({"s": {"command": "x", "args": ["-v", 3]}}, "mcpServers.s.args[1]", "must be a string, got 3"),
    ({"s": {"command": "x", "env": ["A=1"]}}, "mcpServers.s.env", "must be an object of strings, got an array"),
    ({"s": {"command": "x", "env": {"A": 1}}}, "mcpServers.s.env.A", "must be a string, got 1"),
    ({"s": {"httpUrl": "ftp://h/mcp"}}, "mcpServers.s.httpUrl",
     'must be an http:// or https:// URL with a host, got "ftp://h/mcp"'),
    ({"s": {"url": "localhost:3000"}}, "mcpServers.s.url",
     'must be an http:// or https:// URL with a host, got "localhost:3000"'),
    ({"s": {"httpUrl": "http://h", "headers": {"X": None}}}, "mcpServers.s.headers.X",
     "must be a string, got null"),
    ({"s": {"command": "x", "timeout": 0}}, "mcpServers.s.timeout",
     "must be a positive number of milliseconds, got 0"),
    ({"s": {"command": "x", "trust": "yes"}}, "mcpServers.s.trust", 'must be true or false, got "yes"'),
    ({"s": {"command": "x", "includeTools": "add"}}, "mcpServers.s.includeTools",
     'must be an array of strings, got "add"'),
    ({"s": {"command": "x", "disabled": 1}}, "mcpServers.s.disabled", "must be true or false, got 1"),
    ({" ": {"command": "x"}}, 'mcpServers[" "]', 'must be a non-empty name, got " "'),
    # A name with a dot in it is written as a JSON string, so the path stays unambiguous.
    ({"a.b": {"command": "x", "cwd": ""}}, 'mcpServers["a.b"].cwd', 'must be a non-empty string, got ""'),
])
def test_bad_settings_shapes_are_refused_naming_the_member(value: Any, path: str, detail: str):
    with pytest.raises(McpConfigError) as caught:
        parse_settings(value)
    assert (caught.value.path, caught.value.detail) == (path, detail)


def test_the_daemon_refuses_a_bad_file_and_warns_about_unknown_members(tmp_path: Path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"mcpServers": {"fs": {"command": "x", "args": [1]}}}))
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert str(caught.value) == f"{path}: mcpServers.fs.args[0]: must be a string, got 1"
    path.write_text(json.dumps({"mcpServers": {"fs": {"command": "x", "oauth": {}}}}))
    settings = load_settings(path)
    assert settings.warnings == (f"{path}: unknown key 'mcpServers.fs.oauth' ignored",)
    [server] = settings.mcp_server_configs
    assert (server.name, server.command) == ("fs", "x")
    path.write_text(json.dumps({"mcpServers": []}))
    with pytest.raises(SettingsError, match="mcpServers: must be an object, got an array"):
        load_settings(path)


def test_the_acp_shapes():
    servers = parse_acp([
        {"name": "fs", "command": "/usr/bin/fs", "args": ["--root", "."], "env": [{"name": "A", "value": "1"}]},
        {"type": "stdio", "name": "plain", "command": "x"},
        {"type": "http", "name": "web", "url": "https://h/mcp", "headers": [{"name": "X", "value": "y"}],
         "_meta": {"ignored": True}},
        {"type": "sse", "name": "old", "url": "http://h/sse", "headers": []},
    ])
    assert [(s.name, s.transport, s.source) for s in servers] == [
        ("fs", "stdio", "acp"), ("plain", "stdio", "acp"), ("web", "http", "acp"), ("old", "sse", "acp")]
    assert servers[0].args == ("--root", ".") and servers[0].env == (("A", "1"),)
    assert servers[2].headers == (("X", "y"),) and not servers[2].sse_fallback
    assert parse_acp(None) == () and parse_acp([]) == ()


@pytest.mark.parametrize(("value", "path", "detail"), [
    ({}, "$.mcpServers", "must be an array of objects, got an object"),
    ([5], "$.mcpServers[0]", "must be an object, got 5"),
    ([{"command": "x"}], "$.mcpServers[0].name", "is required"),
    ([{"name": "a"}], "$.mcpServers[0].command", "must be a non-empty string, got null"),
    ([{"name": "a", "command": "x", "args": [1]}], "$.mcpServers[0].args[0]", "must be a string, got 1"),
    ([{"name": "a", "command": "x", "env": {"A": "1"}}], "$.mcpServers[0].env",
     "must be an array of objects or null, got an object"),
    ([{"name": "a", "command": "x", "env": [{"name": "A"}]}], "$.mcpServers[0].env[0].value", "is required"),
    ([{"type": "http", "name": "a", "url": "mcp.example.com"}], "$.mcpServers[0].url",
     'must be an http:// or https:// URL with a host, got "mcp.example.com"'),
    ([{"type": "http", "name": "a", "url": "http://h", "headers": [{"value": "v"}]}],
     "$.mcpServers[0].headers[0].name", "is required"),
    ([{"type": "acp", "name": "a", "serverId": "1"}], "$.mcpServers[0].type",
     'must be one of ["stdio", "http", "sse"], got "acp"'),
    ([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}], "$.mcpServers[1].name", '"a" is given twice'),
])
def test_bad_acp_shapes_are_refused_naming_the_path(value: Any, path: str, detail: str):
    with pytest.raises(McpConfigError) as caught:
        parse_acp(value)
    assert (caught.value.path, caught.value.detail) == (path, detail)


def test_a_clients_server_replaces_the_settings_one_of_its_name():
    settings, _ = parse_settings({"a": {"command": "a"}, "b": {"command": "b"}})
    client = parse_acp([{"name": "b", "command": "client-b"}, {"name": "c", "command": "c"}])
    assert [(s.name, s.command) for s in merge_servers(settings, client)] == [
        ("a", "a"), ("b", "client-b"), ("c", "c")]


def test_variables_are_expanded_but_never_the_daemons_credentials():
    environ = {"HOME": "/home/u", "API": "k", "TRELLIS_TOKEN": "secret", "OPENAI_API_KEY": "sk"}
    assert expand("$HOME/x ${API} $MISSING.", environ) == "/home/u/x k ."
    assert expand("${TRELLIS_TOKEN}$OPENAI_API_KEY", environ) == ""
    assert expand("no variables", environ) == "no variables"
