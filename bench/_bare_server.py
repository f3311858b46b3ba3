"""The floor of the HTTP benchmarks: a bare quart-trio app on hypercorn, in its own process.

Same Quart, quart-trio and hypercorn as the daemon, and the daemon's hypercorn
configuration (``transport/server.py``: a ``Config()`` with the bind, a 1 s
graceful timeout, no access or error log) and app limits, served by stock
``hypercorn.trio.serve``. Two routes, nothing else (no auth, no host check):

- ``POST /prompt`` reads the body and answers 202 with a JSON body the shape and
  size of the daemon's ``{"promptId", "lastEventId", "eventEpoch"}``; it also
  releases the streams waiting on ``/sse?wait=1`` (so a bare "prompt" starts a
  bare "turn", as ours does);
- ``GET /sse?frames=N&size=S[&wait=1]`` sends ``retry: 3000``, then (after the
  next ``POST /prompt`` with ``wait=1``) N pre-encoded frames
  ``id: n\\nevent: session_update\\ndata: {...}\\n\\n`` whose JSON is about S
  bytes, the last one ``event: turn_complete`` — the simplest idiomatic
  streaming response, an async generator yielding each frame.

It prints ``listening on http://127.0.0.1:PORT`` like the daemon. With
``--report-loop-stalls MS`` it times every Trio task step with the daemon's own
instrument (``actors/loop_stalls.py``: wall time less run-queue delay) and, at
SIGTERM, writes its ``longest step <X> ms in task <name> ...`` line on stderr (the
floor of that figure).

    python bench/_bare_server.py [--port 0] [--report-loop-stalls 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, make_response, request
from quart_trio import QuartTrio



def _load_stall_watch() -> type:
    """The daemon's ``actors/loop_stalls.py`` alone (it needs only trio): importing it through the ``actors``
    package would load the whole daemon into the floor, and its collector would walk it."""
    path = Path(__file__).resolve().parent.parent / "actors" / "loop_stalls.py"
    spec = importlib.util.spec_from_file_location("_bench_loop_stalls", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StallWatch


StallWatch = _load_stall_watch()

EPOCH = "c2c31bea54f7540edef006cf4172db48"


@lru_cache(maxsize=8)
def frames(n: int, size: int) -> tuple[bytes, ...]:
    """N SSE frames, JSON of about ``size`` bytes each, the last a turn_complete; encoded once."""
    out = []
    for i in range(1, n + 1):
        kind = "turn_complete" if i == n else "session_update"
        data = {"id": i, "v": 1, "type": kind, "promptId": "prompt-fc08b81119581ea8",
                "data": {"sessionId": "session-d3948b473d29b991", "update": {
                    "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}}},
                "_meta": {"serverTimestamp": 1796138521450}}
        pad = max(0, size - len(orjson.dumps(data)))
        data["data"]["update"]["content"]["text"] = "x" * pad
        out.append(b"id: %d\nevent: %s\ndata: %s\n\n" % (i, kind.encode(), orjson.dumps(data)))
    return tuple(out)


def create_app() -> QuartTrio:
    app = QuartTrio("bare")
    app.config["MAX_CONTENT_LENGTH"] = 10 * 1024 * 1024  # as transport/app.py
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["BODY_TIMEOUT"] = 60
    state = {"released": trio.Event(), "prompts": 0}

    @app.post("/prompt")
    async def prompt() -> Response:
        await request.get_data()
        state["prompts"] += 1
        state["released"].set()
        state["released"] = trio.Event()
        body = orjson.dumps({"promptId": "prompt-%016x" % state["prompts"], "lastEventId": state["prompts"],
                             "eventEpoch": EPOCH})
        return Response(body, status=202, content_type="application/json")

    @app.get("/sse")
    async def sse() -> Response:
        n, size = int(request.args.get("frames", "100")), int(request.args.get("size", "250"))
        released = state["released"] if request.args.get("wait") else None
        encoded = frames(n, size)

        async def stream():
            yield b"retry: 3000\n\n"
            if released is not None:
                await released.wait()
            for frame in encoded:
                yield frame

        response = await make_response(stream(), {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                                  "X-Accel-Buffering": "no"})
        response.timeout = None
        return response

    return app


async def main(port: int, watch: Any) -> None:
    config = Config()  # as transport/server.py
    config.bind = [f"127.0.0.1:{port}"]
    config.graceful_timeout = 1.0
    config.accesslog = None
    config.errorlog = None
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: serve(create_app(), config, task_status=task_status))
            print(f"listening on {binds[0]}", flush=True)
            if watch is not None:
                watch.arm()  # as the daemon: steps count from here
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--report-loop-stalls", type=float, default=None, metavar="MS")
    args = parser.parse_args()
    watch = StallWatch(args.report_loop_stalls, armed=False) if args.report_loop_stalls is not None else None
    trio.run(main, args.port, watch, instruments=[watch] if watch else [])
    if watch is not None:
        print(watch.report(), file=sys.stderr, flush=True)
