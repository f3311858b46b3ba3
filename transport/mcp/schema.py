"""The small JSON Schema subset the MCP tools declare, checked before a tool runs.

Supported: ``type`` (object, array, string, integer, number, boolean, null, or
a list of them), ``properties``, ``required``, ``additionalProperties: false``,
``items``, ``enum``, ``minLength``, ``maxLength``, ``minimum``, ``maximum``.
Booleans are not numbers here, as in JSON Schema.

Every problem is named by where it is (``arguments.max_turns``) and, where it
helps the caller correct itself, what was given: the text goes back to the
model as a tool execution error (MCP 2025-11-25), so it has to be readable.
"""

from __future__ import annotations

from typing import Any

MAX_SHOWN = 60  # characters of a given value quoted back in a message


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return type(value) is int  # 1.0 too would be, in JSON Schema; the tools behind want an int
    if kind == "number":
        return type(value) in (int, float)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    return True


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _json_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def problems(schema: dict[str, Any], value: Any, path: str = "arguments") -> list[str]:
    """Every way ``value`` misses ``schema``, each naming the field; empty when it matches."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if kinds and not any(_type_ok(k, value) for k in kinds):
        wanted = " or ".join(kinds)
        return [f"{path} must be of type {wanted} (got {_json_name(value)}: {_shown(value)})"]
    found: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join("null" if c is None else repr(c) for c in schema["enum"])
        found.append(f"{path} must be one of {choices} (got {_shown(value)})")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            found.append(f"{path} must not be empty" if schema.get("minLength") == 1 else
                         f"{path} must have at least {schema['minLength']} characters (got {len(value)})")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            found.append(f"{path} must have at most {schema['maxLength']} characters (got {len(value)})")
    if type(value) in (int, float):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{path} must be at least {schema['minimum']} (got {value})")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{path} must be at most {schema['maximum']} (got {value})")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += problems(schema["items"], item, f"{path}[{index}]")
    if isinstance(value, dict) and "object" in kinds:
        properties = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                found.append(f"{path}.{name} is required")
        if schema.get("additionalProperties") is False:
            for name in sorted(set(value) - set(properties)):
                found.append(f"{path}.{name} is not a known field (expected only: {', '.join(sorted(properties))})"
                             if properties else f"{path}.{name} is not a known field (this takes no arguments)")
        for name, sub in properties.items():
            if name in value:
                found += problems(sub, value[name], f"{path}.{name}")
    return found


def check(schema: dict[str, Any], value: Any, path: str = "arguments") -> str | None:
    """Why ``value`` does not match ``schema`` (every problem, ``;``-separated), or ``None``."""
    found = problems(schema, value, path)
    return "; ".join(found) if found else None
