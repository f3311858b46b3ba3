"""JSON-RPC 2.0 as MCP narrows it, and the ``_meta`` rules of its requests.

Messages, batches, errors and their codes are :mod:`actors.wire.jsonrpc`'s
(the daemon's one JSON-RPC, shared with ACP). MCP narrows them: a request id
is a string or an integer, never null (and a boolean is no integer, although
Python thinks so); params are an object, and absent params mean ``{}``.
Whether a batch is allowed at all is the session's protocol version
(``protocol.py``).
"""

from __future__ import annotations

from typing import Any

import attrs

from actors.wire import jsonrpc
from actors.wire.jsonrpc import Batch, Invalid, Request, Response

IDS = jsonrpc.STRING_OR_INTEGER_IDS


def parse(body: bytes) -> Request | Response | Batch | Invalid:
    """One POST body: a message, a batch (each member narrowed), or the :class:`Invalid` that answers it."""
    message = jsonrpc.parse(body, ids=IDS)
    if isinstance(message, Batch):
        return Batch(tuple(_narrow(member) for member in message.messages))
    return _narrow(message)


def _narrow(message: Request | Response | Invalid) -> Request | Response | Invalid:
    if not isinstance(message, Request) or isinstance(message.params, dict):
        return message
    if message.params is None:
        return attrs.evolve(message, params={})
    return Invalid(jsonrpc.invalid_request("params must be an object"), message.id)


def progress_token(params: dict[str, Any]) -> str | int | None:
    """``params._meta.progressToken`` when it is a usable token (a string or an integer)."""
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if IDS.accepts(token) else None


def meta_problem(params: dict[str, Any]) -> str | None:
    """Why ``params._meta`` breaks the request schema, or ``None``."""
    if "_meta" not in params:
        return None
    meta = params["_meta"]
    if not isinstance(meta, dict):
        return "params._meta must be an object"
    if "progressToken" in meta and not IDS.accepts(meta["progressToken"]):
        return "params._meta.progressToken must be a string or an integer"
    return None
