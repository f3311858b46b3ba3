"""Serving hypercorn under Trio with a cap on open connections (``limits.maxConnections``).

Hypercorn has no such cap: every accepted socket gets a connection task, an
h11/h2 state machine and buffers, and an idle keep-alive connection keeps all
of it until its keep-alive timeout. A client (or a buggy one in a reconnect
loop) could hold thousands and starve everyone else of file descriptors.

Why here and not in the ASGI app: the app only sees requests, never a
connection that sends nothing, sits idle between keep-alive requests, or
holds an SSE stream — the cap must count sockets. So this module owns the
accept loop: :func:`serve` mirrors ``hypercorn.trio.run.worker_serve``
(hypercorn 0.17–0.18: lifespan, the worker context, the shutdown trigger, the
graceful timeout) for plain-TCP binds, and hands every accepted stream to
:class:`ConnectionCap`, which runs hypercorn's own per-connection
``TCPServer`` while fewer than ``limit`` connections are open. One over the cap
is answered at once, before any HTTP parsing, with a canned 503
``{"error", "code": "too_many_connections", "path": null}`` and
``Connection: close``; the socket is then closed. The refusal is bounded in
time (:data:`REFUSAL_SECONDS`) and in number (:data:`MAX_REFUSING`: past that
many refusals under way, an extra socket is closed without an answer), so
connections over the cap hold nothing for long.

Trio runs one task at a time and the check and the increment happen without
an ``await`` between them, so the count is exact.

Owning the accept loop also lets this module fix hypercorn-under-Trio faults.
Two the HTTP fuzz test (tests/e2e/test_http_fuzz.py) found: a connection whose
handler raises no longer stops the server (:meth:`ConnectionCap.__call__`), and
an answer that says ``Connection: close`` really closes its socket
(:class:`_TCPServer`). And an idle keep-alive connection is closed after
hypercorn's ``keep_alive_timeout`` (its timer was restarted from a task
quart-trio had cancelled, so it never ran), by one sweep task for the whole
server rather than a timer task per request (:mod:`transport.keep_alive`). It also writes
an answer of known length (a 202, any JSON answer) in one write, head and body
together, where hypercorn writes the head first (:meth:`_TCPServer.protocol_send`).

And it makes each write cheaper, since an event stream writes once per event
chunk (see "per-write cost" below): a write goes straight to the socket when
nothing else is writing on that connection (:meth:`_TCPServer._write`), and an
event-stream chunk is framed here rather than by h11 (:class:`_H11Protocol`).

And a prompt's admission, the request every turn starts with, is answered by
its connection when it comes to an idle HTTP/1.1 connection in its plainest
form, its body in the same read or within :data:`BODY_WAIT` after its head
(:meth:`_TCPServer._offer_inline`, :mod:`transport.inline_request`): no h11
parse, no ASGI stream or app task, the same bytes back. Anything else, or a
request the app's inline answer declines, goes to hypercorn untouched.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import h11
import orjson
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.events import Body
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr, wrap_app

from . import access_log
from .admission import InlineAnswer, server_error
from .inline_request import answer_bytes, read_prompt_request
from .keep_alive import IdleSweep, IdleTimer

try:  # h11's own writer class, to tell a chunked body (h11 0.14-0.16); without it, h11 frames every chunk
    from h11._writers import ChunkedWriter
except ImportError:  # pragma: no cover - a future h11
    ChunkedWriter = None  # type: ignore[assignment,misc]

if sys.version_info < (3, 11):  # pragma: no cover - the project needs 3.11
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger("trellis.connections")

DEFAULT_MAX_CONNECTIONS = 256
REFUSAL_SECONDS = 1.0  # at most this long to write the 503 and read what the client already sent
REFUSAL_DRAIN_BYTES = 64 * 1024  # read (and drop) at most this much of the refused request before closing
MAX_REFUSING = 64  # refusals under way at once; past it, an extra socket is closed without an answer
BODY_WAIT = 1.0  # seconds an inline admission's body may take after its head; a slower one is hypercorn's


class _TCPServer(TCPServer):
    """Hypercorn's per-connection server, closing the socket even from a cancelled task.

    Hypercorn closes a connection whose answer said ``Connection: close`` from
    the task that sent the answer — quart-trio's request task, which quart-trio
    cancels as soon as the response is sent. The close (``send_eof`` then
    ``aclose``) then dies at its first checkpoint and the socket stays open,
    holding a connection slot and a task, for as long as the client keeps it:
    every refusal that closes its connection (unread body, 413, 503) leaked one.
    Shielded, it completes (both steps are immediate on a socket; the deadline
    is only a backstop).
    """

    _held: bytes | None = None  # a response head waiting for its body (see protocol_send)
    _protocol: ProtocolWrapper

    def __init__(self, *args: Any, sweep: IdleSweep, inline: InlineAnswer | None = None) -> None:
        super().__init__(*args)
        self.idle_task = IdleTimer(sweep, self._initiate_server_close)  # type: ignore[assignment]
        self._inline = inline

    @property
    def protocol(self) -> ProtocolWrapper:  # type: ignore[override]
        return self._protocol

    @protocol.setter
    def protocol(self, wrapper: ProtocolWrapper) -> None:
        """Hypercorn's ``run`` builds the connection's protocol; an HTTP/1.1 one becomes :class:`_H11Protocol`.

        The wrapper keeps everything its protocol was built from; the stock
        :class:`H11Protocol` it made has seen no byte yet (this runs before
        ``initiate``), so replacing it loses nothing. An h2c / prior-knowledge
        HTTP/2 switch later replaces it with hypercorn's own H2 protocol, as now.
        """
        if type(wrapper.protocol) is H11Protocol:
            wrapper.protocol = _H11Protocol(wrapper.app, wrapper.config, wrapper.context, wrapper.task_group,
                                            wrapper.state, wrapper.ssl, wrapper.client, wrapper.server,
                                            wrapper.send)
        self._protocol = wrapper

    async def _close(self) -> None:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + REFUSAL_SECONDS):
            await super()._close()

    async def _read_data(self) -> None:
        """Hypercorn's read loop, without a cancel scope around each read when there is no ``read_timeout``
        (hypercorn enters ``fail_after(inf)``: a scope that can never expire, about 28,000 instructions a
        read)."""
        try:
            if self.config.read_timeout is not None:
                await super()._read_data()
                return
            while True:
                try:
                    data = await self.stream.receive_some(MAX_RECV)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    break
                if self._inline is not None and data:
                    answered, data, end = await self._offer_inline(data)
                    if answered:
                        continue
                    if end is not None:  # the stream ended while a body was awaited: hypercorn is told as it reads
                        await self.protocol.handle(RawData(data))
                        if end == "closed":
                            break
                        data = b""
                await self.protocol.handle(RawData(bytes(data)))
                if data == b"":
                    break
            await self.protocol.handle(Closed())
        finally:
            # The connection is closed: out of the keep-alive sweep for good (a late "idle" from a request
            # task still finishing, after a client's reset, must not put it back).
            self.idle_task.close()

    async def _offer_inline(self, data: bytes | bytearray) -> tuple[bool, bytes, str | None]:
        """Answer a prompt admission that came to an idle HTTP/1.1 connection with the app's inline answer,
        without h11, hypercorn's stream or an app task (see :mod:`transport.inline_request`).

        Returns whether it was answered; if not, the bytes hypercorn is to handle (``data``, with what else was
        read) and how the stream ended meanwhile (``"eof"``, ``"closed"``) or ``None``. A head whose body comes
        in later reads (httpx writes them apart) is read on for at most :data:`BODY_WAIT` seconds; a body slower
        than that is hypercorn's, as the rest.

        The connection is busy meanwhile (off the keep-alive sweep), counts the request towards hypercorn's
        ``keep_alive_max_requests`` (the one that reaches it is hypercorn's, which closes after it), gets the
        access line :class:`transport.access_log.AccessLog` writes, and is closed after an answer that says
        ``Connection: close``, as hypercorn closes it.
        """
        protocol = self._protocol.protocol
        if type(protocol) is not _H11Protocol:
            return False, data, None
        connection = protocol.connection
        if (type(connection) is not h11.Connection or connection.our_state is not h11.IDLE
                or connection.their_state is not h11.IDLE or connection.trailing_data[0] or protocol.stream is not None
                or protocol.keep_alive_requests + 1 >= self.config.keep_alive_max_requests
                or self.context.terminated.is_set()):
            return False, data, None
        started = time.perf_counter()
        data = bytes(data)
        request, missing = read_prompt_request(data)
        if request is None and not missing:
            return False, data, None
        await self.idle_task.stop()  # a request has begun (hypercorn marks it so once it has the head)
        if missing:
            data, missing, end = await self._read_body(data, missing)
            if missing or end is not None:
                return False, data, end
            request, _ = read_prompt_request(data)
            if request is None:
                return False, data, None
        scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": request.path,
                 "query_string": b"", "headers": request.headers, "client": protocol.client}
        try:
            answer = await self._inline(scope, request.body)  # type: ignore[misc]
        except Exception:
            log.exception("the inline answer to POST %s failed", access_log.shown_path(request.path))
            answer = server_error()
        if answer is None:
            return False, data, None  # hypercorn takes the request from here, and marks the connection idle after
        protocol.keep_alive_requests += 1
        await self.context.mark_request()  # as hypercorn counts a request (its max_requests)
        status, headers, body = answer
        await self._write(answer_bytes(status, headers, body, self.config.response_headers("h11")))
        if access_log.log.isEnabledFor(logging.INFO):
            access_log.write_line(scope, status, started)
        if (b"connection", b"close") in headers:
            await self.protocol_send(Closed())  # as hypercorn does once h11 must close: the socket, then the protocol
        else:
            await self.idle_task.restart(self._task_group)
        return True, b"", None

    async def _read_body(self, data: bytes, missing: int) -> tuple[bytes, int, str | None]:
        """Read on until ``missing`` more bytes have come, at most :data:`BODY_WAIT` seconds: what was read with
        ``data``, what is still missing (below 0: more came than the body), and ``"eof"``/``"closed"`` if the
        stream ended. (A cancel scope of its own, where a whole request in one read has none.)"""
        end = None
        with trio.move_on_after(BODY_WAIT):
            try:
                while missing > 0:
                    more = await self.stream.receive_some(MAX_RECV)
                    if not more:
                        end = "eof"
                        break
                    data += more
                    missing -= len(more)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                end = "closed"
        return data, missing, end

    async def protocol_send(self, event: Event) -> None:
        """Hypercorn's, but the head of an answer with a ``Content-Length`` goes out with its body.

        Hypercorn writes the head as soon as the app starts its answer, then the
        body: two writes (each a lock, a send and their checkpoints) where a 202
        or a JSON answer needs one. The head is held until the next thing sent
        on the connection — the body, which the app sends right after it, or the
        empty end of a bodiless answer — and goes out in the same write. Any
        other event sends it first. Streamed answers (an SSE stream: no
        ``Content-Length``) and answers that close their connection (refusals,
        whose close follows hypercorn's own order) are written as they come.
        """
        held, self._held = self._held, None
        if type(event) is RawData:
            data = event.data
            if held is not None:
                data = held + data
            elif _sized_head(data):
                self._held = data
                return
            await self._write(data)
            return
        if held is not None:
            await self._write(held)
        await super().protocol_send(event)

    async def _write(self, data: bytes) -> None:
        """Hypercorn's write of ``RawData`` (under the send lock, shielded, a broken socket handled as
        ``Closed``), without its two trips through the scheduler when nothing else is writing.

        Per-write cost: hypercorn takes the connection's send lock (a checkpoint
        that yields to the scheduler) and calls ``send_all`` (another), for every
        write — an event stream's every chunk. When the lock is free no write is
        under way on this connection, and none can start before this returns
        without an ``await``, so the bytes go to the non-blocking socket at once:
        the same bytes, in the same order. Whatever the kernel does not take
        (its buffer is full: a slow client) is written as hypercorn writes it,
        under the lock, shielded, waiting for the socket — so a slow reader still
        holds the sender back (backpressure unchanged; the subscription's own
        bounded queue and eviction do the rest). A socket error on the direct
        write is left to hypercorn's path, which meets it again and handles it as
        now (``Closed`` to the protocol). As hypercorn's lock does, a cancelled
        sender is stopped before anything is written.

        Plain HTTP/1.1 only: a WebSocket upgrade (hypercorn's ``H11WSConnection``)
        or HTTP/2 keeps hypercorn's write. Its rejection of an upgrade with a body
        relies on the scheduling those checkpoints give (without them the app's
        reply no longer fails, and hypercorn then never closes the connection).
        """
        lock = self.send_lock
        stream = self.stream
        if lock.locked() or type(stream) is not trio.SocketStream or not self._plain_http():
            await super().protocol_send(RawData(data=data))
            return
        await trio.lowlevel.checkpoint_if_cancelled()  # no scheduling, unless cancelled (then it raises)
        fd = stream.socket.fileno()
        if fd < 0:  # closed: hypercorn's path raises ClosedResourceError and handles it
            await super().protocol_send(RawData(data=data))
            return
        if not data:  # h11's end of a sized body: nothing to write
            return
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
        except OSError:  # reset, broken pipe: nothing written; hypercorn's path meets the error and handles it
            await super().protocol_send(RawData(data=data))
            return
        if sent == len(data):
            return
        lock.acquire_nowait()  # free (checked above, no await since): the rest is written as hypercorn writes
        try:
            with trio.CancelScope(shield=True):
                await stream.send_all(memoryview(data)[sent:])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self.protocol.handle(Closed())
        finally:
            lock.release()


    def _plain_http(self) -> bool:
        """Whether the connection speaks plain HTTP/1.1 through :class:`_H11Protocol` (not a WebSocket, not h2)."""
        protocol = self._protocol.protocol
        return type(protocol) is _H11Protocol and type(protocol.connection) is h11.Connection


class _H11Protocol(H11Protocol):
    """Hypercorn's HTTP/1.1 protocol, framing a chunked body's data itself.

    Hypercorn hands every body chunk to h11 (``Connection.send(Data)``): an
    event object, a state-machine step, three writes joined. For a chunked body
    (an event stream), h11's writer only frames (``<hex size>\\r\\n<data>\\r\\n``)
    and sending ``Data`` in ``SEND_BODY`` changes no state, so the frame is made
    here, the same bytes. Anything else — the head, a sized body (h11 counts its
    length), the end of a body, a refusal — goes through h11 as before, and h11
    still ends the chunked body (``0\\r\\n\\r\\n``) and decides keep-alive.
    """

    async def stream_send(self, event: object) -> None:
        if type(event) is Body:
            connection = self.connection
            if (type(connection) is h11.Connection and connection.our_state is h11.SEND_BODY
                    and ChunkedWriter is not None and type(getattr(connection, "_writer", None)) is ChunkedWriter):
                data = event.data
                if data:  # an empty chunk would end the body: h11 writes nothing for it either
                    await self.send(RawData(data=b"%x\r\n%b\r\n" % (len(data), data)))
                return
        await super().stream_send(event)  # type: ignore[arg-type]


def _sized_head(data: bytes) -> bool:
    """Whether ``data`` is a whole HTTP/1.x response head (not 1xx) that announces a ``Content-Length`` and
    keeps its connection (a ``Connection: close`` answer — a refusal — is written as hypercorn writes it)."""
    if not (data.startswith(b"HTTP/1.") and data.endswith(b"\r\n\r\n")) or data[9:10] == b"1":
        return False
    head = data.lower()
    return b"\r\ncontent-length:" in head and b"\r\nconnection: close" not in head


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
            # The connection is closed by trio.serve_listeners; every other one goes on.
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


async def serve(
    app: object,
    config: Config,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    inline: InlineAnswer | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``hypercorn.trio.serve(app, config, shutdown_trigger=...)`` with at most ``max_connections`` open.

    Plain TCP binds only (the daemon serves no TLS or QUIC itself). Reports the
    bound URLs (``http://host:port``) through ``task_status``, as hypercorn does.
    With ``inline`` (the app's :data:`transport.inline_http.INLINE_ANSWER`), a
    prompt admission read whole at once is offered to it first (see
    :meth:`_TCPServer._offer_inline`).
    """
    wrapped = wrap_app(app, config.wsgi_max_body_size, None)  # type: ignore[arg-type]
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
            sweep = IdleSweep(config.keep_alive_timeout)
            handler = partial(_TCPServer, wrapped, config, context, ConnectionState(lifespan_state.copy()),
                              sweep=sweep, inline=inline)
            cap = ConnectionCap(max_connections, handler)  # type: ignore[arg-type]
            task_status.started(binds)
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    if shutdown_trigger is not None:
                        nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    nursery.start_soon(sweep.run)
                    nursery.start_soon(partial(trio.serve_listeners, cap, listeners, handler_nursery=server_nursery))
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors
            finally:
                # As hypercorn: stop accepting, tell open connections to finish, give them the graceful timeout.
                await context.terminated.set()
                sweep.close_all()  # idle connections close now, as hypercorn's timers do once terminated
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout

        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
