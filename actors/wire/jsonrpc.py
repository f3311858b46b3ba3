"""JSON-RPC 2.0 without I/O: reading messages and batches, building answers, the error codes.

The one JSON-RPC of the daemon: ACP (``transport/acp``), MCP (``transport/mcp``)
and a subagent's signal client (``actors/subagents/client.py``) read and write
their messages here. Like h11 it does no I/O — text or parsed JSON in, values
out — and never raises on input: a transport decides what to do with what it
gets (answer an error, run a request, settle a call) and narrows the rules
where its protocol does (ACP refuses batches; MCP wants params as an object).

:func:`parse` (JSON text) and :func:`read` (parsed JSON) give one of

- :class:`Request` — a call (it has an ``id``) or a notification (it has none);
- :class:`Response` — an answer to a call of ours: a result, or an error object;
- :class:`Batch` — a non-empty array, each member read as a lone message;
- :class:`Invalid` — anything else, with the error to answer and the id to answer it with.

The rules are the specification's (https://www.jsonrpc.org/specification):

- text that is not JSON: -32700, id null (§5.1);
- a value that is neither a Request nor a Response object: -32600 (§4, §5).
  The answer echoes the id of a message that tried to be a request (it has a
  ``method``) when that id is valid, else it is null (§5: null "if there was
  an error in detecting the id"). A malformed *response* is answered with id
  null: its id names a call of ours, and echoing it would answer a call of
  the other side;
- an id is a string, a number or null (§4; the last two are discouraged, not
  forbidden); a boolean is no number. A protocol may narrow this:
  :data:`STRING_OR_INTEGER_IDS` is MCP's rule, and ACP's;
- params, when present, are an object or an array (§4.2): ``null`` is neither;
- a response has exactly one of ``result`` and ``error`` (§5); its id is one
  the rule accepts, or null beside an error (whatever the rule: the id of a
  request that could not be read); an error is an object with an integer
  ``code`` and a string ``message`` (§5.1);
- an empty array is one -32600 with id null, not an array (§6). A batch is
  answered with one response per member that needs one (:func:`needs_answer`)
  and, when none does, with nothing at all — never ``[]`` (§6):
  :func:`batch_answer`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import orjson

from .errors import shorten

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000  # the first of -32000..-32099, kept for implementation-defined server errors (§5.1)

Id = str | int | float | None


# --------------------------------------------------------------------------- ids


def _spec_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False  # Python's bool is an int; JSON's true is no number
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int))


def _string_or_integer_id(value: Any) -> bool:
    return isinstance(value, str) or type(value) is int


@attrs.frozen
class IdRule:
    """Which ids a peer accepts (in requests, and in the responses to its calls), and how a refusal says so."""

    accepts: Callable[[Any], bool]
    described: str


SPEC_IDS = IdRule(_spec_id, "a string, a number or null")
"""JSON-RPC 2.0's own rule."""
STRING_OR_INTEGER_IDS = IdRule(_string_or_integer_id, "a string or an integer")
"""MCP's rule ("MUST NOT be null"; an integer), and the ids ACP's clients send: no null, no fraction."""


# --------------------------------------------------------------------------- the error object


class RpcError(Exception):
    """A JSON-RPC error object: raise it from a handler; :meth:`to_dict` is its wire form."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @classmethod
    def from_dict(cls, error: dict[str, Any]) -> RpcError:
        """The error of a :class:`Response` (whose error object :func:`read` already checked)."""
        return cls(error["code"], error["message"], error.get("data"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.message!r})"


def parse_error(why: str) -> RpcError:
    return RpcError(PARSE_ERROR, f"Parse error: {why}")


def invalid_request(why: str) -> RpcError:
    return RpcError(INVALID_REQUEST, f"Invalid Request: {why}")


def method_not_found(method: str) -> RpcError:
    # Shortened: a method name is client input, and an error never echoes more than an excerpt of it.
    return RpcError(METHOD_NOT_FOUND, f"Method not found: {shorten(method, 80)}")


def invalid_params(why: str, path: str) -> RpcError:
    """-32602 naming the offending field (``$.prompt[0].text``) in its message and in ``data.path``."""
    return RpcError(INVALID_PARAMS, f"Invalid params: {why} at {path}", {"path": path})


def internal_error(details: str) -> RpcError:
    return RpcError(INTERNAL_ERROR, "Internal error", {"details": details})


# --------------------------------------------------------------------------- messages


@attrs.frozen
class Request:
    """An incoming call, or a notification (no ``id`` member at all: nothing answers it).

    ``params`` is an object or an array, ``None`` when absent. A call whose id is
    null (allowed, discouraged) is no notification: build it with ``is_notification=False``.
    """

    method: str
    params: Any = None
    id: Id = None
    is_notification: bool = attrs.field(default=attrs.Factory(lambda self: self.id is None, takes_self=True),
                                        kw_only=True)


@attrs.frozen
class Response:
    """An answer to a call of ours: ``result``, or ``error`` (the wire's error object, already checked)."""

    id: Id
    result: Any = None
    error: dict[str, Any] | None = None


@attrs.frozen(eq=False)
class Invalid:
    """Input that is no JSON-RPC message; :meth:`response` is its answer."""

    error: RpcError
    id: Id = None

    def response(self) -> dict[str, Any]:
        return error_response(self.id, self.error)


@attrs.frozen
class Batch:
    """A non-empty array of messages, each read on its own (§6)."""

    messages: tuple[Request | Response | Invalid, ...]


def needs_answer(message: Request | Response | Invalid) -> bool:
    """A call or an invalid message is answered; a notification or a response never is."""
    return isinstance(message, Invalid) or (isinstance(message, Request) and not message.is_notification)


# --------------------------------------------------------------------------- reading


def decode(raw: bytes | bytearray | memoryview | str) -> Any:
    """The JSON value of ``raw``, or :class:`Invalid` (-32700) when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Invalid(parse_error(str(exc)))


def parse(raw: bytes | bytearray | memoryview | str, *,
          ids: IdRule = SPEC_IDS) -> Request | Response | Batch | Invalid:
    """One message or a batch from JSON text; :class:`Invalid` for anything else."""
    value = decode(raw)
    return value if isinstance(value, Invalid) else read(value, ids=ids)


def read(value: Any, *, ids: IdRule = SPEC_IDS) -> Request | Response | Batch | Invalid:
    """One message or a batch from parsed JSON; :class:`Invalid` for anything else."""
    if not isinstance(value, list):
        return read_message(value, ids=ids)
    if not value:
        return Invalid(invalid_request("an empty batch"))
    return Batch(tuple(read_message(member, ids=ids) for member in value))


def read_message(value: Any, *, ids: IdRule = SPEC_IDS) -> Request | Response | Invalid:
    """One message (an array is no message: batches are :func:`read`'s)."""
    if not isinstance(value, dict):
        return Invalid(invalid_request("expected a JSON object"))
    has_id = "id" in value
    reply_id = value["id"] if "method" in value and has_id and ids.accepts(value["id"]) else None
    if value.get("jsonrpc") != "2.0":
        return Invalid(invalid_request('"jsonrpc" must be "2.0"'), reply_id)
    if "method" in value:
        if has_id and not ids.accepts(value["id"]):
            return Invalid(invalid_request(f"id must be {ids.described}"))
        method = value["method"]
        if not isinstance(method, str):
            return Invalid(invalid_request("method must be a string"), reply_id)
        params = value.get("params")
        if "params" in value and not isinstance(params, (dict, list)):
            return Invalid(invalid_request("params must be an object or an array"), reply_id)
        return Request(method, params, value.get("id"), is_notification=not has_id)
    if not has_id:
        return Invalid(invalid_request("neither a request nor a response (no method, no id)"))
    return _read_response(value, ids)


def _read_response(value: dict[str, Any], ids: IdRule) -> Response | Invalid:
    has_result, has_error = "result" in value, "error" in value
    if has_result == has_error:
        return Invalid(invalid_request("a response has exactly one of result and error"))
    response_id = value["id"]
    # Null is the id of an error about a request whose id could not be read (§5), whatever the rule.
    if not (ids.accepts(response_id) or (has_error and response_id is None)):
        return Invalid(invalid_request(f"a response's id must be {ids.described}"))
    if has_error:
        error = value["error"]
        if not (isinstance(error, dict) and type(error.get("code")) is int and isinstance(error.get("message"), str)):
            return Invalid(invalid_request("error must be an object with an integer code and a string message"))
        return Response(response_id, error=error)
    return Response(response_id, value["result"])


# --------------------------------------------------------------------------- writing


def request(call_id: Id, method: str, params: Any = None) -> dict[str, Any]:
    """A call (``params`` left out when ``None``)."""
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": call_id, "method": method}
    if params is not None:
        out["params"] = params
    return out


def notification(method: str, params: Any = None) -> dict[str, Any]:
    """A notification (``params`` left out when ``None``)."""
    out: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        out["params"] = params
    return out


def result_response(reply_id: Id, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": reply_id, "result": result}


def error_response(reply_id: Id, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": reply_id, "error": error.to_dict()}


def batch_answer(responses: Iterable[dict[str, Any] | None]) -> list[dict[str, Any]] | None:
    """A batch's answer: its responses in order, or ``None`` when there are none (nothing is sent, §6)."""
    answer = [response for response in responses if response is not None]
    return answer or None


def encode(message: Any) -> bytes:
    """The JSON text of a message or a batch's answer."""
    return orjson.dumps(message)
