"""Lending an ACP client's files and terminal to the sessions it binds (and taking them back).

At ``initialize`` the connection keeps the client's ``clientCapabilities``.
Each binding (``session/new``, ``session/load``) of a client that offers
``fs.readTextFile``/``fs.writeTextFile`` or ``terminal`` lends the session a
:class:`~actors.session.client.ClientServices` over this connection; the
binding's teardown (``session/close``, the client gone, an HTTP grace run out)
takes it back, and the session's tools use local files and shells again. When
several connections hold one session, the latest binding's client serves it
until that binding ends (then the session is local again, not the earlier
client's: a binding never lends on someone else's behalf).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from actors import ActorGone
from actors.session.client import ClientServices

from .client_fs import ClientFiles, offers_fs
from .client_terminal import ClientTerminal, offers_terminal

if TYPE_CHECKING:
    from .binding import SessionBinding
    from .connection import AcpConnection

log = logging.getLogger("trellis.acp")


def services_for(conn: AcpConnection, session_id: str, owner: object = None) -> ClientServices | None:
    """What ``conn``'s client offers a session, or ``None`` when it offers neither files nor a terminal."""
    capabilities = conn.client_capabilities
    reads, writes = offers_fs(capabilities)
    files = ClientFiles(conn.peer, session_id, read=reads, write=writes) if reads or writes else None
    terminal = ClientTerminal(conn.peer, session_id, conn.nursery) if offers_terminal(capabilities) else None
    services = ClientServices(files=files, terminal=terminal, owner=owner)
    return None if services.empty else services


async def lend(conn: AcpConnection, binding: SessionBinding) -> None:
    """Lend ``binding``'s session this client's files and terminal, if it offers any."""
    services = services_for(conn, binding.session_id, binding)
    if services is None:
        return
    binding.lent = services  # before the message: a teardown meanwhile takes it back (the mailbox keeps order)
    await binding.handle.set_client_services(services)
    log.info("session %s uses the client's %s", binding.session_id,
             " and ".join(n for n, v in (("files", services.files), ("terminal", services.terminal)) if v))


async def take_back(binding: SessionBinding) -> None:
    """The binding ends: its session goes back to local files and shells (unless another client lent since)."""
    lent, binding.lent = binding.lent, None
    if lent is not None:
        try:
            await binding.handle.set_client_services(None, replacing=lent)
        except (ActorGone, trio.TooSlowError):
            pass  # the session is gone: nothing to take back


__all__ = ["lend", "services_for", "take_back"]
