"""Validation of ACP request params: every refusal is a -32602 naming the field.

Content blocks and a prompt's ``_meta`` are checked by :mod:`actors.wire`, the
same strict decoder the REST surface uses, so both surfaces accept exactly the
same prompts.
"""

from __future__ import annotations

import os
from typing import Any

from actors import wire

from .jsonrpc import invalid_params


def require_object(params: Any) -> dict[str, Any]:
    """ACP params are always an object (JSON-RPC also allows arrays)."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise invalid_params("expected an object", "$")
    return params


def string(params: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise invalid_params("required field missing", f"$.{name}")
        return None
    if not isinstance(value, str) or not value:
        raise invalid_params("expected a non-empty string", f"$.{name}")
    return value


def integer(params: dict[str, Any], name: str) -> int:
    value = params.get(name)
    if type(value) is not int:
        raise invalid_params("required field missing" if name not in params else "expected an integer", f"$.{name}")
    return value


def optional_object(params: dict[str, Any], name: str) -> dict[str, Any]:
    value = params.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_params("expected an object", f"$.{name}")
    return value


def optional_list(params: dict[str, Any], name: str) -> list[Any]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_params("expected an array", f"$.{name}")
    return value


def directory(params: dict[str, Any], name: str = "cwd", *, required: bool = True) -> str | None:
    """An absolute path to an existing directory (ACP requires absolute paths)."""
    path = string(params, name, required=required)
    if path is None:
        return None
    if len(path) > wire.MAX_PATH_CHARS:  # as on the REST surface; and never echoed whole
        raise invalid_params(f"longer than {wire.MAX_PATH_CHARS:,} characters ({len(path):,} given)", f"$.{name}")
    if "\x00" in path:
        raise invalid_params(wire.nul_in_path(name), f"$.{name}")
    if not os.path.isabs(path):
        raise invalid_params("must be an absolute path", f"$.{name}")
    if not os.path.isdir(path):
        raise invalid_params(f"{wire.excerpt(path)} is not a directory", f"$.{name}")
    return path


def prompt_body(params: dict[str, Any]) -> wire.PromptBody:
    """``{prompt: [ContentBlock], _meta?}`` as the runtime's prompt body."""
    if "prompt" not in params:
        raise invalid_params("required field missing", "$.prompt")
    body: dict[str, Any] = {"prompt": params["prompt"]}
    if params.get("_meta") is not None:
        body["_meta"] = params["_meta"]
    try:
        decoded = wire.structure(body, wire.PromptBody)
    except wire.WireError as exc:
        raise invalid_params(exc.message, exc.path) from None
    if not decoded.prompt:
        raise invalid_params("must contain at least one content block", "$.prompt")
    return decoded
