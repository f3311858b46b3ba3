"""Fault 4: a connection the client has closed stays open until its keep-alive timer expires.

When the client closes an idle keep-alive connection, TCPServer._read_data
ends, but the connection's task group still holds the keep-alive timer task
(_idle_timeout), so TCPServer.run neither returns nor closes the socket for up
to keep_alive_timeout: the socket sits in CLOSE-WAIT (Linux: /proc/net/tcp).
A raw ASGI app, so that the quart-trio fault of repro 3 does not hide this one.
Run: python repro_4_client_close_waits_for_timer.py
"""
import sys
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve


async def app(scope, receive, send):
    if scope["type"] != "http":
        raise RuntimeError("HTTP only")  # hypercorn then runs without lifespan
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})


def close_wait(port: int) -> int:
    """Sockets of the server's port in CLOSE-WAIT (state 08): closed by the client, not yet by the server."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "08")


async def main() -> int:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = 5
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, shutdown_trigger=trio.sleep_forever))
        port = int(binds[0].rsplit(":", 1)[1])
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nhello"):
                answer += await stream.receive_some(65536)
            await trio.sleep(0.2)  # the server finishes the answer: the connection is idle, kept alive
            print(f"answer: {answer.splitlines()[0].decode()}; the client now closes the idle connection")
        await trio.sleep(0.5)
        left = close_wait(port)
        print(f"0.5 s later: {left} server socket(s) on port {port} in CLOSE-WAIT")
        if left:
            await trio.sleep(5)
            print(f"5.5 s later: {close_wait(port)} server socket(s) on port {port} in CLOSE-WAIT")
        nursery.cancel_scope.cancel()
    if left:
        print("FAULT: the server keeps the client-closed connection open until keep_alive_timeout (5 s)")
        return 1
    print("OK: the server closed its side as soon as the client closed")
    return 0


sys.exit(trio.run(main))
