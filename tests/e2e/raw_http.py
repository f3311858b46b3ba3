"""HTTP/1.1 over a raw Trio socket, for tests that need what a client library will not send or hide.

A library client pools connections (which would count against the daemon's
connection cap), normalises methods, paths and headers, and refuses
malformed ones; these helpers send exactly the bytes asked for and read one
response at a time, so a test can also tell whether the connection is still
open after it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import attrs
import orjson
import trio

MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024


class Closed(Exception):
    """The server closed the connection before a whole response arrived."""


@attrs.define
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value
    body: bytes
    complete: bool = True  # False when only the head was read (an event stream)

    def json(self) -> object:
        return orjson.loads(self.body)


class RawConnection:
    """One TCP connection to the daemon; requests are written verbatim, responses parsed."""

    def __init__(self, stream: trio.SocketStream, authority: str) -> None:
        self.stream = stream
        self.authority = authority  # host:port, the Host header that names the daemon
        self._buffer = bytearray()
        self.eof = False

    @classmethod
    async def open(cls, url: str) -> RawConnection:
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        stream = await trio.open_tcp_stream(parts.hostname, parts.port)
        return cls(stream, parts.netloc)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def request(self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]] | None = None,
                      body: bytes = b"", *, host: bytes | None = None, head_only: bool = False) -> RawResponse:
        """Send one request (Host and Content-Length added unless ``headers`` has them) and read its response."""
        headers = list(headers or [])
        names = {name.lower() for name, _ in headers}
        if b"host" not in names:
            headers.insert(0, (b"Host", host if host is not None else self.authority.encode()))
        if body and b"content-length" not in names and b"transfer-encoding" not in names:
            headers.append((b"Content-Length", str(len(body)).encode()))
        head = method + b" " + target + b" HTTP/1.1\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in headers)
        await self.send(head + b"\r\n" + body)
        return await self.read_response(head_only=head_only, method=method)

    async def _fill(self) -> None:
        data = await self.stream.receive_some(64 * 1024)
        if not data:
            self.eof = True
            raise Closed("the server closed the connection")
        self._buffer += data

    async def _read_until(self, marker: bytes, limit: int) -> bytes:
        while (at := self._buffer.find(marker)) < 0:
            if len(self._buffer) > limit:
                raise AssertionError(f"no {marker!r} within {limit} bytes")
            await self._fill()
        out = bytes(self._buffer[:at])
        del self._buffer[: at + len(marker)]
        return out

    async def _read_exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            await self._fill()
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    async def read_response(self, *, head_only: bool = False, method: bytes = b"GET") -> RawResponse:
        """One response; ``head_only`` stops after the head of a streamed (event-stream) body."""
        while True:
            head = await self._read_until(b"\r\n\r\n", MAX_HEAD)
            status_line, *lines = head.decode("latin-1").split("\r\n")
            version, _, rest = status_line.partition(" ")
            assert version.startswith("HTTP/1."), status_line
            status = int(rest[:3])
            headers: dict[str, str] = {}
            for line in lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if not 100 <= status < 200:
                break  # an interim 1xx is skipped
        if method.upper() == b"HEAD" or status in (204, 304):
            return RawResponse(status, headers, b"")
        if head_only and headers.get("content-type", "").startswith("text/event-stream"):
            return RawResponse(status, headers, b"", complete=False)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                size = int((await self._read_until(b"\r\n", 1024)).split(b";")[0], 16)
                if size == 0:
                    await self._read_until(b"\r\n", MAX_HEAD)  # no trailers expected
                    break
                body += await self._read_exactly(size)
                await self._read_exactly(2)
                assert len(body) <= MAX_BODY, "response body too large"
            return RawResponse(status, headers, bytes(body))
        if "content-length" in headers:
            return RawResponse(status, headers, await self._read_exactly(int(headers["content-length"])))
        body = bytearray(self._buffer)  # delimited by the end of the connection
        self._buffer.clear()
        while not self.eof:
            try:
                await self._fill()
            except Closed:
                break
            body += self._buffer
            self._buffer.clear()
        return RawResponse(status, headers, bytes(body))

    async def closed_by_server(self) -> bool:
        """Whether the server has closed its end: EOF (or a reset) with nothing more to read."""
        if self.eof:
            return True
        try:
            await self._fill()
        except Closed:
            return True
        except trio.BrokenResourceError:
            self.eof = True
            return True
        return False
