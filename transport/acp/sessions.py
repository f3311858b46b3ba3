"""ACP ``session/list``, ``session/resume`` and ``session/fork``, and the slash commands a session offers.

``session/list`` lists the daemon's sessions, live and restorable from the
state directory (:meth:`Daemon.list_sessions`), newest first, optionally only
those of one ``cwd``; pages hold :data:`PAGE_SIZE` and the cursor is an offset.
``session/resume`` binds a session to the connection *without* replaying its
history (unlike ``session/load``): a live session is attached, one on disk is
restored first. ``session/fork`` starts a new session with a copy of a live
session's conversation (:meth:`Daemon.fork_session`). After each of
new/load/resume/fork the client gets an ``available_commands_update`` with the
slash commands (:mod:`actors.session.commands`).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from actors import InvalidSessionId, NotStartedHere, TooManySessions, UnknownSession, wire
from actors.session import commands
from actors.session.transcript import SESSION_ID_RULE, TranscriptError, is_safe_session_id

from . import mapping, params as p
from .jsonrpc import INTERNAL_ERROR, SERVER_BUSY, Request, RpcError, invalid_params

if TYPE_CHECKING:
    from .connection import AcpConnection

PAGE_SIZE = 100
CAPABILITIES = {"list": {}, "resume": {}, "fork": {}}  # agentCapabilities.sessionCapabilities


@contextmanager
def restoring(session_id: str) -> Iterator[None]:
    """What starting a session from disk can refuse (``session/load``, ``session/resume``), as JSON-RPC errors."""
    try:
        yield
    except UnknownSession:
        raise invalid_params(f"no session {wire.excerpt(session_id)} on disk", "$.sessionId") from None
    except InvalidSessionId:
        raise invalid_params(f"is not a session id: a session id is {SESSION_ID_RULE}", "$.sessionId") from None
    except TranscriptError as exc:
        raise RpcError(INTERNAL_ERROR, f"transcript unreadable: {exc}", {"code": "transcript_corrupt"}) from None
    except TooManySessions as exc:
        raise RpcError(SERVER_BUSY, str(exc), {"code": "too_many_sessions"}) from None
    except NotStartedHere as exc:  # cluster mode: another node has it, or this one is draining
        raise RpcError(SERVER_BUSY, str(exc), {"code": exc.code}) from None


async def announce_commands(conn: AcpConnection, session_id: str) -> None:
    """Tell the client which slash commands the session understands."""
    await conn.peer.notify("session/update", {"sessionId": session_id,
                                              "update": commands.available_commands_update()},
                           session_id=session_id)


def _iso(ms: Any) -> str | None:
    if not isinstance(ms, int):
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _cursor(params: dict[str, Any]) -> int:
    cursor = p.string(params, "cursor", required=False)
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > 12:
        raise invalid_params("not a cursor this agent gave", "$.cursor")
    return int(cursor)


async def list_sessions(conn: AcpConnection, request: Request) -> dict[str, Any]:
    conn.require_initialized()
    params = p.require_object(request.params)
    cwd = p.string(params, "cwd", required=False)
    start = _cursor(params)
    found = [s for s in await conn.daemon.list_sessions() if cwd is None or s.get("cwd") == cwd]
    page = found[start:start + PAGE_SIZE]
    sessions = []
    for s in page:
        info: dict[str, Any] = {"sessionId": s["sessionId"], "cwd": s.get("cwd") or ""}
        if s.get("title") is not None:
            info["title"] = s["title"]
        updated = _iso(s.get("updatedAt"))
        if updated is not None:
            info["updatedAt"] = updated
        info["_meta"] = {mapping.META_PREFIX + "live": bool(s.get("live")),
                         mapping.META_PREFIX + "state": s.get("state")}
        sessions.append(info)
    result: dict[str, Any] = {"sessions": sessions}
    if start + PAGE_SIZE < len(found):
        result["nextCursor"] = str(start + PAGE_SIZE)
    return result


async def resume_session(conn: AcpConnection, request: Request, mcp_servers: tuple[Any, ...]) -> dict[str, Any]:
    conn.require_initialized()
    params = p.require_object(request.params)
    session_id = p.string(params, "sessionId")
    assert session_id is not None
    cwd = p.directory(params, "cwd", required=False)
    daemon = conn.daemon
    with restoring(session_id):
        try:
            handle = daemon.get(session_id)
        except UnknownSession:
            handle = await daemon.load_session(session_id, cwd, mcp_servers=mcp_servers)
        else:
            await handle.add_mcp_servers(mcp_servers)
        await conn.bind(handle, None)  # live events only: resuming replays nothing
    status = await handle.status()
    await announce_commands(conn, session_id)
    return {"modes": mapping.session_modes(status["approvalMode"])}


async def fork_session(conn: AcpConnection, request: Request, mcp_servers: tuple[Any, ...]) -> dict[str, Any]:
    conn.require_initialized()
    params = p.require_object(request.params)
    source_id = p.string(params, "sessionId")
    assert source_id is not None
    p.directory(params, "cwd", required=False)  # the fork works where its source does
    daemon = conn.daemon
    try:
        if not is_safe_session_id(source_id):
            raise InvalidSessionId(source_id)
        if not any(h.session_id == source_id for h in daemon.sessions()) and daemon.restorable(source_id):
            await daemon.load_session(source_id)  # a stored source is restored first: forks copy live history
        handle = await daemon.fork_session(source_id)
    except InvalidSessionId:
        raise invalid_params(f"is not a session id: a session id is {SESSION_ID_RULE}", "$.sessionId") from None
    except UnknownSession:
        raise invalid_params(f"no live session {wire.excerpt(source_id)} (resume or load it first)",
                             "$.sessionId") from None
    except TooManySessions as exc:
        raise RpcError(SERVER_BUSY, str(exc), {"code": "too_many_sessions"}) from None
    except NotStartedHere as exc:  # cluster mode: another node has it, or this one is draining
        raise RpcError(SERVER_BUSY, str(exc), {"code": exc.code}) from None
    await handle.add_mcp_servers(mcp_servers)
    await conn.bind(handle, None)
    status = await handle.status()
    await announce_commands(conn, handle.session_id)
    return {"sessionId": handle.session_id, "modes": mapping.session_modes(status["approvalMode"])}
