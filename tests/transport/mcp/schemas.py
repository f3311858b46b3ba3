"""Checking structured content against an ``outputSchema`` with jsonschema (MCP's default dialect).

``strict`` also refuses fields the schema does not declare (the served schemas leave
``additionalProperties`` open so that clients keep working when a field is added; the tests
insist that every field the daemon sends is declared).
"""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft202012Validator


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``additionalProperties: false`` on every object that lists its properties."""
    schema = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def problems(schema: dict[str, Any], value: Any) -> list[str]:
    """Why ``value`` does not validate against ``schema`` (JSON Schema 2020-12, MCP's default dialect)."""
    Draft202012Validator.check_schema(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in Draft202012Validator(schema).iter_errors(value)]
