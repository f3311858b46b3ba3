"""A plain prompt admission answered without quart (transport/admission.py), as quart answers it; every other
request of the route left to quart, which answers it as before.

Each case is sent twice to the same served app over a real socket: once with the inline answer installed and
once without it, so quart's route and hooks answer. A ``before_request`` hook added by the test counts the
requests quart saw.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import trio

from actors import CountingIds, Limits, ScriptedModel, Settings, open_daemon
from tests.transport.served import served_app
from transport.admission import InlineAdmission, server_error
from transport.app import create_app
from transport.inline_http import INLINE_ANSWER

TEXT = {"prompt": [{"type": "text", "text": "hello"}]}


class Served:
    def __init__(self, app: Any, daemon: Any, client: httpx.AsyncClient) -> None:
        self.app, self.daemon, self.client = app, daemon, client
        self.inline = app.extensions[INLINE_ANSWER]
        self.seen_by_quart = 0

        async def count() -> None:
            self.seen_by_quart += 1

        app.before_request_funcs.setdefault(None, []).insert(0, count)  # ahead of the checks that may answer

    async def both(self, path: str, **kwargs: Any) -> tuple[tuple[httpx.Response, int], tuple[httpx.Response, int]]:
        """The answer with the inline answer installed, then without it; each with the requests quart saw."""
        answers = []
        for installed in (True, False):
            if installed:
                self.app.extensions[INLINE_ANSWER] = self.inline
            else:
                self.app.extensions.pop(INLINE_ANSWER)
            before = self.seen_by_quart
            answers.append((await self.client.post(path, **kwargs), self.seen_by_quart - before))
        self.app.extensions[INLINE_ANSWER] = self.inline
        return answers[0], answers[1]


@asynccontextmanager
async def served(model: Any = None, settings: Settings | None = None) -> AsyncIterator[Served]:
    # The connections leave every request to hypercorn: what is tested here is the answer at the ASGI layer.
    async with served_app(model, settings, inline=False) as s:
        async with httpx.AsyncClient(base_url=s.url, headers={"Authorization": f"Bearer {s.token}"},
                                     timeout=10) as client:
            yield Served(s.app, s.daemon, client)


def headers_of(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k != "date"}


def shape(body: Any) -> Any:
    """A 202 body's keys and value types (its ids differ from one admission to the next)."""
    return {k: type(v).__name__ for k, v in body.items()}


async def test_a_plain_admission_is_answered_without_quart_as_quart_answers_it():
    with trio.fail_after(30):
        async with served() as s:
            sid = (await s.client.post("/session", json={})).json()["sessionId"]
            client_id = (await s.client.post("/session", json={"sessionId": sid})).json()["clientId"]
            for extra in ({}, {"X-Qwen-Client-Id": client_id}):
                (inline, inline_seen), (routed, routed_seen) = await s.both(f"/session/{sid}/prompt", json=TEXT,
                                                                            headers=extra)
                assert (inline_seen, routed_seen) == (0, 1)
                assert inline.status_code == routed.status_code == 202
                assert headers_of(inline) == headers_of(routed)
                assert shape(inline.json()) == shape(routed.json()) == {"promptId": "str", "lastEventId": "int",
                                                                        "eventEpoch": "str"}
                assert inline.json()["promptId"] != routed.json()["promptId"]
                for answer in (inline, routed):  # each one a prompt of the session
                    turn = await s.client.get(f"/session/{sid}/turns/{answer.json()['promptId']}")
                    assert turn.status_code == 200


@pytest.mark.parametrize("case", ["no token", "wrong token", "other host", "allowed origin", "refused origin",
                                  "unknown session", "stale client id", "not json", "not a prompt",
                                  "empty prompt", "image refused", "shutting down"])
async def test_anything_but_the_plain_case_is_answered_by_quart_unchanged(case: str):
    with trio.fail_after(30):
        async with served() as s:
            sid = (await s.client.post("/session", json={})).json()["sessionId"]
            port = s.client.base_url.port
            path, kwargs = f"/session/{sid}/prompt", {"json": TEXT}
            if case == "no token":
                kwargs["headers"] = {"Authorization": ""}
            elif case == "wrong token":
                kwargs["headers"] = {"Authorization": "Bearer wrong"}
            elif case == "other host":
                kwargs["headers"] = {"Host": f"evil.example:{port}"}
            elif case == "allowed origin":
                kwargs["headers"] = {"Origin": f"http://localhost:{port}"}
            elif case == "refused origin":
                kwargs["headers"] = {"Origin": "https://evil.example"}
            elif case == "unknown session":
                path = "/session/nobody/prompt"
            elif case == "stale client id":
                kwargs["headers"] = {"X-Qwen-Client-Id": "0" * 24}
            elif case == "not json":
                kwargs = {"content": b"{not json"}
            elif case == "not a prompt":
                kwargs = {"json": {"prompt": 1}}
            elif case == "empty prompt":
                kwargs = {"json": {"prompt": []}}
            elif case == "image refused":  # an image block that is not base64
                kwargs = {"json": {"prompt": [{"type": "image", "mimeType": "image/png", "data": "%%%"}]}}
            elif case == "shutting down":
                s.daemon._shutting_down = True  # as shutdown_gracefully sets it first thing
            pending = (await s.client.get(f"/session/{sid}/pending-prompts")).json()["pendingPrompts"]
            (inline, inline_seen), (routed, routed_seen) = await s.both(path, **kwargs)
            assert inline_seen == routed_seen == 1  # quart answered both
            assert inline.status_code == routed.status_code
            assert headers_of(inline) == headers_of(routed)
            if case == "allowed origin":
                assert inline.status_code == 202 and shape(inline.json()) == shape(routed.json())
                assert inline.headers["access-control-allow-origin"] == f"http://localhost:{port}"
            else:
                assert inline.status_code >= 400 and inline.json() == routed.json()
                s.daemon._shutting_down = False
                # and nothing was admitted
                assert (await s.client.get(f"/session/{sid}/pending-prompts")).json()["pendingPrompts"] == pending


async def test_a_full_queue_is_refused_inline_as_quart_refuses_it(scripted):
    model = scripted([{"sleep": 30}], then="demo")
    with trio.fail_after(30):
        async with served(model, Settings(limits=Limits(max_pending_prompts=2))) as s:
            sid = (await s.client.post("/session", json={})).json()["sessionId"]
            for _ in range(2):
                assert (await s.client.post(f"/session/{sid}/prompt", json=TEXT)).status_code == 202
            (inline, inline_seen), (routed, routed_seen) = await s.both(f"/session/{sid}/prompt", json=TEXT)
            assert (inline_seen, routed_seen) == (0, 1)
            assert inline.status_code == routed.status_code == 503
            assert inline.json() == routed.json() == {**routed.json(), "code": "prompt_queue_full", "limit": 2,
                                                      "pendingCount": 2}
            # Closed after, as quart's hook closes a refused request's connection.
            assert headers_of(inline) == headers_of(routed) and inline.headers["connection"] == "close"


async def test_a_cluster_app_has_no_inline_answer_and_a_served_one_does():
    async with open_daemon(model=ScriptedModel(), ids=CountingIds()) as daemon:
        assert isinstance(create_app(daemon, token="t").extensions[INLINE_ANSWER], InlineAdmission)
        assert INLINE_ANSWER not in create_app(daemon, token="t", cluster=object()).extensions


async def test_a_request_not_for_the_prompt_route_is_declined_without_a_look():
    async with open_daemon(model=ScriptedModel(), ids=CountingIds()) as daemon:
        sid = (await daemon.create_session(None, None))[0].session_id
        admit = InlineAdmission(daemon, expected=None, hosts=None, client_known=lambda s, c: True)
        body = orjson.dumps(TEXT)
        scope = {"type": "http", "method": "POST", "path": f"/session/{sid}/prompt", "headers": []}
        assert await admit({**scope, "method": "PUT"}, body) is None
        assert await admit({**scope, "path": f"/session/{sid}/prompts"}, body) is None
        status, headers, data = await admit(scope, body)  # an open app (no token expected): admitted
        assert status == 202 and orjson.loads(data)["promptId"]
        assert headers == [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]


async def test_the_server_error_answer_is_quarts_to_a_route_that_raises():
    async with open_daemon(model=ScriptedModel(), ids=CountingIds()) as daemon:
        app = create_app(daemon, token=None)

        @app.get("/raises")
        async def raises() -> None:
            raise RuntimeError("a fault in a route")

        app.config["PROPAGATE_EXCEPTIONS"] = False  # as served (the test client re-raises otherwise)
        answer = await app.test_client().get("/raises")
        status, headers, data = server_error()
        assert answer.status_code == status == 500
        assert orjson.loads(await answer.get_data()) == orjson.loads(data)
        assert dict(headers)[b"connection"] == b"close"
