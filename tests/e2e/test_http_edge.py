"""The HTTP edge: odd cursors, huge inputs, unknown fields, routes and methods — always a short JSON answer."""

from __future__ import annotations

import pytest
import trio

from tests.conftest import live_daemon
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
