"""The ACP agent methods, on top of the daemon's actors.

``initialize`` negotiates the protocol version and, for a bridge, mid-turn
draining; ``session/new`` and ``session/load`` bind a session to the
connection (load replays the history as ``session/update`` notifications
before it answers); ``session/prompt`` admits the prompt to the session's FIFO
and is answered when its turn ends; ``session/cancel`` aborts it (the prompt
then answers ``cancelled``); ``session/set_mode`` sets the approval mode;
``session/close`` ends the session; ``session/list``, ``session/resume`` and
``session/fork`` are in :mod:`.sessions`, which also announces the slash
commands after new/load/resume/fork. The bridge method
``craft/todoStopGuardQueueReleased`` tells a session that the queued prompt its
Todo Stop Guard yielded to is gone.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from actors import Admitted, NotStartedHere, TooManySessions, UnknownSession, wire
from actors.checked import CheckError
from actors.mcp_client import McpConfigError, available as mcp_available, parse_acp
from actors.permission_rules import RuleLists, rule_lists
from actors.session.fifo import StorageUnavailable
from actors.session.images import ImageRefused, accepts_images

from . import bridge, checkpoints, mapping, params as p, sessions
from .jsonrpc import DEFERRED, INVALID_PARAMS, SERVER_BUSY, Request, RpcError, invalid_params

if TYPE_CHECKING:
    from .connection import AcpConnection

log = logging.getLogger("trellis.acp")

PROTOCOL_VERSION = 1
AGENT_INFO = {"name": "trellis", "title": "Trellis", "version": "0.1.0"}


def install_methods(conn: AcpConnection) -> None:
    """Register every agent method on ``conn``'s peer."""
    agent = _Agent(conn)
    peer = conn.peer
    # Inline methods are short and their order matters (a prompt is admitted before a later cancel).
    peer.method("initialize", agent.initialize, inline=True)
    peer.method("authenticate", agent.authenticate, inline=True)
    peer.method("session/new", agent.new_session)
    peer.method("session/load", agent.load_session)
    peer.method("session/prompt", agent.prompt, inline=True)
    peer.method("session/cancel", agent.cancel, inline=True)
    peer.method("session/set_mode", agent.set_mode, inline=True)
    peer.method("session/close", agent.close_session)
    peer.method("session/list", agent.list_sessions)
    peer.method("session/resume", agent.resume_session)
    peer.method("session/fork", agent.fork_session)
    peer.method(bridge.RELEASE_METHOD, agent.queue_released, inline=True)
    checkpoints.register(peer, conn)  # _trellis/rewind, _trellis/checkpoints, _trellis/checkpoints/undo


class _Agent:
    def __init__(self, conn: AcpConnection) -> None:
        self.conn = conn
        self.daemon = conn.daemon

    async def initialize(self, request: Request) -> dict[str, Any]:
        params = p.require_object(request.params)
        p.integer(params, "protocolVersion")  # any version is answered with ours, as ACP prescribes
        capabilities = p.optional_object(params, "clientCapabilities")
        self.conn.client_info = p.optional_object(params, "clientInfo")
        self.conn.client_capabilities = capabilities  # fs/terminal offers: lent to sessions at bind
        self.conn.bridge = bridge.client_supports_bridge(capabilities)
        self.conn.initialized = True
        result: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "sessionCapabilities": sessions.CAPABILITIES,
                "promptCapabilities": {"image": accepts_images(self.daemon.runtime.provider), "audio": False,
                                       "embeddedContext": True},
                # Client MCP servers are connected (actors.mcp_client) when the mcp package is installed.
                "mcpCapabilities": {"http": mcp_available(), "sse": mcp_available()},
                "_meta": {bridge.CAPABILITY: True},
            },
            "authMethods": [],
            "agentInfo": AGENT_INFO,
        }
        if self.conn.bridge:
            result["_meta"] = {bridge.CAPABILITY: True}  # confirms bridge mode for this connection
        return result

    async def authenticate(self, request: Request) -> dict[str, Any]:
        return {}  # no authentication methods are offered

    async def new_session(self, request: Request) -> dict[str, Any]:
        self.conn.require_initialized()
        params = p.require_object(request.params)
        cwd = p.directory(params, "cwd")
        result: dict[str, Any] = {}
        servers = _mcp_servers(params)
        permissions = _permission_rules(params)
        try:
            handle, _ = await self.daemon.create_session(cwd, mcp_servers=servers, permissions=permissions)
        except TooManySessions as exc:
            raise RpcError(SERVER_BUSY, str(exc), {"code": "too_many_sessions"}) from None
        except NotStartedHere as exc:  # cluster mode: another node has it, or this one is draining
            raise RpcError(SERVER_BUSY, str(exc), {"code": exc.code}) from None
        await self.conn.bind(handle, None)
        status = await handle.status()
        result.update(sessionId=handle.session_id, modes=mapping.session_modes(status["approvalMode"]))
        await sessions.announce_commands(self.conn, handle.session_id)
        return result

    async def load_session(self, request: Request) -> dict[str, Any]:
        self.conn.require_initialized()
        params = p.require_object(request.params)
        session_id = p.string(params, "sessionId")
        assert session_id is not None
        cwd = p.directory(params, "cwd", required=False)
        servers = _mcp_servers(params)
        with sessions.restoring(session_id):
            try:
                handle = self.daemon.get(session_id)
            except UnknownSession:
                # Not live: start it from disk; the pump then replays the whole ring (the restored history).
                handle = await self.daemon.load_session(session_id, cwd, mcp_servers=servers)
                binding = await self.conn.bind(handle, 0)
            else:
                # Live: reloading publishes nothing to the session's other clients; this connection is sent
                # the history itself (the earlier turns compacted, the running one as it streamed), then
                # the pump goes on after it.
                await handle.add_mcp_servers(servers)  # those it has none of that name of yet
                await handle.load()
                history, cursor = handle.load_replay(False)
                for event in history:
                    if event.type == "session_update":
                        await self.conn.peer.notify("session/update", mapping.session_update(event.data),
                                                    session_id=session_id)
                binding = await self.conn.bind(handle, cursor)
        # ACP: the history is streamed before the answer.
        await binding.caught_up(handle.last_event_id)
        status = await handle.status()
        await sessions.announce_commands(self.conn, session_id)
        return {"modes": mapping.session_modes(status["approvalMode"])}

    async def prompt(self, request: Request) -> Any:
        self.conn.require_initialized()
        params = p.require_object(request.params)
        binding = self.conn.binding(params)
        body = p.prompt_body(params)
        try:
            admitted = await binding.handle.prompt(body)
        except ImageRefused as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc.message} at {exc.path}",
                           {"path": exc.path, "code": exc.code}) from None
        if isinstance(admitted, StorageUnavailable):
            raise RpcError(SERVER_BUSY, f"the prompt was not admitted: {admitted.reason}",
                           {"code": "storage_unavailable"})
        if not isinstance(admitted, Admitted):
            raise RpcError(SERVER_BUSY, f"the session already has {admitted.pending_count} pending prompt(s)",
                           {"code": "prompt_queue_full", "limit": admitted.limit,
                            "pendingCount": admitted.pending_count})
        await binding.expect(admitted.prompt_id, request)
        return DEFERRED  # the pump answers when the turn ends, after its updates

    async def cancel(self, request: Request) -> None:
        params = p.require_object(request.params)
        binding = self.conn.bindings.get(params.get("sessionId"))  # type: ignore[arg-type]
        if binding is None:
            log.info("session/cancel for a session this connection does not hold: %r", params.get("sessionId"))
            return
        await binding.cancel()

    async def set_mode(self, request: Request) -> dict[str, Any]:
        self.conn.require_initialized()
        params = p.require_object(request.params)
        binding = self.conn.binding(params)
        mode = p.string(params, "modeId")
        if mode not in mapping.MODES:
            raise invalid_params(f"unknown mode {wire.excerpt(mode)}; expected one of {list(mapping.MODES)}",
                                 "$.modeId")
        await binding.handle.set_approval_mode(mode)
        return {}

    async def close_session(self, request: Request) -> dict[str, Any]:
        self.conn.require_initialized()
        params = p.require_object(request.params)
        binding = self.conn.binding(params)
        await self.conn.unbind(binding.session_id, abort=True)
        try:
            await self.daemon.close_session(binding.session_id)
        except UnknownSession:
            pass  # it ended on its own meanwhile
        return {}

    async def list_sessions(self, request: Request) -> dict[str, Any]:
        return await sessions.list_sessions(self.conn, request)

    async def resume_session(self, request: Request) -> dict[str, Any]:
        return await sessions.resume_session(self.conn, request, _mcp_servers(p.require_object(request.params)))

    async def fork_session(self, request: Request) -> dict[str, Any]:
        return await sessions.fork_session(self.conn, request, _mcp_servers(p.require_object(request.params)))

    async def queue_released(self, request: Request) -> dict[str, Any]:
        self.conn.require_initialized()
        params = p.require_object(request.params)
        binding = self.conn.binding(params)
        return {"released": await binding.handle.release_queued_prompt_wait()}


def _permission_rules(params: dict[str, Any]) -> RuleLists | None:
    """The session's own permission rules, from ``_meta.permissions`` (as ``POST /session`` takes them);
    a rule that cannot be read is -32602 naming its path."""
    meta = p.optional_object(params, "_meta")
    if "permissions" not in meta:
        return None
    try:
        return rule_lists(meta["permissions"], "$._meta.permissions")
    except CheckError as exc:
        raise invalid_params(exc.detail, exc.path) from None


def _mcp_servers(params: dict[str, Any]) -> tuple[Any, ...]:
    """The client's ``mcpServers`` (ACP's format); a shape we cannot use is -32602 naming its path."""
    try:
        return parse_acp(params.get("mcpServers"))
    except McpConfigError as exc:
        raise invalid_params(exc.detail, exc.path) from None
