"""actors/settings.schema.json is generated from the settings classes, and agrees with the daemon.

The schema is :func:`actors.settings_file.schema` (``python -m actors.settings_file`` writes it): the
committed file must be exactly what the generator makes now, so it cannot drift from the code.

Every example below also goes through both judges: the daemon's path (``load_settings``, then the model
provider as ``transport.bootstrap.make_model`` builds it, under either provider) and the JSON Schema (draft
2020-12, with format assertion on, so a hook ``matcher`` must be a valid pattern). They must agree: both
accept it, or both refuse it. The examples of ``docs/settings.md`` and of the README's *Settings* are
checked too.
"""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from actors.model.text_tools import STYLES as TEXT_TOOL_STYLES
from actors.process.sandbox import SANDBOX_SETTINGS, WITHHELD_NAMES
from actors.session.hooks import EVENTS as HOOK_EVENTS
from actors.settings import APPROVAL_MODES, SettingsError
from actors.settings_file import SCHEMA_PATH, load_settings, schema_text
from actors.subagents.registry import RUNNERS
from transport.bootstrap import make_model
from transport.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads(resources.files("actors").joinpath("settings.schema.json").read_text())
VALIDATOR = Draft202012Validator(SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)

# The openai provider needs a server address and a model name from somewhere to start: the environment
# gives them here (the settings file's own values win over it, so they are still checked), and nothing
# else comes from this process's environment.
MODEL_ENVIRONMENT = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_MODEL": "test-model"}


# ----------------------------------------------------------------- the two judges


def daemon_verdict(tmp_path: Path, document: Any) -> tuple[bool, str]:
    """(accepted, why): the settings file as the daemon loads it, under either model provider."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(document))
    try:
        settings = load_settings(path)
        for flags in ([], ["--model", "openai"]):
            args = build_parser().parse_args(flags)
            args.settings = str(path)
            make_model(args, settings, MODEL_ENVIRONMENT)
    except SettingsError as exc:
        return False, str(exc)
    return True, "; ".join(settings.warnings)


def schema_verdict(document: Any) -> tuple[bool, str]:
    errors = sorted(VALIDATOR.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    return not errors, "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:3])


# ----------------------------------------------------------------- examples

HOOK = {"type": "command", "command": "./check.sh", "timeout": 30}

VALID: list[Any] = [
    {},
    # The README's example file.
    {
        "experimental": {"todoStopGuard": False},
        "ui": {"enableFollowupSuggestions": False},
        "disableAllHooks": False,
        "approvalMode": "default",
        "sandbox": "auto",
        "storage": {"fsync": "always"},
        "limits": {"maxSessions": 256, "maxPendingPrompts": 32, "maxMidTurnMessages": 32,
                   "eventRingSize": 8000, "subscriberQueue": 256, "subscriberQueueBytes": 2097152,
                   "replayBytes": 4194304, "shutdownSeconds": 10, "maxConnections": 256,
                   "keepAliveSeconds": 5},
    },
    {"experimental": {"todoStopGuard": True}, "approvalMode": "plan", "sandbox": "off", "storage": {"fsync": "never"}},
    *({"approvalMode": mode} for mode in APPROVAL_MODES),
    *({"sandbox": kind} for kind in SANDBOX_SETTINGS),
    *({"sandbox": {"mode": kind}} for kind in SANDBOX_SETTINGS),
    {"sandbox": {}}, {"sandbox": {"env": []}}, {"sandbox": {"mode": "off", "env": ["GOPATH", "_X1"]}},
    {"sandbox": {"env": {"PIP_INDEX_URL": "https://mirror/simple", "EMPTY": ""}}},
    *({"sandbox": {"maxProcesses": count}} for count in (0, 8, 1024, 4194304)),
    {"cluster": {"allowUnauthenticated": []}}, {"cluster": {"allowUnauthenticated": ["redis", "postgresql"]}},
    {"cluster.allowUnauthenticated": ["postgresql"]},
    {"subagents": {"runners": {"command": {"template": "claude -p {brief}", "env": ["ANTHROPIC_API_KEY"]}}}},
    {"subagents": {"runners": {"command": {"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}}}}},
    {"subagents": {"runners": {"command": {"env": None}}}},
    {"stopHookBlockingCap": 1, "loopProtection": {"maxToolCallsPerTurn": 1, "maxRepeatedFailures": 10}},
    {"limits": {"clientGraceSeconds": 0.5, "shutdownSeconds": 3}},  # a number: fractions and integers
    {"systemPrompt": "", "appendSystemPrompt": "Answer in French."},
    {"tools": {"enableWebFetch": True, "allowPathsOutsideCwd": False}}, {"tools.enableWebFetch": False},
    # Dotted spellings at the top level.
    {"limits.maxSessions": 4, "experimental.todoStopGuard": True, "loopProtection.maxRepeatedFailures": 2},
    # Unknown keys: warnings, never errors (a file may be shared with other tools)...
    {"theme": "dark", "experimental": {"somethingElse": 1}, "limits": {"maxWidgets": -1}},
    # Hooks.
    {"hooks": {}},
    {"hooks": {event: [{"hooks": [HOOK]}] for event in HOOK_EVENTS}},
    {"hooks": {"PreToolUse": [{"matcher": "Bash|todo_write", "hooks": [{"command": "x"}]},
                              {"matcher": "*", "hooks": []}, {"matcher": "", "hooks": []},
                              {"matcher": None, "hooks": [{"command": "y", "timeout": 0.5}]}]}},
    {"hooks": {"Stop": [{"hooks": [HOOK], "note": "other members are ignored"}]}},
    {"hooks": {"Notification": 5, "SubagentStop": [{"whatever": True}]}},  # events not run: ignored
    {"disableAllHooks": True, "hooks": {"Stop": []}},
    # The model.
    {"model": {}},
    {"model": {"provider": "scripted"}},
    {"model": {"provider": "openai", "baseUrl": "http://127.0.0.1:8080/v1", "apiKey": "sk-x", "name": "qwen",
               "connectTimeout": 5, "readTimeout": 0.5, "contextWindow": 32768, "maxTokens": 1024, "maxRetries": 0,
               "textToolCalls": "hermes", "supportsImages": True}},
    *({"model": {"textToolCalls": style}} for style in TEXT_TOOL_STYLES),
    {"model": {"provider": "openai", "unknownMember": [1, 2]}},
    {"model": {"baseUrl": "HTTPS://user@example.com/v1"}}, {"model": {"baseUrl": "http://[::1]:8080"}},
    # Subagents.
    {"subagents": {}},
    {"subagents": {"runners": {"command": {"template": "claude -p {brief} --mcp-config {config}"},
                               "session": {"model": "qwen", "approvalMode": "auto-edit"}},
                   "defaultRunner": "command", "signalGraceSeconds": 1.5}},
    {"subagents": {"runners": {"command": {"template": None}, "session": {"model": None, "approvalMode": None}}}},
    *({"subagents": {"defaultRunner": runner}} for runner in RUNNERS),
    # MCP servers (actors.mcp_client.config).
    {"mcpServers": {}},
    {"mcpServers": {"fs": {"command": "npx", "args": ["-y", "server-fs"], "env": {"A": "$B"}, "cwd": "tools",
                           "timeout": 15000, "trust": False, "includeTools": ["read"], "excludeTools": []},
                    "web": {"httpUrl": "https://example.com/mcp", "headers": {"Authorization": "Bearer t"},
                            "discoveryTimeoutMs": 2000.5},
                    "claude": {"type": "http", "url": "http://127.0.0.1:3000/mcp"},
                    "old": {"type": "sse", "url": "http://[::1]:8080/sse"}, "bare": {"url": "http://h/sse"},
                    "plain": {"type": "stdio", "command": "srv"}, "off": {"command": "x", "disabled": True},
                    "other": {"command": "x", "oauth": {"enabled": True}, "description": "ignored members"}}},
]

INVALID: list[Any] = [
    # Not an object at the top level.
    [], "settings", 7, None,
    # A known group whose value is not an object.
    {"limits": 5}, {"experimental": True}, {"ui": []}, {"storage": "always"}, {"loopProtection": None},
    # Wrong types and values of plain keys.
    {"approvalMode": "sometimes"}, {"approvalMode": 1}, {"approvalMode": None},
    {"sandbox": "docker"}, {"sandbox": True}, {"sandbox": None}, {"sandbox": ["auto"]},
    {"sandbox": {"mode": "docker"}}, {"sandbox": {"mode": None}}, {"sandbox": {"envs": []}},
    {"sandbox": {"env": "GOPATH"}}, {"sandbox": {"env": None}}, {"sandbox": {"env": [5]}},
    {"sandbox": {"env": ["A=B"]}}, {"sandbox": {"env": ["1A"]}}, {"sandbox": {"env": [""]}},
    {"sandbox": {"env": {"A": 1}}}, {"sandbox": {"env": {"A B": "x"}}},
    *({"sandbox": {"maxProcesses": bad}} for bad in (1, 7, -1, 4194305, "1024", None, True, 64.5)),
    {"sandbox.maxProcesses": 3, "sandbox": {"maxProcesses": 3}},
    {"cluster": {"allowUnauthenticated": "redis"}}, {"cluster": {"allowUnauthenticated": ["all"]}},
    {"cluster": {"allowUnauthenticated": ["Redis"]}}, {"cluster": {"allowUnauthenticated": None}},
    {"cluster.allowUnauthenticated": [True]},
    *({"sandbox": {"env": [name]}} for name in sorted(WITHHELD_NAMES)),
    *({"sandbox": {"env": {name: "x"}}} for name in sorted(WITHHELD_NAMES)),
    {"subagents": {"runners": {"command": {"env": "ANTHROPIC_API_KEY"}}}},
    {"subagents": {"runners": {"command": {"env": ["OPENAI_API_KEY"]}}}},
    {"subagents": {"runners": {"command": {"env": {"TRELLIS_TOKEN": "t"}}}}},
    {"storage": {"fsync": "sometimes"}}, {"storage": {"fsync": False}},
    {"experimental": {"todoStopGuard": "yes"}}, {"experimental": {"todoStopGuard": 1}},
    {"ui": {"enableFollowupSuggestions": None}}, {"disableAllHooks": "false"},
    {"systemPrompt": 5}, {"systemPrompt": None}, {"appendSystemPrompt": ["a"]},
    {"tools": 5}, {"tools": {"enableWebFetch": "yes"}}, {"tools": {"allowPathsOutsideCwd": 1}},
    # Limits: positive integers (no booleans, no strings, no fractions), positive numbers.
    {"limits": {"maxSessions": 0}}, {"limits": {"maxSessions": -1}}, {"limits": {"maxSessions": "5"}},
    {"limits": {"maxSessions": True}}, {"limits": {"eventRingSize": 1.5}}, {"limits": {"replayBytes": None}},
    {"limits": {"shutdownSeconds": 0}}, {"limits": {"shutdownSeconds": -1}}, {"limits": {"shutdownSeconds": "10"}},
    {"limits": {"clientGraceSeconds": True}},
    {"limits": {"keepAliveSeconds": 0}}, {"limits": {"keepAliveSeconds": -5}}, {"limits": {"keepAliveSeconds": "5"}},
    {"stopHookBlockingCap": 0}, {"loopProtection": {"maxToolCallsPerTurn": -3}},
    {"loopProtection": {"maxRepeatedFailures": "3"}},
    {"limits.maxSessions": 0}, {"experimental.todoStopGuard": "on"},
    # Hooks.
    {"hooks": []}, {"hooks": None}, {"hooks": {"Stop": {}}}, {"hooks": {"Stop": None}},
    {"hooks": {"Stop": [5]}}, {"hooks": {"Stop": [{}]}}, {"hooks": {"Stop": [{"hooks": {}}]}},
    {"hooks": {"PreToolUse": [{"matcher": 5, "hooks": []}]}},
    {"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}},
    {"hooks": {"Stop": [{"hooks": [5]}]}},
    {"hooks": {"Stop": [{"hooks": [{"type": "prompt", "command": "x"}]}]}},
    {"hooks": {"Stop": [{"hooks": [{"type": None, "command": "x"}]}]}},
    {"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}},
    {"hooks": {"Stop": [{"hooks": [{"command": ""}]}]}},
    {"hooks": {"Stop": [{"hooks": [{"command": " \t\n"}]}]}},
    {"hooks": {"Stop": [{"hooks": [{"command": 5}]}]}},
    {"hooks": {"Stop": [{"hooks": [{"command": "x", "timeout": 0}]}]}},
    {"hooks": {"Stop": [{"hooks": [{"command": "x", "timeout": "30"}]}]}},
    {"hooks": {"Stop": [{"hooks": [{"command": "x", "timeout": True}]}]}},
    # The model (its members are checked as the openai provider reads them).
    {"model": "openai"}, {"model": None},
    {"model": {"provider": "anthropic"}}, {"model": {"provider": None}},
    {"model": {"baseUrl": None}}, {"model": {"apiKey": 5}}, {"model": {"name": ["x"]}},
    {"model": {"baseUrl": "ftp://example.com"}}, {"model": {"baseUrl": "localhost:8080"}},
    {"model": {"baseUrl": "http://:8080/v1"}}, {"model": {"baseUrl": "http:///v1"}},
    {"model": {"connectTimeout": 0}}, {"model": {"readTimeout": "120"}},
    {"model": {"contextWindow": 0}}, {"model": {"contextWindow": 1.5}}, {"model": {"maxTokens": "x"}},
    {"model": {"maxRetries": -1}}, {"model": {"maxRetries": 1.5}}, {"model": {"maxRetries": True}},
    {"model": {"textToolCalls": "xml"}}, {"model": {"textToolCalls": None}}, {"model": {"supportsImages": "yes"}},
    # Subagents.
    {"subagents": 5}, {"subagents": None},
    {"subagents": {"runners": []}}, {"subagents": {"runners": None}},
    {"subagents": {"runners": {"command": None}}}, {"subagents": {"runners": {"session": "x"}}},
    {"subagents": {"runners": {"command": {"template": 5}}}},
    {"subagents": {"runners": {"session": {"model": 5}}}},
    {"subagents": {"runners": {"session": {"approvalMode": "sometimes"}}}},
    {"subagents": {"defaultRunner": "docker"}}, {"subagents": {"defaultRunner": None}},
    {"subagents": {"signalGraceSeconds": 0}}, {"subagents": {"signalGraceSeconds": "60"}},
    # MCP servers.
    {"mcpServers": []}, {"mcpServers": None}, {"mcpServers": {"s": "python"}}, {"mcpServers": {" ": {"command": "x"}}},
    {"mcpServers": {"s": {}}}, {"mcpServers": {"s": {"tcp": "localhost:9"}}},
    {"mcpServers": {"s": {"command": "x", "url": "http://h"}}}, {"mcpServers": {"s": {"type": "ws", "url": "http://h"}}},
    {"mcpServers": {"s": {"type": "sse", "command": "x"}}}, {"mcpServers": {"s": {"type": "stdio", "url": "http://h"}}},
    {"mcpServers": {"s": {"command": ""}}}, {"mcpServers": {"s": {"command": None}}},
    {"mcpServers": {"s": {"command": "x", "args": "-v"}}}, {"mcpServers": {"s": {"command": "x", "args": [1]}}},
    {"mcpServers": {"s": {"command": "x", "env": {"A": 1}}}}, {"mcpServers": {"s": {"command": "x", "env": []}}},
    {"mcpServers": {"s": {"httpUrl": "ftp://h/mcp"}}}, {"mcpServers": {"s": {"url": "localhost:3000"}}},
    {"mcpServers": {"s": {"httpUrl": "http://h", "headers": {"X": None}}}},
    {"mcpServers": {"s": {"command": "x", "timeout": 0}}}, {"mcpServers": {"s": {"command": "x", "timeout": "5"}}},
    {"mcpServers": {"s": {"command": "x", "trust": "yes"}}}, {"mcpServers": {"s": {"command": "x", "disabled": 1}}},
    {"mcpServers": {"s": {"command": "x", "includeTools": "add"}}}, {"mcpServers": {"s": {"command": "x", "type": None}}},
    # A NUL in a value no environment can hold.
    {"sandbox": {"env": {"A": "x\u0000y"}}},
]

# The one place they cannot agree: JSON Schema's integer is a number with no fraction, so 8.0 is
# one; the daemon (json.loads gives a float) refuses it. Kept here so a change on either side shows.
SCHEMA_ONLY: list[Any] = [{"limits": {"maxSessions": 8.0}}, {"model": {"maxTokens": 512.0}}]


def _id(document: Any) -> str:
    text = json.dumps(document)
    return text if len(text) <= 70 else text[:67] + "..."


@pytest.mark.parametrize("document", VALID, ids=_id)
def test_both_accept(tmp_path: Path, document: Any) -> None:
    daemon, why = daemon_verdict(tmp_path, document)
    schema, schema_why = schema_verdict(document)
    assert (daemon, schema) == (True, True), (why, schema_why)


@pytest.mark.parametrize("document", INVALID, ids=_id)
def test_both_refuse(tmp_path: Path, document: Any) -> None:
    daemon, why = daemon_verdict(tmp_path, document)
    schema, schema_why = schema_verdict(document)
    assert (daemon, schema) == (False, False), (why, schema_why)


@pytest.mark.parametrize("document", SCHEMA_ONLY, ids=_id)
def test_integers_written_with_a_fraction_are_the_known_difference(tmp_path: Path, document: Any) -> None:
    assert daemon_verdict(tmp_path, document)[0] is False
    assert schema_verdict(document)[0] is True


def test_unknown_keys_are_warnings_and_known_ones_are_not(tmp_path: Path) -> None:
    accepted, warnings = daemon_verdict(tmp_path, {"theme": "dark", "limits": {"maxWidgets": 1}})
    assert accepted and "'theme'" in warnings and "'limits.maxWidgets'" in warnings
    every_group_key = {key: _sample(_resolve(ref)) for key, ref in SCHEMA["properties"].items() if "." in key}
    assert "limits.maxSessions" in every_group_key and "cluster.store" in every_group_key
    assert daemon_verdict(tmp_path, every_group_key) == (True, "")
    assert schema_verdict(every_group_key)[0]


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema a ``$ref`` (``#/$defs/Name`` or ``#/$defs/Name/properties/key``) points at."""
    if "$ref" not in schema:
        return schema
    target: Any = SCHEMA
    for part in schema["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    return target


def _sample(schema: dict[str, Any]) -> Any:
    """A valid value of a scalar key's schema."""
    if "enum" in schema:
        return schema["enum"][-1]
    if schema.get("type") == "array":
        return [_sample(_resolve(schema["items"]))]
    return {"boolean": True, "integer": 3, "number": 3, "string": "text"}[schema["type"]]


# ----------------------------------------------------------------- the schema is the generator's


def test_the_committed_schema_is_what_the_generator_makes_now() -> None:
    committed = SCHEMA_PATH.read_text()
    assert committed == schema_text(), "run: python -m actors.settings_file"
    assert json.loads(resources.files("actors").joinpath("settings.schema.json").read_text()) == SCHEMA


def test_the_schema_enums_are_the_code_constants() -> None:
    props, defs = SCHEMA["properties"], SCHEMA["$defs"]
    assert props["approvalMode"]["enum"] == list(APPROVAL_MODES)
    mode, form = props["sandbox"]["anyOf"]
    assert mode["enum"] == defs["SandboxForm"]["properties"]["mode"]["enum"] == list(SANDBOX_SETTINGS)
    for branch in defs["SandboxForm"]["properties"]["env"]["anyOf"]:
        names = branch.get("items") or branch["propertyNames"]
        assert names["not"]["enum"] == sorted(WITHHELD_NAMES)  # what the daemon refuses by name
    assert defs["HooksConfig"]["properties"].keys() == HOOK_EVENTS.keys()
    assert defs["ModelSettings"]["properties"]["textToolCalls"]["enum"] == list(TEXT_TOOL_STYLES)
    assert defs["SubagentsSettings"]["properties"]["defaultRunner"]["enum"] == list(RUNNERS)


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_with_the_package() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA.get("additionalProperties", True) is True  # unknown keys are warnings
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "settings.schema.json" in pyproject["tool"]["setuptools"]["package-data"]["actors"]


def test_every_key_of_a_group_is_also_spelt_dotted() -> None:
    for group in ("experimental", "ui", "storage", "loopProtection", "tools", "limits", "cluster"):
        ref = SCHEMA["properties"][group]
        for leaf in _resolve(ref)["properties"]:
            assert SCHEMA["properties"][f"{group}.{leaf}"] == {"$ref": f"{ref['$ref']}/properties/{leaf}"}


def _doc_examples() -> list[Any]:
    text = (ROOT / "docs" / "settings.md").read_text()
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL)]


def test_the_examples_of_docs_settings_md_are_valid_files(tmp_path: Path) -> None:
    examples = _doc_examples()
    assert examples
    for document in examples:
        assert daemon_verdict(tmp_path, document)[0], document
        assert schema_verdict(document)[0], document


def test_the_settings_example_of_the_readme_is_a_valid_file(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    examples = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.DOTALL)]
    assert examples
    for document in examples:
        assert daemon_verdict(tmp_path, document) == (True, ""), document
        assert schema_verdict(document)[0], document
