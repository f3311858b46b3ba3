"""JSON-RPC 2.0 for ACP: parsing with the proper error codes, dispatch, and calls to the other side.

The :class:`Peer` knows nothing of ACP or of transports. A transport feeds it
raw messages (:meth:`Peer.receive`) and gives it one coroutine to send a
message (``send(message, session_id, event_id)``; the two hints let the HTTP
transport pick the stream — stdio ignores them).

Bad input never changes anything and never stops the peer: unparsable text
gets -32700 with a null id, a message that is not a JSON-RPC request or
response gets -32600, an unknown method -32601, bad params -32602 (the message
names the field). Notifications never get an answer, not even an error.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import orjson
import trio

log = logging.getLogger("trellis.acp")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_BUSY = -32000  # implementation-defined server error: too much in flight

MAX_IN_FLIGHT = 64  # concurrent (non-inline) requests per peer
MAX_OUTGOING = 256  # calls to the other side awaiting an answer


class RpcError(Exception):
    """A JSON-RPC error answer: raise it from a handler, or get it from :meth:`OutgoingCall.wait`."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.message!r})"


def invalid_params(message: str, path: str) -> RpcError:
    """-32602 whose message names the offending field (``$.prompt[0].text``)."""
    return RpcError(INVALID_PARAMS, f"Invalid params: {message} at {path}", {"path": path})


class ConnectionClosed(Exception):
    """The peer closed before the other side answered."""


@attrs.frozen
class Request:
    """An incoming request (``id`` set) or notification (``id`` is ``None``)."""

    method: str
    params: Any
    id: str | int | None = None

    @property
    def is_notification(self) -> bool:
        return self.id is None


@attrs.frozen
class Response:
    id: str | int
    result: Any = None
    error: dict[str, Any] | None = None


class BadMessage(Exception):
    """Input that is not a valid JSON-RPC message; ``reply_id`` is the id to answer with (or ``None``)."""

    def __init__(self, error: RpcError, reply_id: str | int | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.reply_id = reply_id


def _valid_id(value: Any) -> bool:
    # JSON-RPC allows strings and numbers; booleans are not numbers here, and fractions are refused.
    return isinstance(value, str) or (type(value) is int)


def parse(raw: bytes | str) -> Request | Response:
    """One message from its JSON text; raises :class:`BadMessage` for anything else."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadMessage(RpcError(PARSE_ERROR, f"Parse error: {exc}")) from None
    return from_value(value)


def from_value(value: Any) -> Request | Response:
    """One message from already-parsed JSON; raises :class:`BadMessage`."""
    if isinstance(value, list):
        raise BadMessage(RpcError(INVALID_REQUEST, "Invalid Request: batches are not supported"))
    if not isinstance(value, dict):
        raise BadMessage(RpcError(INVALID_REQUEST, "Invalid Request: expected a JSON object"))
    has_id = "id" in value
    raw_id = value.get("id")
    reply_id = raw_id if _valid_id(raw_id) else None
    if value.get("jsonrpc") != "2.0":
        raise BadMessage(RpcError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'), reply_id)
    if has_id and not _valid_id(raw_id):
        raise BadMessage(RpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer"))
    if "method" in value:
        method = value["method"]
        if not isinstance(method, str) or not method:
            raise BadMessage(RpcError(INVALID_REQUEST, "Invalid Request: method must be a non-empty string"),
                             reply_id)
        params = value.get("params")
        if "params" in value and not isinstance(params, (dict, list)):
            raise BadMessage(RpcError(INVALID_REQUEST, "Invalid Request: params must be an object or an array"),
                             reply_id)
        return Request(method, params, raw_id if has_id else None)
    if not has_id:
        raise BadMessage(RpcError(INVALID_REQUEST, "Invalid Request: neither a request nor a response"))
    has_result, has_error = "result" in value, "error" in value
    if has_result == has_error:
        raise BadMessage(RpcError(INVALID_REQUEST, "Invalid Request: a response has exactly one of result, error"))
    error = value.get("error")
    if has_error and not (isinstance(error, dict) and type(error.get("code")) is int):
        raise BadMessage(RpcError(INVALID_REQUEST, "Invalid Request: error must be an object with an integer code"))
    return Response(raw_id, value.get("result"), error)


def error_message(reply_id: str | int | None, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": reply_id, "error": error.to_dict()}


def result_message(reply_id: str | int, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": reply_id, "result": result}


class OutgoingCall:
    """A request we sent; its answer arrives later (or never)."""

    def __init__(self, call_id: str, method: str) -> None:
        self.id = call_id
        self.method = method
        self._done = trio.Event()
        self._result: Any = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _settle(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self._done.is_set():
            self._result, self._error = result, error
            self._done.set()

    async def wait(self, timeout: float = math.inf) -> Any:
        """The result; raises :class:`RpcError`, :class:`ConnectionClosed`, or ``trio.TooSlowError``."""
        with trio.fail_after(timeout):
            await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result


Handler = Callable[[Request], Awaitable[Any]]
Send = Callable[[dict[str, Any], "str | None", "int | None"], Awaitable[None]]


class _Deferred:
    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED: Any = _Deferred()
"""Returned by a handler that has arranged for :meth:`Peer.respond` to answer later."""


class Peer:
    """One side of a JSON-RPC connection.

    Handlers are registered per method. An *inline* handler runs inside
    :meth:`receive` (so messages after it wait for it: use this for short ones
    whose order matters, such as admitting a prompt before a cancel); others run
    as tasks in ``nursery``, at most :data:`MAX_IN_FLIGHT` at a time.
    """

    def __init__(
        self,
        send: Send,
        nursery: trio.Nursery,
        *,
        reply_scope: Callable[[Request], str | None] = lambda request: None,
        id_prefix: str = "trellis-",
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self._send = send
        self._nursery = nursery
        self._reply_scope = reply_scope
        self._handlers: dict[str, tuple[Handler, bool]] = {}
        self._outgoing: dict[str, OutgoingCall] = {}
        self._next_id = 0
        self._id_prefix = id_prefix
        self._in_flight = 0
        self._max_in_flight = max_in_flight
        self.closed = False

    def method(self, name: str, handler: Handler, *, inline: bool = False) -> None:
        self._handlers[name] = (handler, inline)

    # ------------------------------------------------------------- incoming

    async def receive(self, raw: bytes | str) -> None:
        """Handle one raw message; answers bad input with an error and goes on."""
        try:
            message = parse(raw)
        except BadMessage as bad:
            log.info("bad JSON-RPC input: %s", bad.error.message)
            await self._send(error_message(bad.reply_id, bad.error), None, None)
            return
        await self.receive_message(message)

    async def receive_message(self, message: Request | Response) -> None:
        if isinstance(message, Response):
            self._on_response(message)
            return
        entry = self._handlers.get(message.method)
        if entry is None:
            if message.is_notification:
                log.info("ignored unknown notification %r", message.method)
                return
            await self.respond(message, error=RpcError(METHOD_NOT_FOUND, f"Method not found: {message.method}"))
            return
        handler, inline = entry
        if inline or message.is_notification:
            # Notifications are quick by contract (cancel); running them here keeps their order.
            await self._run(handler, message)
            return
        if self._in_flight >= self._max_in_flight:
            await self.respond(message, error=RpcError(SERVER_BUSY, "Server busy: too many requests in flight"))
            return
        self._in_flight += 1
        self._nursery.start_soon(self._run_counted, handler, message)

    async def _run_counted(self, handler: Handler, message: Request) -> None:
        try:
            await self._run(handler, message)
        finally:
            self._in_flight -= 1

    async def _run(self, handler: Handler, message: Request) -> None:
        answer = await self._answer(handler, message)
        if answer is not None and not message.is_notification and not self.closed:
            await self._send(answer, self._reply_scope(message), None)

    async def _answer(self, handler: Handler, message: Request) -> dict[str, Any] | None:
        """The answer message of ``handler`` for ``message`` (``None`` when deferred)."""
        try:
            result = await handler(message)
        except RpcError as exc:
            if message.is_notification:
                log.info("notification %s failed: %s", message.method, exc.message)
            return error_message(message.id, exc)
        except Exception as exc:  # contained: one failing handler never stops the peer
            log.exception("handler for %s failed", message.method)
            return error_message(message.id, RpcError(INTERNAL_ERROR, "Internal error",
                                                      {"details": f"{type(exc).__name__}: {exc}"}))
        if result is DEFERRED:
            return None
        return result_message(message.id, result)  # type: ignore[arg-type]

    async def answer_now(self, message: Request) -> dict[str, Any]:
        """Run ``message``'s handler and return its answer instead of sending it (HTTP's ``initialize``)."""
        entry = self._handlers.get(message.method)
        if entry is None:
            return error_message(message.id, RpcError(METHOD_NOT_FOUND, f"Method not found: {message.method}"))
        answer = await self._answer(entry[0], message)
        assert answer is not None, "a deferred handler cannot answer now"
        return answer

    async def respond(self, request: Request, result: Any = None, *, error: RpcError | None = None) -> None:
        """Answer ``request`` (nothing for a notification)."""
        if request.is_notification:
            if error is not None:
                log.info("notification %s failed: %s", request.method, error.message)
            return
        assert request.id is not None
        message = error_message(request.id, error) if error is not None else result_message(request.id, result)
        if self.closed:
            return
        await self._send(message, self._reply_scope(request), None)

    # ------------------------------------------------------------- outgoing

    def _on_response(self, response: Response) -> None:
        call = self._outgoing.pop(str(response.id), None)
        if call is None:
            log.info("ignored a response to unknown or finished request %r", response.id)
            return
        if response.error is not None:
            error = response.error
            call._settle(error=RpcError(error["code"], str(error.get("message", "")), error.get("data")))
        else:
            call._settle(result=response.result)

    async def call(self, method: str, params: Any, *, session_id: str | None = None,
                   event_id: int | None = None) -> OutgoingCall:
        """Send a request to the other side; wait for the answer with ``await call.wait(timeout)``.

        Call :meth:`forget` when you stop waiting, so its slot is freed.
        """
        self._next_id += 1
        call = OutgoingCall(f"{self._id_prefix}{self._next_id}", method)
        if self.closed:
            call._settle(error=ConnectionClosed("the connection is closed"))
            return call
        if len(self._outgoing) >= MAX_OUTGOING:
            call._settle(error=RpcError(SERVER_BUSY, "too many requests awaiting the client"))
            return call
        self._outgoing[call.id] = call
        await self._send({"jsonrpc": "2.0", "id": call.id, "method": method, "params": params}, session_id, event_id)
        return call

    def forget(self, call: OutgoingCall) -> None:
        """Stop tracking a call; a late answer is then ignored."""
        self._outgoing.pop(call.id, None)
        call._settle(error=ConnectionClosed("no longer awaited"))

    async def notify(self, method: str, params: Any, *, session_id: str | None = None,
                     event_id: int | None = None) -> None:
        if not self.closed:
            await self._send({"jsonrpc": "2.0", "method": method, "params": params}, session_id, event_id)

    def close(self) -> None:
        """Fail every call still awaiting an answer; send nothing more."""
        self.closed = True
        calls, self._outgoing = list(self._outgoing.values()), {}
        for call in calls:
            call._settle(error=ConnectionClosed("the connection closed"))
