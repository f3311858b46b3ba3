"""The HTTP edge: odd cursors, huge inputs, unknown fields, routes and methods — always a short JSON answer."""

from __future__ import annotations

import pytest
import trio

from tests.conftest import live_daemon
from tests.e2e.raw_http import RawConnection
from tests.e2e.sse_client import frames

TEXT = {"prompt": [{"type": "text", "text": "Plan a picnic"}]}
SMALL = 1024  # an error body is at most this many bytes, whatever the input


async def new_session(client) -> str:
    r = await client.post("/session", json={})
    assert r.status_code == 200
    return r.json()["sessionId"]


async def finished_turn(client, sid: str) -> None:
    pid = (await client.post(f"/session/{sid}/prompt", json=TEXT)).json()["promptId"]
    with trio.fail_after(10):
        while (await client.get(f"/session/{sid}/turns/{pid}")).json().get("state") not in (
                "completed", "error", "cancelled"):
            await trio.sleep(0.01)


def assert_small_error(r, status: int, code: str, path: str | None) -> dict:
    assert r.status_code == status, r.text[:300]
    assert r.headers["content-type"].startswith("application/json")
    assert len(r.content) < SMALL, len(r.content)
    err = r.json()
    assert set(err) >= {"error", "code", "path"} and isinstance(err["error"], str) and err["error"]
    assert (err["code"], err["path"]) == (code, path), err
    return err


# ----------------------------------------------------------------- Last-Event-ID


@pytest.mark.parametrize("cursor", ["7" * 5000, "-1", "1e3", "abc", "", "1.0", str(2**53)])
@pytest.mark.parametrize("where", ["header", "query"])
async def test_an_unusable_cursor_is_ignored_and_the_stream_is_live_only(cursor: str, where: str):
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            await finished_turn(client, sid)  # old events a replay would send
            last = (await client.get(f"/session/{sid}/status")).json()["lastEventId"]
            assert last > 0
            kwargs = {"headers": {"Last-Event-ID": cursor}} if where == "header" else {"params": {"lastEventId": cursor}}
            async with client.stream("GET", f"/session/{sid}/events", **kwargs) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                # Live only: the first frame is the next new event, not a replay of old ones.
                await client.post(f"/session/{sid}/prompt", json=TEXT)
                async for frame in frames(r):
                    assert frame["type"] not in ("replay_complete", "state_resync_required"), frame
                    assert frame["id"] == last + 1, frame
                    break


# ----------------------------------------------------------------- bounded error bodies


async def test_a_5_mb_session_id_is_refused_with_a_short_answer():
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            r = await client.post("/session", json={"sessionId": "x" * 5_000_000})
            err = assert_small_error(r, 400, "invalid_session_id", "$.sessionId")
            assert "xxxx" in err["error"] and "…" in err["error"]
            assert "at most 128" in err["error"]  # the advice at the end survives the cut


async def test_an_unknown_5000_char_session_id_is_a_short_404():
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            for method, url in [("GET", f"/session/{'s' * 5000}/status"),
                                ("GET", f"/session/{'s' * 5000}/transcript"),
                                ("POST", f"/session/{'s' * 5000}/cancel")]:
                assert_small_error(await client.request(method, url), 404, "session_not_found", "url.sessionId")


async def test_a_1_mb_bad_field_value_is_refused_with_a_short_answer():
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            huge = "v" * 1_000_000
            r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": huge, "text": "x"}]})
            assert_small_error(r, 400, "invalid_request", "$.prompt[0]")
            r = await client.post(f"/session/{sid}/prompt", json={**TEXT, huge: 1})
            err = assert_small_error(r, 400, "invalid_request", r.json()["path"])
            assert err["path"].startswith("$.vvvv") and "…" in err["path"]
            r = await client.post(f"/session/{sid}/permission/p1", json={"outcome": {"outcome": huge}})
            assert r.status_code in (400, 404) and len(r.content) < SMALL, r.text[:300]


# ----------------------------------------------------------------- unknown fields


async def test_an_unknown_field_is_named_by_its_path():
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            cases = [
                ({**TEXT, "bogus": 1}, "$.bogus"),
                ({"prompt": [{"type": "text", "text": "x", "bogus": 1}]}, "$.prompt[0].bogus"),
                ({"prompt": [{"type": "resource", "resource": {"uri": "u", "etag": "e"}}]},
                 "$.prompt[0].resource.etag"),
            ]
            for body, path in cases:
                err = assert_small_error(await client.post(f"/session/{sid}/prompt", json=body), 400,
                                         "invalid_request", path)
                assert path.rsplit(".", 1)[1] in err["error"]
            err = assert_small_error(await client.post("/session", json={"cwd": None, "bogus": 1}), 400,
                                     "invalid_request", "$.bogus")


# ----------------------------------------------------------------- unknown routes and methods


async def test_an_unknown_route_and_an_unknown_method_answer_json():
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            assert_small_error(await client.get("/no/such/route"), 404, "not_found", None)
            assert_small_error(await client.get("/" + "r" * 5000), 404, "not_found", None)
            assert_small_error(await client.put(f"/session/{sid}/prompt", json=TEXT), 405,
                               "method_not_allowed", None)
            assert_small_error(await client.delete("/health"), 405, "method_not_allowed", None)


async def test_qwens_routes_for_what_trellis_has_not_say_what_it_has_instead():
    """qwen's Web Shell shows a panel's error sentence as it is ("GET /scheduled-tasks: no route ..."): for the
    routes of qwen features Trellis does not have, the sentence says what Trellis has instead."""
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            for path, words in (("/scheduled-tasks", "no scheduled tasks"), ("/goals", "no goals"),
                                ("/workspace/extensions", "no plugin manager"),
                                ("/workspace/extensions/operations", "no plugin manager"),
                                ("/workspaces/%2Ftmp%2Fp/extensions", "no plugin manager"),
                                ("/workspace/mcp", "no plugin manager")):
                err = assert_small_error(await client.get(path), 404, "not_found", None)
                assert words in err["error"] and "no route GET" in err["error"], (path, err)
            err = assert_small_error(await client.get("/workspace/extensionsx"), 404, "not_found", None)
            assert err["error"] == "no route GET /workspace/extensionsx"
            # The shell polls the open session's goal: qwen's answer for a session without one. Setting one is
            # refused in the same words.
            sid = await new_session(client)
            r = await client.get(f"/session/{sid}/goal")
            assert r.status_code == 200 and r.json() == {"snapshot": None}
            err = assert_small_error(await client.post(f"/session/{sid}/goal", json={"objective": "x"}), 405,
                                     "method_not_allowed", None)
            assert "no goals" in err["error"] and "POST is not allowed" in err["error"], err
            assert_small_error(await client.get("/session/nope/goal"), 404, "session_not_found", "url.sessionId")


async def test_an_unknown_route_or_method_is_said_in_our_words():
    """What was not found, and which methods the route has: not the web framework's sentence."""
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            err = assert_small_error(await client.get("/nope"), 404, "not_found", None)
            assert err["error"] == "no route GET /nope"
            err = assert_small_error(await client.delete("/session/x/y/z"), 404, "not_found", None)
            assert err["error"] == "no route DELETE /session/x/y/z"
            r = await client.post("/health")
            assert assert_small_error(r, 405, "method_not_allowed", None)["error"] == \
                "POST is not allowed on /health; allowed: GET"
            assert set(r.headers["Allow"].split(", ")) >= {"GET", "HEAD"}
            err = assert_small_error(await client.put("/session", json={}), 405, "method_not_allowed", None)
            assert err["error"] == "PUT is not allowed on /session; allowed: GET, POST"
            err = assert_small_error(await client.get(f"/session/{sid}/prompt"), 405, "method_not_allowed", None)
            assert err["error"] == f"GET is not allowed on /session/{sid}/prompt; allowed: POST"
            # A control character in the path is shown escaped; a long one is cut.
            err = assert_small_error(await client.get("/a%0Ab%1B"), 404, "not_found", None)
            assert err["error"] == "no route GET /a\\nb\\x1b"
            err = assert_small_error(await client.get("/" + "r" * 5000), 404, "not_found", None)
            assert err["error"].startswith("no route GET /rrr") and "…" in err["error"]
            assert len(err["error"]) < 200
            # A WebSocket upgrade (no route takes one): said as plainly, never a 500.
            upgrade = [(b"Connection", b"Upgrade"), (b"Upgrade", b"websocket"), (b"Sec-WebSocket-Version", b"13"),
                       (b"Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
                       (b"Authorization", client.headers["Authorization"].encode())]
            for target, status, said in ((b"/health", 400, "/health does not take a WebSocket"),
                                         (b"/nope", 404, "no route WebSocket /nope")):
                conn = await RawConnection.open(str(client.base_url))
                try:
                    r = await conn.request(b"GET", target, upgrade)
                finally:
                    await conn.aclose()
                assert r.status == status and r.json()["error"] == said, (r.status, r.body)
