"""The per-connection server's cheap writes (transport/connections.py): same bytes, same order, same backpressure.

An uncontended write goes straight to the socket, without a trip through the
scheduler; a write the kernel cannot take at once (a slow reader) waits as
hypercorn's does, and a write made meanwhile queues behind it. An event
stream's chunks are framed by :class:`transport.connections._H11Protocol`, not
h11: the stream a raw client reads must be byte-exact chunked encoding.
"""

from __future__ import annotations

import socket

import h11
import pytest
import h11._writers
import orjson
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from quart import make_response, request
from quart_trio import QuartTrio

from transport import connections
from transport.connections import _TCPServer


class Protocol:
    """A protocol wrapper holding a plain HTTP/1.1 protocol (what the lean write is for); records what it is told."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self.protocol = object.__new__(connections._H11Protocol)
        self.protocol.connection = h11.Connection(h11.SERVER)

    async def handle(self, event: object) -> None:
        self.events.append(event)


def server(stream: trio.SocketStream) -> tuple[_TCPServer, Protocol]:
    tcp = object.__new__(_TCPServer)  # only what protocol_send uses: the stream, its lock, the protocol
    tcp.stream, tcp.send_lock = stream, trio.Lock()
    protocol = Protocol()
    tcp._protocol = protocol  # type: ignore[assignment]
    return tcp, protocol


def socket_pair() -> tuple[trio.SocketStream, socket.socket]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    return trio.SocketStream(trio.socket.from_stdlib_socket(ours)), theirs


def drain(sock: socket.socket) -> bytes:
    out = bytearray()
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return bytes(out)
        if not data:
            return bytes(out)
        out += data


async def test_an_uncontended_write_goes_out_without_yielding_to_other_tasks():
    stream, peer = socket_pair()
    tcp, _ = server(stream)
    ran = []

    async def other() -> None:
        ran.append("other task")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await tcp.protocol_send(RawData(data=b"5\r\nhello\r\n"))
        assert ran == []  # written with no checkpoint that let the other task run
        assert drain(peer) == b"5\r\nhello\r\n"
    assert not tcp.send_lock.locked()
    await stream.aclose()
    peer.close()


async def test_a_cancelled_sender_writes_nothing():
    stream, peer = socket_pair()
    tcp, _ = server(stream)
    with trio.CancelScope() as scope:
        scope.cancel()
        await tcp.protocol_send(RawData(data=b"never"))
    assert scope.cancelled_caught
    assert drain(peer) == b""
    await stream.aclose()
    peer.close()


async def test_a_slow_reader_holds_the_writer_back_and_later_writes_keep_their_order(autojump_clock):
    stream, peer = socket_pair()
    tcp, _ = server(stream)
    big = bytes(range(256)) * (16 * 1024)  # 4 MiB: far more than a socket buffer
    done: list[str] = []

    async def write(data: bytes, name: str) -> None:
        await tcp.protocol_send(RawData(data=data))
        done.append(name)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, big, "big")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(write, b"tail", "tail")
            await trio.sleep(5)  # virtual time: nobody reads, so neither write can finish
            assert done == [] and tcp.send_lock.locked()
            received = bytearray()
            while len(received) < len(big) + 4:
                await trio.lowlevel.wait_readable(peer)
                received += drain(peer)
    assert done == ["big", "tail"]
    assert bytes(received) == big + b"tail"
    await stream.aclose()
    peer.close()


async def test_a_write_to_a_gone_client_tells_the_protocol_it_is_closed():
    stream, peer = socket_pair()
    tcp, protocol = server(stream)
    peer.close()
    await tcp.protocol_send(RawData(data=b"x" * 100))
    assert [type(e) for e in protocol.events] == [Closed]
    await stream.aclose()
    protocol.events.clear()
    await tcp.protocol_send(RawData(data=b"after close"))  # a closed socket: hypercorn's ClosedResourceError path
    assert [type(e) for e in protocol.events] == [Closed]


# ------------------------------------------------------------------ over a real server


def frame(i: int, size: int) -> bytes:
    return b"id: %d\nevent: session_update\ndata: %s\n\n" % (i, orjson.dumps({"pad": "x" * size}))


SIZES = [0, 1, 14, 15, 16, 200, 240, 255, 256, 4000, 4095, 4096, 65536, 70000, 1 << 20]
FRAMES = [b"retry: 3000\n\n"] + [frame(i, size) for i, size in enumerate(SIZES * 3, 1)]


def app() -> QuartTrio:
    app = QuartTrio("fast-write")
    app.config["RESPONSE_TIMEOUT"] = None

    @app.get("/sse")
    async def sse():
        async def chunks():
            for chunk in FRAMES:
                await trio.lowlevel.checkpoint()
                yield chunk

        response = await make_response(chunks(), {"Content-Type": "text/event-stream"})
        response.timeout = None
        return response

    @app.post("/echo")
    async def echo():
        return await request.get_data(), 202

    return app


def parse_chunked(raw: bytes) -> tuple[list[bytes], bytes]:
    """The chunks of a chunked body (strictly parsed) and what follows its end."""
    chunks = []
    while True:
        line, sep, raw = raw.partition(b"\r\n")
        assert sep and line and line == line.strip() and all(c in b"0123456789abcdef" for c in line), line
        size = int(line, 16)
        if size == 0:
            assert raw.startswith(b"\r\n"), raw[:20]  # no trailers
            return chunks, raw[2:]
        assert raw[size:size + 2] == b"\r\n"
        chunks.append(raw[:size])
        raw = raw[size + 2:]


async def read_until(stream: trio.SocketStream, buffer: bytearray, marker: bytes) -> None:
    while not buffer.endswith(marker):
        data = await stream.receive_some(1 << 20)
        assert data, "the server closed the connection"
        buffer += data


async def test_an_event_stream_is_byte_exact_chunked_encoding_framed_without_h11(monkeypatch):
    def h11_frames(*args: object) -> None:
        raise AssertionError("an event-stream chunk went through h11's ChunkedWriter")

    monkeypatch.setattr(h11._writers.ChunkedWriter, "send_data", h11_frames)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None
    config.graceful_timeout = 1
    stop = trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: connections.serve(
                app(), config, shutdown_trigger=stop.wait, task_status=task_status))
            host, port = binds[0].removeprefix("http://").rsplit(":", 1)
            client = await trio.open_tcp_stream(host, int(port))
            await client.send_all(b"GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")
            raw = bytearray()
            await read_until(client, raw, b"\r\n0\r\n\r\n")
            head, _, body = bytes(raw).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
            chunks, rest = parse_chunked(body)
            assert rest == b""
            assert b"".join(chunks) == b"".join(FRAMES)  # every frame, in order, nothing more
            # The connection is kept alive and answers its next request (a sized one, framed by h11).
            monkeypatch.undo()
            await client.send_all(b"POST /echo HTTP/1.1\r\nHost: x\r\ncontent-length: 5\r\n\r\nhello")
            raw.clear()
            await read_until(client, raw, b"hello")
            assert raw.startswith(b"HTTP/1.1 202") and b"content-length: 5\r\n" in raw
            await client.aclose()
            stop.set()


async def test_the_h11_protocol_of_a_connection_is_the_lean_one():
    """Guards the hook: hypercorn's ``run`` assigns ``self.protocol``; the setter swaps in ``_H11Protocol``."""
    from hypercorn.protocol import ProtocolWrapper
    from hypercorn.trio.worker_context import WorkerContext
    from hypercorn.typing import ConnectionState

    tcp = object.__new__(_TCPServer)

    async def send(event: object) -> None:
        pass

    wrapper = ProtocolWrapper(None, Config(), WorkerContext(None), None, ConnectionState({}), False,  # type: ignore
                              None, None, send, "http/1.1")
    tcp.protocol = wrapper
    assert type(tcp.protocol.protocol) is connections._H11Protocol
    assert tcp.protocol.protocol.send is send and tcp.protocol is wrapper


async def test_the_keep_alive_timer_closes_an_idle_connection_and_spares_a_busy_one(autojump_clock):
    """The keep-alive timer (``transport.keep_alive``): stopped by each request, started again when it ends.

    Hypercorn's own timer is restarted from the request's task, which quart-trio
    cancels once the answer is sent: its lock's checkpoint raised, and an idle
    keep-alive connection was never closed (this test timed out with it).
    """
    gate = trio.Event()
    application = app()

    @application.get("/slow")
    async def slow():
        await gate.wait()
        return "done", 200

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None
    config.graceful_timeout = 1
    config.keep_alive_timeout = 5
    stop = trio.Event()
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: connections.serve(
                application, config, shutdown_trigger=stop.wait, task_status=task_status))
            host, port = binds[0].removeprefix("http://").rsplit(":", 1)
            idle = await trio.open_tcp_stream(host, int(port))
            for n in range(3):  # requests at 4 s intervals keep it open: each one restarts the timer
                await idle.send_all(b"POST /echo HTTP/1.1\r\nHost: x\r\ncontent-length: 1\r\n\r\n%d" % n)
                raw = bytearray()
                await read_until(idle, raw, b"%d" % n)
                await trio.sleep(4)
            busy = await trio.open_tcp_stream(host, int(port))
            await busy.send_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            started = trio.current_time()
            assert await idle.receive_some(100) == b""  # 5 s after its last answer: closed by the server
            assert trio.current_time() - started == pytest.approx(1, abs=0.1)
            await trio.sleep(20)  # far past the keep-alive time, but a request is in flight: not closed
            gate.set()
            raw = bytearray()
            await read_until(busy, raw, b"done")
            assert raw.startswith(b"HTTP/1.1 200")
            started = trio.current_time()
            assert await busy.receive_some(100) == b""  # idle again, then closed 5 s later
            assert trio.current_time() - started == pytest.approx(5, abs=0.1)
            stop.set()
