"""The HTTP/1.1 response parser and request-head encoder, without I/O: every framing, split at every byte."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.model.h1 import MAX_HEAD, Head, ProtocolError, ResponseParser, request_head

# RFC 9110 field-value, spelled as h11 0.16 spells it (h11/_abnf.py), as the reference
field_value = r"([^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?"


def pieces(wire: bytes, cut: int | None) -> list[bytes]:
    if cut is None:
        return [wire]
    return [wire[:cut], wire[cut:]] if 0 < cut < len(wire) else [wire]


def parse(chunks: list[bytes], *, eof: bool = False) -> tuple[Head, bytes, ResponseParser]:
    """Feed ``chunks`` one by one (then the end of the stream, if ``eof``); the head, the body, the parser."""
    parser = ResponseParser()
    feed = list(chunks) + ([b""] if eof else [])
    head = None
    body = b""
    while True:
        if head is None:
            head = parser.head()
            if head is None:
                assert feed, "the parser wants more than was given"
                parser.receive(feed.pop(0))
            continue
        data = parser.body()
        if data is None:
            assert feed, "the parser wants more than was given"
            parser.receive(feed.pop(0))
            continue
        body += data
        if parser.done:
            return head, body, parser


def every_split(wire: bytes, **kw: bool) -> list[tuple[Head, bytes, ResponseParser]]:
    """``parse`` of ``wire`` whole, one byte at a time, and cut in two at every byte."""
    results = [parse([wire], **kw), parse([wire[i:i + 1] for i in range(len(wire))], **kw)]
    results += [parse(pieces(wire, cut), **kw) for cut in range(1, len(wire))]
    return results


CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"7;name=value;x\r\ndata: 1\r\n"
           b"A \r\n\ndata: 22\n\r\n"
           b"0;last\r\nX-Trailer: yes\r\nChecksum: 0\r\n\r\n")


def test_chunked_with_extensions_and_trailers_at_every_split() -> None:
    for head, body, parser in every_split(CHUNKED):
        assert (head.status_code, head.reason_phrase, head.http_version) == (200, "OK", "1.1")
        assert head.headers == {"content-type": "text/event-stream", "transfer-encoding": "chunked"}
        assert body == b"data: 1\ndata: 22\n"
        assert parser.done and parser.reusable


def test_body_returns_everything_that_has_arrived_at_once() -> None:
    parser = ResponseParser()
    parser.receive(CHUNKED)
    assert parser.head() is not None
    assert parser.body() == b"data: 1\ndata: 22\n" and parser.done
    assert parser.body() == b""


def test_content_length_at_every_split_and_the_next_cycle() -> None:
    wire = b"HTTP/1.1 404 Not Found\r\nContent-Length: 13\r\nContent-Length: 13\r\n\r\nno such model"
    for head, body, parser in every_split(wire):
        assert (head.status_code, head.reason_phrase, body) == (404, "Not Found", b"no such model")
        assert head.headers["content-length"] == "13, 13"
        assert parser.reusable
    parser.start_next_cycle()
    parser.receive(wire)
    head = parser.head()
    assert head is not None and parser.body() == b"no such model" and parser.done


def test_close_delimited_runs_to_the_end_of_the_stream_and_is_not_reused() -> None:
    wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end"
    for head, body, parser in every_split(wire, eof=True):
        assert body == b"until the end" and parser.done and not parser.reusable
    with pytest.raises(ProtocolError):
        parser.start_next_cycle()


@pytest.mark.parametrize("status", [204, 304])
def test_no_body_statuses_and_a_zero_length_are_done_with_the_head(status: int) -> None:
    for wire in (b"HTTP/1.1 %d X\r\n\r\n" % status, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"):
        parser = ResponseParser()
        parser.receive(wire)
        assert parser.head() is not None and parser.done and parser.reusable and parser.body() == b""


def test_1xx_responses_are_skipped() -> None:
    wire = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
            b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
    for head, body, _ in every_split(wire):
        assert (head.status_code, head.headers, body) == (201, {"content-length": "2"}, b"ok")


def test_lf_line_ends_folded_values_and_repeated_headers() -> None:
    wire = b"HTTP/1.1 200\nSet-Thing: a\nset-thing: b\nX-Long: one\n  two\nContent-Length: 1\n\nz"
    for head, body, _ in every_split(wire):
        assert (head.reason_phrase, body) == ("", b"z")
        assert head.headers == {"set-thing": "a, b", "x-long": "one two", "content-length": "1"}


@pytest.mark.parametrize("wire", [
    b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nz",
    b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 1\r\n\r\nz",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nzHTTP/1.1 200 OK\r\n",  # bytes beyond the body
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n1\r\nz\r\n0\r\n\r\n",
], ids=["http-1.0", "connection-close", "bytes-beyond", "chunked-and-length"])
def test_what_cannot_carry_another_request(wire: bytes) -> None:
    _, body, parser = parse([wire])
    assert body == b"z" and parser.done and not parser.reusable


@pytest.mark.parametrize("wire, message", [
    (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1 status line"),
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1 status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "not a header line"),
    (b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "not a header line"),
    (b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", "illegal value"),
    (b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "illegal value"),
    (b"HTTP/1.1 200 OK\r\nX: a \x0bb\r\n\r\n", "illegal value"),
    (b"HTTP/1.1 200 OK\r\nX: \x0c\r\n\r\n", "illegal value"),
    (b"HTTP/1.1 200 OK\r\n folded first\r\n\r\n", "folded header line"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", "instead of a response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "conflicting Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "unsupported Transfer-Encoding"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * MAX_HEAD + b"\r\n\r\n", "over 16384 bytes"),
])
def test_a_bad_head_is_a_clear_error(wire: bytes, message: str) -> None:
    parser = ResponseParser()
    parser.receive(wire)
    with pytest.raises(ProtocolError, match=message):
        parser.head()


def test_an_endless_head_is_refused_before_its_end_comes() -> None:
    parser = ResponseParser()
    parser.receive(b"HTTP/1.1 200 OK\r\n")
    assert parser.head() is None
    parser.receive(b"X: " + b"y" * MAX_HEAD)
    with pytest.raises(ProtocolError, match="over"):
        parser.head()


@pytest.mark.parametrize("body, message", [
    (b"zz\r\n", "not a chunk-size line"),
    (b"2\r\nabc\r\n", "runs past its size"),
    (b"1" * 5000, "chunk-size line over"),
    (b"0\r\nno colon\r\n\r\n", "not a trailer line"),
])
def test_a_bad_chunked_body_is_a_clear_error(body: bytes, message: str) -> None:
    parser = ResponseParser()
    parser.receive(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    assert parser.head() is not None
    with pytest.raises(ProtocolError, match=message):
        parser.body()


@pytest.mark.parametrize("wire", [
    CHUNKED[:CHUNKED.index(b"A \r\n") + 6],  # mid-chunk
    CHUNKED[:CHUNKED.index(b"A \r\n") + 1],  # mid chunk-size line
    CHUNKED[:CHUNKED.index(b"0;last")],  # before the last chunk
    CHUNKED[:-2],  # in the trailers
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial",
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
], ids=["mid-chunk", "mid-size-line", "before-last-chunk", "in-trailers", "short-length", "no-body"])
def test_a_body_cut_short_is_an_error_never_an_end(wire: bytes) -> None:
    parser = ResponseParser()
    parser.receive(wire)
    assert parser.head() is not None
    received = b""
    parser.receive(b"")
    with pytest.raises(ProtocolError, match="closed the connection"):
        while True:
            data = parser.body()
            assert data is not None and not parser.done
            received += data
    assert not parser.done and not parser.reusable


@pytest.mark.parametrize("wire, message", [
    (b"", "without a response"),
    (b"HTTP/1.1 200 OK\r\nContent-", "in the middle of the response head"),
])
def test_the_end_of_the_stream_before_a_head_is_an_error(wire: bytes, message: str) -> None:
    parser = ResponseParser()
    parser.receive(wire)
    parser.receive(b"")
    with pytest.raises(ProtocolError, match=message):
        parser.head()


def test_request_head_encodes_in_order_and_refuses_what_h11_would() -> None:
    head = request_head("POST", b"/v1/chat/completions?x=1",
                        [(b"Host", b"h:1"), (b"Content-Type", b"application/json"), (b"Authorization", b"Bearer k")])
    assert head == (b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: h:1\r\nContent-Type: application/json\r\n"
                    b"Authorization: Bearer k\r\n")
    for name, value in [(b"Bad Name", b"v"), (b"X", b"v\r\nY: 1"), (b"X", b" padded"), (b"X", b"a\x00")]:
        with pytest.raises(ProtocolError) as info:
            request_head("POST", b"/", [(name, value)])
        assert value not in str(info.value).encode()  # a value may be a key: never shown


@pytest.mark.parametrize("target", [b"", b"/a b", b"/a\r\nX: 1", b"/\x00", b"/\xc3\xa9", b"/\t"])
def test_a_request_target_h11_would_refuse_is_refused(target: bytes) -> None:
    with pytest.raises(ProtocolError):
        request_head("GET", target, [(b"Host", b"h")])


ALPHABET = b"a \t\x00\x0b\x0c\r\x1f\x7f\xe9"


@given(st.lists(st.sampled_from(ALPHABET), max_size=12).map(bytes))
@settings(max_examples=400, derandomize=True, deadline=None)
def test_a_header_value_is_refused_exactly_when_h11_would_refuse_it(value: bytes) -> None:
    parser = ResponseParser()
    parser.receive(b"HTTP/1.1 200 OK\r\nX: " + value + b"\r\nContent-Length: 0\r\n\r\n")
    seen = value.strip(b" \t")  # its line ends in the CR LF after it: a CR of its own is in it, and refused
    legal = re.fullmatch(field_value.encode("ascii"), seen) is not None
    if legal:
        assert parser.head().headers["x"] == seen.decode("latin-1")
    else:
        with pytest.raises(ProtocolError, match="illegal value for the header X"):
            parser.head()


@given(st.lists(st.sampled_from(ALPHABET), max_size=12).map(bytes))
@settings(max_examples=400, derandomize=True, deadline=None)
def test_a_header_value_is_sent_exactly_when_h11_would_send_it(value: bytes) -> None:
    legal = re.fullmatch(field_value.encode("ascii"), value) is not None
    if legal:
        assert request_head("GET", b"/", [(b"X", value)]).endswith(b"X: " + value + b"\r\n")
    else:
        with pytest.raises(ProtocolError, match="illegal value for the header X"):
            request_head("GET", b"/", [(b"X", value)])
