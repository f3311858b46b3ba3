"""The small JSON Schema subset the MCP tools declare, checked before a tool runs.

Supported: ``type`` (object, string, integer, number, boolean), ``properties``,
``required``, ``additionalProperties: false``, ``enum``, ``minLength``,
``maxLength``, ``minimum``, ``maximum``. Booleans are not numbers here.
"""

from __future__ import annotations

from typing import Any


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return type(value) is int
    if kind == "number":
        return type(value) in (int, float)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


def check(schema: dict[str, Any], value: Any, path: str = "arguments") -> str | None:
    """Why ``value`` does not match ``schema`` (naming the field), or ``None``."""
    kind = schema.get("type")
    if kind is not None and not _type_ok(kind, value):
        return f"{path} must be of type {kind}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} must be one of {schema['enum']}"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{path} must not be empty" if schema.get("minLength") == 1 else \
                f"{path} must have at least {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path} must have at most {schema['maxLength']} characters"
    if type(value) in (int, float):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path} must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path} must be at most {schema['maximum']}"
    if isinstance(value, dict) and kind == "object":
        properties = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                return f"{path}.{name} is required"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            if extra:
                return f"{path} has unknown field(s) {extra}; expected only {sorted(properties)}"
        for name, sub in properties.items():
            if name in value:
                problem = check(sub, value[name], f"{path}.{name}")
                if problem:
                    return problem
    return None
