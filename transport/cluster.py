"""Cluster mode's HTTP edge: any node answers any request (``docs/cluster.md``).

A request for a session this node does not run is decided here, before any
route handler, after authentication:

    request                                 the session is ...            this node
    --------------------------------------  ----------------------------  ------------------------------------
    GET /session                            -                             lists them all, each with the
                                                                          ``node`` that runs it
    POST /session (no sessionId)            -                             creates it, or forwards to the
                                                                          least-loaded live node (placement)
    POST /session/:id/prompt                owned by a live node          admits it: journalled in the inbox,
                                                                          202 with the owner's body, owner woken
    GET  /session/:id/events                anywhere (here too)           streams what Redis holds
    any other /session/:id/...              owned by a live node          forwards it to the owner, answers as
                                                                          the owner did (503 owner_unreachable
                                                                          if it cannot reach it)
    any /session/:id/...                    owned by nobody live          takes it over here (restores it),
                                                                          then answers as its owner
    POST /permission/:requestId             pending on another node       forwards it to each live node in
                                                                          turn; answers as the one that has it
    anything                                live here / unknown           the ordinary routes

Every event stream of a cluster carries only what Redis holds, on the owner
too (there its node hands each batch over once Redis acknowledged it, rather
than reading it back): what any client has seen is then in the session's
durable stream, so the next owner continues its ids exactly where they
stopped (no gap, no duplicate).

A forwarded request carries ``X-Trellis-Forwarded``, and a node answers it
itself: a request never goes round the cluster. Nodes share the bearer token
(the client's own ``Authorization`` header is what is forwarded).
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import trio
from opentelemetry.trace import SpanKind
from quart import Response, g, make_response, request
from quart_trio import QuartTrio

from actors import ActorGone, Daemon, wire
from actors.cluster.follow import remote_subscription
from actors.cluster.node import ClusterNode, NodeDraining, SessionElsewhere
from actors.session.images import ImageRefused
from actors.telemetry import continued, extract, inject, span

from . import sse
from .errors import HttpError, int_query, json_response

FORWARDED = "X-Trellis-Forwarded"
_SESSION_PATH = re.compile(r"^/session/([^/]+)(/.*)?$")
_PERMISSION_PATH = re.compile(r"^/permission/([^/]+)$")
_PASSED = ("authorization", "content-type", "accept", "last-event-id", "x-qwen-client-id", "x-qwen-event-epoch")
_ANSWERED = ("content-type", "x-qwen-event-epoch", "www-authenticate", "retry-after")
FORWARD_TIMEOUT = httpx.Timeout(30.0, connect=3.0)


def register(app: QuartTrio, daemon: Daemon, node: ClusterNode) -> None:
    """Route requests for sessions other nodes own (see the module docstring)."""
    client = httpx.AsyncClient(timeout=FORWARD_TIMEOUT, follow_redirects=False, trust_env=False)

    @app.after_serving
    async def close_client() -> None:
        await client.aclose()

    async def send(base_url: str) -> httpx.Response:
        """This request, as the node at ``base_url`` is to answer it itself; ``httpx.HTTPError`` if unreachable."""
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED}
        headers[FORWARDED] = node.node_id
        url = base_url.rstrip("/") + request.full_path.rstrip("?")
        # A client span whose W3C traceparent the owner continues (a client's own traceparent its parent).
        with continued(extract(request.headers), f"{request.method} (forwarded from here)"), \
                span(f"forward {request.method}", kind=SpanKind.CLIENT) as s:
            if s.is_recording():
                s.set_attributes({"http.request.method": request.method, "server.address": base_url,
                                  "trellis.node": node.node_id})
            inject(headers)
            return await client.request(request.method, url, content=await request.get_data(), headers=headers)

    def relay(answer: httpx.Response) -> Response:
        kept = {k: v for k, v in answer.headers.items() if k.lower() in _ANSWERED}
        return Response(answer.content, status=answer.status_code, headers=kept)

    async def forward(base_url: str) -> Response:
        try:
            answer = await send(base_url)
        except httpx.HTTPError as exc:
            raise HttpError(503, f"the node that owns this session cannot be reached ({type(exc).__name__}); "
                                 "try again: another node takes the session over once its lease runs out",
                            "owner_unreachable") from None
        return relay(answer)

    @app.before_request
    async def route_in_cluster() -> Response | None:
        if request.headers.get(FORWARDED):
            continue_trace()
            return None  # another node sent it here: answered here, whatever it is
        if request.method == "POST" and (vote := _PERMISSION_PATH.match(request.path)):
            return await vote_anywhere(vote.group(1))
        if request.path == "/session" and request.method == "POST":
            return await place_new()
        if request.path == "/session" and request.method == "GET":
            return await list_sessions()
        match = _SESSION_PATH.match(request.path)
        if match is None:
            return None
        session_id, rest = match.group(1), match.group(2) or ""
        events = rest == "/events" and request.method in ("GET", "HEAD")
        if node.live_here(session_id):
            return await remote_events(session_id) if events else None
        owner = await node.owner(session_id)
        if owner is None:
            return None  # unknown to the cluster, or stored and unowned: the ordinary routes (load restores it)
        elsewhere = owner.live and owner.node_id != node.node_id
        if not elsewhere and not node.draining:
            await take_over(session_id)
            return await remote_events(session_id) if events else None
        if events:
            return await remote_events(session_id)
        if rest == "/prompt" and request.method == "POST":
            return await admit_elsewhere(session_id, owner)
        if not elsewhere:  # this node is draining and the session is between owners
            raise HttpError(503, f"session {session_id} is moving to another node; try again in a moment",
                            "session_moving")
        return await forward(owner.advertise_url)

    def continue_trace() -> None:
        """A forwarded request with a ``traceparent``: its handling is a server span of the forwarder's trace,
        current until the request is torn down (:func:`end_trace`)."""
        context = extract(request.headers)
        if context is None:
            return
        held = continued(context, f"forwarded {request.method}", {"http.request.method": request.method,
                                                                   "trellis.forwarded_by": request.headers[FORWARDED],
                                                                   "trellis.node": node.node_id})
        held.__enter__()
        g.trellis_trace = held

    @app.teardown_request
    async def end_trace(exc: BaseException | None) -> None:
        held = g.pop("trellis_trace", None)
        if held is not None:
            held.__exit__(None, None, None)

    async def list_sessions() -> Response:
        # The ordinary list, with the sessions other live nodes run marked live there ("node").
        sessions = await daemon.list_sessions()
        here = {h.session_id for h in daemon.sessions()}
        owners = await node.owners([s["sessionId"] for s in sessions])
        for entry in sessions:
            owner = owners.get(entry["sessionId"])
            if entry["sessionId"] in here:
                entry["node"] = node.node_id
            elif owner is not None and owner.live:
                entry.update(live=True, restorable=False, state="remote", node=owner.node_id)
        return json_response({"sessions": sessions})

    async def vote_anywhere(request_id: str) -> Response | None:
        """``POST /permission/:requestId`` names no session: answered here when one of this node's sessions
        has the request pending, else by the live node that has it (each asked in turn; only the owner of
        the request's session can have it)."""
        if await pending_here(request_id):
            return None
        try:
            wire.decode(await request.get_data(), wire.PermissionVoteBody)
        except wire.WireError:
            return None  # the ordinary route answers 400
        try:
            others = [n for n in await node.nodes() if n.alive and n.node_id != node.node_id]
        except OSError as exc:
            raise HttpError(503, f"the other nodes cannot be listed to find permission request {request_id!r}: "
                                 f"{exc}", "storage_unavailable") from None
        unreachable = []
        for other in others:
            try:
                answer = await send(other.advertise_url)
            except httpx.HTTPError:
                unreachable.append(other.node_id)
                continue
            if answer.status_code != 404 or _code(answer) != "permission_not_found":
                return relay(answer)  # the vote was taken there (or refused there, saying why)
        if unreachable:
            raise HttpError(503, f"permission request {request_id!r} is not pending on this node or any node "
                                 f"reached, and node(s) {', '.join(unreachable)} cannot be reached; try again",
                            "owner_unreachable")
        raise HttpError(404, f"no pending permission request {request_id!r} on any node", "permission_not_found",
                        "url.requestId")

    async def pending_here(request_id: str) -> bool:
        for live in daemon.sessions():
            try:
                if await live.has_permission_request(request_id):
                    return True
            except (ActorGone, trio.TooSlowError):
                continue  # closing: none of its requests can be voted on any more
        return False

    async def take_over(session_id: str) -> None:
        try:
            await node.take_over(session_id)
        except SessionElsewhere as exc:  # taken by another node meanwhile
            raise HttpError(503, f"{exc}; try again", "session_moving") from None
        except NodeDraining as exc:
            raise HttpError(503, str(exc), "node_draining") from None

    async def place_new() -> Response | None:
        raw = await request.get_data()
        try:
            b = wire.decode(raw if raw.strip() else b"{}", wire.CreateSessionBody)
        except wire.WireError:
            return None  # the ordinary route answers 400
        if b.sessionId is not None:
            owner = await node.owner(b.sessionId)
            if owner is not None and owner.live and owner.node_id != node.node_id:
                return await forward(owner.advertise_url)  # attaching to a session that runs there
            return None
        target = await node.place()
        if target is None or target.node_id == node.node_id:
            if node.draining:
                raise HttpError(503, f"node {node.node_id} is draining and no other node takes sessions",
                                "node_draining")
            return None
        return await forward(target.advertise_url)

    async def admit_elsewhere(session_id: str, owner: Any) -> Response:
        try:
            b = wire.decode(await request.get_data(), wire.PromptBody)
        except wire.WireError as exc:
            raise HttpError(400, exc.message, exc.code, exc.path) from None
        if not b.prompt:
            raise HttpError(400, "prompt must contain at least one content block", "empty_prompt", "$.prompt")
        try:
            admitted = await node.admit_elsewhere(session_id, owner, b, request.headers.get("X-Qwen-Client-Id"))
        except ImageRefused as exc:
            raise HttpError(400, exc.message, exc.code, exc.path) from None
        except KeyError:
            raise HttpError(404, f"unknown session {session_id!r}", "session_not_found", "url.sessionId") from None
        except OSError as exc:
            raise HttpError(503, f"the prompt was not admitted: {exc}", "storage_unavailable") from None
        return json_response({"promptId": admitted.prompt_id, "lastEventId": admitted.last_event_id,
                              "eventEpoch": admitted.event_epoch}, 202)

    async def remote_events(session_id: str) -> Response:
        cursor = sse.parse_cursor(request.headers.get("Last-Event-ID") or request.args.get("lastEventId"))
        epoch = request.headers.get("X-Qwen-Event-Epoch") or request.args.get("epoch")
        max_queued = int_query("maxQueued", 16, 2048)
        try:
            event_epoch, subscription = await remote_subscription(node, session_id, cursor, epoch, max_queued)
        except OSError as exc:
            raise HttpError(503, f"the session's events cannot be read: {exc}", "events_unavailable") from None
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                   "X-Qwen-Event-Epoch": event_epoch or ""}
        if request.method == "HEAD":
            subscription.close()
            return Response(b"", headers=headers)
        headers["X-Accel-Buffering"] = "no"
        response = await make_response(sse.frames(subscription), headers)
        response.timeout = None
        return response


def _code(answer: httpx.Response) -> str | None:
    """The ``code`` of an error answer's JSON body, if it has one."""
    try:
        body = orjson.loads(answer.content)
    except orjson.JSONDecodeError:
        return None
    return body.get("code") if isinstance(body, dict) else None
