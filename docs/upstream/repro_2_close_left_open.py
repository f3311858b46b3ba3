"""Fault 2: with quart-trio, an answer saying "Connection: close" leaves the socket open.

So does any answer after which hypercorn must close (here: a 413 to a request
whose body has not all arrived). Hypercorn closes the socket (TCPServer._close:
send_eof, then aclose) in the task that sent the answer's last body message.
quart-trio cancels that task as soon as the send returns (hypercorn queued
http.disconnect during it), so the close dies at send_eof's checkpoint and the
client never sees EOF.  Run: python repro_2_close_left_open.py
"""
import sys
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio

app = QuartTrio(__name__)


@app.get("/")
async def index():
    return "bye", 200, {"Connection": "close"}


@app.post("/")
async def upload():  # refused before its body is read: hypercorn must close the connection
    return "too large", 413


async def eof_within(port: int, request: bytes, seconds: float) -> bool:
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(request)
        answer, closed = b"", False
        with trio.move_on_after(seconds):
            try:
                while data := await stream.receive_some(65536):
                    answer += data
            except trio.BrokenResourceError:  # a reset closes it too
                pass
            closed = True
        head = answer.split(b"\r\n")[0].decode() or "no answer"
        print(f"  {head}, " + ("then the server closed the connection" if closed else f"no EOF after {seconds} s"))
        return closed


async def main() -> int:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, shutdown_trigger=trio.sleep_forever))
        port = int(binds[0].rsplit(":", 1)[1])
        print("GET answered with Connection: close:")
        get_ok = await eof_within(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 2)
        print("POST refused before its body came in (hypercorn closes such a connection):")
        post_ok = await eof_within(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nhello", 2)
        nursery.cancel_scope.cancel()
    if get_ok and post_ok:
        print("OK: the server closed the connection after each answer")
        return 0
    print("FAULT: the server left a connection open that it had decided to close")
    return 1


sys.exit(trio.run(main))
