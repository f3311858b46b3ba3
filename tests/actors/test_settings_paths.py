"""Every settings error names the JSON path of the bad value, however deep it sits.

One family of the settings file at a time (top-level keys, limits, sandbox, model, subagents,
mcpServers, hooks), through the loader and through the family's own parser: the whole message is
asserted, so the path, the reason and the value shown (never a secret) are all pinned down.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from actors.mcp_client.config import McpConfigError, parse_acp, parse_settings
from actors.model.openai import OpenAIConfig
from actors.process.sandbox import SandboxSetting
from actors.session.hooks import HookConfigError, parse_hooks
from actors.settings import Settings, SettingsError
from actors.settings_file import load_settings, settings_from_dict
from actors.subagents.registry import SubagentConfig
from actors.subagents.runners import command_env


def refused(document: Any) -> str:
    """The message of the settings error for ``document``, read as the file ``settings.json``."""
    with pytest.raises(SettingsError) as caught:
        settings_from_dict(document, source="settings.json")
    return str(caught.value)


# ----------------------------------------------------------------- top-level keys and groups


def test_a_bad_top_level_key_or_group_member_is_named_by_its_path() -> None:
    assert refused({"tools": {"enableWebFetch": "yes"}}) == (
        'settings.json: tools.enableWebFetch: must be true or false, got "yes"')
    assert refused({"systemPrompt": None}) == "settings.json: systemPrompt: must be a string, got null"
    assert refused({"storage": {"fsync": "sometimes"}}) == (
        'settings.json: storage.fsync: must be one of ["always", "never"], got "sometimes"')
    # A group's key written dotted at the top level is named the same way.
    assert refused({"cluster.leaseSeconds": -1}) == "settings.json: cluster.leaseSeconds: must be a positive number, got -1"
    assert refused({"experimental": [True]}) == "settings.json: experimental: must be an object, got an array"


def test_a_bad_file_names_itself_then_the_path(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"loopProtection": {"maxRepeatedFailures": 2.5}}))
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert str(caught.value) == f"{path}: loopProtection.maxRepeatedFailures: must be a positive integer, got 2.5"
    assert (caught.value.source, caught.value.path) == (str(path), "loopProtection.maxRepeatedFailures")


def test_bad_input_changes_nothing_and_the_first_bad_value_is_named() -> None:
    base = settings_from_dict({"limits": {"maxSessions": 4}, "theme": 1}, source="first")
    with pytest.raises(SettingsError) as caught:
        settings_from_dict({"approvalMode": "yolo", "limits": {"eventRingSize": 0}}, source="second", base=base)
    assert caught.value.path == "limits.eventRingSize"
    assert (base.approval_mode, base.limits.max_sessions, base.limits.event_ring_size) == ("default", 4, 8000)
    assert base == settings_from_dict({"limits": {"maxSessions": 4}, "theme": 1}, source="first")


# ----------------------------------------------------------------- limits


def test_a_bad_limit_is_named_by_its_path(tmp_path: Path) -> None:
    assert refused({"limits": {"maxSessions": 0}}) == "settings.json: limits.maxSessions: must be a positive integer, got 0"
    assert refused({"limits": {"keepAliveSeconds": True}}) == (
        "settings.json: limits.keepAliveSeconds: must be a positive number, got true")


@pytest.mark.parametrize("number", [math.nan, math.inf])
def test_nan_and_infinity_are_no_numbers_even_from_python(number: float) -> None:
    message = refused({"limits": {"shutdownSeconds": number}})
    assert message.startswith("settings.json: limits.shutdownSeconds: must be a positive number, got ")


# ----------------------------------------------------------------- sandbox


def test_a_bad_sandbox_member_is_named_by_its_path() -> None:
    assert refused({"sandbox": {"env": {"PIP_INDEX_URL": "https://m/simple", "TRELLIS_TOKEN": "t"}}}) == (
        "settings.json: sandbox.env.TRELLIS_TOKEN: TRELLIS_TOKEN is the daemon's own credential; it is never "
        "passed to a command")
    assert refused({"sandbox": {"writable": ["/opt/cache", "cache"]}}) == (
        'settings.json: sandbox.writable[1]: must be an absolute path or start with ~/, got "cache"')
    with pytest.raises(ValueError) as caught:
        SandboxSetting.parse({"mode": "off", "env": ["GOPATH", 7]}, "sandbox")
    assert str(caught.value) == "sandbox.env[1]: must be a variable name, got 7"
    assert refused({"sandbox": {"maxProcesses": 4}}) == (
        "settings.json: sandbox.maxProcesses: 4 is too few for bwrap and a shell (at least 8; 0: no limit)")
    assert refused({"sandbox": {"maxProcesses": "1024"}}) == (
        'settings.json: sandbox.maxProcesses: must be a number of processes from 8 to 4194304 (0: no limit), '
        'got "1024"')
    assert refused({"sandbox": {"maxprocesses": 64}}) == (
        "settings.json: sandbox.maxprocesses: unknown key (it takes mode, env, writable, network, maxProcesses, diskReserve)")


def test_a_bad_process_limit_or_cluster_opt_out_changes_nothing(tmp_path: Path) -> None:
    base = settings_from_dict({"sandbox": {"maxProcesses": 64}, "cluster": {"allowUnauthenticated": ["redis"]}})
    for document, path in (({"approvalMode": "yolo", "sandbox": {"maxProcesses": 0, "network": "off"},
                             "cluster": {"allowUnauthenticated": ["yes"]}}, "cluster.allowUnauthenticated[0]"),
                           ({"cluster": {"allowUnauthenticated": []}, "sandbox": {"maxProcesses": -8}},
                            "sandbox.maxProcesses")):
        with pytest.raises(SettingsError) as caught:
            settings_from_dict(document, source="second", base=base)
        assert caught.value.path == path
    assert (base.approval_mode, base.sandbox, base.cluster_allow_unauthenticated) == (
        "default", SandboxSetting(max_processes=64), ("redis",))
    # Through the loader: the file is named, then the path; no Settings comes out of it.
    file = tmp_path / "settings.json"
    file.write_text(json.dumps({"cluster": {"allowUnauthenticated": "all"}}))
    with pytest.raises(SettingsError) as caught:
        load_settings(file)
    assert str(caught.value) == f'{file}: cluster.allowUnauthenticated: must be an array of values, got "all"'


# ----------------------------------------------------------------- model


def test_a_bad_model_member_is_named_by_its_path_when_the_file_is_read() -> None:
    assert refused({"model": {"provider": "openai", "contextWindow": 0}}) == (
        "settings.json: model.contextWindow: must be a positive integer, got 0")
    with pytest.raises(ValueError) as caught:
        OpenAIConfig.from_sources({}, {"name": "qwen", "maxRetries": -1})
    assert str(caught.value) == "model.maxRetries: must be a non-negative integer, got -1"


def test_a_bad_api_key_or_base_url_is_named_but_never_shown() -> None:
    assert refused({"model": {"apiKey": 1234567}}) == "settings.json: model.apiKey: must be a string, got a number"
    assert refused({"model": {"baseUrl": "ftp://user:hunter2@host/v1"}}) == (
        "settings.json: model.baseUrl: must be an http:// or https:// URL with a host, got a string")


# ----------------------------------------------------------------- subagents


def test_a_bad_subagents_member_is_named_by_its_path() -> None:
    assert refused({"subagents": {"runners": {"session": {"approvalMode": "sometimes"}}}}) == (
        'settings.json: subagents.runners.session.approvalMode: must be one of ["default", "auto-edit", "yolo", '
        '"plan"], got "sometimes"')
    assert refused({"subagents": {"runners": {"command": {"env": ["GOPATH", "OPENAI_API_KEY"]}}}}) == (
        "settings.json: subagents.runners.command.env[1]: OPENAI_API_KEY is the daemon's own credential; it is never "
        "passed to a command")
    with pytest.raises(SettingsError) as caught:
        SubagentConfig.from_settings(Settings(subagents={"runners": {"command": {"template": 3}}}))
    assert str(caught.value) == "subagents.runners.command.template: must be a string or null, got 3"
    with pytest.raises(ValueError) as caught:
        command_env({"runners": {"command": {"env": {"A": 1}}}})
    assert str(caught.value) == "subagents.runners.command.env.A: must be a string, got 1"


# ----------------------------------------------------------------- mcpServers


def test_a_bad_mcp_server_member_is_named_by_its_path() -> None:
    assert refused({"mcpServers": {"github": {"command": "npx", "args": ["-y", "server", 3]}}}) == (
        "settings.json: mcpServers.github.args[2]: must be a string, got 3")
    with pytest.raises(McpConfigError) as caught:
        parse_settings({"docs": {"httpUrl": "https://h/mcp", "headers": {"Authorization": "t", "X-Count": 2}}})
    assert (caught.value.path, str(caught.value)) == (
        "mcpServers.docs.headers.X-Count", "mcpServers.docs.headers.X-Count: must be a string, got 2")
    with pytest.raises(McpConfigError) as caught:
        parse_acp([{"name": "a", "command": "x"}, {"name": "b", "command": "y", "env": [{"name": "A", "value": 1}]}])
    assert str(caught.value) == "$.mcpServers[1].env[0].value: must be a string, got 1"


# ----------------------------------------------------------------- hooks


def test_a_bad_hook_member_is_named_by_its_path() -> None:
    hooks = {"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": "./audit.sh"}]},
                            {"hooks": [{"command": "./a.sh"}, {"command": "./b.sh", "timeout": 0}]}]}
    assert refused({"hooks": hooks}) == (
        "settings.json: hooks.PreToolUse[1].hooks[1].timeout: must be a positive number, got 0")
    with pytest.raises(HookConfigError) as caught:
        parse_hooks({"Stop": [{"hooks": [{"command": "x", "sandbox": "yes"}]}]})
    assert str(caught.value) == 'hooks.Stop[0].hooks[0].sandbox: must be true or false, got "yes"'
