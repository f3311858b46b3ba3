"""Fault 1: an exception in one connection stops hypercorn's whole Trio server.

A WebSocket upgrade request carrying a body, sent to an HTTP-only app, makes
h11 raise LocalProtocolError inside that connection's TCPServer. The
connection runs in the server's nursery, so serve() ends and every later
connection is refused.  Run: python repro_1_handler_exception.py
"""
import sys

import trio
from hypercorn.config import Config
from hypercorn.trio import serve


async def app(scope, receive, send):
    if scope["type"] != "http":
        raise RuntimeError("HTTP only")  # as the ASGI spec asks (hypercorn then runs without lifespan)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


UPGRADE_WITH_BODY = (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                     b"Content-Length: 5\r\n\r\nhello")


async def exchange(port: int, request: bytes) -> str:
    try:
        with trio.fail_after(2):
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await stream.send_all(request)
                return (await stream.receive_some(65536)).split(b"\r\n")[0].decode() or "EOF, no answer"
    except (OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
        return f"failed: {exc!r}"


async def main() -> int:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    ended: list[str] = []

    async def serve_noting_end(task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve(app, config, shutdown_trigger=trio.sleep_forever, task_status=task_status)
            ended.append("serve() returned")
        except Exception as exc:  # what ended the server
            ended.append(f"serve() raised {exc!r}")

    async with trio.open_nursery() as nursery:
        port = int((await nursery.start(serve_noting_end))[0].rsplit(":", 1)[1])
        print("upgrade request with a body ->", await exchange(port, UPGRADE_WITH_BODY))
        await trio.sleep(0.2)
        print("then a plain request        ->", await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
        print("server:", ended[0] if ended else "still serving")
        nursery.cancel_scope.cancel()
    if ended:
        print("FAULT: one connection's exception stopped the whole server")
        return 1
    print("OK: the server survived the failing connection")
    return 0


sys.exit(trio.run(main))
