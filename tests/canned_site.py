"""A loopback HTTP/1.1 site with canned answers, for the web_fetch tests (unit, e2e and security alike), and the
reading of one request, for the tests' hostile model servers."""

from __future__ import annotations

import functools
import re
from typing import Any

import trio

Route = tuple[str, dict[str, str], bytes]

_LENGTH = re.compile(rb"(?i)content-length:\s*(\d+)")


async def read_request(stream: Any) -> tuple[bytes, bytes] | None:
    """One HTTP/1.1 request from ``stream``: its head and its body (``Content-Length`` of it); ``None`` when the
    peer closed before a whole head came."""
    data = b""
    while b"\r\n\r\n" not in data:
        if not (got := await stream.receive_some(65536)):
            return None
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    length = _LENGTH.search(head)
    while length is not None and len(body) < int(length.group(1)):
        if not (got := await stream.receive_some(65536)):
            break
        body += got
    return head, body  # status line's rest ("200 OK"), headers, body
NOT_FOUND: Route = ("404 Not Found", {"Content-Type": "text/plain"}, b"no")


class Site:
    """An HTTP/1.1 server on ``host`` (a loopback address): one canned answer per path, 404 for the rest, and
    ``/stall`` never answers. Every request's path is noted in ``seen``."""

    def __init__(self, host: str = "127.0.0.1", routes: dict[str, Route] | None = None) -> None:
        self.host = host
        self.routes = dict(routes or {})
        self.seen: list[str] = []
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def handle(self, stream: Any) -> None:
        data = b""
        with trio.move_on_after(10):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                data += chunk
            path = data.split(b" ", 2)[1].decode()
            self.seen.append(path)
            if path == "/stall":
                await trio.sleep_forever()
            status, headers, body = self.routes.get(path, NOT_FOUND)
            head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            await stream.send_all(head.encode() + b"\r\n" + body)
        await stream.aclose()

    async def start(self, nursery: trio.Nursery) -> str:
        """Listen on a free port of ``host``; the site's base URL."""
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self.handle, 0, host=self.host))
        self.port = listeners[0].socket.getsockname()[1]
        return self.base
