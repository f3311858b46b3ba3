"""ACP's JSON-RPC peer: dispatch to handlers, and calls to the other side awaiting their answers.

Messages, errors and their codes are :mod:`actors.wire.jsonrpc`'s (the one
JSON-RPC of the daemon, shared with MCP); this module adds what ACP does with
them. The :class:`Peer` knows nothing of ACP or of transports. A transport
feeds it raw messages (:meth:`Peer.receive`) and gives it one coroutine to
send a message (``send(message, session_id, event_id)``; the two hints let the
HTTP transport pick the stream — stdio ignores them).

ACP narrows JSON-RPC in two ways (:func:`read`): request ids are strings or
integers, and there are no batches — an array is one -32600 with a null id
(its replies would belong to different streams over HTTP; ACP's clients never
batch). Bad input never changes anything and never stops the peer; a
notification never gets an answer, not even an error.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from actors.wire import jsonrpc
from actors.wire.jsonrpc import (
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, Invalid, Request, Response,
    RpcError, invalid_params,
)

log = logging.getLogger("trellis.acp")

SERVER_BUSY = jsonrpc.SERVER_ERROR  # too much in flight, or a daemon limit (``data.code`` says which)

MAX_IN_FLIGHT = 64  # concurrent (non-inline) requests per peer
MAX_OUTGOING = 256  # calls to the other side awaiting an answer

__all__ = [
    "DEFERRED", "INTERNAL_ERROR", "INVALID_PARAMS", "INVALID_REQUEST", "METHOD_NOT_FOUND", "PARSE_ERROR",
    "SERVER_BUSY", "ConnectionClosed", "Invalid", "OutgoingCall", "Peer", "Request", "Response", "RpcError", "Send",
    "invalid_params", "read",
]


class ConnectionClosed(Exception):
    """The peer closed before the other side answered."""


def read(raw: bytes | str) -> Request | Response | Invalid:
    """One ACP message from its JSON text, or the :class:`Invalid` that answers it."""
    message = jsonrpc.parse(raw, ids=jsonrpc.STRING_OR_INTEGER_IDS)
    if isinstance(message, jsonrpc.Batch):
        return Invalid(jsonrpc.invalid_request("batches are not supported"))
    return message


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
        message = read(raw)
        if isinstance(message, Invalid):
            log.info("bad JSON-RPC input: %s", message.error.message)
            await self._send(message.response(), None, None)
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
            await self.respond(message, error=jsonrpc.method_not_found(message.method))
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
            return jsonrpc.error_response(message.id, exc)
        except Exception as exc:  # contained: one failing handler never stops the peer
            log.exception("handler for %s failed", message.method)
            return jsonrpc.error_response(message.id, jsonrpc.internal_error(f"{type(exc).__name__}: {exc}"))
        if result is DEFERRED:
            return None
        return jsonrpc.result_response(message.id, result)

    async def answer_now(self, message: Request) -> dict[str, Any]:
        """Run ``message``'s handler and return its answer instead of sending it (HTTP's ``initialize``)."""
        entry = self._handlers.get(message.method)
        if entry is None:
            return jsonrpc.error_response(message.id, jsonrpc.method_not_found(message.method))
        answer = await self._answer(entry[0], message)
        assert answer is not None, "a deferred handler cannot answer now"
        return answer

    async def respond(self, request: Request, result: Any = None, *, error: RpcError | None = None) -> None:
        """Answer ``request`` (nothing for a notification)."""
        if request.is_notification:
            if error is not None:
                log.info("notification %s failed: %s", request.method, error.message)
            return
        if error is not None:
            message = jsonrpc.error_response(request.id, error)
        else:
            message = jsonrpc.result_response(request.id, result)
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
            call._settle(error=RpcError.from_dict(response.error))
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
        await self._send(jsonrpc.request(call.id, method, params), session_id, event_id)
        return call

    def forget(self, call: OutgoingCall) -> None:
        """Stop tracking a call; a late answer is then ignored."""
        self._outgoing.pop(call.id, None)
        call._settle(error=ConnectionClosed("no longer awaited"))

    async def notify(self, method: str, params: Any, *, session_id: str | None = None,
                     event_id: int | None = None) -> None:
        if not self.closed:
            await self._send(jsonrpc.notification(method, params), session_id, event_id)

    def close(self) -> None:
        """Fail every call still awaiting an answer; send nothing more."""
        self.closed = True
        calls, self._outgoing = list(self._outgoing.values()), {}
        for call in calls:
            call._settle(error=ConnectionClosed("the connection closed"))
