"""The cap on open connections (``limits.maxConnections`` / ``--max-connections``), on a real daemon process.

Connections are raw sockets (tests/e2e/raw_http.py): a pooling client would
hold connections of its own and blur the count. Idle keep-alive connections
and event streams both hold a slot; one over the cap is answered 503
``too_many_connections`` and closed, changes nothing, and holds no file
descriptor in the daemon for long; once slots are freed, new connections are
served again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from tests.conftest import daemon_process
from tests.e2e.raw_http import RawConnection, RawResponse

CAP = 4


def assert_refused(r: RawResponse) -> None:
    assert r.status == 503, (r.status, r.body[:300])
    assert r.headers["content-type"] == "application/json"
    assert r.headers["connection"] == "close"
    body = r.json()
    assert isinstance(body, dict) and body["code"] == "too_many_connections" and body["path"] is None, body
    assert f"at most {CAP}" in body["error"]


async def served(url: str) -> RawConnection:
    """A new connection the daemon serves (``GET /health`` is 200) — retried while a freed slot is still
    being released on the daemon's side (the client sees the close before the daemon counts it)."""
    while True:
        conn = await RawConnection.open(url)
        r = await conn.request(b"GET", b"/health")
        if r.status == 200:
            return conn
        assert_refused(r)
        await conn.aclose()
        await trio.sleep(0.02)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.parametrize("configured_by", ["flag", "settings"])
async def test_connections_over_the_cap_get_503_are_closed_and_freed_slots_serve_again(
        tmp_path: Path, configured_by: str) -> None:
    # Idle connections hold their slots here for the whole test, however slow the machine: a long keep-alive.
    limits: dict[str, object] = {"keepAliveSeconds": 600}
    if configured_by == "flag":
        args = ["--max-connections", str(CAP)]
    else:
        limits["maxConnections"] = CAP
        args = []
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"limits": limits}))
    args += ["--settings", str(settings)]
    with trio.fail_after(60):
        async with daemon_process(*args, state_dir=tmp_path / "state") as daemon:
            auth = [(b"Authorization", b"Bearer " + daemon.token().encode())]
            # Fill the cap: two idle keep-alive connections and two event streams.
            idle_a = await served(daemon.url)
            r = await idle_a.request(b"POST", b"/session", auth + [(b"Content-Type", b"application/json")], b"{}")
            assert r.status == 200, r.body
            sid = r.json()["sessionId"]  # type: ignore[index]
            idle_b = await served(daemon.url)
            streams = []
            for _ in range(2):
                conn = await served(daemon.url)
                r = await conn.request(b"GET", f"/session/{sid}/events".encode(), auth, head_only=True)
                assert r.status == 200 and not r.complete
                streams.append(conn)
            fds_when_full = open_fds(daemon.pid)

            # Over the cap: a request, no request at all, and a request that would create a session.
            for request in [(b"GET", b"/health", [], b""), None,
                            (b"POST", b"/session", auth + [(b"Content-Type", b"application/json")], b"{}")]:
                extra = await RawConnection.open(daemon.url)
                if request is None:
                    assert_refused(await extra.read_response())
                else:
                    assert_refused(await extra.request(*request))
                assert await extra.closed_by_server()
                await extra.aclose()

            # The idle keep-alive connections were open all along (they answer on the same socket), so they
            # were what held the slots.
            for conn in (idle_a, idle_b):
                assert (await conn.request(b"GET", b"/health")).status == 200

            # Many refused connections that send nothing and are never closed by the client hold nothing:
            # the daemon answers each and closes its end, so its descriptors come back to what they were.
            lingering = [await RawConnection.open(daemon.url) for _ in range(40)]
            for conn in lingering:
                assert_refused(await conn.read_response())
            while open_fds(daemon.pid) > fds_when_full:
                await trio.sleep(0.05)

            # Free two slots (an idle connection and a stream): new connections are served again, up to the cap.
            await idle_a.aclose()
            await streams[0].aclose()
            again = [await served(daemon.url), await served(daemon.url)]
            r = await again[0].request(b"GET", b"/session", auth)
            assert r.status == 200
            # The refused POST /session created nothing.
            assert [s["sessionId"] for s in r.json()["sessions"]] == [sid]  # type: ignore[index]
            extra = await RawConnection.open(daemon.url)
            assert_refused(await extra.request(b"GET", b"/health"))
            for conn in [*lingering, extra, idle_b, streams[1], *again]:
                await conn.aclose()


async def test_an_idle_keep_alive_connection_is_closed_after_limits_keep_alive_seconds(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"limits": {"keepAliveSeconds": 0.5}}))
    with trio.fail_after(60):
        async with daemon_process("--settings", str(settings), state_dir=tmp_path / "state") as daemon:
            conn = await served(daemon.url)
            answered = trio.current_time()  # conn is idle from here
            stream = await served(daemon.url)
            auth = [(b"Authorization", b"Bearer " + daemon.token().encode())]
            r = await stream.request(b"POST", b"/session", auth + [(b"Content-Type", b"application/json")], b"{}")
            sid = r.json()["sessionId"]  # type: ignore[index]
            r = await stream.request(b"GET", f"/session/{sid}/events".encode(), auth, head_only=True)
            assert r.status == 200 and not r.complete
            assert await conn.stream.receive_some(100) == b""  # closed by the daemon, once idle for 0.5 s
            assert trio.current_time() - answered >= 0.45
            await trio.sleep(1.5)  # the event stream, in flight all along, is still served
            r = await (await served(daemon.url)).request(
                b"POST", f"/session/{sid}/prompt".encode(), auth + [(b"Content-Type", b"application/json")],
                json.dumps({"prompt": [{"type": "text", "text": "hi"}]}).encode())
            assert r.status == 202, r.body
            seen = bytearray()
            with trio.fail_after(10):
                while b"user_message_chunk" not in seen:
                    data = await stream.stream.receive_some(1 << 16)
                    assert data, "the event stream was closed"
                    seen += data
