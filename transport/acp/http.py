"""ACP over HTTP at ``/acp`` (the Streamable HTTP shape of ACP RFD #721, as qwen serve has it).

- ``POST /acp`` with ``initialize`` answers 200 with the result and an
  ``Acp-Connection-Id`` header. Every other POST carries that header and is
  answered 202; its reply travels on an SSE stream: the *session* stream for
  methods on a session this connection holds, else the *connection* stream.
  Input that is not JSON-RPC is answered 400 with the JSON-RPC error.
- ``GET /acp`` with ``Acp-Connection-Id`` opens the connection stream; with
  ``Acp-Session-Id`` too, that session's stream. A session stream resumes with
  ``Last-Event-ID`` (or ``?lastEventId=``) through the session's event ring; the
  replay ends with a ``_trellis/replay_complete`` notification, and our own
  replies that waited (a ``session/prompt`` answer) come only after it.
- ``DELETE /acp`` tears the connection down.

A session stream that drops without ``session/close`` keeps its binding for
``grace`` seconds (10 by default): a reconnect within it resumes; at expiry
the binding is torn down — its prompts aborted, its permission requests
resolved as cancelled, never approved. A connection stream that drops gets
the same grace before the whole connection goes, unless a session stream is
still attached or within its own grace.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import trio
from quart import Response, make_response, request
from quart_trio import QuartTrio

from actors import Daemon, SessionHandle, TooManySubscribers
from actors.wire import excerpt, jsonrpc

from .. import sse
from ..errors import HttpError, json_response
from . import bridge, mapping
from .binding import SessionBinding
from .connection import AcpConnection
from .jsonrpc import Invalid, Request, read
from .outbox import END, KEEPALIVE, Frame, Outbox

log = logging.getLogger("trellis.acp.http")

CONNECTION_HEADER = "Acp-Connection-Id"
SESSION_HEADER = "Acp-Session-Id"
GRACE_SECONDS = 10.0
IDLE_TIMEOUT = 30 * 60.0  # a connection with no stream and no request this long is reaped
MAX_CONNECTIONS = 64
KEEPALIVE_SECONDS = sse.KEEPALIVE_SECONDS
EXTENSION = "trellis.acp"  # app.extensions key of the registry
REPLAY_COMPLETE = "_trellis/replay_complete"
STATE_RESYNC = "_trellis/state_resync_required"


class HttpConnection:
    """One ACP client over HTTP: its protocol connection, its SSE outboxes and its grace timers."""

    def __init__(self, registry: Registry, connection_id: str) -> None:
        self.registry = registry
        self.id = connection_id
        self.outbox = Outbox()
        self.session_outboxes: dict[str, Outbox] = {}
        self.graces: dict[str, trio.CancelScope] = {}
        self.conn_grace: trio.CancelScope | None = None
        self.conn_grace_expired = False
        self.conn: AcpConnection | None = None
        self.nursery: trio.Nursery | None = None
        self.last_active = trio.current_time()
        self._closing = trio.Event()
        self._done = trio.Event()
        self.closed = False

    @property
    def acp(self) -> AcpConnection:
        assert self.conn is not None
        return self.conn

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host the connection's tasks until it is closed."""
        registry = self.registry
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                self.conn = AcpConnection(registry.daemon, nursery, self._send, on_unbind=self._unbound,
                                          drain_deadline=registry.drain_deadline,
                                          drain_late_limit=registry.drain_late_limit)
                nursery.start_soon(self._idle_watch)
                task_status.started()
                await self._closing.wait()
                nursery.cancel_scope.cancel()
        except Exception:
            # Contained: one broken connection must never take the app (and every other client) down.
            log.exception("ACP connection %s… failed", self.id[:8])
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await self._teardown()

    async def _teardown(self) -> None:
        self.closed = True
        registry = self.registry
        registry.connections.pop(self.id, None)
        if self.conn is not None:
            await self.conn.close()
        self.outbox.close()
        for box in self.session_outboxes.values():
            box.close()
        self._done.set()

    def close(self) -> None:
        self._closing.set()

    async def aclose(self) -> None:
        """Close and wait until its sessions are released (prompts aborted, permissions cancelled)."""
        self.close()
        await self._done.wait()

    def touch(self) -> None:
        self.last_active = trio.current_time()

    # ------------------------------------------------------------- outgoing frames

    async def _send(self, message: dict[str, Any], session_id: str | None, event_id: int | None) -> None:
        if session_id is None:
            self.outbox.push(message)
        elif self.conn is not None and session_id in self.conn.bindings:
            self.session_outbox(session_id).push(message, event_id)
        elif "method" not in message:
            self.outbox.push(message)  # a late answer still reaches the client, on the connection stream
        # else: a notification for a session this connection no longer holds: nobody expects it

    def session_outbox(self, session_id: str) -> Outbox:
        box = self.session_outboxes.get(session_id)
        if box is None:
            box = self.session_outboxes[session_id] = Outbox()
        return box

    def _unbound(self, session_id: str) -> None:
        scope = self.graces.pop(session_id, None)
        if scope is not None:
            scope.cancel()
        box = self.session_outboxes.pop(session_id, None)
        if box is not None:
            box.close()

    # ------------------------------------------------------------- streams

    def attach_connection_stream(self) -> int:
        if self.conn_grace is not None:
            self.conn_grace.cancel()
            self.conn_grace = None
        self.conn_grace_expired = False
        self.touch()
        return self.outbox.attach()

    def connection_stream_ended(self, token: int) -> None:
        if self.closed or not self.outbox.detach(token):
            return
        self._start_conn_grace()

    def attach_session_stream(self, handle: SessionHandle, cursor: int | None) -> int:
        """Attach (or re-attach) a session stream; a cursor resumes through the ring."""
        session_id = handle.session_id
        scope = self.graces.pop(session_id, None)
        if scope is not None:
            scope.cancel()
            log.info("ACP session %s reclaimed within its grace period", session_id)
        self.touch()
        box = self.session_outbox(session_id)
        if cursor is None:
            return box.attach()
        binding = self.acp.bindings[session_id]
        replay, last = self._replay(binding, cursor)
        return box.attach(replay, skip_through=last, resend=binding.pending_requests())

    @staticmethod
    def _replay(binding: SessionBinding, cursor: int) -> tuple[list[Frame], int]:
        """The ring after ``cursor`` as frames, ending with the replay marker; and the last id it covers."""
        handle = binding.handle
        subscription = handle.subscribe(cursor, max_queued=16)
        frames: list[Frame] = []
        last = cursor
        session_id = handle.session_id
        try:
            # The replay is queued whole when subscribing, so it is read here without waiting.
            while (event := subscription.get_nowait()) is not None:
                if event.type == "session_update":  # what the live stream sent
                    frames.append(Frame(jsonrpc.notification("session/update", mapping.session_update(event.data)),
                                        event.id))
                elif event.type == "state_resync_required":
                    frames.append(Frame(jsonrpc.notification(STATE_RESYNC, {"sessionId": session_id, **event.data})))
                elif event.type == "replay_complete":
                    last = event.data["lastEventId"]
                    frames.append(Frame(jsonrpc.notification(REPLAY_COMPLETE,
                                                             {"sessionId": session_id, **event.data})))
                    break
        finally:
            subscription.close()
        return frames, last

    def session_stream_ended(self, session_id: str, token: int) -> None:
        box = self.session_outboxes.get(session_id)
        if self.closed or box is None or not box.detach(token):
            return  # a newer stream took over, or the binding is gone
        log.info("ACP session stream of %s dropped; grace %.1f s", session_id, self.registry.grace)
        scope = trio.CancelScope()
        self.graces[session_id] = scope
        assert self.nursery is not None
        self.nursery.start_soon(self._session_grace, session_id, scope)

    async def _session_grace(self, session_id: str, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(self.registry.grace)
        if scope.cancelled_caught or self.graces.get(session_id) is not scope:
            return
        del self.graces[session_id]
        log.info("ACP session %s: no reconnect within %.1f s; tearing its binding down", session_id,
                 self.registry.grace)
        await self.acp.unbind(session_id, abort=True)
        self._maybe_reap()

    def _start_conn_grace(self) -> None:
        scope = trio.CancelScope()
        self.conn_grace = scope
        assert self.nursery is not None
        self.nursery.start_soon(self._conn_grace, scope)

    async def _conn_grace(self, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(self.registry.grace)
        if scope.cancelled_caught:
            return
        self.conn_grace_expired = True
        self._maybe_reap()

    def _maybe_reap(self) -> None:
        """After the connection stream's grace: close unless a session is still attached or recovering."""
        if not self.conn_grace_expired or self.outbox.attached:
            return
        if self.graces or any(box.attached for box in self.session_outboxes.values()):
            return
        log.info("ACP connection %s… reaped after its grace period", self.id[:8])
        self.close()

    async def _idle_watch(self) -> None:
        timeout = self.registry.idle_timeout
        while True:
            await trio.sleep(min(timeout, 60.0))
            streams = self.outbox.attached or any(b.attached for b in self.session_outboxes.values())
            if not streams and not self.graces and trio.current_time() - self.last_active >= timeout:
                log.info("ACP connection %s… idle for %.0f s; closing", self.id[:8], timeout)
                self.close()
                return


class Registry:
    """The live ACP-over-HTTP connections of one app."""

    def __init__(self, app: QuartTrio, daemon: Daemon, *, grace: float, idle_timeout: float,
                 max_connections: int, drain_deadline: float, drain_late_limit: float) -> None:
        self.app = app
        self.daemon = daemon
        self.grace = grace
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.drain_deadline = drain_deadline
        self.drain_late_limit = drain_late_limit
        self.connections: dict[str, HttpConnection] = {}

    async def create(self) -> HttpConnection:
        if len(self.connections) >= self.max_connections:
            raise HttpError(503, f"at most {self.max_connections} ACP connections", "too_many_connections")
        connection = HttpConnection(self, secrets.token_urlsafe(18))
        self.connections[connection.id] = connection
        await self.app.nursery.start(connection.run)
        return connection

    def get(self, connection_id: str | None) -> HttpConnection:
        if not connection_id:
            raise HttpError(400, f"missing {CONNECTION_HEADER} header (initialize first)", "missing_connection_id",
                            f"header.{CONNECTION_HEADER}")
        connection = self.connections.get(connection_id)
        if connection is None or connection.closed:
            raise HttpError(404, "unknown or closed ACP connection; initialize again", "connection_not_found",
                            f"header.{CONNECTION_HEADER}")
        return connection

    def close_all(self) -> None:
        for connection in list(self.connections.values()):
            connection.close()


async def _frames(box: Outbox, token: int, on_end: Callable[[int], None]) -> AsyncIterator[bytes]:
    try:
        yield b"retry: 3000\n\n"
        while True:
            frame = await box.next(token, KEEPALIVE_SECONDS)
            if frame is END:
                return
            yield b": keepalive\n\n" if frame is KEEPALIVE else frame.sse()
    finally:
        on_end(token)


async def _sse_response(body: AsyncIterator[bytes], headers: dict[str, str]) -> Response:
    response = await make_response(body, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no", **headers})
    response.timeout = None
    return response


def register(
    app: QuartTrio,
    daemon: Daemon,
    *,
    grace: float = GRACE_SECONDS,
    idle_timeout: float = IDLE_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    drain_deadline: float = bridge.DEADLINE,
    drain_late_limit: float = bridge.LATE_LIMIT,
    path: str = "/acp",
) -> Registry:
    """Add ``/acp`` to the daemon's quart-trio app; returns the connection registry.

    ``grace`` is how long a dropped stream keeps its binding (10 s, as in qwen serve).
    The registry is also kept as ``app.extensions["trellis.acp"]``.
    """
    registry = Registry(app, daemon, grace=grace, idle_timeout=idle_timeout, max_connections=max_connections,
                        drain_deadline=drain_deadline, drain_late_limit=drain_late_limit)
    app.extensions[EXTENSION] = registry

    @app.after_serving
    async def close_acp_connections() -> None:
        registry.close_all()

    async def post() -> Response:
        raw = await request.get_data()
        message = read(raw)
        if isinstance(message, Invalid):
            return json_response(message.response(), 400)
        if isinstance(message, Request) and message.method == "initialize" and not message.is_notification:
            connection = await registry.create()
            answer = await connection.acp.peer.answer_now(message)
            if "error" in answer:
                connection.close()  # a failed initialize leaves nothing behind
                return json_response(answer, 200)
            return json_response(answer, 200, {CONNECTION_HEADER: connection.id})
        connection = registry.get(request.headers.get(CONNECTION_HEADER))
        connection.touch()
        await connection.acp.peer.receive_message(message)
        return Response(b"", status=202)

    async def get() -> Response:
        connection = registry.get(request.headers.get(CONNECTION_HEADER))
        session_id = request.headers.get(SESSION_HEADER)
        if request.method == "HEAD":
            # Headers only: a HEAD answer must end, and a stream never does (it stayed attached, and its
            # keep-alive connection unusable, for good).
            if session_id is not None and session_id not in connection.acp.bindings:
                raise HttpError(404, f"this connection holds no session {excerpt(session_id)}", "session_not_found",
                                f"header.{SESSION_HEADER}")
            return Response(b"", headers={"Content-Type": "text/event-stream", CONNECTION_HEADER: connection.id})
        if session_id is None:
            token = connection.attach_connection_stream()
            return await _sse_response(_frames(connection.outbox, token, connection.connection_stream_ended),
                                       {CONNECTION_HEADER: connection.id})
        binding = connection.acp.bindings.get(session_id)
        if binding is None:
            raise HttpError(404, f"this connection holds no session {excerpt(session_id)}", "session_not_found",
                            f"header.{SESSION_HEADER}")
        cursor = sse.parse_cursor(request.headers.get("Last-Event-ID") or request.args.get("lastEventId"))
        try:
            token = connection.attach_session_stream(binding.handle, cursor)
        except TooManySubscribers as exc:
            raise HttpError(503, str(exc), "too_many_subscribers") from None
        box = connection.session_outbox(session_id)
        return await _sse_response(_frames(box, token, partial(connection.session_stream_ended, session_id)),
                                   {CONNECTION_HEADER: connection.id, SESSION_HEADER: session_id})

    async def delete() -> Response:
        connection = registry.get(request.headers.get(CONNECTION_HEADER))
        with trio.move_on_after(10):
            await connection.aclose()
        return Response(b"", status=204)

    app.add_url_rule(path, "acp_post", post, methods=["POST"])
    app.add_url_rule(path, "acp_get", get, methods=["GET"])
    app.add_url_rule(path, "acp_delete", delete, methods=["DELETE"])
    return registry
