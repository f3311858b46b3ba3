"""The lean HTTP/1.1 client against real servers on loopback: the fake OpenAI server, and small h11 servers."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import h11
import httpx
import orjson
import pytest
import trio

from actors.model.http import Response, Transport, prepare
from transport.fake_openai import FakeOpenAI

LIMIT = 5  # seconds per test
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
TIMEOUT = {"connect": 5.0, "write": 5.0, "read": 5.0}


async def post(transport: Transport, url: str, body: bytes = BODY, timeout: dict[str, Any] = TIMEOUT,
               headers: tuple[tuple[str, str], ...] = ()) -> Response:
    target = prepare("POST", url, [("Content-Type", "application/json"), *headers])
    return await transport.send(target, body, **timeout)


async def chunks(response: Response) -> AsyncIterator[bytes]:
    while data := await response.receive():
        yield data


class CountingFake(FakeOpenAI):
    """The fake OpenAI server, counting the TCP connections it accepts."""

    accepted = 0

    async def _connection(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        await super()._connection(stream)


@asynccontextmanager
async def fake_openai(*responses: Any) -> AsyncIterator[tuple[CountingFake, str]]:
    fake = CountingFake(responses)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        yield fake, url + "/chat/completions"
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------- a small h11 server


class Server:
    """Accepts connections and hands each, with its own h11 state, to ``handler``."""

    def __init__(self, handler: Callable[[Server, trio.abc.Stream, h11.Connection, int], Awaitable[None]]) -> None:
        self.handler = handler
        self.accepted = 0
        self.closed = 0
        self.requests: list[tuple[h11.Request, bytes]] = []
        self.first_reads: list[bytes] = []
        self.changed = trio.Event()

    async def connection(self, stream: trio.abc.Stream) -> None:
        self.accepted += 1
        try:
            await self.handler(self, stream, h11.Connection(h11.SERVER), self.accepted)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)
            self.closed += 1
            self.changed.set()
            self.changed = trio.Event()

    async def request(self, stream: trio.abc.Stream, conn: h11.Connection) -> tuple[h11.Request, bytes] | None:
        """The next request on ``conn``, or None at EOF."""
        if conn.our_state is h11.DONE:
            conn.start_next_cycle()
        head, body, first = None, b"", True
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if first:
                    self.first_reads.append(data)
                    first = False
                conn.receive_data(data)
            elif type(event) is h11.Request:
                head = event
            elif type(event) is h11.Data:
                body += event.data
            elif type(event) is h11.EndOfMessage:
                assert head is not None
                self.requests.append((head, body))
                return head, body
            else:
                return None

    @staticmethod
    async def respond(stream: trio.abc.Stream, conn: h11.Connection, status: int = 200, body: bytes = b"ok",
                      headers: tuple[tuple[str, str], ...] = ()) -> None:
        head = h11.Response(status_code=status, headers=[("Content-Length", str(len(body))), *headers])
        await stream.send_all(conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))

    async def wait_closed(self, n: int) -> None:
        while self.closed < n:
            await self.changed.wait()


@asynccontextmanager
async def serving(handler: Any, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[tuple[Server, int]]:
    server = Server(handler)
    async with trio.open_nursery() as nursery:
        if ssl_context is None:
            listeners = await nursery.start(partial(trio.serve_tcp, server.connection, 0, host="127.0.0.1"))
        else:
            listeners = await nursery.start(partial(trio.serve_ssl_over_tcp, server.connection, 0, ssl_context,
                                                    host="127.0.0.1"))
        sock = listeners[0].transport_listener.socket if ssl_context else listeners[0].socket
        yield server, sock.getsockname()[1]
        nursery.cancel_scope.cancel()


async def keep_alive(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
    """Answers every request ``ok`` until the client closes."""
    while await server.request(stream, conn) is not None:
        await server.respond(stream, conn)


# ----------------------------------------------------------------- streaming and keep-alive


async def test_a_streamed_response_arrives_chunk_by_chunk_before_the_body_ends() -> None:
    transport = Transport()
    with trio.fail_after(LIMIT):
        async with fake_openai([{"text": "first"}, {"stall": None}]) as (fake, url):
            response = await post(transport, url)
            assert (response.status_code, response.http_version) == (200, "HTTP/1.1")
            assert response.headers["content-type"] == "text/event-stream"
            seen = b""
            while b"first" not in seen:  # the server is stalled forever: this chunk comes on its own
                seen += await response.receive()
            assert not response.complete
            await response.aclose()
            with pytest.raises(httpx.StreamClosed):  # closed before its end: never a silent b""
                await response.receive()
            await fake.disconnected.wait()
        assert transport.idle_count() == 0  # not read to the end: closed, not pooled
    await transport.aclose()


async def test_sequential_requests_reuse_one_connection_and_send_each_in_one_write() -> None:
    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(keep_alive) as (server, port):
            for _ in range(3):
                response = await post(transport, f"http://127.0.0.1:{port}/v1/x?a=1")
                assert await response.aread() == b"ok"
                await response.aclose()
            assert server.accepted == 1 and transport.idle_count() == 1
            head, body = server.requests[0]
            assert (head.method, head.target, body) == (b"POST", b"/v1/x?a=1", BODY)
            assert b"accept-encoding" not in dict(head.headers)  # bodies come raw
            # Head and body in one write: the server's first read holds the whole request.
            assert all(read.endswith(BODY) for read in server.first_reads)
            await transport.aclose()
            await server.wait_closed(1)


async def test_a_body_over_the_join_limit_arrives_whole_after_its_head() -> None:
    from actors.model.http import JOIN_LIMIT

    large = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (2 * JOIN_LIMIT)}]})
    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(keep_alive) as (server, port):
            for body in (large, BODY, large):
                response = await post(transport, f"http://127.0.0.1:{port}/v1/x", body)
                assert await response.aread() == b"ok"
                await response.aclose()
            assert server.accepted == 1
            assert [body for _, body in server.requests] == [large, BODY, large]
            assert all(dict(head.headers)[b"content-length"] == str(len(body)).encode()
                       for head, body in server.requests)
            await transport.aclose()
            await server.wait_closed(1)


async def test_the_fake_openai_stream_read_to_its_end_leaves_the_connection_for_the_next() -> None:
    transport = Transport()
    with trio.fail_after(LIMIT):
        async with fake_openai([{"text": "a"}], [{"text": "b"}]) as (fake, url):
            for text in (b'"a"', b'"b"'):
                response = await post(transport, url)
                body = await response.aread()
                assert text in body and body.endswith(b"data: [DONE]\n\n")
            assert fake.accepted == 1 and len(fake.requests) == 2
            await transport.aclose()


async def test_an_idle_connection_the_server_closed_is_replaced_by_a_new_one() -> None:
    async def one_each(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        await server.respond(stream, conn)  # keep-alive, then an idle timeout: the server hangs up

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(one_each) as (server, port):
            for n in (1, 2):
                response = await post(transport, f"http://127.0.0.1:{port}/")
                assert await response.aread() == b"ok"
                assert transport.idle_count() == 1
                await server.wait_closed(n)
            assert server.accepted == 2 and len(server.requests) == 2
    await transport.aclose()


async def test_a_reused_connection_closed_before_the_response_is_retried_once_on_a_new_one() -> None:
    async def hang_up_on_the_second(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        await server.respond(stream, conn)
        if n == 1:
            await server.request(stream, conn)  # the keep-alive race: closed as the request came
            return
        await keep_alive(server, stream, conn, n)

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(hang_up_on_the_second) as (server, port):
            for _ in range(2):
                response = await post(transport, f"http://127.0.0.1:{port}/")
                assert await response.aread() == b"ok"
            assert server.accepted == 2 and len(server.requests) == 3  # the second request sent twice
    await transport.aclose()


async def test_a_new_connection_closed_before_the_response_is_an_error_not_retried() -> None:
    async def hang_up(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(hang_up) as (server, port):
            with pytest.raises(httpx.RemoteProtocolError):
                await post(transport, f"http://127.0.0.1:{port}/")
            assert server.accepted == 1
    await transport.aclose()


async def test_at_most_max_idle_connections_are_kept_the_least_recently_used_closed() -> None:
    transport = Transport(max_idle=1)
    with trio.fail_after(LIMIT):
        async with serving(keep_alive) as (server, port):
            url = f"http://127.0.0.1:{port}/"
            first = await post(transport, url)
            second = await post(transport, url)  # the first is busy: a second connection
            assert server.accepted == 2
            for response in (first, second):
                await response.aread()
            await server.wait_closed(1)  # the first released was dropped when the second came back
            assert transport.idle_count() == 1
            await post(transport, url)
            assert server.accepted == 2
    await transport.aclose()


async def test_a_server_saying_connection_close_is_not_reused() -> None:
    async def closing(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        await server.respond(stream, conn, headers=(("Connection", "close"),))

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(closing) as (server, port):
            for _ in range(2):
                response = await post(transport, f"http://127.0.0.1:{port}/")
                assert await response.aread() == b"ok"
                assert transport.idle_count() == 0
            assert server.accepted == 2


async def test_closing_the_transport_closes_its_idle_connections() -> None:
    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(keep_alive) as (server, port):
            for _ in range(2):  # two origins' worth: 127.0.0.1 and localhost
                for host in ("127.0.0.1", "localhost"):
                    response = await post(transport, f"http://{host}:{port}/")
                    await response.aread()
            assert (server.accepted, transport.idle_count()) == (2, 2)
            await transport.aclose()
            assert transport.idle_count() == 0
            await server.wait_closed(2)


# ----------------------------------------------------------------- errors


async def test_a_4xx_or_5xx_body_is_readable_and_the_connection_kept() -> None:
    transport = Transport()
    with trio.fail_after(LIMIT):
        async with fake_openai({"status": 503, "body": {"error": {"message": "busy"}}, "headers": {"Retry-After": "3"}},
                               {"status": 404, "body": "no such model"}, [{"text": "ok"}]) as (fake, url):
            first = await post(transport, url)
            assert (first.status_code, first.headers["retry-after"]) == (503, "3")
            assert orjson.loads(await first.aread()) == {"error": {"message": "busy"}}
            second = await post(transport, url)
            assert (second.status_code, await second.aread()) == (404, b"no such model")
            third = await post(transport, url)
            assert third.status_code == 200 and b'"ok"' in await third.aread()
            assert fake.accepted == 1
    await transport.aclose()


async def test_a_body_cut_after_a_chunk_is_a_protocol_error_not_an_end() -> None:
    transport = Transport()
    with trio.fail_after(LIMIT):
        async with fake_openai([{"text": "a"}, {"cut": True}]) as (fake, url):
            response = await post(transport, url)
            seen = b""
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                async for data in chunks(response):
                    seen += data
            assert b'"a"' in seen
            await response.aclose()
            assert transport.idle_count() == 0
    await transport.aclose()


@pytest.mark.parametrize("wire", [
    b"Transfer-Encoding: chunked\r\n\r\n100\r\npartial",  # mid-chunk
    b"Content-Length: 100\r\n\r\npartial",  # short of its length
], ids=["mid-chunk", "content-length"])
async def test_a_body_cut_mid_way_is_a_protocol_error(wire: bytes) -> None:
    async def cut(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        await stream.send_all(b"HTTP/1.1 200 OK\r\n" + wire)

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(cut) as (server, port):
            response = await post(transport, f"http://127.0.0.1:{port}/")
            with pytest.raises(httpx.RemoteProtocolError):
                await response.aread()
    await transport.aclose()


async def test_an_upgrade_is_refused_not_spun_on() -> None:
    async def upgrade(server: Server, stream: trio.abc.Stream, conn: h11.Connection, n: int) -> None:
        await server.request(stream, conn)
        await stream.send_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nraw")
        await trio.sleep_forever()

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(upgrade) as (server, port):
            with pytest.raises(httpx.RemoteProtocolError, match="instead of a response"):
                await post(transport, f"http://127.0.0.1:{port}/", headers=(("Connection", "Upgrade"), ("Upgrade", "x")))


async def test_connection_refused_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    transport = Transport()
    with trio.fail_after(LIMIT):
        with pytest.raises(httpx.ConnectError) as info:
            await post(transport, f"http://127.0.0.1:{port}/")
    assert f"127.0.0.1:{port}" in str(info.value)


async def test_an_unknown_host_is_a_connect_error() -> None:
    with trio.fail_after(30):  # a resolver that cannot reach its server takes a while to say so
        with pytest.raises(httpx.ConnectError):
            await post(Transport(), "http://no-such-host.invalid/")


async def test_no_response_in_time_is_a_read_timeout(autojump_clock: trio.testing.MockClock) -> None:
    transport = Transport()
    timeout = {"connect": None, "read": 30.0, "write": None}
    with trio.fail_after(LIMIT * 100):
        async with fake_openai({"steps": [{"text": "late"}], "delay": None}) as (fake, url):
            start = trio.current_time()
            with pytest.raises(httpx.ReadTimeout):
                await post(transport, url, timeout=timeout)
            assert trio.current_time() - start >= 30.0
            await fake.disconnected.wait()
    await transport.aclose()


async def test_a_stall_mid_body_is_a_read_timeout(autojump_clock: trio.testing.MockClock) -> None:
    transport = Transport()
    timeout = {"connect": None, "read": 30.0, "write": None}
    with trio.fail_after(LIMIT * 100):
        async with fake_openai([{"text": "a"}, {"stall": None}]) as (fake, url):
            response = await post(transport, url, timeout=timeout)
            with pytest.raises(httpx.ReadTimeout):
                await response.aread()
            await fake.disconnected.wait()
            assert transport.idle_count() == 0
    await transport.aclose()


@pytest.mark.skipif(sys.platform != "linux", reason="relies on Linux dropping SYNs when the accept queue is full")
async def test_a_connect_that_does_not_complete_is_a_connect_timeout(autojump_clock: trio.testing.MockClock) -> None:
    # A listener with a full backlog that nobody accepts from: the kernel drops further SYNs.
    transport = Transport()
    timeout = {"connect": 10.0, "read": None, "write": None}
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(4)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        try:
            with trio.fail_after(LIMIT * 100), pytest.raises(httpx.ConnectTimeout):
                await post(transport, f"http://127.0.0.1:{port}/", timeout=timeout)
        finally:
            for filler in fillers:
                filler.close()


# ----------------------------------------------------------------- encodings and TLS


def self_signed() -> tuple[bytes, bytes]:
    """A certificate for 127.0.0.1 and its key, PEM."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trellis test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


async def test_https_trusts_ssl_cert_file_and_makes_its_context_only_when_first_needed(tmp_path, monkeypatch) -> None:
    cert, key = self_signed()
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server_context.set_alpn_protocols(["h2", "http/1.1"])
    protocols: list[str | None] = []

    async def tls_keep_alive(server: Server, stream: Any, conn: h11.Connection, n: int) -> None:
        await stream.do_handshake()
        protocols.append(stream.selected_alpn_protocol())
        await keep_alive(server, stream, conn, n)

    transport = Transport()
    with trio.fail_after(LIMIT):
        async with serving(keep_alive) as (_, plain), serving(tls_keep_alive, server_context) as (server, port):
            await (await post(transport, f"http://127.0.0.1:{plain}/")).aread()
            assert transport._ssl_context is None  # plain http never pays for it
            for _ in range(2):
                response = await post(transport, f"https://127.0.0.1:{port}/")
                assert await response.aread() == b"ok"
            assert (server.accepted, protocols) == (1, ["http/1.1"])
            await transport.aclose()
            monkeypatch.delenv("SSL_CERT_FILE")
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await post(Transport(), f"https://127.0.0.1:{port}/")


def test_an_idle_connection_is_checked_on_a_descriptor_numbered_over_1024() -> None:
    import os
    import resource

    from actors.model.http import _Connection

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard if hard != resource.RLIM_INFINITY else 4096) <= 1100:
        pytest.skip("cannot open a descriptor numbered over 1024 here")
    if soft <= 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    ours, theirs = socket.socketpair()
    high = os.dup2(ours.fileno(), 1100)  # a daemon with many sessions and streams gets there
    ours.close()
    sock = socket.socket(fileno=high)
    try:
        conn = _Connection((b"http", b"h", 80), sock, None)
        assert conn.idle_readable() is False  # select() raised ValueError for this descriptor
        theirs.close()  # the server closes the idle connection: EOF is readable
        assert conn.idle_readable() is True
    finally:
        sock.close()
        if soft <= 1100:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
