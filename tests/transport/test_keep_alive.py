"""A request refused before its body is read leaves its keep-alive connection usable (or closed), never hung."""

from __future__ import annotations

import trio

from tests.conftest import live_daemon


async def test_fifty_refused_posts_with_unread_bodies_on_one_connection_none_hang():
    # Larger than the socket buffers: the unread rest is what a reused connection would choke on.
    body = {"prompt": [{"type": "text", "text": "x" * 300_000}]}
    with trio.fail_after(60):
        async with live_daemon() as (_, client):
            wrong = {"Authorization": "Bearer wrong"}  # replaces the client's own token for one request
            for n in range(50):
                # 401 from the token check, 404 for an unknown session, 404 from a signal route: none reads
                # the body before answering; each is followed at once by a request on the same client.
                if n % 3 == 0:
                    r = await client.post("/session/nope/prompt", json=body, headers=wrong)
                    assert r.status_code == 401
                elif n % 3 == 1:
                    r = await client.post("/session/nope/prompt", json=body)
                    assert r.status_code == 404
                else:
                    r = await client.post("/signal/mcp/not-a-token", json=body)
                    assert r.status_code == 404
                with trio.fail_after(5):  # a hung connection would stall here
                    assert (await client.post("/session", json={})).status_code == 200
