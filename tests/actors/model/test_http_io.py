"""The lean HTTP/1.1 client's bodies and socket paths against small servers on loopback: codings,
framings, 1xx, sends that fill the kernel's buffer, timeouts, and closing under a waiting reader."""

from __future__ import annotations

import gzip
import zlib
from functools import partial
from typing import Any

import h11
import httpx
import pytest
import trio

from actors.model.http import Transport
from tests.actors.model.test_http import LIMIT, Server, keep_alive, post, serving


def deflated(data: bytes, wbits: int) -> bytes:
    compressor = zlib.compressobj(wbits=wbits)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize("coding, encode", [
    ("gzip", gzip.compress),
    ("deflate", partial(deflated, wbits=zlib.MAX_WBITS)),  # zlib-wrapped, as the RFC says
    ("deflate", partial(deflated, wbits=-zlib.MAX_WBITS)),  # raw, as some servers send it
    ("identity, gzip", gzip.compress),
    ("gzip, gzip", lambda data: gzip.compress(gzip.compress(data))),
], ids=["gzip", "deflate-zlib", "deflate-raw", "identity-gzip", "gzip-twice"])
async def test_a_compressed_body_is_decoded_whatever_its_chunks(coding: str, encode: Any) -> None:
    text = b"".join(b"data: {\"n\": %d}\n\n" % i for i in range(300))
    wire = encode(text)

    async def compressed(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        head = h11.Response(status_code=200, headers=[("Content-Encoding", coding), ("Transfer-Encoding", "chunked")])
        await stream.send_all(conn.send(head))
        for i in range(0, len(wire), 7):  # 7-byte chunks, each its own write
            await stream.send_all(conn.send(h11.Data(data=wire[i:i + 7])))
        await stream.send_all(conn.send(h11.EndOfMessage()))
        await keep_alive(server, stream, conn, n)

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(compressed) as (server, port):
            response = await post(transport, f"http://127.0.0.1:{port}/")
            assert response.headers["content-encoding"] == coding
            assert await response.aread() == text
            assert transport.idle_count() == 1  # read to its end: pooled
    await transport.aclose()


async def test_a_body_that_does_not_decode_is_a_decoding_error_and_an_unknown_coding_passes_raw() -> None:
    async def bad(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        await server.respond(stream, conn, body=b"not gzip at all", headers=(("Content-Encoding", "gzip"),))
        await server.request(stream, conn)
        await server.respond(stream, conn, body=b"\x00br", headers=(("Content-Encoding", "br"),))

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(bad) as (server, port):
            response = await post(transport, f"http://127.0.0.1:{port}/")
            with pytest.raises(httpx.DecodingError):
                await response.aread()
            response = await post(transport, f"http://127.0.0.1:{port}/")
            assert await response.aread() == b"\x00br"  # as httpx without brotli installed
    await transport.aclose()


async def test_a_close_delimited_body_ends_at_eof_and_its_connection_is_not_kept() -> None:
    async def until_close(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: a\n\n")
        await stream.send_all(b"data: [DONE]\n\n")

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(until_close) as (server, port):
            for n in (1, 2):
                response = await post(transport, f"http://127.0.0.1:{port}/")
                assert await response.aread() == b"data: a\n\ndata: [DONE]\n\n"
                assert response.complete and transport.idle_count() == 0
            assert server.accepted == 2
    await transport.aclose()


async def test_interim_1xx_responses_are_skipped_and_an_empty_body_completes_with_its_head() -> None:
    async def interim(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        while await server.request(stream, conn) is not None:
            await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            await stream.send_all(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
                                  b"HTTP/1.1 204 No Content\r\n\r\n")
            conn = h11.Connection(h11.SERVER)  # it saw none of what went out by hand

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(interim) as (server, port):
            for _ in range(2):
                response = await post(transport, f"http://127.0.0.1:{port}/")
                assert response.status_code == 204 and response.complete
                assert transport.idle_count() == 1 and await response.receive() == b""
            assert server.accepted == 1
    await transport.aclose()


async def test_a_body_larger_than_the_socket_buffers_is_sent_in_pieces_whole() -> None:
    large = b'{"x":"' + b"y" * (16 * 1024 * 1024) + b'"}'

    async def slow_reader(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await trio.sleep(0.05)  # let the client fill the buffers and wait to write
        await keep_alive(server, stream, conn, n)

    transport = Transport()
    with trio.fail_after(LIMIT * 4):
        async with serving(slow_reader) as (server, port):
            for body in (large, b"{}"):
                response = await post(transport, f"http://127.0.0.1:{port}/", body)
                assert await response.aread() == b"ok"
            assert [body for _, body in server.requests] == [large, b"{}"] and server.accepted == 1
    await transport.aclose()


async def test_a_server_that_never_reads_is_a_write_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async def deaf(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await trio.sleep_forever()

    transport = Transport()
    timeout = {"connect": None, "read": None, "write": 30.0}
    with trio.fail_after(LIMIT * 100):
        async with serving(deaf) as (server, port):
            start = trio.current_time()
            with pytest.raises(httpx.WriteTimeout):
                await post(transport, f"http://127.0.0.1:{port}/", b"x" * (64 * 1024 * 1024), timeout)
            assert trio.current_time() - start >= 30.0
            assert transport.idle_count() == 0 and not transport._active  # dropped, not pooled
    await transport.aclose()


async def test_closing_the_transport_wakes_a_reader_waiting_on_it() -> None:
    async def stall(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n")
        await trio.sleep_forever()

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(stall) as (server, port):
            response = await post(transport, f"http://127.0.0.1:{port}/")
            assert await response.receive() == b"ab"
            async with trio.open_nursery() as nursery:
                nursery.start_soon(transport.aclose)
                with pytest.raises(httpx.ReadError):
                    await response.receive()
            assert not response.complete
