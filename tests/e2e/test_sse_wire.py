"""An event stream on the wire, read by a raw socket: exact chunked framing across many turns, and a client
that goes away mid-stream frees its subscription.

The daemon frames an event stream's chunks itself and writes them straight to
the socket when nothing else is writing (transport/connections.py); a library
client would hide a framing slip, so these read the bytes.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import trio

from tests.conftest import live_daemon

TURNS = 5


def prompt(text: str) -> dict:
    return {"prompt": [{"type": "text", "text": text}]}


class ChunkedReader:
    """Strictly parses a chunked body as it arrives: every size line lower-case hex, every chunk ``\\r\\n``-ended."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.body = bytearray()
        self.chunks = 0
        self.ended = False

    async def head(self) -> bytes:
        while b"\r\n\r\n" not in self.buffer:
            await self._fill()
        head, _, rest = bytes(self.buffer).partition(b"\r\n\r\n")
        self.buffer[:] = rest
        return head

    async def _fill(self) -> None:
        data = await self.stream.receive_some(1 << 16)
        assert data, "the daemon closed the stream"
        self.buffer += data

    def _parse(self) -> None:
        while not self.ended:
            line, sep, rest = bytes(self.buffer).partition(b"\r\n")
            if not sep:
                return
            assert line and all(c in b"0123456789abcdef" for c in line), line
            size = int(line, 16)
            if len(rest) < size + 2:
                return
            assert rest[size:size + 2] == b"\r\n", rest[size:size + 2]
            del self.buffer[:len(line) + 2 + size + 2]
            if size == 0:
                self.ended = True
                return
            self.body += rest[:size]
            self.chunks += 1

    async def until(self, marker: bytes, count: int) -> None:
        self._parse()
        while self.body.count(marker) < count:
            await self._fill()
            self._parse()


def events(body: bytes) -> list[dict]:
    out = []
    for block in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
        if "data" in fields:
            out.append({"id": int(fields["id"]) if "id" in fields else None, "type": fields["event"],
                        "data": json.loads(fields["data"])})
    return out


async def subscribers(client, sid: str) -> int:
    return (await client.get(f"/session/{sid}/status")).json()["subscribers"]


async def test_an_event_stream_is_exact_chunked_encoding_over_many_turns_and_a_gone_client_frees_it():
    with trio.fail_after(30):
        async with live_daemon() as (_daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            url = urlsplit(str(client.base_url))
            raw = await trio.open_tcp_stream(url.hostname, url.port)
            auth = client.headers["Authorization"].encode()
            await raw.send_all(b"GET /session/%s/events HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n\r\n"
                               % (sid.encode(), url.netloc.encode(), auth))
            reader = ChunkedReader(raw)
            head = (await reader.head()).lower()
            assert head.startswith(b"http/1.1 200") and b"transfer-encoding: chunked" in head
            assert b"content-type: text/event-stream" in head
            await reader.until(b"retry: 3000\n\n", 1)
            assert await subscribers(client, sid) == 1
            for turn in range(TURNS):
                r = await client.post(f"/session/{sid}/prompt", json=prompt(f"turn {turn}"))
                assert r.status_code == 202
                await reader.until(b"event: turn_complete\n", turn + 1)
            got = events(bytes(reader.body))
            ids = [e["id"] for e in got if e["id"] is not None]
            assert ids == list(range(ids[0], ids[0] + len(ids)))  # every event once, in order
            assert [e["type"] for e in got].count("turn_complete") == TURNS
            assert reader.chunks > TURNS and not reader.ended
            assert bytes(reader.body).startswith(b"retry: 3000\n\n")

            await raw.aclose()  # gone mid-stream, without a word
            while await subscribers(client, sid) != 0:
                await trio.sleep(0.01)
            r = await client.post(f"/session/{sid}/prompt", json=prompt("after"))  # the session goes on
            assert r.status_code == 202
