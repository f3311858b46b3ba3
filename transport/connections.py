"""Serving the app with hypercorn under Trio, with at most ``limit`` connections open (``limits.maxConnections``).

Hypercorn has no such cap: every accepted socket gets a connection task, an
h11/h2 state machine and buffers, and an idle keep-alive connection keeps all
of it until its keep-alive timeout. A client (or a buggy one in a reconnect
loop) could hold thousands and starve everyone else of file descriptors. The
cap must count sockets, which the ASGI app never sees (a connection that sends
nothing, an idle keep-alive one), so it sits where sockets are accepted.

``hypercorn.trio.serve`` accepts inside, with no place for that, so :func:`serve`
runs the same public parts of hypercorn it runs — its ``Lifespan``,
``WorkerContext`` and per-connection ``TCPServer``, with ``trio.serve_listeners``
— and puts :class:`ConnectionCap` in front of ``TCPServer``. Nothing of
hypercorn is subclassed or patched. One connection over the cap is answered at
once, before any HTTP parsing, with a canned 503 ``{"error", "code":
"too_many_connections", "path": null}`` and ``Connection: close``; the socket is
then closed. The refusal is bounded in time (:data:`REFUSAL_SECONDS`) and in
number (:data:`MAX_REFUSING`: past that many refusals under way, an extra
socket is closed without an answer), so connections over the cap hold nothing
for long. Trio runs one task at a time and the check and the increment happen
without an ``await`` between them, so the count is exact.

Three faults of hypercorn under Trio are worked around, each as small as it
works (reproductions and patches for upstream: ``docs/upstream/``):

1. a connection whose handler raises stops the whole server (its handlers run
   in the server's nursery): :class:`ConnectionCap` contains the exception;
2. an answer that says ``Connection: close`` leaves its socket open, and
3. the keep-alive timer of a connection is never started, so an idle
   connection is never closed: both because hypercorn finishes a connection's
   answer (the close, or the timer's start) in the task that sent its last
   body message, which quart-trio cancels as soon as that send returns;
   :class:`transport.answers.WholeAnswers` sends that message shielded;
4. a connection the client has closed stays open (and holds its slot under
   the cap) until its keep-alive timer expires, since the timer's task keeps
   the connection's task group alive: :class:`ClientSide` stops the timer when
   the client's side ends, and :class:`IdleTimer` keeps it stopped.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import orjson
import trio
from hypercorn.config import Config
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import TrioSingleTask, WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr, wrap_app

from .answers import WholeAnswers

if sys.version_info < (3, 11):  # pragma: no cover - the project needs 3.11
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger("trellis.connections")

DEFAULT_MAX_CONNECTIONS = 256
REFUSAL_SECONDS = 1.0  # at most this long to write the 503 and read what the client already sent
REFUSAL_DRAIN_BYTES = 64 * 1024  # read (and drop) at most this much of the refused request before closing
MAX_REFUSING = 64  # refusals under way at once; past it, an extra socket is closed without an answer


def refusal_bytes(limit: int) -> bytes:
    """The whole HTTP/1.1 answer to a connection over the cap (written before any request is parsed)."""
    body = orjson.dumps({"error": f"too many open connections (at most {limit}); close idle ones or retry later",
                         "code": "too_many_connections", "path": None})
    head = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\nretry-after: 1\r\n\r\n" % len(body))
    return head + body


class ConnectionCap:
    """Counts open connections; runs ``handler`` for those under ``limit`` and refuses the rest."""

    def __init__(self, limit: int, handler: Callable[[trio.SocketStream], Awaitable[None]]) -> None:
        if limit < 1:
            raise ValueError(f"max_connections must be at least 1, got {limit}")
        self.limit = limit
        self.handler = handler
        self.open = 0  # connections being served (idle keep-alive ones and streams included)
        self.refusing = 0
        self.refused = 0  # in total, for diagnostics
        self._answer = refusal_bytes(limit)

    async def __call__(self, stream: trio.SocketStream) -> None:
        if self.open >= self.limit:
            await self._refuse(stream)
            return
        self.open += 1
        try:
            await self.handler(stream)
        except Exception as exc:
            # Contained: hypercorn's handlers run in the server's nursery, so one connection's exception would
            # stop the whole server (and the daemon). A WebSocket upgrade request with a body does exactly that
            # in hypercorn 0.18 (h11 LocalProtocolError from its rejection path), before any authentication.
            # TCPServer closed the connection on its way out; every other one goes on.
            # One line per failure (a client could send many); the traceback at debug level.
            log.warning("a connection failed inside hypercorn and was closed: %r", exc,
                        exc_info=log.isEnabledFor(logging.DEBUG))
        finally:
            self.open -= 1

    async def _refuse(self, stream: trio.SocketStream) -> None:
        self.refused += 1
        if self.refusing >= MAX_REFUSING:
            await trio.aclose_forcefully(stream)  # a flood: no answer, nothing kept
            return
        self.refusing += 1
        try:
            with trio.move_on_after(REFUSAL_SECONDS):
                await stream.send_all(self._answer)
                await stream.send_eof()
                # Read what the client already sent before closing: closing a socket with unread input
                # makes the kernel send RST, which can discard the 503 before the client reads it.
                drained = 0
                while drained < REFUSAL_DRAIN_BYTES:
                    data = await stream.receive_some(16 * 1024)
                    if not data:
                        break
                    drained += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the client is gone already
        finally:
            self.refusing -= 1
            await trio.aclose_forcefully(stream)


class IdleTimer:
    """A connection's keep-alive timer: hypercorn's own (``TrioSingleTask``), put in as ``TCPServer.idle_task``,
    which stays stopped once the client's side has ended (an answer finishing after that would start it again,
    and the connection would wait for it)."""

    def __init__(self) -> None:
        self._timer = TrioSingleTask()
        self.client_gone = False

    async def restart(self, task_group: Any, action: Callable[[], Awaitable[None]]) -> None:
        if not self.client_gone:
            await self._timer.restart(task_group, action)

    async def stop(self) -> None:
        await self._timer.stop()

    async def client_ended(self) -> None:
        self.client_gone = True
        await self._timer.stop()


class ClientSide(trio.abc.HalfCloseableStream):
    """A connection's socket stream as hypercorn's ``TCPServer`` reads it, telling the keep-alive timer once the
    client's side has ended, so the connection closes at once."""

    def __init__(self, stream: trio.SocketStream, timer: IdleTimer) -> None:
        self.stream = stream
        self.socket = stream.socket  # what TCPServer reads the addresses from
        self.timer = timer

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            data = await self.stream.receive_some(max_bytes)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self.timer.client_ended()
            raise
        if not data:
            await self.timer.client_ended()
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        await self.stream.aclose()


async def serve_connection(app: object, config: Config, context: WorkerContext, state: ConnectionState,
                           stream: trio.SocketStream) -> None:
    """One accepted connection, served by hypercorn's ``TCPServer``."""
    timer = IdleTimer()
    server = TCPServer(app, config, context, state, ClientSide(stream, timer))  # type: ignore[arg-type]
    server.idle_task = timer  # type: ignore[assignment]
    try:
        await server.run()
    finally:
        # The server and its protocol refer to each other (the protocol sends through a bound method of the
        # server): without the cycle, a connection that outlived a frozen full collection is freed when it
        # ends, by reference counting (transport.gc_policy), not kept until the next thaw.
        server.protocol = None  # type: ignore[assignment]


async def serve(
    app: object,
    config: Config,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``hypercorn.trio.serve(app, config, shutdown_trigger=...)`` with at most ``max_connections`` open.

    Plain TCP binds only (the daemon serves no TLS or QUIC itself). Reports the
    bound URLs (``http://host:port``) through ``task_status``, as hypercorn does.
    The steps are hypercorn's own (``hypercorn.trio.run.worker_serve``).
    """
    wrapped = wrap_app(WholeAnswers(app), config.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]
    config.set_statsd_logger_class(StatsdLogger)
    lifespan_state: dict[str, object] = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()

        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets()
            if sockets.secure_sockets or sockets.quic_sockets:
                raise ValueError("transport.connections.serve serves plain TCP binds only")
            listeners = []
            binds = []
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            handler = partial(serve_connection, wrapped, config, context, ConnectionState(lifespan_state.copy()))
            cap = ConnectionCap(max_connections, handler)  # type: ignore[arg-type]
            task_status.started(binds)
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    if shutdown_trigger is not None:
                        nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    nursery.start_soon(partial(trio.serve_listeners, cap, listeners, handler_nursery=server_nursery))
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors
            finally:
                # As hypercorn: stop accepting, tell open connections to finish (idle ones close at once),
                # give them the graceful timeout.
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout

        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
