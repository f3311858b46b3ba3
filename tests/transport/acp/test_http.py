"""ACP over HTTP at /acp on a real daemon served on loopback: streams, grace period, permissions."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from actors import CountingIds, Settings, load_script, open_daemon
from transport.acp import register
from transport.acp.http import EXTENSION
from transport.app import create_app

from tests.e2e.sse_client import collect, frames
from tests.transport.acp.harness import call, text

TIMEOUT = 10
CID = "Acp-Connection-Id"
SID = "Acp-Session-Id"


def acp_app(daemon: Any, grace: float) -> tuple[Any, Any]:
    """The daemon's app with /acp: registered by ``create_app`` itself once wired, else here."""
    if "acp_grace" in inspect.signature(create_app).parameters:
        app = create_app(daemon, acp_grace=grace)
        return app, app.extensions[EXTENSION]
    app = create_app(daemon)
    return app, register(app, daemon, grace=grace)


@asynccontextmanager
async def acp_daemon(*responses: Any, grace: float = 0.5, settings: Settings | None = None,
                     ) -> AsyncIterator[tuple[Any, Any, httpx.AsyncClient]]:
    """A daemon with ``/acp`` registered, served on 127.0.0.1:0, and an httpx client for it."""
    model = load_script({"responses": list(responses)})
    async with open_daemon(settings, model=model, ids=CountingIds()) as daemon:
        app, registry = acp_app(daemon, grace)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = config.errorlog = None
        config.graceful_timeout = 0.5
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(hypercorn_serve, app, config, shutdown_trigger=trio.sleep_forever))
            async with httpx.AsyncClient(base_url=binds[0], timeout=TIMEOUT) as client:
                yield daemon, registry, client
            nursery.cancel_scope.cancel()


class Stream:
    """An SSE stream of /acp read in the background; ``close`` drops it like a network blip."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self._arrived = trio.Event()
        self._scope = trio.CancelScope()
        self.ended = trio.Event()

    async def run(self, http: httpx.AsyncClient, headers: dict[str, str], *,
                  task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self._scope:
                async with http.stream("GET", "/acp", headers=headers) as response:
                    task_status.started(response.status_code)
                    if response.status_code != 200:
                        return
                    async for frame in frames(response):
                        self.frames.append(frame)
                        self._arrived.set()
                        self._arrived = trio.Event()
        finally:
            self.ended.set()

    async def wait_for(self, predicate: Any) -> dict[str, Any]:
        with trio.fail_after(TIMEOUT):
            while True:
                found = next((f for f in self.frames if predicate(f)), None)
                if found is not None:
                    return found
                await self._arrived.wait()

    async def close(self) -> None:
        self._scope.cancel()
        await self.ended.wait()


class AcpHttpClient:
    """Just enough of an ACP-over-HTTP client to drive the tests by hand."""

    def __init__(self, http: httpx.AsyncClient, nursery: trio.Nursery) -> None:
        self.http = http
        self.nursery = nursery
        self.cid = ""
        self._id = 0
        self.connection_stream = Stream()

    async def initialize(self) -> dict[str, Any]:
        r = await self.http.post("/acp", json={"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                                "params": {"protocolVersion": 1}})
        assert r.status_code == 200, r.text
        self.cid = r.headers[CID]
        status = await self.nursery.start(self.connection_stream.run, self.http, {CID: self.cid})
        assert status == 200
        return r.json()

    async def post(self, message: dict[str, Any], session_id: str | None = None) -> httpx.Response:
        headers = {CID: self.cid}
        if session_id:
            headers[SID] = session_id
        return await self.http.post("/acp", json=message, headers=headers)

    async def send(self, method: str, params: dict[str, Any]) -> int:
        self._id += 1
        r = await self.post({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params},
                            params.get("sessionId"))
        assert r.status_code == 202, r.text
        return self._id

    async def new_session(self, cwd: str) -> str:
        request_id = await self.send("session/new", {"cwd": cwd, "mcpServers": []})
        answer = await self.connection_stream.wait_for(lambda f: f.get("id") == request_id)
        return answer["result"]["sessionId"]

    async def open_session_stream(self, session_id: str, last_event_id: int | None = None) -> Stream:
        stream = Stream()
        headers = {CID: self.cid, SID: session_id}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        status = await self.nursery.start(stream.run, self.http, headers)
        assert status == 200
        return stream


def is_update(text_value: str) -> Any:
    return lambda f: f.get("method") == "session/update" and \
        f["params"]["update"].get("content", {}).get("text") == text_value


def permission_request(f: dict[str, Any]) -> bool:
    return f.get("method") == "session/request_permission"


async def rest_events(http: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    return await collect(http, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")


async def wait_idle(http: httpx.AsyncClient, sid: str) -> None:
    with trio.fail_after(TIMEOUT):
        while (await http.get(f"/session/{sid}/status")).json()["state"] != "idle":
            await trio.sleep(0.02)


async def test_a_reconnect_within_the_grace_period_replays_what_was_missed(tmp_path) -> None:
    script = {"steps": [{"text": "one"}, {"sleep": 0.3}, {"text": "two"}, {"sleep": 0.3}, {"text": "three"}]}
    async with acp_daemon(script, grace=3.0) as (daemon, registry, http):
        async with trio.open_nursery() as nursery:
            acp = AcpHttpClient(http, nursery)
            await acp.initialize()
            sid = await acp.new_session(str(tmp_path))
            first = await acp.open_session_stream(sid)
            prompt_id = await acp.send("session/prompt", {"sessionId": sid, "prompt": text("go")})
            seen = await first.wait_for(is_update("one"))
            await first.close()  # the network blips; the turn goes on meanwhile
            await trio.sleep(1.0)
            assert sid in registry.connections[acp.cid].acp.bindings  # kept through the blip
            second = await acp.open_session_stream(sid, last_event_id=int(seen["_sse_id"]))
            answer = await second.wait_for(lambda f: f.get("id") == prompt_id)
            assert answer["result"]["stopReason"] == "end_turn"
            # The missed text, as the live stream sent it (the ring is never folded), then the replay
            # marker, then the prompt's answer: never ahead of its updates.
            methods = [f.get("method") for f in second.frames]
            assert methods[-2:] == ["_trellis/replay_complete", None]
            replayed = second.frames[:-2]
            assert all(m == "session/update" for m in methods[:-2])
            assert "".join(f["params"]["update"]["content"]["text"] for f in replayed) == "twothree"
            ids = [int(f["_sse_id"]) for f in replayed]
            assert ids == sorted(ids) and ids[0] > int(seen["_sse_id"])
            nursery.cancel_scope.cancel()


async def test_after_the_grace_period_the_prompt_is_aborted_and_the_permission_cancelled(tmp_path) -> None:
    script = ([call("shell", command="echo never > out.txt")], [{"text": "after"}])
    async with acp_daemon(*script, grace=0.5) as (daemon, registry, http):
        async with trio.open_nursery() as nursery:
            acp = AcpHttpClient(http, nursery)
            await acp.initialize()
            sid = await acp.new_session(str(tmp_path))
            stream = await acp.open_session_stream(sid)
            await acp.send("session/prompt", {"sessionId": sid, "prompt": text("go")})
            asked = await stream.wait_for(permission_request)
            await stream.close()  # gone without answering and without session/close
            await trio.sleep(0.2)
            assert sid in registry.connections[acp.cid].acp.bindings  # still within the grace period
            await wait_idle(http, sid)
            # Expired: the binding is gone, the turn was cancelled, the permission resolved as cancelled.
            assert sid not in registry.connections[acp.cid].acp.bindings
            events = await rest_events(http, sid)
            assert [e["data"]["outcome"] for e in events if e["type"] == "permission_resolved"] == \
                [{"outcome": "cancelled"}]
            assert [e["data"]["stopReason"] for e in events if e["type"] == "turn_complete"] == ["cancelled"]
            # A late approval changes nothing.
            late = await acp.post({"jsonrpc": "2.0", "id": asked["id"],
                                   "result": {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}})
            assert late.status_code == 202
            r = await http.get("/acp", headers={CID: acp.cid, SID: sid})
            assert r.status_code == 404 and r.json()["code"] == "session_not_found"
            nursery.cancel_scope.cancel()
    assert not (tmp_path / "out.txt").exists()
    assert len(daemon.runtime.provider.calls) == 1


async def test_a_permission_round_trip_over_http(tmp_path) -> None:
    script = ([call("shell", command="echo approved > out.txt")], [{"text": "after"}])
    async with acp_daemon(*script) as (daemon, registry, http):
        async with trio.open_nursery() as nursery:
            acp = AcpHttpClient(http, nursery)
            await acp.initialize()
            sid = await acp.new_session(str(tmp_path))
            stream = await acp.open_session_stream(sid)
            prompt_id = await acp.send("session/prompt", {"sessionId": sid, "prompt": text("go")})
            asked = await stream.wait_for(permission_request)
            assert asked["params"]["toolCall"]["title"] == "echo approved > out.txt"
            assert [o["kind"] for o in asked["params"]["options"]] == \
                ["allow_once", "allow_always", "reject_once", "reject_always"]
            r = await acp.post({"jsonrpc": "2.0", "id": asked["id"],
                                "result": {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}})
            assert r.status_code == 202
            answer = await stream.wait_for(lambda f: f.get("id") == prompt_id)
            assert answer["result"]["stopReason"] == "end_turn"
            methods = [f.get("method") for f in stream.frames]
            # The request came in order with the updates, and the answer after all of them.
            assert methods.index("session/request_permission") < len(methods) - 1
            assert methods[-1] is None
            nursery.cancel_scope.cancel()
    assert (tmp_path / "out.txt").read_text() == "approved\n"


async def test_a_pending_permission_is_asked_again_on_a_resumed_stream(tmp_path) -> None:
    script = ([call("shell", command="echo resumed > out.txt")], [{"text": "after"}])
    async with acp_daemon(*script, grace=3.0) as (daemon, registry, http):
        async with trio.open_nursery() as nursery:
            acp = AcpHttpClient(http, nursery)
            await acp.initialize()
            sid = await acp.new_session(str(tmp_path))
            first = await acp.open_session_stream(sid)
            prompt_id = await acp.send("session/prompt", {"sessionId": sid, "prompt": text("go")})
            asked = await first.wait_for(permission_request)
            last_id = max(int(f["_sse_id"]) for f in first.frames if f["_sse_id"])
            await first.close()
            second = await acp.open_session_stream(sid, last_event_id=last_id)
            again = await second.wait_for(permission_request)
            assert again["id"] == asked["id"]
            await acp.post({"jsonrpc": "2.0", "id": again["id"],
                            "result": {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}})
            answer = await second.wait_for(lambda f: f.get("id") == prompt_id)
            assert answer["result"]["stopReason"] == "end_turn"
            nursery.cancel_scope.cancel()
    assert (tmp_path / "out.txt").read_text() == "resumed\n"


async def test_explicit_cancel_close_and_delete_keep_their_meaning(tmp_path) -> None:
    slow = {"steps": [{"text": "working"}, {"sleep": 30}]}
    async with acp_daemon(slow, slow, slow) as (daemon, registry, http):
        async with trio.open_nursery() as nursery:
            acp = AcpHttpClient(http, nursery)
            await acp.initialize()
            sid = await acp.new_session(str(tmp_path))
            stream = await acp.open_session_stream(sid)
            # session/cancel: the prompt answers `cancelled`.
            prompt_id = await acp.send("session/prompt", {"sessionId": sid, "prompt": text("one")})
            await stream.wait_for(is_update("working"))
            r = await acp.post({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}, sid)
            assert r.status_code == 202
            answer = await stream.wait_for(lambda f: f.get("id") == prompt_id)
            assert answer["result"]["stopReason"] == "cancelled"
            # session/close: the running prompt is aborted and the session ends.
            await acp.send("session/prompt", {"sessionId": sid, "prompt": text("two")})
            await stream.wait_for(lambda f: len([x for x in stream.frames if is_update("working")(x)]) == 2)
            close_id = await acp.send("session/close", {"sessionId": sid})
            await acp.connection_stream.wait_for(lambda f: f.get("id") == close_id and "result" in f)
            assert sid not in {h.session_id for h in daemon.sessions()}
            # DELETE: every binding of the connection goes; its running prompt is aborted.
            other = await acp.new_session(str(tmp_path))
            other_stream = await acp.open_session_stream(other)
            await acp.send("session/prompt", {"sessionId": other, "prompt": text("three")})
            await other_stream.wait_for(is_update("working"))
            r = await http.delete("/acp", headers={CID: acp.cid})
            assert r.status_code == 204
            await wait_idle(http, other)
            events = await rest_events(http, other)
            assert [e["data"]["stopReason"] for e in events if e["type"] == "turn_complete"] == ["cancelled"]
            gone = await acp.post({"jsonrpc": "2.0", "id": 99, "method": "session/new", "params": {"cwd": "/"}})
            assert gone.status_code == 404 and gone.json()["code"] == "connection_not_found"
            nursery.cancel_scope.cancel()


async def test_bad_input_over_http_is_refused_and_the_connection_keeps_serving(tmp_path) -> None:
    async with acp_daemon() as (daemon, registry, http):
        async with trio.open_nursery() as nursery:
            acp = AcpHttpClient(http, nursery)
            init = await acp.initialize()
            assert init["result"]["agentCapabilities"]["loadSession"] is True
            r = await http.post("/acp", content=b"{nope", headers={CID: acp.cid})
            assert r.status_code == 400 and r.json() == {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32700, "message": r.json()["error"]["message"]}}
            r = await http.post("/acp", content=json.dumps({"jsonrpc": "2.0", "id": 5}), headers={CID: acp.cid})
            assert r.status_code == 400 and r.json()["error"]["code"] == -32600
            r = await http.post("/acp", json={"jsonrpc": "2.0", "id": 1, "method": "session/new"})
            assert r.status_code == 400 and r.json()["code"] == "missing_connection_id"
            r = await http.post("/acp", json={"jsonrpc": "2.0", "id": 1, "method": "session/new"},
                                headers={CID: "unknown"})
            assert r.status_code == 404
            r = await http.get("/acp", headers={CID: acp.cid, SID: "unknown"})
            assert r.status_code == 404
            missing = await acp.send("no/such/method", {})
            error = await acp.connection_stream.wait_for(lambda f: f.get("id") == missing)
            assert error["error"]["code"] == -32601
            sid = await acp.new_session(str(tmp_path))  # still serving
            assert sid
            nursery.cancel_scope.cancel()


async def test_frames_wait_for_a_stream_and_a_dropped_connection_stream_is_reaped(tmp_path) -> None:
    async with acp_daemon([{"text": "hello"}], grace=0.3) as (daemon, registry, http):
        async with trio.open_nursery() as nursery:
            acp = AcpHttpClient(http, nursery)
            await acp.initialize()
            sid = await acp.new_session(str(tmp_path))
            prompt_id = await acp.send("session/prompt", {"sessionId": sid, "prompt": text("hi")})
            await wait_idle(http, sid)
            # Nothing was attached: the updates and the answer waited, and now arrive in order.
            stream = await acp.open_session_stream(sid)
            await stream.wait_for(lambda f: f.get("id") == prompt_id)
            # The slash commands first (sent at session/new), the title the prompt gave the session, then the
            # prompt's two updates and its answer.
            assert [f.get("method") for f in stream.frames] == ["session/update"] * 4 + [None]
            assert [f["params"]["update"]["sessionUpdate"] for f in stream.frames[:2]] == [
                "available_commands_update", "session_info_update"]
            await stream.close()
            await acp.connection_stream.close()
            with trio.fail_after(TIMEOUT):
                while acp.cid in registry.connections:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
