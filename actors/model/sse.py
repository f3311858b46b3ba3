"""What the openai provider reads of a response, whichever client sent it, and the SSE ``data:`` splitter.

:class:`Body` is the face both paths show: :class:`~.http.Response` (the direct
path) and :class:`Proxied` round an :class:`httpx.Response` (the full client,
when a proxy is named). :func:`data_payloads` splits either's bytes into the
payloads of its ``data:`` lines, within a bound on one line and one on the
whole body.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

import httpx

from ..content_coding import CODINGS, Decoder, DecodingFailed


MAX_LINE_BYTES = 32 * 2**20  # an SSE line (one chunk) no server needs longer: a whole answer, escaped


class LineTooLong(ValueError):
    """An SSE line ran past the bound :func:`data_payloads` was given before it ended."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an event-stream line ran past {limit:,} bytes without ending")
        self.limit = limit


class BodyTooLong(ValueError):
    """The body ran past the bound on its bytes :func:`data_payloads` was given."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an event stream ran past {limit:,} bytes")
        self.limit = limit


async def data_payloads(response: Body, max_line: int = MAX_LINE_BYTES,
                        max_body: float = math.inf) -> AsyncIterator[bytes]:
    """The payload of each SSE ``data:`` line, split from the body's bytes (LF, CR LF or CR).

    Blank lines, comments and the ``event:``/``id:``/``retry:`` fields are skipped.
    ``response.receive()`` hands over every byte that has arrived at once (``b""`` at
    the end), so a burst of events is split in one pass; a chat-completions payload
    is JSON, so a CR can only be a line end. A line still unended past ``max_line``
    bytes raises :class:`LineTooLong`: a server that never ends one must not fill
    the memory. The pieces of a long line are joined once it ends, not at each read.
    Every byte read counts against ``max_body`` (past it, :class:`BodyTooLong`): lines
    that say nothing (comments, chunks without text) cost their parse all the same.
    """
    pieces: list[bytes] = []  # the line not ended yet, as it arrived
    held = 0
    read = 0  # bytes of the body so far
    receive = response.receive
    while data := await receive():
        read += len(data)
        if read > max_body:
            raise BodyTooLong(int(max_body))
        if pieces:
            if b"\n" not in data and b"\r" not in data:
                pieces.append(data)
                held += len(data)
                if held > max_line:
                    raise LineTooLong(max_line)
                continue
            data = b"".join((*pieces, data))
            pieces, held = [], 0
        lines = data.splitlines()
        if not data.endswith((b"\n", b"\r")):
            rest = lines.pop()
            pieces, held = [rest], len(rest)
            if held > max_line:
                raise LineTooLong(max_line)
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip()
    rest = b"".join(pieces)
    if rest.startswith(b"data:"):
        yield rest[5:].strip()


class Body(Protocol):
    """What the provider reads of a response: :class:`~.http.Response`, or :class:`Proxied` round httpx's."""

    status_code: int
    reason_phrase: str

    @property
    def headers(self) -> Mapping[str, str]: ...  # looked up by lower-case names

    @property
    def is_success(self) -> bool: ...

    @property
    def complete(self) -> bool: ...  # the body was read to its end: receive() can only give what is left

    async def receive(self) -> bytes: ...

    async def aclose(self) -> None: ...


class Proxied:
    """An :class:`httpx.Response` (the proxied path, through the full client) as a :class:`Body`.

    Its raw bytes are decoded here, by the bound the direct path keeps
    (:class:`actors.content_coding.Decoder`): httpx's own decoders give a read whole, whatever it
    decompresses to."""

    __slots__ = ("response", "status_code", "reason_phrase", "headers", "_chunks", "_decoder", "_ended")

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.status_code = response.status_code
        self.reason_phrase = response.reason_phrase
        self.headers = response.headers
        self._chunks = response.aiter_raw()
        coding = response.headers.get("content-encoding") or ""
        codings = [c for c in (c.strip().lower() for c in coding.split(",")) if c in CODINGS]
        self._decoder = Decoder(codings) if codings else None
        self._ended = False

    @property
    def is_success(self) -> bool:
        return self.response.is_success

    complete = False  # not known: httpx reads on

    async def receive(self) -> bytes:
        try:
            while not self._ended:
                try:
                    data = await self._chunks.__anext__()
                except StopAsyncIteration:
                    self._ended = True
                    return self._decoder.decode(b"", True) if self._decoder is not None else b""
                if self._decoder is not None:
                    data = self._decoder.decode(data, False)
                if data:
                    return data
        except DecodingFailed as exc:
            raise httpx.DecodingError(str(exc)) from exc
        return b""

    async def aclose(self) -> None:
        await self._chunks.aclose()
        await self.response.aclose()
