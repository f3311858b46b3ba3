"""Newline-delimited framing and the stdio server, in process over memory streams."""

from __future__ import annotations

import json

import trio
import trio.testing

from actors import CountingIds, load_script, open_daemon
from transport.acp.stdio import read_lines, serve_stdio


class Chunks(trio.abc.ReceiveStream):
    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""

    async def aclose(self) -> None:
        pass


async def lines(*chunks: bytes, max_line: int = 100) -> list[bytes | None]:
    return [line async for line in read_lines(Chunks(*chunks), max_line=max_line)]


async def test_lines_are_split_joined_and_bounded() -> None:
    assert await lines(b'{"a"', b':1}\n{"b":2}\n\n  \n{"c"', b":3}") == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert await lines(b"x" * 150 + b"\nok\n") == [None, b"ok"]
    assert await lines(b"x" * 60, b"x" * 60, b"x" * 60 + b"\nafter\n") == [None, b"after"]


async def test_serve_stdio_answers_in_order_and_ends_with_its_input(tmp_path) -> None:
    to_agent_send, to_agent_receive = trio.testing.memory_stream_one_way_pair()
    from_agent_send, from_agent_receive = trio.testing.memory_stream_one_way_pair()
    model = load_script({"responses": [[{"text": "hi there"}]]})
    received: list[dict] = []

    async def read_all() -> None:
        async for line in read_lines(from_agent_receive):
            assert line is not None
            received.append(json.loads(line))

    async with open_daemon(model=model, ids=CountingIds()) as daemon:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_stdio, daemon, to_agent_receive, from_agent_send)
            nursery.start_soon(read_all)

            async def send(message: dict) -> None:
                await to_agent_send.send_all(json.dumps(message).encode() + b"\n")

            await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
            await to_agent_send.send_all(b"{broken\n")
            await send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path)}})
            with trio.fail_after(10):
                while not any(m.get("id") == 2 for m in received):
                    await trio.sleep(0.01)
            sid = next(m for m in received if m.get("id") == 2)["result"]["sessionId"]
            await send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                        "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}})
            with trio.fail_after(10):
                while not any(m.get("id") == 3 for m in received):
                    await trio.sleep(0.01)
            await to_agent_send.aclose()  # stdin closes: the server tears down and returns
            with trio.fail_after(10):
                while daemon.get(sid).session_id and (await daemon.get(sid).status())["subscribers"]:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert received[1] == {"jsonrpc": "2.0", "id": None, "error": received[1]["error"]}
    assert received[1]["error"]["code"] == -32700
    after_prompt = received[received.index(next(m for m in received if m.get("id") == 2)) + 1:]
    # The title the prompt gave the session, the prompt's echo and its answer, then the prompt's result.
    assert [m.get("method") or m.get("id") for m in after_prompt] == ["session/update"] * 3 + [3]
    assert after_prompt[-1]["result"]["stopReason"] == "end_turn"
