"""JSON-RPC 2.0 as MCP uses it: what one incoming message is, and the shapes of answers.

Pure functions over parsed JSON; nothing here knows about HTTP or sessions.
MCP narrows JSON-RPC: a request id is a string or an integer, never null (and
a boolean is not an integer here, although Python thinks so).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

Kind = Literal["request", "notification", "response"]


@attrs.frozen
class Incoming:
    """One well-formed message: a request (has an id), a notification, or a client's response to us."""

    kind: Kind
    id: Any = None
    method: str | None = None
    params: dict[str, Any] = attrs.field(factory=dict)

    @property
    def is_request(self) -> bool:
        return self.kind == "request"


@attrs.frozen
class Malformed:
    """A message that is not one, and the error response it gets."""

    response: dict[str, Any]


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response (``id`` null when the request's could not be determined)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def result(request_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def valid_id(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (str, int))


def classify(message: Any) -> Incoming | Malformed:
    """What ``message`` (one parsed JSON value, not a batch) is, or the error it gets."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return Malformed(error(None, INVALID_REQUEST, "Invalid Request: expected a JSON-RPC 2.0 object"))
    has_id = "id" in message
    request_id = message.get("id")
    echo = request_id if valid_id(request_id) else None
    if has_id and not valid_id(request_id):
        return Malformed(error(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer"))
    method = message.get("method")
    if method is None:
        if has_id and ("result" in message or "error" in message):
            return Incoming("response", request_id)
        return Malformed(error(echo, INVALID_REQUEST, "Invalid Request: neither a request, a notification "
                                                      "nor a response (no method, no result or error)"))
    if not isinstance(method, str):
        return Malformed(error(echo, INVALID_REQUEST, "Invalid Request: method must be a string"))
    params = message.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return Malformed(error(echo, INVALID_REQUEST, "Invalid Request: params must be an object"))
    return Incoming("request" if has_id else "notification", request_id, method, params)


def progress_token(params: dict[str, Any]) -> str | int | None:
    """``params._meta.progressToken`` when it is a usable token (a string or an integer)."""
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if valid_id(token) else None


def meta_problem(params: dict[str, Any]) -> str | None:
    """Why ``params._meta`` breaks the request schema, or ``None``."""
    if "_meta" not in params:
        return None
    meta = params["_meta"]
    if not isinstance(meta, dict):
        return "params._meta must be an object"
    if "progressToken" in meta and not valid_id(meta["progressToken"]):
        return "params._meta.progressToken must be a string or an integer"
    return None
