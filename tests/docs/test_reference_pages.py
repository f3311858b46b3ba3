"""The docs site's generated reference pages (docs/_hooks/reference.py) list everything their sources hold.

Each test walks the source on its own (the settings schema, the argparse parsers, the OpenAPI document) and
looks for what it finds on the page the hook renders; the last one builds the whole site with ``--strict``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "_hooks" / "reference.py"


def _load_hook() -> Any:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _load_hook()


# ------------------------------------------------------------------------------------------------- settings

SCHEMA = json.loads((ROOT / "actors" / "settings.schema.json").read_text())


def property_names(node: Any) -> Iterator[str]:
    """Every member name declared anywhere in a schema (its $defs included), however deep."""
    if isinstance(node, dict):
        for name, child in node.get("properties", {}).items():
            yield name
            yield from property_names(child)
        for key, child in node.items():
            if key != "properties":
                yield from property_names(child)
    elif isinstance(node, list):
        for child in node:
            yield from property_names(child)


def test_settings_page_lists_every_key_of_the_schema():
    page = reference.settings_markdown(reference.settings_schema())
    top = SCHEMA["properties"]
    for key in top:  # the dotted spellings (limits.maxSessions) are the groups' keys, listed as such
        assert f"`{key}`" in page, key
    for group, child in top.items():
        target = child.get("$ref", "")
        members = SCHEMA["$defs"][target.rsplit("/", 1)[-1]].get("properties", {}) if target.startswith(
            "#/$defs/") and target.count("/") == 2 else {}
        for member in members:
            assert f"`{group}.{member}`" in page, f"{group}.{member}"
    nested = set(property_names(SCHEMA["$defs"])) | set(property_names(top))
    for name in nested:  # as the last part of some key: hooks.Stop[].hooks[].command, mcpServers.<name>.url
        assert f".{name}`" in page or f"`{name}`" in page, name


def test_settings_page_gives_type_default_allowed_values_and_where_the_file_is_read():
    page = reference.settings_markdown(reference.settings_schema())
    row = next(line for line in page.splitlines() if line.startswith("| `limits.maxSessions` |"))
    assert "integer" in row and "`256`" in row and "≥ 1" in row and "Live sessions per daemon" in row
    row = next(line for line in page.splitlines() if line.startswith("| `approvalMode` |"))
    assert all(f'`"{mode}"`' in row for mode in ("default", "auto-edit", "yolo", "plan"))
    assert "--settings FILE" in page
    assert "$XDG_CONFIG_HOME/trellis/settings.json" in page and "~/.config/trellis/settings.json" in page
    for group in ("limits", "cluster", "model", "hooks", "mcpServers"):  # a section per group
        assert f"\n## `{group}`\n" in page


def test_settings_keys_are_flattened_through_arrays_maps_and_one_of_forms():
    page = reference.settings_markdown(reference.settings_schema())
    for key in ("hooks.Stop[].hooks[].command", "mcpServers.<name>.command", "sandbox.writable",
                "subagents.runners.command.template"):
        assert f"| `{key}` |" in page, key


# ------------------------------------------------------------------------------------------------------ CLI


def parsers_within(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and each subcommand's, however deep."""
    yield parser
    for action in parser._actions:
        if isinstance(action.choices, dict):
            for sub in action.choices.values():
                if isinstance(sub, argparse.ArgumentParser):
                    yield from parsers_within(sub)


def test_cli_page_lists_every_option_of_every_parser():
    commands = reference.cli_commands()
    page = reference.cli_markdown(commands)
    progs = {c.parser.prog for c in commands}
    assert {"trellis", "python -m transport", "python -m actors.replay"} <= progs
    seen = 0
    for command in commands:
        for parser in parsers_within(command.parser):
            assert f"`{parser.prog}`" in page, parser.prog
            for action in parser._actions:
                for option in action.option_strings:
                    if action.help == argparse.SUPPRESS:  # internal (--secrets-fd): not in --help, not here
                        assert f"`{option}`" not in page, option
                    else:
                        assert f"`{option}`" in page, f"{parser.prog} {option}"
                        seen += 1
    assert seen > 60  # the daemon alone has over forty flags: the walk found them


def test_cli_page_names_every_subcommand_of_trellis():
    from trellis.cli import CLIENTS, DELEGATED

    page = reference.cli_markdown(reference.cli_commands())
    for name in [*DELEGATED, *CLIENTS]:
        assert f"## `trellis {name}`" in page, name
    assert "#### `trellis token rotate`" in page


# ------------------------------------------------------------------------------------------------ REST API


def test_rest_page_lists_every_operation_of_the_openapi_document():
    from transport.openapi import openapi_document

    doc = openapi_document()
    page = reference.openapi_markdown(doc)
    operations = [(m, p) for p, item in doc["paths"].items() for m in item if m in reference.HTTP_METHODS]
    assert len(operations) > 20
    for method, path in operations:
        assert f"### `{method.upper()} {path}`" in page, f"{method.upper()} {path}"
    stream = doc["paths"]["/session/{sessionId}/events"]["get"]["responses"]["200"]
    for event in stream["x-sse-events"]:
        assert f"| `{event}` |" in page, event
    codes = doc["components"]["schemas"]["ErrorBody"]["properties"]["code"]["enum"]
    for code in codes:
        assert f"`{code}`" in page, code
    assert "<details><summary>openapi.json</summary>" in page


STAND_IN = {  # a small document in the forms transport/openapi.py uses: allOf-narrowed errors, typed frames
    "openapi": "3.1.0",
    "info": {"title": "t", "version": "1"},
    "security": [{"bearer": []}],
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "ErrorBody": {"type": "object", "properties": {"code": {"type": "string", "enum": ["a", "b", "c"]}}},
            "Body": {"type": "object", "required": ["text"], "properties": {
                "text": {"type": "string", "pattern": "^(x|y)$", "description": "one | two"}}},
            "TickFrame": {"allOf": [{"type": "object"}, {"properties": {
                "type": {"const": "tick"}, "data": {"type": "object", "required": ["n"], "properties": {
                    "n": {"type": "integer"}, "m": {"type": "integer"}}}}}]},
        },
    },
    "paths": {
        "/health": {"get": {"summary": "up", "security": [], "responses": {"200": {"description": "ok"}}}},
        "/things/{id}": {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "post": {"summary": "make", "requestBody": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Body"}}}},
                "responses": {"400": {"description": "bad", "content": {"application/json": {"schema": {
                    "allOf": [{"$ref": "#/components/schemas/ErrorBody"},
                              {"properties": {"code": {"enum": ["b"]}}}]}}}}}},
            "get": {"summary": "watch", "responses": {"200": {"description": "events", "content": {
                "text/event-stream": {"schema": {"oneOf": [{"$ref": "#/components/schemas/TickFrame"}]}}}}}},
        },
    },
}


def test_rest_page_renders_auth_bodies_narrowed_error_codes_and_events():
    page = reference.openapi_markdown(STAND_IN)
    assert "| `GET` | `/health` | up | none |" in page
    assert "| `POST` | `/things/{id}` | make | bearer token |" in page
    assert "| `id` | path | string | yes |" in page  # the path's parameters, on each of its operations
    assert "| `text` | string | matches `^(x|y)$` | **Required.** one \\| two |" in page
    row = next(line for line in page.splitlines() if line.startswith("| `400` |"))
    assert "`b`" in row and "`a`" not in row and "`c`" not in row  # allOf narrows the error body's codes
    assert "| `tick` |" in page and "`n`, `m?`" in page


def test_the_hook_fails_when_the_openapi_module_cannot_be_imported(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "transport.openapi", None)  # an import of it raises ImportError
    with pytest.raises(ImportError):
        reference.generated_pages()


# ------------------------------------------------------------------------------------------------ the site


def _mkdocs_available() -> bool:
    return importlib.util.find_spec("mkdocs") is not None and importlib.util.find_spec("material") is not None


def test_the_site_builds_strictly(tmp_path: Path):
    if not _mkdocs_available():
        if not os.environ.get("CI"):
            pytest.skip("mkdocs-material is not installed (pip install -e '.[docs]')")
        pytest.fail("CI must install the docs extra: mkdocs or mkdocs-material is missing")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(site)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # Material's banner, not a warning
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("settings", "cli", "rest-api"):
        assert (site / "reference" / page / "index.html").is_file(), page
    assert json.loads((site / "reference" / "openapi.json").read_text())["openapi"].startswith("3.1")
