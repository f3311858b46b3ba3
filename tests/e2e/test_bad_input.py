"""Bad numbers in query strings and oversize or over-deep body fields: a clear 400 naming them, never a 500.

Each limit is tried just over it (refused, nothing changes) and at it (accepted),
on the real HTTP daemon; the limits are those README's *Limits on input* lists
(``actors.wire.MAX_*``).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors import wire
from tests.conftest import live_daemon

TEXT = [{"type": "text", "text": "x"}]


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = {"a": value}
    return {"a": value}


async def new_session(client) -> str:
    r = await client.post("/session", json={})
    assert r.status_code == 200, r.text
    return r.json()["sessionId"]


def assert_refused(r, code: str, path: str) -> None:
    assert r.status_code == 400, r.text[:300]
    body = r.json()
    assert (body["code"], body["path"]) == (code, path), body
    assert len(r.content) < 1024


@pytest.mark.parametrize("raw", ["7" * 5000, "9" * 4301, "²", "١٦", "-16", "16.0", "1e3", "0x10", "", " 16", "2049",
                                 "15", "0" * 5000])
async def test_a_bad_max_queued_is_a_400_naming_it(raw: str) -> None:
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            r = await client.get(f"/session/{sid}/events", params={"maxQueued": raw})
            assert_refused(r, "invalid_request", "query.maxQueued")
            assert "maxQueued" in r.json()["error"]


@pytest.mark.parametrize("raw", ["16", "0016", "2048"])
async def test_a_max_queued_in_range_opens_the_stream(raw: str) -> None:
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            async with client.stream("GET", f"/session/{sid}/events", params={"maxQueued": raw}) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")


# (route under the session, body with the field at `size` characters, the field's path, its limit)
FIELDS = [
    ("model", lambda n: {"model": "m" * n}, "$.model", wire.MAX_MODEL_CHARS),
    ("cwd", lambda n: {"cwd": "/" + "c" * (n - 1)}, "$.cwd", wire.MAX_PATH_CHARS),
    ("mid-turn-message", lambda n: {"message": "m" * n}, "$.message", wire.MAX_TEXT_CHARS),
    ("mid-turn-message", lambda n: {"message": "m", "messageId": "i" * n}, "$.messageId", wire.MAX_ID_CHARS),
    ("prompt", lambda n: {"prompt": [{"type": "text", "text": "t" * n}]}, "$.prompt[0].text", wire.MAX_TEXT_CHARS),
    ("prompt", lambda n: {"prompt": [{"type": "resource_link", "uri": "u" * n, "name": "x"}]}, "$.prompt[0].uri",
     wire.MAX_URI_CHARS),
    ("prompt", lambda n: {"prompt": [{"type": "resource", "resource": {"uri": "u", "text": "t" * n}}]},
     "$.prompt[0].resource.text", wire.MAX_TEXT_CHARS),
    ("prompt", lambda n: {"prompt": [{"type": "image", "data": "AA", "mimeType": "i" * n}]},
     "$.prompt[0].mimeType", wire.MAX_MIME_CHARS),
    ("permission/p1", lambda n: {"outcome": {"outcome": "selected", "optionId": "o" * n}}, "$.outcome.optionId",
     wire.MAX_ID_CHARS),
]


@pytest.mark.parametrize(("route", "make", "path", "limit"), FIELDS, ids=[f[2] for f in FIELDS])
async def test_a_field_over_its_limit_is_a_400_naming_it_and_changes_nothing(route, make, path, limit) -> None:
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            before = (await client.get(f"/session/{sid}/status")).json()
            r = await client.post(f"/session/{sid}/{route}", json=make(limit + 1))
            assert_refused(r, "value_too_long", path)
            assert f"{limit:,} characters" in r.json()["error"]
            after = (await client.get(f"/session/{sid}/status")).json()
            assert after == before


@pytest.mark.parametrize("limit", [wire.MAX_MODEL_CHARS])
async def test_a_model_name_at_the_limit_is_accepted(limit: int) -> None:
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            r = await client.post(f"/session/{sid}/model", json={"model": "m" * limit})
            assert r.status_code == 200, r.text[:300]
            assert (await client.get(f"/session/{sid}/status")).json()["model"] == "m" * limit


async def test_a_cwd_over_the_limit_is_refused_at_create_and_nothing_is_created() -> None:
    with trio.fail_after(20):
        async with live_daemon() as (daemon, client):
            r = await client.post("/session", json={"cwd": "c" * (wire.MAX_PATH_CHARS + 1)})
            assert_refused(r, "value_too_long", "$.cwd")
            assert (await client.get("/session")).json()["sessions"] == []


@pytest.mark.parametrize(("where", "body"), [
    ("prompt", {"prompt": TEXT, "_meta": nested(300)}),  # crashed the session's FIFO (orjson writes 254 levels)
    ("prompt", {"prompt": [{**TEXT[0], "annotations": nested(wire.MAX_JSON_DEPTH + 1)}]}),
    ("prompt", {"prompt": [{**TEXT[0], "_meta": nested(wire.MAX_JSON_DEPTH + 1)}]}),
])
async def test_a_free_form_object_nested_too_deeply_is_refused_and_the_session_goes_on(where, body) -> None:
    with trio.fail_after(30):
        async with live_daemon() as (daemon, client):
            sid = await new_session(client)
            r = await client.post(f"/session/{sid}/{where}", json=body)
            assert r.status_code == 400, r.text[:300]
            assert r.json()["code"] == "value_too_deep" and r.json()["path"].startswith("$.")
            # The session is alive and takes a prompt whose _meta is as deep as allowed.
            r = await client.post(f"/session/{sid}/prompt", json={"prompt": TEXT, "_meta": nested(wire.MAX_JSON_DEPTH)})
            assert r.status_code == 202, r.text[:300]
            prompt_id = r.json()["promptId"]
            while (await client.get(f"/session/{sid}/turns/{prompt_id}")).json().get("state") != "completed":
                await trio.sleep(0.02)
