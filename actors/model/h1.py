"""HTTP/1.1 on the client side, without I/O: a request head's bytes, and a response parser.

:func:`request_head` validates and encodes a request line and its headers once
(the openai provider sends the same head on every call, only ``Content-Length``
differs). :class:`ResponseParser` reads one connection's responses from the
bytes given to :meth:`~ResponseParser.receive` (``b""`` is the end of the
stream), in these states:

- ``HEAD``: bytes up to the blank line ending the head (CR LF or LF line ends;
  at most :data:`MAX_HEAD` bytes, else :class:`ProtocolError`). A 1xx other than
  101 is skipped, and the next head read, up to :data:`MAX_INTERIM` of them (one
  more is an error: a server sending them without end would keep the call
  waiting, and the parser busy); a 101 is an error (we never ask for an
  upgrade). A final head decides the body's framing, the first that applies:
  204 or 304: no body (``DONE``); ``Transfer-Encoding: chunked``: ``CHUNK_SIZE``
  (another transfer-coding is an error); ``Content-Length: n``: ``LENGTH`` (``DONE``
  at once for 0; several that differ, or one that is not digits, is an error);
  else ``CLOSE`` (the body runs to the end of the stream).
- ``LENGTH``: the next ``n`` bytes are the body, then ``DONE``.
- ``CHUNK_SIZE``: a line ``hex-size [;extensions] CR LF`` (bounded); size 0 goes to
  ``TRAILERS``, else ``CHUNK_DATA``.
- ``CHUNK_DATA``: ``size`` bytes of body, then ``CHUNK_END``: exactly CR LF, then
  ``CHUNK_SIZE`` again.
- ``TRAILERS``: lines up to an empty one (skipped, bounded as a head), then ``DONE``.
- ``CLOSE``: every byte until the end of the stream, then ``DONE``.
- ``DONE``: the response is complete. :attr:`~ResponseParser.reusable` says whether
  the connection can carry another request: HTTP/1.1, no ``Connection: close``,
  a framed body (not ``CLOSE``), and no byte received beyond the body.

The end of the stream anywhere but ``CLOSE`` or ``DONE`` is a :class:`ProtocolError`
(a body cut short is never a silent end); so is any malformed line. After an
error the parser stays failed.
"""

from __future__ import annotations

import re

MAX_HEAD = 16384  # as h11's default max_incomplete_event_size
MAX_LINE = 4096  # a chunk-size line
MAX_INTERIM = 8  # 1xx heads skipped before a response's final one (a server sends one 100 or 103, if any)

HEAD, LENGTH, CHUNK_SIZE, CHUNK_DATA, CHUNK_END, TRAILERS, CLOSE, DONE, FAILED = range(9)

_FIELD_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
# A field value, once stripped of spaces and tabs at its ends, is h11's (words of anything but NUL and white
# space, parted by spaces and tabs) exactly when it holds none of these; searched for, not matched against
# h11's pattern, whose nested repetition cost a tenth of a response head's parse.
_VALUE_ILLEGAL = re.compile(rb"[\x00\n\r\x0b\x0c]")
_BLANKS = (b" ", b"\t")  # at either end of a value
_STATUS_LINE = re.compile(rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
_TARGET = re.compile(rb"[\x21-\x7e]+")  # as h11: visible ASCII, no space or control character
_HEAD_END = re.compile(rb"\n\r?\n")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\r\n]*)?[ \t]*")


class ProtocolError(Exception):
    """The peer broke HTTP/1.1 (or the caller asked for a head it cannot send)."""


def request_head(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """``METHOD target HTTP/1.1`` and ``headers``, each line ending CR LF, without the blank line after them.

    Raises :class:`ProtocolError` for a name that is not a token or a value with a
    control character, leading or trailing whitespace (as h11 does); the message
    names the header, never its value (it may be a key).
    """
    if not _FIELD_NAME.fullmatch(method.encode("ascii", "replace")) or not _TARGET.fullmatch(target):
        raise ProtocolError(f"cannot send {method!r} {target!r}")
    lines = [b"%s %s HTTP/1.1\r\n" % (method.encode("ascii"), target)]
    for name, value in headers:
        if not _FIELD_NAME.fullmatch(name):
            raise ProtocolError(f"illegal header name {name!r}")
        if not legal_value(value) or value[:1] in _BLANKS or value[-1:] in _BLANKS:
            raise ProtocolError(f"illegal value for the header {name.decode('ascii')}")
        lines.append(b"%s: %s\r\n" % (name, value))
    return b"".join(lines)


class Head:
    """A response's status line and headers (names lower-cased; repeats joined with ``, ``, as httpx does)."""

    __slots__ = ("status_code", "reason_phrase", "http_version", "headers")

    def __init__(self, status_code: int, reason_phrase: str, http_version: str, headers: dict[str, str]) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.http_version = http_version
        self.headers = headers

    def __repr__(self) -> str:
        return f"Head({self.status_code}, {self.reason_phrase!r}, {self.http_version!r})"


def legal_value(value: bytes) -> bool:
    """Whether a header value, stripped of spaces and tabs at its ends, is one h11 accepts."""
    return _VALUE_ILLEGAL.search(value) is None


def _line(raw: bytes) -> bytes:
    """A head line without its end: LF, or CR LF (one CR, as h11: any other CR is in the line, and refused)."""
    return raw[:-1] if raw.endswith(b"\r") else raw


def _parse_head(block: bytes) -> Head:
    lines = block.split(b"\n")
    status = _STATUS_LINE.fullmatch(_line(lines[0]))
    if status is None:
        raise ProtocolError(f"not an HTTP/1 status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    last = ""
    for raw in lines[1:]:
        line = _line(raw)
        if not line:
            continue
        if line[0] in b" \t":  # obsolete line folding: more of the last value
            if not last:
                raise ProtocolError("a folded header line before any header")
            headers[last] += " " + line.strip(b" \t").decode("latin-1")
            continue
        name, colon, value = line.partition(b":")
        if not colon or not _FIELD_NAME.fullmatch(name):
            raise ProtocolError(f"not a header line: {line[:80]!r}")
        value = value.strip(b" \t")
        if not legal_value(value):
            raise ProtocolError(f"illegal value for the header {name.decode('ascii')}")
        last = name.decode("ascii").lower()
        text = value.decode("latin-1")
        headers[last] = headers[last] + ", " + text if last in headers else text
    version, code, reason = status.groups()
    return Head(int(code), (reason or b"").decode("latin-1"), version.decode("ascii"), headers)


class ResponseParser:
    """The responses on one connection, one at a time (see the module doc for the states)."""

    __slots__ = ("state", "reusable", "_buf", "_eof", "_left", "_interim")

    def __init__(self) -> None:
        self.state = HEAD
        self.reusable = False
        self._buf = b""
        self._eof = False
        self._left = 0  # bytes still to come: of the LENGTH body, or of the current chunk
        self._interim = 0  # 1xx heads skipped for this response

    @property
    def done(self) -> bool:
        return self.state == DONE

    def receive(self, data: bytes) -> None:
        """Bytes read from the connection; ``b""`` when the peer closed it."""
        if not data:
            self._eof = True
        elif self._buf:
            self._buf += data
        else:
            self._buf = data

    def start_next_cycle(self) -> None:
        if self.state != DONE or not self.reusable:
            raise ProtocolError("the connection cannot carry another request")
        self.state = HEAD
        self.reusable = False
        self._interim = 0

    def _fail(self, message: str) -> ProtocolError:
        self.state = FAILED
        self.reusable = False
        return ProtocolError(message)

    def head(self) -> Head | None:
        """The response's final head, skipping 1xx; None while more bytes are needed."""
        while True:
            if self.state != HEAD:
                raise ProtocolError("no response head to read now")
            buf = self._buf
            end = _HEAD_END.search(buf, 0, MAX_HEAD + 4)
            if end is None:
                if len(buf) > MAX_HEAD:
                    raise self._fail(f"the response head is over {MAX_HEAD} bytes")
                if self._eof:
                    raise self._fail("the server closed the connection in the middle of the response head"
                                     if buf.strip() else "the server closed the connection without a response")
                return None
            self._buf = buf[end.end():]
            try:
                head = _parse_head(buf[:end.start()].lstrip(b"\r\n"))
            except ProtocolError:
                self.state = FAILED
                raise
            code = head.status_code
            if code < 200:
                if code == 101:
                    raise self._fail(f"unexpected {head!r} instead of a response (no upgrade was asked for)")
                # Counted: sent without end they would keep the call waiting, each skip slicing the buffer anew
                # (one read can hold thousands of small heads).
                self._interim += 1
                if self._interim > MAX_INTERIM:
                    raise self._fail(f"the server sent more than {MAX_INTERIM} interim (1xx) responses before its "
                                     f"answer (at most {MAX_INTERIM} are skipped)")
                continue  # 100 Continue, 103 Early Hints: the response follows
            self._frame(head)
            return head

    def _frame(self, head: Head) -> None:
        headers = head.headers
        connection = headers.get("connection", "").lower()
        keep = head.http_version == "1.1" and "close" not in [t.strip() for t in connection.split(",")]
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if coding is not None and length is not None:
            keep = False  # both: chunked wins, but the connection is not trusted again (RFC 9112 §6.3)
        if head.status_code in (204, 304):
            self.state = DONE
        elif coding is not None:
            if coding.strip().lower() != "chunked":
                raise self._fail(f"unsupported Transfer-Encoding {coding[:40]!r} (only chunked is)")
            self.state = CHUNK_SIZE
        elif length is not None:
            values = {v.strip() for v in length.split(",")}
            if len(values) != 1:
                raise self._fail(f"conflicting Content-Length headers: {length[:80]!r}")
            value = values.pop()
            if not value.isdigit() or not value.isascii() or len(value) > 20:
                raise self._fail(f"bad Content-Length {value[:40]!r}")
            self._left = int(value)
            self.state = LENGTH if self._left else DONE
        else:
            self.state = CLOSE
            keep = False
        self.reusable = keep
        if self.state == DONE:
            self._done()

    def _done(self) -> None:
        self.state = DONE
        if self._buf:  # bytes nobody asked for: the next response cannot be told from them
            self.reusable = False

    def body(self) -> bytes | None:
        """The body bytes received so far and not yet returned, all of them at once.

        None while more are needed; ``b""`` once the body is complete (:attr:`done`)
        and nothing is left. Data and the end can come together: check :attr:`done`.
        """
        state = self.state
        if state == LENGTH:
            buf = self._buf
            if not buf:
                if self._eof:
                    raise self._fail(f"the server closed the connection {self._left} bytes short of "
                                     f"the body's Content-Length")
                return None
            left = self._left
            if len(buf) < left:
                self._buf = b""
                self._left = left - len(buf)
                return buf
            self._buf = buf[left:]
            self._done()
            return buf[:left] if self._buf else buf
        if state == CLOSE:
            data, self._buf = self._buf, b""
            if self._eof:
                self._done()
                return data
            return data or None
        if state == DONE:
            return b""
        if state in (CHUNK_SIZE, CHUNK_DATA, CHUNK_END, TRAILERS):
            return self._chunks()
        raise ProtocolError("no response body to read now")

    def _chunks(self) -> bytes | None:
        parts: list[bytes] = []
        buf = self._buf
        pos = 0
        state = self.state
        try:
            while True:
                if state == CHUNK_DATA:
                    left = self._left
                    size = len(buf) - pos
                    if size <= 0:
                        break
                    if size < left:
                        parts.append(buf[pos:] if pos else buf)
                        self._left = left - size
                        pos = len(buf)
                        break
                    parts.append(buf[pos:pos + left])
                    pos += left
                    state = CHUNK_END
                elif state == CHUNK_SIZE:
                    end = buf.find(b"\r\n", pos, pos + MAX_LINE + 2)
                    if end < 0:
                        if len(buf) - pos > MAX_LINE:
                            raise self._fail(f"a chunk-size line over {MAX_LINE} bytes")
                        break
                    match = _CHUNK_SIZE.fullmatch(buf, pos, end)
                    if match is None:
                        raise self._fail(f"not a chunk-size line: {buf[pos:end][:80]!r}")
                    self._left = int(match[1], 16)
                    pos = end + 2
                    state = CHUNK_DATA if self._left else TRAILERS
                elif state == CHUNK_END:
                    if len(buf) - pos < 2:
                        if buf[pos:] not in (b"", b"\r"):
                            raise self._fail("a chunk's data runs past its size")
                        break
                    if buf[pos:pos + 2] != b"\r\n":
                        raise self._fail("a chunk's data runs past its size")
                    pos += 2
                    state = CHUNK_SIZE
                elif state == TRAILERS:
                    end = buf.find(b"\n", pos, pos + MAX_HEAD + 1)
                    if end < 0:
                        if len(buf) - pos > MAX_HEAD:
                            raise self._fail(f"the trailers are over {MAX_HEAD} bytes")
                        break
                    line = buf[pos:end].rstrip(b"\r")
                    pos = end + 1
                    if not line:
                        state = DONE
                        break
                    if b":" not in line:
                        raise self._fail(f"not a trailer line: {line[:80]!r}")
        finally:
            if self.state != FAILED:
                self.state = state
        self._buf = buf[pos:] if pos < len(buf) else b""
        if state == DONE:
            self._done()
        elif self._eof and not parts:
            raise self._fail("the server closed the connection before the end of the chunked body")
        if len(parts) == 1:
            return parts[0]
        if parts:
            return b"".join(parts)
        return b"" if state == DONE else None
