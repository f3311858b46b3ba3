"""The REST + SSE surface of the daemon (wire-compatible with qwen-code's ``qwen serve``).

Routes translate HTTP into calls on :class:`actors.SessionHandle`; bodies are
validated by :mod:`actors.wire` before anything changes.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import trio

from quart import Response, g, has_request_context, has_websocket_context, make_response, request, websocket
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from actors import (
    ActorGone,
    Daemon,
    DeletionUnavailable,
    InvalidCwd,
    InvalidSessionId,
    NotStartedHere,
    SessionHandle,
    SessionStarting,
    TooManySessions,
    TooManySubscribers,
    UnknownSession,
    wire,
)
from actors.session.fifo import StorageUnavailable
from actors.session.images import ImageRefused
from actors.session.transcript import SESSION_ID_RULE, TranscriptError
from actors.storage import StorageError
from actors.wire import answers

from . import sse
from .acp import register as register_acp
from .access import CORS_EXPOSED_HEADERS, PREFLIGHT_HEADERS, AccessPolicy, Allowed, Preflight, decide
from .admission import admission_answer
from .checkpoints import register as register_checkpoints, rewind_files
from .errors import HttpError, framework_error, int_query, json_response, not_found_session, session_closing
from .hosts import HostPolicy
from .load_replay import LoadReplay, Replayed
from .mcp import register as register_mcp
from .metrics import register as register_metrics
from .openapi import openapi_document
from .permissions import register as register_permissions, session_rules
from .shutdown import refuse_if_shutting_down
from .ui import register as register_ui
from .work import register as register_work
from .webshell import WEBSHELL_FEATURES, capability_fields
from .webshell import register as register_webshell

T = TypeVar("T")

MAX_BODY = 10 * 1024 * 1024
PROTOCOL_VERSION = 1
FEATURES = [
    "non_blocking_prompt",
    "session_mid_turn_message_mutation",  # DELETE /session/:id/mid-turn-messages/:messageId
    "session_mid_turn_message_query",  # GET /session/:id/mid-turn-messages
    "mid_turn_messages",
    "pending_prompts",
    "event_replay",
    "session_load",
    "todo_stop_guard",
    "subagents",
]
CLIENTS_PER_SESSION = 64


class ClientRegistry:
    """Client ids handed out per session (``X-Qwen-Client-Id``), the newest kept; beside the id a load
    handed out, what that load showed its client until the client's stream takes it (transport/load_replay.py)."""

    def __init__(self) -> None:
        self._clients: dict[str, OrderedDict[str, LoadReplay | None]] = {}

    def register(self, session_id: str, live: set[str] | None = None, replay: LoadReplay | None = None) -> str:
        if live is not None:  # forget the clients of sessions that are gone (closed, crashed)
            for gone in [s for s in self._clients if s not in live and s != session_id]:
                del self._clients[gone]
        clients = self._clients.setdefault(session_id, OrderedDict())
        now = time.monotonic()
        for known, kept in list(clients.items()):  # replays no stream came for: let their events go
            if kept is not None and kept.expired(now):
                clients[known] = None
        client_id = secrets.token_hex(12)
        clients[client_id] = replay
        while len(clients) > CLIENTS_PER_SESSION:
            clients.popitem(last=False)
        return client_id

    def take_replay(self, session_id: str, client_id: str | None, cursor: int | None,
                    epoch: str | None) -> tuple[str, LoadReplay] | None:
        """What a load kept for this stream, once, and the client id it was kept beside: the stream of the
        client it answered, from the ``lastEventId`` it answered (a stream without a client id: the oldest
        such live load of the session)."""
        clients = self._clients.get(session_id)
        if not clients or cursor is None:
            return None
        now = time.monotonic()
        for known in ([client_id] if client_id is not None else list(clients)):
            kept = clients.get(known)
            if kept is not None and not kept.expired(now) and kept.fits(cursor, epoch) \
                    and (client_id is not None or kept.by_cursor):
                clients[known] = None
                return known, kept
        return None

    def knows(self, session_id: str, client_id: str) -> bool:
        return client_id in self._clients.get(session_id, {})

    def check(self, session_id: str, client_id: str | None) -> None:
        if client_id is not None and not self.knows(session_id, client_id):
            raise HttpError(400, "unknown or stale client id; resume the session to get a new one",
                            "invalid_client_id", "header.X-Qwen-Client-Id")

    def give_back(self, session_id: str, taken: tuple[str, LoadReplay]) -> None:
        """A replay taken by a stream that could not open: the client's next try takes it."""
        client_id, replay = taken
        clients = self._clients.get(session_id)
        if clients is not None and client_id in clients and clients[client_id] is None:
            clients[client_id] = replay

    def forget(self, session_id: str) -> None:
        self._clients.pop(session_id, None)


def create_app(
    daemon: Daemon,
    *,
    token: str | None = None,
    allowed_origins: tuple[str, ...] = (),
    acp_grace: float = 10.0,
    hosts: HostPolicy | None = None,
    cluster: Any = None,
) -> QuartTrio:
    """The quart-trio application serving ``daemon`` (REST + SSE, and ACP at ``/acp``).

    With ``token``, every route but ``/health`` and ``/signal/mcp/<token>`` wants
    ``Authorization: Bearer <token>``; ``None`` leaves the app open. This is the
    lower layer (test harnesses build apps with it): :func:`transport.serve`
    decides the token, minting one by default.

    With ``hosts`` (:class:`transport.hosts.HostPolicy`, which ``serve`` builds
    and tells the bound address), a request whose ``Host`` it does not accept
    answers 421 ``misdirected_host`` before anything else, and a browser
    ``Origin`` is allowed when same-origin with the daemon or listed in
    ``allowed_origins``. Without it (bare harness apps) ``Host`` is not checked
    and only ``allowed_origins`` are allowed.

    With ``cluster`` (an :class:`actors.cluster.node.ClusterNode`), requests for
    sessions other nodes own are admitted, streamed or forwarded here
    (:mod:`transport.cluster`).
    """
    app = QuartTrio("trellis")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["BODY_TIMEOUT"] = 60
    clients = ClientRegistry()
    # token None: open (test harnesses; serve(auth=False)). One decision for every request (transport/access.py).
    policy = AccessPolicy(token.encode() if token else None, hosts, tuple(allowed_origins))

    # ------------------------------------------------------------- helpers

    def live_ids() -> set[str]:
        return {h.session_id for h in daemon.sessions()}

    def session(session_id: str) -> SessionHandle:
        try:
            handle = daemon.get(session_id)
        except UnknownSession:
            raise not_found_session(session_id) from None
        clients.check(session_id, request.headers.get("X-Qwen-Client-Id"))
        return handle

    async def body(cls: type[T], *, optional: bool = False) -> T:
        raw = await request.get_data()
        if optional and not raw.strip():
            raw = b"{}"
        try:
            return wire.decode(raw, cls)
        except wire.WireError as exc:
            raise HttpError(400, exc.message, exc.code, exc.path) from None

    @contextmanager
    def starting_a_session(id_path: str = "$.sessionId") -> Iterator[None]:
        """What starting (or restoring) a session can refuse, as HTTP errors."""
        try:
            yield
        except InvalidSessionId as exc:
            raise HttpError(400, f"invalid or taken session id {str(exc)!r}: a session id is {SESSION_ID_RULE}",
                            "invalid_session_id", id_path) from None
        except InvalidCwd as exc:
            raise HttpError(400, str(exc), "invalid_cwd", "$.cwd") from None
        except SessionStarting as exc:
            raise HttpError(409, str(exc), "session_starting", id_path) from None
        except NotStartedHere as exc:  # cluster mode: another node has it, or this one is draining
            raise HttpError(503, f"{exc}; try again", exc.code, id_path) from None
        except TooManySessions as exc:
            raise HttpError(503, str(exc), "too_many_sessions", limit=daemon.settings.limits.max_sessions) from None
        except TranscriptError as exc:
            raise HttpError(500, f"transcript unreadable: {exc}", "transcript_corrupt") from None
        except StorageError as exc:
            raise HttpError(503, f"the session could not be stored: {exc}", "storage_unavailable") from None

    # ------------------------------------------------------------- guards

    @app.before_request
    async def check_access() -> Response | None:
        decision = decide(policy, request.method, request.path, request.headers.get)
        g.access = decision  # the answer's CORS headers (allow_origin, below)
        if isinstance(decision, Allowed):
            return None
        if isinstance(decision, Preflight):
            return Response(b"", status=204, headers=dict(PREFLIGHT_HEADERS))
        refused = HttpError(decision.status, decision.message, decision.code, decision.path).response()
        refused.headers.update(dict(decision.headers))
        return refused

    @app.before_request
    async def check_shutting_down() -> Response | None:
        return await refuse_if_shutting_down(daemon)  # 503 shutting_down for new work (transport/shutdown.py)

    @app.after_request
    async def allow_origin(response: Response) -> Response:
        origin = getattr(g.get("access"), "cors_origin", None)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = CORS_EXPOSED_HEADERS
            response.headers.add("Vary", "Origin")
        return response

    @app.errorhandler(HttpError)
    async def on_http_error(exc: HttpError) -> Response:
        return exc.response()

    @app.errorhandler(ActorGone)
    async def on_actor_gone(exc: ActorGone) -> Response:
        return session_closing().response()

    @app.errorhandler(HTTPException)
    async def on_werkzeug_error(exc: HTTPException) -> Response:
        # In our words, not the framework's: what was not found, which methods the route has.
        if has_request_context():
            method, path = request.method, request.path
        else:  # a WebSocket upgrade: there is no HTTP request (and no WebSocket route)
            method, path = "WebSocket", websocket.path if has_websocket_context() else "?"
        error = framework_error(exc, method, path, body_timeout=app.config.get("BODY_TIMEOUT"))
        response = error.response()
        if exc.code == 405 and getattr(exc, "valid_methods", None):
            response.headers["Allow"] = ", ".join(sorted(exc.valid_methods))  # type: ignore[attr-defined]
        if exc.code == 413:
            response.headers["Connection"] = "close"  # the unread body must not be taken for the next request
        return response

    # ------------------------------------------------------------- daemon

    @app.get("/health")
    async def health() -> Response:
        return answer(answers.Health(status="ok"))

    documents: list[dict[str, Any]] = []  # built at the first request (pure; 40 ms and a megabyte few daemons use)

    @app.get("/openapi.json")
    async def openapi() -> Response:
        if not documents:
            documents.append(openapi_document())
        return json_response(documents[0])  # the REST API's OpenAPI 3.1 document, without a token (no data)

    @app.get("/capabilities")
    async def capabilities() -> Response:
        limits = daemon.settings.limits
        return json_response({
            "protocolVersion": PROTOCOL_VERSION,
            "features": FEATURES + WEBSHELL_FEATURES
            + (["checkpoints"] if daemon.runtime.checkpoint_store is not None else []),  # transport/checkpoints.py
            "model": daemon.runtime.provider.name,
            "todoStopGuard": daemon.settings.guard_enabled,
            "sandbox": daemon.runtime.sandbox.kind,  # what model-run commands run in: "bwrap" or "off"
            "limits": {
                "maxSessions": limits.max_sessions,
                "maxPendingPrompts": limits.max_pending_prompts,
                "maxMidTurnMessages": limits.max_mid_turn_messages,
                "eventRingSize": limits.event_ring_size,
                "maxBodyBytes": MAX_BODY,
            },
            **(await capability_fields(daemon)),
        })

    @app.get("/session")
    async def list_sessions() -> Response:
        """Live sessions and those restorable from the state directory (``live``/``restorable``)."""
        return json_response({"sessions": await daemon.list_sessions()})

    @app.post("/sessions/delete")
    async def delete_sessions() -> Response:
        """Delete sessions for good (qwen's Web Shell's route): a live one is closed first."""
        b = await body(wire.DeleteSessionsBody)
        if len(b.sessionIds) > wire.MAX_DELETED_SESSIONS:
            raise HttpError(400, f"at most {wire.MAX_DELETED_SESSIONS} session ids, got {len(b.sessionIds)}",
                            "too_many_sessions_named", "$.sessionIds")
        removed: list[str] = []
        not_found: list[str] = []
        errors: list[answers.SessionNotDeleted] = []

        def refused(sid: str, code: str, message: str) -> None:
            errors.append(answers.SessionNotDeleted(sessionId=sid, code=code, message=message, error=message))

        for sid in dict.fromkeys(b.sessionIds):
            try:
                (removed if await daemon.delete_session(sid) else not_found).append(sid)
                clients.forget(sid)
            except DeletionUnavailable as exc:
                raise HttpError(409, str(exc), "deletion_unavailable") from None
            except InvalidSessionId:
                refused(sid, "invalid_session_id", f"not a session id: a session id is {SESSION_ID_RULE}")
            except SessionStarting as exc:
                refused(sid, "session_starting", str(exc))
            except StorageError as exc:
                refused(sid, "storage_unavailable", f"not deleted: {exc}")
        return answer(answers.SessionsDeleted(removed=removed, notFound=not_found, errors=errors))

    @contextmanager
    def _recording(record: bool | None) -> Iterator[None]:
        """``record``: this session is recorded (or not) by the daemon's recorder (``--record DIR``)."""
        recorder = getattr(daemon, "recorder", None)
        if recorder is None:
            if record:
                raise HttpError(400, "this daemon records nothing: start it with --record DIR", "not_recording",
                                "$.record")
            yield
            return
        with recorder.choose(record):
            yield

    @app.post("/session")
    async def create_session() -> Response:
        b = await body(wire.CreateSessionBody, optional=True)
        with starting_a_session(), _recording(b.record):
            handle, attached = await daemon.create_session(b.cwd, b.sessionId, system_prompt=b.systemPrompt,
                                                           append_system_prompt=b.appendSystemPrompt, title=b.title,
                                                           permissions=session_rules(b.permissions))
        if b.approvalMode is not None:
            await handle.set_approval_mode(b.approvalMode)
        # Attached to a live session, or restored with prompts to run: it may well have one under way.
        return answer(_session_info(handle, attached, clients.register(handle.session_id, live_ids()),
                                    await prompt_active(handle)))

    # ------------------------------------------------------------- one session

    @app.get("/session/<session_id>/status")
    async def status(session_id: str) -> Response:
        return json_response(await session(session_id).status())

    @app.delete("/session/<session_id>")
    async def close_session(session_id: str) -> Response:
        session(session_id)
        await daemon.close_session(session_id)
        clients.forget(session_id)
        return Response(b"", status=204)

    @app.post("/session/<session_id>/prompt")
    async def prompt(session_id: str) -> Response:
        handle = session(session_id)
        b = await body(wire.PromptBody)
        if not b.prompt:
            raise HttpError(400, "prompt must contain at least one content block", "empty_prompt", "$.prompt")
        try:
            admitted = await handle.prompt(b, client_id=request.headers.get("X-Qwen-Client-Id"))
        except ImageRefused as exc:
            raise HttpError(400, exc.message, exc.code, exc.path) from None
        return json_response(admission_answer(admitted), 202)

    @app.get("/session/<session_id>/pending-prompts")
    async def pending_prompts(session_id: str) -> Response:
        return json_response({"pendingPrompts": await session(session_id).pending_prompts()})

    @app.delete("/session/<session_id>/pending-prompts/<prompt_id>")
    async def remove_pending_prompt(session_id: str, prompt_id: str) -> Response:
        return answer(answers.Removed(removed=await session(session_id).abort_prompt(prompt_id)))

    @app.post("/session/<session_id>/mid-turn-message")
    async def mid_turn_message(session_id: str) -> Response:
        handle = session(session_id)
        b = await body(wire.MidTurnMessageBody)
        if not b.message.strip():
            raise HttpError(400, "message must not be empty", "empty_message", "$.message")
        return json_response(await handle.post_mid_turn_message(
            b.message, b.messageId, client_id=request.headers.get("X-Qwen-Client-Id")))

    @app.get("/session/<session_id>/mid-turn-messages")
    async def mid_turn_messages(session_id: str) -> Response:
        return json_response(await session(session_id).mid_turn_messages())

    @app.delete("/session/<session_id>/mid-turn-messages/<message_id>")
    async def remove_mid_turn_message(session_id: str, message_id: str) -> Response:
        removed = await session(session_id).remove_mid_turn_message(message_id)
        if isinstance(removed, StorageUnavailable):
            raise HttpError(503, f"the message was not taken back: {removed.reason}", "storage_unavailable")
        return answer(answers.Removed(removed=removed))

    @app.post("/session/<session_id>/cancel")
    async def cancel(session_id: str) -> Response:
        await session(session_id).cancel()
        return Response(b"", status=204)

    async def vote(handle: SessionHandle, request_id: str) -> Response:
        b = await body(wire.PermissionVoteBody)
        option = b.outcome.optionId if isinstance(b.outcome, wire.SelectedOutcome) else None
        try:
            accepted = await handle.vote(request_id, b.outcome.outcome, option)
        except ValueError as exc:
            raise HttpError(400, str(exc), "unknown_option", "$.outcome.optionId") from None
        if not accepted:
            ended = await handle.permission_ended(request_id)
            raise HttpError(404, f"no pending permission request {request_id!r}"
                            + (f": {ended}" if ended else ""), "permission_not_found", "url.requestId")
        return answer(answers.VoteAccepted(accepted=True, requestId=request_id))

    @app.post("/session/<session_id>/permission/<request_id>")
    async def session_permission(session_id: str, request_id: str) -> Response:
        return await vote(session(session_id), request_id)

    @app.post("/permission/<request_id>")
    async def permission(request_id: str) -> Response:
        handle = None
        for live in daemon.sessions():
            try:
                if await live.has_permission_request(request_id):
                    handle = live
                    break
            except (ActorGone, trio.TooSlowError):
                continue  # closing: none of its requests can be voted on any more
        if handle is None:
            await body(wire.PermissionVoteBody)  # bad bodies are still 400, not 404
            raise HttpError(404, f"no pending permission request {request_id!r}", "permission_not_found",
                            "url.requestId")
        return await vote(handle, request_id)

    @app.post("/session/<session_id>/rewind")
    async def rewind(session_id: str) -> Response:
        handle = session(session_id)
        b = await body(wire.RewindBody)
        if b.files:  # the files too, from the turn's checkpoint (transport/checkpoints.py)
            return await rewind_files(handle, b.turn, bool(b.force))
        try:
            kept = await handle.rewind(b.turn)
        except ValueError as exc:
            status, code = (409, "session_busy") if "busy" in str(exc) else (400, "invalid_turn")
            raise HttpError(status, str(exc), code, "$.turn") from None
        return answer(answers.HistoryLength(historyLength=kept))

    @app.post("/session/<session_id>/fork")
    async def fork(session_id: str) -> Response:
        source = session(session_id)
        b = await body(wire.ForkBody, optional=True)
        if b.directive is not None:
            return await fork_with_directive(source, session_id, b)
        with starting_a_session():
            handle = await daemon.fork_session(session_id, b.sessionId)
        return answer(_session_info(handle, False, clients.register(handle.session_id, live_ids()), False))

    async def fork_with_directive(source: Any, session_id: str, b: wire.ForkBody) -> Response:
        """qwen's ``/fork <directive>``: where qwen serve starts a background agent on a copy of the
        conversation, Trellis starts a session with the copy and the directive as its first prompt (admitted
        durably before the 202), titled with the directive; it is in the session lists (docs/webshell.md)."""
        directive = (b.directive or "").strip()
        if not directive:
            raise HttpError(400, "`directive` is required and must be a non-empty string", "missing_directive",
                            "$.directive")
        if await source.pending_prompts():
            raise HttpError(409, "Cannot fork while a response or tool call is in progress", "session_busy",
                            "url.sessionId")
        with starting_a_session():
            handle = await daemon.fork_session(session_id, b.sessionId)
        description = directive[:60]
        await handle.set_title(description)
        await handle.prompt(directive)
        return answer(answers.ForkLaunched(sessionId=session_id, description=description, launched=True,
                                           forkSessionId=handle.session_id), 202)

    @app.post("/session/<session_id>/cwd")
    async def change_cwd(session_id: str) -> Response:
        handle = session(session_id)
        b = await body(wire.CwdBody)
        try:
            cwd = await handle.change_cwd(b.cwd)
        except ValueError as exc:
            raise HttpError(400, str(exc), "invalid_cwd", "$.cwd") from None
        return answer(answers.WorkspaceCwd(workspaceCwd=cwd))

    @app.post("/session/<session_id>/title")
    async def set_title(session_id: str) -> Response:
        handle = session(session_id)
        b = await body(wire.TitleBody)
        return answer(answers.TitleAnswer(sessionId=session_id, title=await handle.set_title(b.title)))

    @app.post("/session/<session_id>/model")
    async def set_model(session_id: str) -> Response:
        handle = session(session_id)
        b = await body(wire.ModelBody)
        try:
            return answer(answers.ModelAnswer(model=await handle.set_model(b.name)))
        except ValueError as exc:
            raise HttpError(400, str(exc), "invalid_model", "$.model") from None

    @app.post("/session/<session_id>/approval-mode")
    async def approval_mode(session_id: str) -> Response:
        handle = session(session_id)
        b = await body(wire.ApprovalModeBody)
        return answer(answers.ModeAnswer(mode=await handle.set_approval_mode(b.target)))

    @app.get("/session/<session_id>/turns/<prompt_id>")
    async def turn(session_id: str, prompt_id: str) -> Response:
        record = await session(session_id).turn(prompt_id)
        if record is None:
            raise HttpError(404, f"no turn {prompt_id!r} in this session", "turn_not_found", "url.promptId")
        return json_response(record)

    @app.post("/session/<session_id>/load")
    @app.post("/session/<session_id>/resume")
    async def load(session_id: str) -> Response:
        b = await body(wire.LoadBody, optional=True)
        resume = request.path.endswith("/resume")
        try:
            with starting_a_session("url.sessionId"):
                live = session_id in {h.session_id for h in daemon.sessions()}
                if resume and live:
                    handle, attached = daemon.get(session_id), True
                else:
                    handle, attached = await daemon.load_session(session_id, b.cwd), False
        except UnknownSession:
            raise HttpError(404, f"no live session and no transcript for {session_id!r}",
                            "session_not_found", "url.sessionId") from None
        active = await prompt_active(handle)
        replay = None
        # A stream from 0 replays the session (the ring, or the compacted replay): resume's, and a restoring
        # load's as before. A live load answers the id it had published its replay after, as before.
        cursor = 0
        if not resume:
            # What this client is shown first on its stream (the earlier turns, the running one with its
            # pending permission requests): to it alone, no longer on the bus (transport/load_replay.py).
            events, after = handle.load_replay(active)
            cursor = after if live else 0
            replay = LoadReplay(events, after, cursor, handle.epoch, by_cursor=live)
        info = _session_info(handle, attached, clients.register(session_id, live_ids(), replay), active)
        restored = len([r for r in handle.transcript() if r.get("type") == "message"])
        return answer(answers.LoadedSessionInfo(**attrs.asdict(info), restoredMessages=restored, lastEventId=cursor,
                                                eventEpoch=handle.epoch))

    @app.get("/session/<session_id>/transcript")
    async def transcript(session_id: str) -> Response:
        try:
            records = daemon.transcript(session_id)
        except (UnknownSession, InvalidSessionId):
            raise not_found_session(session_id) from None
        except (TranscriptError, OSError) as exc:
            raise HttpError(500, f"transcript unreadable: {exc}", "transcript_corrupt") from None
        return json_response({"sessionId": session_id, "entries": records})

    @app.get("/session/<session_id>/events")
    async def events(session_id: str) -> Response:
        handle = session(session_id)
        cursor = sse.parse_cursor(request.headers.get("Last-Event-ID") or request.args.get("lastEventId"))
        epoch = request.headers.get("X-Qwen-Event-Epoch") or request.args.get("epoch")
        max_queued = int_query("maxQueued", 16, 2048)
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Qwen-Event-Epoch": handle.epoch}
        if request.method == "HEAD":
            # Headers only, no subscription: a HEAD answer must end, and an event stream never does (it kept
            # its subscriber and its keep-alive connection forever).
            return Response(b"", headers=headers)
        # The stream of a client that loaded the session: what the load showed it comes first, then the bus's
        # events after it.
        taken = clients.take_replay(session_id, request.headers.get("X-Qwen-Client-Id"), cursor, epoch)
        try:
            subscription: Any = handle.subscribe(cursor if taken is None else taken[1].after, epoch, max_queued)
        except TooManySubscribers as exc:
            if taken is not None:
                clients.give_back(session_id, taken)
            raise HttpError(503, str(exc), "too_many_subscribers") from None
        if taken is not None:
            subscription = Replayed(subscription, taken[1].events)
        response = await make_response(sse.frames(subscription), {**headers, "X-Accel-Buffering": "no"})
        response.timeout = None
        return response

    register_work(app, daemon, session)  # kill a background task, list subagent runs
    register_permissions(app, daemon, session, body)  # a session's permission rules
    register_checkpoints(app, daemon, session, body)  # a session's checkpoints: list, diff, undo
    register_metrics(app, daemon)  # GET /metrics: Prometheus's text format (actors/telemetry)
    register_ui(app)  # the browser UI at / (transport/ui)
    register_acp(app, daemon, grace=acp_grace)  # ACP over HTTP at /acp
    register_mcp(app, daemon)  # MCP: /mcp (parent) and /signal/mcp/<token> (subagents)
    register_webshell(app, daemon, auth=policy.token is not None, allowed_origins=allowed_origins,
                      session=session, body=body)  # qwen's Web Shell
    if cluster is not None:
        from .cluster import register as register_cluster  # imports the cluster extra's clients

        register_cluster(app, daemon, cluster)  # after the access checks: a before_request of its own
    return app


def _session_info(handle: SessionHandle, attached: bool, client_id: str, active: bool) -> answers.SessionInfo:
    return answers.SessionInfo(sessionId=handle.session_id, workspaceCwd=handle.cwd, attached=attached,
                               clientId=client_id, createdAt=handle.created_at, title=handle.summary()["title"],
                               hasActivePrompt=active)


async def prompt_active(handle: SessionHandle) -> bool:
    """qwen serve's ``hasActivePrompt``: a prompt admitted and not ended (running or queued), or an automatic
    turn running (qwen counts its background turns); a follow-up suggestion's call is not a turn."""
    status = await handle.status()
    return status["pendingCount"] > 0 or status["activeWorkState"] in ("prompt", "automatic")


def answer(body: Any, status: int = 200) -> Response:
    """A route's JSON answer from its wire class (actors/wire/answers.py)."""
    return json_response(wire.unstructure(body), status)
