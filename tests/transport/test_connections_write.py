"""The daemon's per-connection server writes a sized answer's head and body together, a streamed one as it comes."""

from __future__ import annotations

import trio
from hypercorn.events import RawData, Updated

from transport.connections import _TCPServer

HEAD = b"HTTP/1.1 202 \r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"
STREAM_HEAD = b"HTTP/1.1 200 \r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class Writes:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes) -> None:
        self.writes.append(bytes(data))


class Idle:
    async def stop(self) -> None:
        pass


def server() -> tuple[_TCPServer, Writes]:
    tcp = object.__new__(_TCPServer)  # only what protocol_send uses: the stream, its lock, the idle timer
    tcp.stream, tcp.send_lock, tcp.idle_task = Writes(), trio.Lock(), Idle()
    return tcp, tcp.stream


async def test_a_sized_answer_goes_out_in_one_write_with_its_head():
    tcp, stream = server()
    await tcp.protocol_send(RawData(data=HEAD))
    assert stream.writes == []  # held for its body
    await tcp.protocol_send(RawData(data=b"{}"))
    await tcp.protocol_send(RawData(data=b""))  # h11's end of a sized body
    assert stream.writes == [HEAD + b"{}", b""]


async def test_a_streamed_answer_is_written_as_it_comes_and_anything_else_sends_a_held_head_first():
    tcp, stream = server()
    await tcp.protocol_send(RawData(data=STREAM_HEAD))
    assert stream.writes == [STREAM_HEAD]  # an event stream's head does not wait for a first frame
    await tcp.protocol_send(RawData(data=HEAD))
    await tcp.protocol_send(Updated(idle=False))
    assert stream.writes == [STREAM_HEAD, HEAD]
    continue_head = b"HTTP/1.1 100 \r\ncontent-length: 0\r\n\r\n"
    await tcp.protocol_send(RawData(data=continue_head))
    assert stream.writes[-1] == continue_head  # 1xx: never held


async def test_an_answer_that_closes_its_connection_is_written_as_hypercorn_writes_it():
    tcp, stream = server()
    refusal = b"HTTP/1.1 400 \r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    await tcp.protocol_send(RawData(data=refusal))
    assert stream.writes == [refusal]
