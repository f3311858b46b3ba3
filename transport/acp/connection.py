"""One ACP client connection, apart from its transport: its peer, its sessions, its bridge mode."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from actors import Daemon, SessionHandle, TooManySubscribers, wire

from . import bridge, client_services
from .binding import SessionBinding
from .jsonrpc import INVALID_REQUEST, SERVER_BUSY, Peer, Request, RpcError, Send, invalid_params

log = logging.getLogger("trellis.acp")

# Methods whose answers belong to the session they name (the HTTP transport puts them on its stream).
SESSION_SCOPED = frozenset({"session/prompt", "session/set_mode", "session/cancel", "session/close",
                            bridge.RELEASE_METHOD})


class AcpConnection:
    """The agent side of one ACP client, on top of the daemon's actors.

    ``send(message, session_id, event_id)`` delivers one outgoing message; the
    transport feeds incoming ones to :meth:`receive`. All tasks run in
    ``nursery``; :meth:`close` tears every binding down (aborting its prompts,
    cancelling its permission requests).
    """

    def __init__(
        self,
        daemon: Daemon,
        nursery: trio.Nursery,
        send: Send,
        *,
        drain_deadline: float = bridge.DEADLINE,
        drain_late_limit: float = bridge.LATE_LIMIT,
        on_unbind: Callable[[str], Awaitable[None] | None] | None = None,
    ) -> None:
        from .agent import install_methods

        self.daemon = daemon
        self.nursery = nursery
        self._send = send
        self.peer = Peer(self._send_quietly, nursery, reply_scope=self._reply_scope)
        self.bindings: dict[str, SessionBinding] = {}
        self.initialized = False
        self.bridge = False
        self.client_info: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}  # from initialize: fs and terminal are lent (client_services)
        self.drain_deadline = drain_deadline
        self.drain_late_limit = drain_late_limit
        self._on_unbind = on_unbind
        self.closed = False
        install_methods(self)

    async def receive(self, raw: bytes | str) -> None:
        """One incoming message (bad input is answered with an error; nothing else changes)."""
        await self.peer.receive(raw)

    async def _send_quietly(self, message: dict[str, Any], session_id: str | None, event_id: int | None) -> None:
        try:
            await self._send(message, session_id, event_id)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            # The client went away; whatever it misses, the transport's end tears the bindings down.
            log.info("ACP client gone while sending: %s", exc)

    def _reply_scope(self, request: Request) -> str | None:
        if request.method in SESSION_SCOPED and isinstance(request.params, dict):
            session_id = request.params.get("sessionId")
            if isinstance(session_id, str) and session_id in self.bindings:
                return session_id
        return None

    # ------------------------------------------------------------- bindings

    def require_initialized(self) -> None:
        if not self.initialized:
            raise RpcError(INVALID_REQUEST, "Invalid Request: call initialize first")

    def binding(self, params: dict[str, Any]) -> SessionBinding:
        """The binding ``params.sessionId`` names; -32602 when this connection has none."""
        session_id = params.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            raise invalid_params("required field missing" if session_id is None else "expected a non-empty string",
                                 "$.sessionId")
        found = self.bindings.get(session_id)
        if found is None:
            raise invalid_params(f"unknown session {wire.excerpt(session_id)} (create or load it on this connection "
                                 "first)",
                                 "$.sessionId")
        return found

    async def bind(self, handle: SessionHandle, cursor: int | None) -> SessionBinding:
        """Hold ``handle`` for this connection (its pump replays from ``cursor``, if given)."""
        existing = self.bindings.get(handle.session_id)
        if existing is not None:
            return existing
        binding = SessionBinding(self, handle)
        self.bindings[handle.session_id] = binding
        try:
            await self.nursery.start(binding.run, cursor)
        except TooManySubscribers as exc:
            self.bindings.pop(handle.session_id, None)
            raise RpcError(SERVER_BUSY, f"the session has too many clients: {exc}") from None
        if self.bridge:
            binding.drain = bridge.BridgeDrain(self.peer, handle, self.nursery, deadline=self.drain_deadline,
                                               late_limit=self.drain_late_limit)
            await binding.drain.install()
        await client_services.lend(self, binding)
        if binding.closed:  # torn down while the lends were on their way: take them back
            with trio.CancelScope(shield=True):
                if binding.drain is not None:
                    await binding.drain.uninstall()
                await client_services.take_back(binding)
        return binding

    async def unbind(self, session_id: str, *, abort: bool = True) -> bool:
        """Tear one binding down; ``False`` when there was none."""
        binding = self.bindings.pop(session_id, None)
        if binding is None:
            return False
        await binding.teardown(abort=abort)
        await self._unbound(session_id)
        return True

    async def session_ended(self, binding: SessionBinding) -> None:
        """The pump saw the session close: nothing is left to abort."""
        if self.bindings.get(binding.session_id) is binding:
            del self.bindings[binding.session_id]
            await binding.teardown(abort=False)
            await self._unbound(binding.session_id)

    async def _unbound(self, session_id: str) -> None:
        if self._on_unbind is not None:
            result = self._on_unbind(session_id)
            if result is not None:
                await result

    async def close(self) -> None:
        """The client is gone: tear every binding down, then stop the peer."""
        if self.closed:
            return
        self.closed = True
        with trio.CancelScope(shield=True):
            for session_id in list(self.bindings):
                await self.unbind(session_id, abort=True)
        self.peer.close()
