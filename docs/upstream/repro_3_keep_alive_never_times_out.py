"""Fault 3: with quart-trio, an idle keep-alive connection is never closed.

After the last body message of an answer, hypercorn restarts the connection's
keep-alive timer (TrioSingleTask.restart: a lock, then nursery.start) in the
task that sent that message. quart-trio cancels that task as soon as the send
returns (hypercorn queued http.disconnect during it), so the restart dies at
the lock's checkpoint and the timer never runs: keep_alive_timeout is ignored.
Run: python repro_3_keep_alive_never_times_out.py
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
    return "hello"


async def main() -> int:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = 1
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, shutdown_trigger=trio.sleep_forever))
        port = int(binds[0].rsplit(":", 1)[1])
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nhello"):  # the whole answer
                answer += await stream.receive_some(65536)
            print(f"answer: {answer.splitlines()[0].decode()}; connection kept alive, now idle")
            closed = False
            with trio.move_on_after(3):
                closed = await stream.receive_some(65536) == b""
        nursery.cancel_scope.cancel()
    if closed:
        print("OK: the server closed the idle connection after keep_alive_timeout (1 s)")
        return 0
    print("FAULT: the idle connection is still open 3 s later (keep_alive_timeout = 1 s)")
    return 1


sys.exit(trio.run(main))
