"""Connection-level faults the HTTP fuzz test found, each on a real daemon process over a raw socket.

- A WebSocket upgrade request with a body raised inside hypercorn's
  connection handler, which runs in the server's nursery: the daemon exited,
  before any authentication. Now that connection alone is closed.
- An answer saying ``Connection: close`` left its socket open (hypercorn
  closes it from quart-trio's request task, cancelled once the response is
  sent), holding a connection slot for as long as the client wished.
- A route that answers before the request's body has arrived (a GET with a
  body) let hypercorn close the connection without saying so.
- A connection its client closed stayed open until its keep-alive timer
  expired (the timer's task kept hypercorn's connection alive), holding its
  slot under the cap: a client opening and closing connections quickly was
  refused 503 by a daemon serving nobody.

(Reproductions against plain hypercorn: ``docs/upstream/``.)
"""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.conftest import daemon_process
from tests.e2e.raw_http import RawConnection

WEBSOCKET = [(b"Connection", b"Upgrade"), (b"Upgrade", b"websocket"), (b"Sec-WebSocket-Version", b"13"),
             (b"Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ==")]


async def health(url: str) -> int:
    conn = await RawConnection.open(url)
    try:
        return (await conn.request(b"GET", b"/health")).status
    finally:
        await conn.aclose()


async def wait_both_slots_free(url: str) -> None:
    """Until a cap of two admits two connections at once (the daemon counts a close a moment after the client
    made it); only 503s meanwhile."""
    while True:
        held = [await RawConnection.open(url) for _ in range(2)]
        statuses = [(await conn.request(b"GET", b"/health")).status for conn in held]
        for conn in held:
            await conn.aclose()
        if statuses == [200, 200]:
            return
        assert 503 in statuses, statuses
        await trio.sleep(0.02)


async def test_a_websocket_upgrade_with_a_body_does_not_stop_the_daemon(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with daemon_process(state_dir=tmp_path / "state") as daemon:
            for _ in range(3):  # no token: anyone who can connect could have sent it
                conn = await RawConnection.open(daemon.url)
                r = await conn.request(b"GET", b"/health", WEBSOCKET, b'{"a": 1}')
                assert r.status == 400 and r.headers.get("connection") == "close"
                assert await conn.closed_by_server()
                await conn.aclose()
                assert await health(daemon.url) == 200
            assert daemon.process.returncode is None


async def test_an_answer_that_says_connection_close_closes_its_socket(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with daemon_process("--max-connections", "2", state_dir=tmp_path / "state") as daemon:
            for headers, body in [([(b"Authorization", b"Bearer wrong")], b'{"x": 1}'),  # refused, body unread
                                  ([(b"Connection", b"close")], b"")]:  # the client asked for it
                conn = await RawConnection.open(daemon.url)
                r = await conn.request(b"POST", b"/session", headers, body)
                assert r.headers.get("connection") == "close", r.headers
                assert await conn.closed_by_server()  # hung here: the socket stayed open
                await conn.aclose()
            # Neither holds a slot once the daemon has finished closing them (the client sees the close a
            # moment before the daemon counts it): the cap of two admits two connections at once again.
            await wait_both_slots_free(daemon.url)


async def test_an_answer_given_before_the_body_arrived_says_connection_close(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with daemon_process(state_dir=tmp_path / "state") as daemon:
            conn = await RawConnection.open(daemon.url)
            token = daemon.token().encode()
            # The body is announced but only its start is sent: the route answers without it.
            r = await conn.request(b"GET", b"/session", [(b"Authorization", b"Bearer " + token),
                                                          (b"Content-Length", b"100000")], b"{}")
            assert r.status == 200
            assert r.headers.get("connection") == "close", r.headers
            assert await conn.closed_by_server()
            await conn.aclose()


async def test_head_on_an_event_stream_answers_headers_and_the_connection_goes_on(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with daemon_process(state_dir=tmp_path / "state") as daemon:
            auth = [(b"Authorization", b"Bearer " + daemon.token().encode())]
            conn = await RawConnection.open(daemon.url)
            r = await conn.request(b"POST", b"/session", auth + [(b"Content-Type", b"application/json")], b"{}")
            sid = r.json()["sessionId"]  # type: ignore[index]
            init = b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}'
            r = await conn.request(b"POST", b"/acp", auth + [(b"Content-Type", b"application/json")], init)
            acp = r.headers["acp-connection-id"]
            for target, extra in [(f"/session/{sid}/events".encode(), []),
                                  (b"/acp", [(b"Acp-Connection-Id", acp.encode())])]:
                r = await conn.request(b"HEAD", target, auth + extra)
                assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
                # The answer ended: the same connection takes the next request (it hung here).
                r = await conn.request(b"GET", f"/session/{sid}/status".encode(), auth)
                assert r.status == 200 and r.json()["subscribers"] == 0  # type: ignore[index]
            await conn.aclose()


async def test_a_connection_its_client_closed_frees_its_slot_at_once(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"limits": {"keepAliveSeconds": 600}}))  # nothing closes for its timer
    with trio.fail_after(30):
        async with daemon_process("--max-connections", "2", "--settings", str(settings),
                                  state_dir=tmp_path / "state") as daemon:
            # Each connection is answered, then closed by the client while idle. The daemon counts a close a
            # moment after the client made it (a busy machine's moment), so a slot may still be held when the
            # next connection comes: it is free within seconds, where hypercorn kept it for its timer's 600 s.
            for _ in range(10):
                with trio.fail_after(5):
                    while (status := await health(daemon.url)) == 503:
                        await trio.sleep(0.05)
                assert status == 200
            with trio.fail_after(5):  # and at the end both slots are free together
                await wait_both_slots_free(daemon.url)
