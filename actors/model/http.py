"""A lean HTTP/1.1 transport for httpx: h11 over Trio sockets, with keep-alive.

The openai provider sends one POST per model call and reads its SSE stream.
Through httpx's default transport about a quarter of the daemon's CPU per
turn went to httpcore: its connection pool's bookkeeping, its wrapper round
h11's state machine, a ``fail_after`` scope round every socket read and
write, several async-generator layers per body chunk. :class:`Transport`
does the same work for about 170 µs less CPU a request (580 → 415 µs for a
short stream from the loopback fake; 8.2 → 7.0 ms of daemon CPU per
canonical guard turn of four calls). It is an :class:`httpx.AsyncBaseTransport`,
so requests, responses and exception classes above it stay httpx's:

- keep-alive: at most ``max_idle`` idle connections per (scheme, host, port),
  the least recently used closed first. A connection goes back to the pool only
  when its response was read to the end and h11 can start another cycle on it;
- an idle connection that has become readable (the server closed it) is
  dropped before use; one found closed when reused (EOF or a reset before the
  response's first byte: the keep-alive race) is dropped and the request sent
  once more on a new connection — only in that case;
- a request's head and body go out in one ``send_all``; a body over
  :data:`JOIN_LIMIT` goes right after its head instead, not copied into one
  buffer with it (a fresh allocation of the body's size, page faults and all);
- timeouts from httpx's ``timeout`` extension (``connect`` round opening and
  the TLS handshake, ``write``, ``read`` round each receive): one cancel scope
  per await that can block, none while h11 already holds the next event;
- a body the server leaves incomplete (a cut mid-chunk) is
  :class:`httpx.RemoteProtocolError`, never a silent end;
- https through :class:`trio.SSLStream`, its context made on first use as httpx
  makes it (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, else certifi), ALPN
  ``http/1.1``. Bodies pass through raw: httpx decodes a ``Content-Encoding``.

No proxies (the provider sends through the full httpx client when the
environment names one), no HTTP/2, no upgrades, and no cap on connections in
use (httpcore's default was 100, then a wait of up to the ``pool`` timeout).
"""

from __future__ import annotations

import math
import ssl
from typing import Any

import h11
import httpx
import trio

DEFAULT_MAX_IDLE = 8
READ_SIZE = 65536
JOIN_LIMIT = 65536  # a request body up to this size is sent in one buffer with its head
_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

Origin = tuple[bytes, bytes, int]  # scheme, host, port


class _Gone(Exception):
    """A reused connection was closed by the server before a byte of the response."""


def _reset(exc: BaseException | None) -> bool:
    """Whether a stream error was caused by a connection reset (or a broken pipe)."""
    while exc is not None:
        if isinstance(exc, ConnectionError):
            return True
        exc = exc.__cause__
    return False


class _Connection:
    __slots__ = ("origin", "stream", "socket", "h11", "broken")

    def __init__(self, origin: Origin, stream: trio.abc.Stream, socket: trio.socket.SocketType) -> None:
        self.origin = origin
        self.stream = stream
        self.socket = socket
        self.h11 = h11.Connection(h11.CLIENT)
        self.broken = False

    def close(self) -> None:
        """Close the socket at once (no TLS close_notify: nothing waits for it)."""
        self.broken = True
        self.socket.close()

    async def receive(self, timeout: float | None) -> bytes:
        if timeout is None:
            return await self.stream.receive_some(READ_SIZE)
        with trio.CancelScope(deadline=trio.current_time() + timeout):
            return await self.stream.receive_some(READ_SIZE)
        raise httpx.ReadTimeout(f"no data in {timeout:g}s")

    async def next_event(self, timeout: float | None) -> Any:
        """The next h11 event, reading the socket only when h11 needs data."""
        conn = self.h11
        while (event := conn.next_event()) is h11.NEED_DATA:
            conn.receive_data(await self.receive(timeout))
        return event


class _Body(httpx.AsyncByteStream):
    """A response body as it arrives; :meth:`aclose` pools the connection if it was read to the end."""

    def __init__(self, transport: Transport, conn: _Connection, timeout: float | None,
                 request: httpx.Request) -> None:
        self._transport = transport
        self._conn: _Connection | None = conn
        self._timeout = timeout
        self._request = request
        self._complete = False

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        if conn is None or self._complete:
            raise StopAsyncIteration
        try:
            event = await conn.next_event(self._timeout)
            if type(event) is h11.Data:
                return bytes(event.data)
            if type(event) is not h11.EndOfMessage:
                raise httpx.RemoteProtocolError(f"unexpected {event!r} in the body", request=self._request)
        except h11.RemoteProtocolError as exc:
            self._fail()
            raise httpx.RemoteProtocolError(str(exc), request=self._request) from exc
        except _STREAM_ERRORS as exc:
            self._fail()
            raise httpx.ReadError(f"reading the response: {exc}", request=self._request) from exc
        except BaseException:
            self._fail()
            raise
        self._complete = True
        raise StopAsyncIteration

    def _fail(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._transport._discard(conn)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            (self._transport._release if self._complete else self._transport._discard)(conn)


class Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 to any origin, keeping up to ``max_idle`` idle connections to each (see the module doc)."""

    def __init__(self, *, max_idle: int = DEFAULT_MAX_IDLE, ssl_context: ssl.SSLContext | None = None) -> None:
        if max_idle < 0:
            raise ValueError(f"max_idle must not be negative, got {max_idle}")
        self.max_idle = max_idle
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[_Connection]] = {}  # each list oldest first
        self._active: set[_Connection] = set()

    def idle_count(self) -> int:
        return sum(map(len, self._idle.values()))

    async def aclose(self) -> None:
        """Close every connection, idle or in use; the transport stays usable."""
        for conn in [*self._active, *(c for conns in self._idle.values() for c in conns)]:
            conn.close()
        self._idle.clear()
        self._active.clear()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}", request=request)
        origin = (scheme, url.raw_host, url.port or (443 if scheme == b"https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]
        head = h11.Request(method=request.method, target=url.raw_path, headers=request.headers.raw)
        conn = self._pooled(origin)
        while True:
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin, timeouts.get("connect"), request)
            self._active.add(conn)
            try:
                event = await self._exchange(conn, head, body, timeouts, reused, request)
                break
            except _Gone:
                self._discard(conn)
                conn = None  # the keep-alive race: once more, on a new connection
            except BaseException:
                self._discard(conn)
                raise
        return httpx.Response(
            event.status_code, headers=event.headers.raw_items(), request=request,
            stream=_Body(self, conn, timeouts.get("read"), request),
            extensions={"http_version": b"HTTP/" + event.http_version, "reason_phrase": event.reason})

    async def _exchange(self, conn: _Connection, head: h11.Request, body: bytes, timeouts: dict[str, Any],
                        reused: bool, request: httpx.Request) -> h11.Response:
        """Send the request and read the response's head; ``_Gone`` if ``reused`` and found closed."""
        h = conn.h11
        try:
            parts = h.send_with_data_passthrough(head)
            if body:
                parts += h.send_with_data_passthrough(h11.Data(data=body))
            parts += h.send_with_data_passthrough(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc), request=request) from exc
        timeout = timeouts.get("write")
        chunks = [b"".join(parts)] if len(body) <= JOIN_LIMIT else [part for part in parts if part]
        write_error: BaseException | None = None
        try:
            if timeout is None:
                for chunk in chunks:
                    await conn.stream.send_all(chunk)
            else:
                with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                    for chunk in chunks:
                        await conn.stream.send_all(chunk)
                if scope.cancelled_caught:
                    raise httpx.WriteTimeout(f"cannot send the request in {timeout:g}s", request=request)
        except _STREAM_ERRORS as exc:
            # The server may have answered (a 413) and closed before reading it all: read what it said.
            conn.broken = True
            write_error = exc
        timeout = timeouts.get("read")
        received = False
        try:
            while (event := h.next_event()) is h11.NEED_DATA or type(event) is h11.InformationalResponse:
                if event is not h11.NEED_DATA:
                    continue  # a 1xx: the response follows
                try:
                    data = await conn.receive(timeout)
                except trio.BrokenResourceError as exc:
                    if received or not _reset(exc):
                        raise
                    data = b""
                if not data and not received:
                    if reused:
                        raise _Gone
                    if write_error is not None:
                        raise httpx.WriteError(f"sending the request: {write_error}",
                                               request=request) from write_error
                    raise httpx.RemoteProtocolError("the server closed the connection without a response",
                                                    request=request)
                received = True
                h.receive_data(data)
        except httpx.ReadTimeout as exc:
            exc.request = request
            raise
        except h11.RemoteProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        except _STREAM_ERRORS as exc:
            raise httpx.ReadError(f"reading the response: {exc}", request=request) from exc
        if type(event) is not h11.Response:
            raise httpx.RemoteProtocolError(f"unexpected {event!r} instead of a response", request=request)
        return event

    def _pooled(self, origin: Origin) -> _Connection | None:
        """The most recently used idle connection to ``origin`` that the server has not closed."""
        conns = self._idle.get(origin)
        while conns:
            conn = conns.pop()
            if not conn.socket.is_readable():  # readable while idle: EOF, or bytes nobody asked for
                return conn
            conn.close()
        return None

    def _release(self, conn: _Connection) -> None:
        """Pool ``conn`` if h11 can start another cycle on it; close it otherwise."""
        self._active.discard(conn)
        h = conn.h11
        if conn.broken or h.our_state is not h11.DONE or h.their_state is not h11.DONE or not self.max_idle:
            conn.close()
            return
        h.start_next_cycle()
        conns = self._idle.setdefault(conn.origin, [])
        conns.append(conn)
        if len(conns) > self.max_idle:
            conns.pop(0).close()

    def _discard(self, conn: _Connection) -> None:
        self._active.discard(conn)
        conn.close()

    def _ssl(self) -> ssl.SSLContext:
        if self._ssl_context is None:  # made on first use: ~20 ms and a few MiB, and most local servers are http
            context = httpx.create_ssl_context(trust_env=True)
            context.set_alpn_protocols(["http/1.1"])
            self._ssl_context = context
        return self._ssl_context

    async def _connect(self, origin: Origin, timeout: float | None, request: httpx.Request) -> _Connection:
        scheme, raw_host, port = origin
        host = raw_host.decode("ascii")
        tcp: trio.SocketStream | None = None
        try:
            with trio.CancelScope(deadline=math.inf if timeout is None else trio.current_time() + timeout):
                stream = tcp = await trio.open_tcp_stream(host, port)
                if scheme == b"https":
                    stream = trio.SSLStream(tcp, self._ssl(), server_hostname=host, https_compatible=True)
                    await stream.do_handshake()
                return _Connection(origin, stream, tcp.socket)
            raise httpx.ConnectTimeout(f"cannot connect to {host}:{port} in {timeout:g}s", request=request)
        except BaseException as exc:
            if tcp is not None:
                tcp.socket.close()
            if not isinstance(exc, (OSError, trio.BrokenResourceError)):
                raise
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {cause}", request=request) from exc
