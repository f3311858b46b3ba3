"""A prompt's admission request recognised in the bytes its connection read, without h11: a pure parser.

Every turn starts with ``POST /session/<id>/prompt``: a small head and a small
JSON body, which the daemon reads in one read, or two when the client writes
the head and the body apart (httpx does). Through hypercorn that request costs
an h11 parse (a regex per header), an ASGI scope, an app task, a body channel,
an h11 response and a keep-alive recycle: about as much as the rest of the
turn's HTTP. :func:`read_prompt_request` recognises, in the bytes read so far,
exactly one such request in the plainest form (or says how much of its body is
still to come), and :func:`answer_bytes` writes the answer as hypercorn and h11
would, byte for byte; :mod:`transport.connections` answers it with
:class:`transport.admission.InlineAdmission`.

The request is taken only when all of this holds, and anything else (``None``)
goes to hypercorn as before, its bytes untouched:

1. the bytes are the whole request, head and body, and nothing more (no
   pipelined request after it, no body still to come);
2. the request line is ``POST /session/<id>/prompt HTTP/1.1``, the id made of
   letters, digits, ``.``, ``_`` and ``-`` (at most 128: a session id's
   alphabet), so the target needs no decoding and has no query;
3. every header line is ``name: value``, the name a token and the value one
   h11 accepts (as :mod:`actors.model.h1` reads a response's), no line folded;
4. one ``Host``; one ``Content-Length`` of decimal digits, at most
   :data:`MAX_BODY` bytes, that the body has exactly; no ``Transfer-Encoding``,
   ``Expect``, ``Upgrade`` or ``TE``; a ``Connection`` header, if any, is
   ``keep-alive`` (a request that closes its connection gets hypercorn's close).

Header names are lower-cased, as h11 gives them to an ASGI scope; values are
kept as sent, stripped of blanks at their ends.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from actors.model.h1 import legal_value

MAX_BODY = 64 * 1024  # as transport.inline_http's INLINE_BODY_MAX
MAX_HEAD = 8 * 1024  # a prompt's head is a few hundred bytes; a larger one is hypercorn's to judge

_REQUEST_LINE = re.compile(rb"POST (/session/[A-Za-z0-9._-]{1,128}/prompt) HTTP/1\.1")
_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_DIGITS = re.compile(rb"[0-9]{1,6}")
_REFUSED = frozenset((b"transfer-encoding", b"expect", b"upgrade", b"te"))
_SINGLE = frozenset((b"host", b"content-length", b"connection"))


class WholeRequest(NamedTuple):
    path: str  # /session/<id>/prompt
    headers: list[tuple[bytes, bytes]]  # (lower-cased name, value), in order
    body: bytes


def whole_prompt_request(data: bytes) -> WholeRequest | None:
    """The prompt admission that ``data`` is exactly, or ``None`` (see the module for what is taken)."""
    request, _ = read_prompt_request(data)
    return request


def read_prompt_request(data: bytes) -> tuple[WholeRequest | None, int]:
    """The prompt admission that ``data`` is exactly, or ``None`` and how many more bytes of its body would
    make it one: more than 0 only for a head that qualifies with its body not all there (a client that writes
    its head and its body apart, as httpx does), else 0."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD)
    if end < 0:
        return None, 0
    lines = data[:end].split(b"\r\n")
    target = _REQUEST_LINE.fullmatch(lines[0])
    if target is None:
        return None, 0
    headers: list[tuple[bytes, bytes]] = []
    seen: set[bytes] = set()
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _NAME.fullmatch(name):
            return None, 0  # a folded line (it starts with a blank) or no header at all: h11's to refuse
        name = name.lower()
        if name in _REFUSED or (name in _SINGLE and name in seen):
            return None, 0
        value = value.strip(b" \t")
        if not legal_value(value):
            return None, 0
        seen.add(name)
        headers.append((name, value))
    if b"host" not in seen:
        return None, 0
    length = connection = None
    for name, value in headers:
        if name == b"content-length":
            length = value
        elif name == b"connection":
            connection = value
    if length is None or not _DIGITS.fullmatch(length) or int(length) > MAX_BODY:
        return None, 0
    if connection is not None and connection.lower() != b"keep-alive":
        return None, 0
    body = data[end + 4:]
    if len(body) != int(length):
        return None, max(int(length) - len(body), 0)
    return WholeRequest(target[1].decode("ascii"), headers, body), 0


def answer_bytes(status: int, headers: list[tuple[bytes, bytes]], body: bytes,
                 server_headers: list[tuple[bytes, bytes]]) -> bytes:
    """An answer as hypercorn has h11 write it: ``HTTP/1.1 <status> `` (no reason phrase), the app's headers,
    then the server's (``date``, ``server``), then the body."""
    head = [b"HTTP/1.1 %d \r\n" % status]
    head += [b"%s: %s\r\n" % pair for pair in headers]
    head += [b"%s: %s\r\n" % pair for pair in server_headers]
    head.append(b"\r\n")
    return b"".join(head) + body
