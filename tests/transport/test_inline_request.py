"""The whole prompt admission read from one read, without h11 (transport/inline_request.py): what is taken,
and that everything else is left to hypercorn."""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transport.inline_request import MAX_BODY, MAX_HEAD, answer_bytes, read_prompt_request, whole_prompt_request

BODY = b'{"prompt":[{"type":"text","text":"hi"}]}'


def request(*, line: bytes = b"POST /session/s-1.a_B/prompt HTTP/1.1", headers: list[bytes] | None = None,
            body: bytes = BODY, length: bytes | None = None) -> bytes:
    if headers is None:
        headers = [b"Host: 127.0.0.1:4170", b"Authorization: Bearer t", b"Content-Type: application/json"]
    headers = [*headers, b"Content-Length: " + (length if length is not None else b"%d" % len(body))]
    return line + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


def h11_reads(data: bytes) -> tuple[h11.Request, bytes]:
    """What h11 (hypercorn's parser) makes of the same bytes: the request and its whole body."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(data)
    head = connection.next_event()
    body = b""
    while type(event := connection.next_event()) is h11.Data:
        body += event.data
    assert type(head) is h11.Request and type(event) is h11.EndOfMessage
    return head, body


@pytest.mark.parametrize("headers", [
    None,
    [b"host: h", b"Connection: keep-alive", b"X-Qwen-Client-Id: abc"],
    [b"Host:h", b"Authorization:   Bearer t  ", b"Accept: */*", b"Accept: text/plain", b"User-Agent: a b\tc"],
])
def test_a_plain_admission_is_read_as_h11_reads_it(headers: list[bytes] | None):
    data = request(headers=headers)
    taken = whole_prompt_request(data)
    assert taken is not None
    head, body = h11_reads(data)
    assert taken.path == head.target.decode()
    assert taken.headers == [(name, value) for name, value in head.headers]  # lower-cased names, values stripped
    assert taken.body == body == BODY


@pytest.mark.parametrize("data", [
    request()[:-1],  # the body not all here yet
    request() + b"POST",  # more after it: a pipelined request
    request().split(b"\r\n\r\n")[0],  # only the head, not even its end
    request(line=b"GET /session/s/prompt HTTP/1.1"),
    request(line=b"POST /session/s/prompt HTTP/1.0"),
    request(line=b"POST /session/s/prompt?x=1 HTTP/1.1"),
    request(line=b"POST /session/s%2Fx/prompt HTTP/1.1"),
    request(line=b"POST /session/s/prompt/ HTTP/1.1"),
    request(line=b"POST /session/" + b"s" * 129 + b"/prompt HTTP/1.1"),
    request(line=b"POST  /session/s/prompt HTTP/1.1"),
    request(line=b"POST /session/s/events HTTP/1.1"),
    request(headers=[b"Authorization: Bearer t"]),  # no Host
    request(headers=[b"Host: a", b"Host: b"]),
    request(headers=[b"Host: a", b"Content-Length: 5"]),  # two lengths
    request(headers=[b"Host: a", b"Transfer-Encoding: chunked"]),
    request(headers=[b"Host: a", b"Expect: 100-continue"]),
    request(headers=[b"Host: a", b"Upgrade: websocket"]),
    request(headers=[b"Host: a", b"TE: trailers"]),
    request(headers=[b"Host: a", b"Connection: close"]),
    request(headers=[b"Host: a", b"Connection: keep-alive", b"Connection: upgrade"]),
    request(headers=[b"Host: a", b"X-Folded: a", b" b"]),
    request(headers=[b"Host: a", b"Bad Name: x"]),
    request(headers=[b"Host: a", b"NoColon"]),
    request(headers=[b"Host: a", b"X: a\x00b"]),
    request(headers=[b"Host: a", b"X: a\rb"]),
    request(headers=[b"Host: a\nTransfer-Encoding: chunked"]),  # a bare LF: h11 would read two headers
    request(headers=[b"Host: a", b"X: a\n"]),
    b"\n" + request(),
    request(line=b"POST /session/s/prompt HTTP/1.1\n"),
    request(length=b"+41"),
    request(length=b"0x29"),
    request(length=b"1_0"),
    request(body=b"x" * (MAX_BODY + 1)),
    request(headers=[b"Host: a", b"X: " + b"y" * MAX_HEAD]),
], ids=lambda d: repr(d[:70]))
def test_anything_else_is_left_to_hypercorn(data: bytes):
    assert whole_prompt_request(data) is None


def test_an_empty_body_is_still_a_whole_request():
    taken = whole_prompt_request(request(body=b""))
    assert taken is not None and taken.body == b""


def test_the_answer_is_written_as_h11_writes_hypercorns():
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    server = [(b"date", b"Thu, 03 Dec 2026 07:09:37 GMT"), (b"server", b"hypercorn-h11")]
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(request())
    while type(connection.next_event()) is not h11.EndOfMessage:
        pass
    wire = connection.send(h11.Response(status_code=202, headers=headers + server))
    wire += connection.send(h11.Data(data=b"{}")) + connection.send(h11.EndOfMessage())
    assert answer_bytes(202, headers, b"{}", server) == wire


def test_a_head_whose_body_is_still_to_come_says_how_much_is_missing():
    data = request()
    head_end = data.index(b"\r\n\r\n") + 4
    assert read_prompt_request(data[:head_end]) == (None, len(BODY))
    assert read_prompt_request(data[:head_end + 5]) == (None, len(BODY) - 5)
    assert read_prompt_request(data)[1] == 0 and read_prompt_request(data)[0] is not None
    # Nothing missing for what is not a plain admission, nor for more than its body.
    assert read_prompt_request(data + b"x") == (None, 0)
    assert read_prompt_request(request(line=b"POST /session HTTP/1.1")[:head_end]) == (None, 0)
    assert read_prompt_request(data[:head_end - 2]) == (None, 0)  # the head itself not whole



# Header lines a request is made of, good and bad (bare CRs and LFs inside, NULs, blanks, folding, duplicate and
# conflicting lengths and hosts, a chunked body), each after a line end that is CR LF or a bare LF.
LINES = [b"Host: h", b"host:h", b"Content-Length: 5", b"content-length: 05", b"Content-Length: 6",
         b"Transfer-Encoding: chunked", b"X: a b", b"X:\x00", b" folded", b"Connection: keep-alive", b"X: a\rb",
         b"X: a\nb", b"Y:\t", b"\x0bZ: 1", b"X-\xe9: 1", b"X: \xe9"]
GOOD = [b"X: a b", b"Connection: keep-alive", b"X: \xe9", b"Accept: */*", b"Y:"]  # more of them: more requests taken
HEADS = st.lists(st.tuples(st.sampled_from([b"\r\n"] * 5 + [b"\n"]), st.sampled_from(LINES + GOOD * 3)), max_size=6)


@given(HEADS, st.sampled_from([b"hello", b"hello!", b"", b"hello\r\n\r\n"]))
@settings(max_examples=3000, derandomize=True, deadline=None)
def test_what_it_takes_h11_reads_the_same(lines: list[tuple[bytes, bytes]], body: bytes):
    lines = [(b"\r\n", b"Host: h"), *lines, (b"\r\n", b"Content-Length: %d" % len(body))]  # what it needs
    data = b"POST /session/s/prompt HTTP/1.1" + b"".join(end + line for end, line in lines) + b"\r\n\r\n" + body
    taken = whole_prompt_request(data)
    if taken is None:
        return
    head, read = h11_reads(data)  # h11 must read a whole request, and the same one, with nothing left over
    assert (taken.path, taken.headers, taken.body) == (head.target.decode(), list(head.headers), read)
