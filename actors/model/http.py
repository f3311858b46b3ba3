"""A lean HTTP/1.1 client over Trio sockets, with keep-alive: the openai provider's direct path.

The openai provider sends one POST per model call and reads its SSE stream.
Through httpx (even over our own transport) each call built an
``httpx.Request`` (header normalisation, URL parsing, content encoding), an
``h11.Request``, an ``httpx.Response``, and read every body chunk through
``aiter_bytes`` → ``aiter_raw`` → a byte stream → h11's ``next_event``. Here a
request is a :class:`Target` prepared once (its request line and headers
encoded and validated when made) plus the body; the response's head and body
are parsed by :class:`~.h1.ResponseParser` (a small state machine, no I/O), and
:meth:`Response.receive` hands the caller every body byte that has arrived, at
once, with no generator between. Exceptions are httpx's (``httpx.ReadTimeout``,
``httpx.RemoteProtocolError`` …), so callers map errors as they did.

- keep-alive: at most ``max_idle`` idle connections per (scheme, host, port),
  the least recently used closed first. A connection goes back to the pool only
  when its response was read to the end and the parser says it can carry another
  (HTTP/1.1, no ``Connection: close``, a framed body, nothing beyond it);
- an idle connection that has become readable (the server closed it) is
  dropped before use; one found closed when reused (EOF or a reset before the
  response's first byte: the keep-alive race) is dropped and the request sent
  once more on a new connection — only in that case;
- a request's head and body go out in one ``send_all``; a body over
  :data:`JOIN_LIMIT` goes right after its head instead, not copied into one
  buffer with it (a fresh allocation of the body's size, page faults and all);
- timeouts ``connect`` (round opening and the TLS handshake), ``write`` (one
  deadline for the whole request) and ``read`` (round each wait for bytes): one
  cancel scope per await that can block, none while the parser already holds
  what is asked for, and on plain TCP none when the bytes were already waiting
  in the socket (or fit in its send buffer) — see :class:`_Connection`;
- a body the server leaves incomplete (a cut mid-chunk, short of its
  ``Content-Length``) is :class:`httpx.RemoteProtocolError`, never a silent end;
- https through :class:`trio.SSLStream`, its context made on first use as httpx
  makes it (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, else certifi), ALPN ``http/1.1``;
- ``Content-Encoding`` ``gzip`` and ``deflate`` are decoded, as httpx decoded them
  (other codings pass through raw, as with httpx without brotli or zstandard), by
  :class:`actors.content_coding.Decoder`, no read to more than ``MAX_DECODED`` bytes;
  a body that does not decode is :class:`httpx.DecodingError`. No
  ``Accept-Encoding`` is sent, so a server should not compress.

No proxies (the provider sends through the full httpx client when the
environment names one), no HTTP/2, no upgrades, and no cap on connections in use.
"""

from __future__ import annotations

import math
import select
import socket
import ssl
from typing import Any

import httpx
import trio

from .. import content_coding
from ..timeouts import wait_readable_within
from .h1 import DONE, Head, ProtocolError, ResponseParser, request_head

DEFAULT_MAX_IDLE = 8
READ_SIZE = 65536
JOIN_LIMIT = 65536  # a request body up to this size is sent in one buffer with its head
_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

Origin = tuple[bytes, bytes, int]  # scheme, host, port
MAX_DECODED = content_coding.MAX_DECODED  # what one read may decompress to (shared with web_fetch's client)
_Decoder = content_coding.Decoder


class _Gone(Exception):
    """A reused connection was closed by the server before a byte of the response."""


def _reset(exc: BaseException | None) -> bool:
    """Whether a stream error was caused by a connection reset (or a broken pipe)."""
    while exc is not None:
        if isinstance(exc, ConnectionError):
            return True
        exc = exc.__cause__
    return False


class Target:
    """Where a request goes and its head without ``Content-Length``, encoded once (see :func:`prepare`)."""

    __slots__ = ("url", "origin", "head")

    def __init__(self, url: httpx.URL, origin: Origin, head: bytes) -> None:
        self.url = url
        self.origin = origin
        self.head = head


def prepare(method: str, url: httpx.URL | str, headers: list[tuple[str, str]] | dict[str, str] = ()) -> Target:
    """A request to ``url`` with ``headers`` after ``Host`` (httpx's order); ``Content-Length`` is added per body.

    Raises :class:`httpx.UnsupportedProtocol` for a scheme other than http(s) and
    :class:`httpx.LocalProtocolError` for a header h11 would refuse to send.
    """
    url = httpx.URL(url)
    scheme = url.raw_scheme
    if scheme not in (b"http", b"https"):
        raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
    origin = (scheme, url.raw_host, url.port or (443 if scheme == b"https" else 80))
    items = list(headers.items() if isinstance(headers, dict) else headers)
    for name, _ in items:
        if name.lower() in ("content-length", "transfer-encoding"):
            raise httpx.LocalProtocolError(f"{name} is set per request")
    if not any(name.lower() == "host" for name, _ in items):
        items.insert(0, ("Host", url.netloc.decode("ascii")))
    try:
        head = request_head(method, url.raw_path, [(n.encode("ascii"), v.encode("ascii")) for n, v in items])
    except (ProtocolError, UnicodeEncodeError) as exc:
        raise httpx.LocalProtocolError(str(exc) if isinstance(exc, ProtocolError) else "a header is not ASCII") \
            from None
    return Target(url, origin, head + b"Content-Length: ")


class _Connection:
    """One connection: plain TCP through its stdlib socket, TLS through a :class:`trio.SSLStream`.

    Plain TCP skips Trio's socket and stream wrappers: a receive first tries the
    (non-blocking) socket, and only when nothing has arrived waits, at most the
    read timeout (kept by a shared sweep, :func:`actors.timeouts.wait_readable_within`,
    not a cancel scope each), for it to become readable; a send writes at once
    and waits (in a scope for the write timeout) only while the kernel's buffer is
    full. Each keeps Trio's checkpoints: a cancelled caller is told before any
    I/O, and a receive yields to the scheduler even when data was waiting.
    """

    __slots__ = ("origin", "stream", "socket", "parser", "broken")

    def __init__(self, origin: Origin, socket: Any, stream: trio.SSLStream[trio.SocketStream] | None) -> None:
        self.origin = origin
        self.socket = socket  # a stdlib socket (plain), else the TLS stream's Trio socket
        self.stream = stream
        self.parser = ResponseParser()
        self.broken = False

    def close(self) -> None:
        """Close the socket at once (no TLS close_notify: nothing waits for it)."""
        self.broken = True
        sock = self.socket
        if self.stream is None and sock.fileno() != -1:
            trio.lowlevel.notify_closing(sock)  # a task waiting on it is woken (ClosedResourceError)
        sock.close()

    def idle_readable(self) -> bool:
        """Whether the socket has something to read (while idle: EOF, or bytes nobody asked for)."""
        poller = select.poll()  # not select(): it fails on a descriptor numbered 1024 or more
        poller.register(self.socket.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    async def send_all(self, chunks: list[bytes], timeout: float | None) -> None:
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        stream = self.stream
        if stream is not None:
            with trio.CancelScope(deadline=deadline):
                for chunk in chunks:
                    await stream.send_all(chunk)
                return
            raise httpx.WriteTimeout(f"cannot send the request in {timeout:g}s")
        sock = self.socket
        await trio.lowlevel.checkpoint_if_cancelled()
        for chunk in chunks:
            with memoryview(chunk) as view:
                sent = 0
                while True:
                    try:
                        sent += sock.send(view[sent:] if sent else view)
                    except BlockingIOError:
                        pass
                    if sent >= len(view):
                        break
                    with trio.CancelScope(deadline=deadline) as scope:
                        await trio.lowlevel.wait_writable(sock)
                    if scope.cancelled_caught:
                        raise httpx.WriteTimeout(f"cannot send the request in {timeout:g}s")
        # No yield here: the response's first receive, next, is the schedule point.

    async def receive(self, timeout: float | None) -> bytes:
        stream = self.stream
        if stream is not None:
            if timeout is None:
                return await stream.receive_some(READ_SIZE)
            with trio.CancelScope(deadline=trio.current_time() + timeout):
                return await stream.receive_some(READ_SIZE)
            raise httpx.ReadTimeout(f"no data in {timeout:g}s")
        sock = self.socket
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            data = sock.recv(READ_SIZE)
        except BlockingIOError:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        while True:
            if timeout is None:
                await trio.lowlevel.wait_readable(sock)
            elif not await wait_readable_within(sock, timeout):  # its deadline kept by a shared sweep
                raise httpx.ReadTimeout(f"no data in {timeout:g}s")
            try:
                return sock.recv(READ_SIZE)
            except BlockingIOError:  # woken with nothing to read after all: wait again
                pass


class Response:
    """A response's status and headers, and its body as it arrives (:meth:`receive`)."""

    __slots__ = ("status_code", "reason_phrase", "http_version", "headers", "_transport", "_conn", "_read",
                 "_decoder", "_cut")

    def __init__(self, transport: Transport, conn: _Connection, head: Head, read: float | None) -> None:
        self.status_code = head.status_code
        self.reason_phrase = head.reason_phrase
        self.http_version = "HTTP/" + head.http_version
        self.headers = head.headers  # lower-case names
        self._transport = transport
        self._conn: _Connection | None = conn
        self._read = read
        self._cut = False  # closed (or failed) before the body's end
        coding = self.headers.get("content-encoding")
        codings = [c for c in (c.strip().lower() for c in coding.split(",")) if c in ("gzip", "deflate")] \
            if coding else []
        self._decoder = _Decoder(codings) if codings else None
        if conn.parser.done:
            self._finish(conn)

    def __repr__(self) -> str:
        return f"<Response [{self.status_code} {self.reason_phrase}]>"

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def complete(self) -> bool:
        """Whether the body was read to its end."""
        return self._conn is None and not self._cut

    async def receive(self) -> bytes:
        """The body bytes that arrived since the last call (waiting for some); ``b""`` at its end."""
        conn = self._conn
        if conn is None:
            if self._cut:
                raise httpx.StreamClosed()
            return b""
        parser = conn.parser
        try:
            while True:
                data = parser.body()
                if data is None:
                    parser.receive(await conn.receive(self._read))
                    continue
                done = parser.state == DONE
                if done:
                    self._finish(conn)
                if self._decoder is not None:
                    data = self._decoder.decode(data, done)
                if data or done:
                    return data
        except ProtocolError as exc:
            self._fail()
            raise httpx.RemoteProtocolError(str(exc)) from None
        except content_coding.DecodingFailed as exc:
            self._fail()
            raise httpx.DecodingError(str(exc)) from exc
        except _STREAM_ERRORS as exc:
            self._fail()
            raise httpx.ReadError(f"reading the response: {exc}") from exc
        except BaseException:
            self._fail()
            raise

    async def aread(self) -> bytes:
        """The rest of the body."""
        parts = []
        while data := await self.receive():
            parts.append(data)
        return b"".join(parts)

    def _finish(self, conn: _Connection) -> None:
        self._conn = None
        self._transport._release(conn)

    def _fail(self) -> None:
        conn, self._conn = self._conn, None
        self._cut = True
        if conn is not None:
            self._transport._discard(conn)

    async def aclose(self) -> None:
        """Give up the connection if the body was not read to its end. Awaits nothing: ``OpenAIModel.stream``
        closes it unshielded, also from a cancelled scope, relying on that."""
        if self._conn is not None:
            self._fail()


class Transport:
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

    async def send(self, target: Target, body: bytes, *, connect: float | None = None, write: float | None = None,
                   read: float | None = None) -> Response:
        """Send ``body`` to ``target``; returns once the response's head is read."""
        head = target.head + b"%d\r\n\r\n" % len(body)
        chunks = [head + body] if len(body) <= JOIN_LIMIT else [head, body]
        origin = target.origin
        conn = self._pooled(origin)
        while True:
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin, connect)
            self._active.add(conn)
            try:
                return Response(self, conn, await self._exchange(conn, chunks, write, read, reused), read)
            except _Gone:
                self._discard(conn)
                conn = None  # the keep-alive race: once more, on a new connection
            except BaseException:
                self._discard(conn)
                raise

    async def _exchange(self, conn: _Connection, chunks: list[bytes], write: float | None, read: float | None,
                        reused: bool) -> Head:
        """Send the request and read the response's head; ``_Gone`` if ``reused`` and found closed."""
        write_error: BaseException | None = None
        try:
            await conn.send_all(chunks, write)
        except _STREAM_ERRORS as exc:
            # The server may have answered (a 413) and closed before reading it all: read what it said.
            conn.broken = True
            write_error = exc
        parser = conn.parser
        received = False
        try:
            while (head := parser.head()) is None:
                try:
                    data = await conn.receive(read)
                except (trio.BrokenResourceError, OSError) as exc:
                    if received or not _reset(exc):
                        raise
                    data = b""
                if not data and not received:
                    if reused:
                        raise _Gone
                    if write_error is not None:
                        raise httpx.WriteError(f"sending the request: {write_error}") from write_error
                    raise httpx.RemoteProtocolError("the server closed the connection without a response")
                received = True
                parser.receive(data)
        except ProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from None
        except _STREAM_ERRORS as exc:
            raise httpx.ReadError(f"reading the response: {exc}") from exc
        return head

    def _pooled(self, origin: Origin) -> _Connection | None:
        """The most recently used idle connection to ``origin`` that the server has not closed."""
        conns = self._idle.get(origin)
        while conns:
            conn = conns.pop()
            if not conn.idle_readable():
                return conn
            conn.close()
        return None

    def _release(self, conn: _Connection) -> None:
        """Pool ``conn`` if it can carry another request; close it otherwise."""
        self._active.discard(conn)
        if conn.broken or not conn.parser.reusable or not self.max_idle:
            conn.close()
            return
        conn.parser.start_next_cycle()
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

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        scheme, raw_host, port = origin
        host = raw_host.decode("ascii")
        tcp: trio.SocketStream | None = None
        try:
            with trio.CancelScope(deadline=math.inf if timeout is None else trio.current_time() + timeout):
                tcp = await trio.open_tcp_stream(host, port)
                if scheme == b"https":
                    stream = trio.SSLStream(tcp, self._ssl(), server_hostname=host, https_compatible=True)
                    await stream.do_handshake()
                    return _Connection(origin, tcp.socket, stream)
                # TCP_NODELAY (set by SocketStream) and non-blocking mode stay with the descriptor.
                sock = socket.socket(fileno=tcp.socket.detach())
                tcp = None
                sock.setblocking(False)
                return _Connection(origin, sock, None)
            raise httpx.ConnectTimeout(f"cannot connect to {host}:{port} in {timeout:g}s")
        except BaseException as exc:
            if tcp is not None:
                tcp.socket.close()
            if not isinstance(exc, (OSError, trio.BrokenResourceError)):
                raise
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {cause}") from exc
