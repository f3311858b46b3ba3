"""Serving the daemon's HTTP surface inside a caller's Trio nursery."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config

from actors import Daemon
from actors.hosts import is_loopback_host

from .access_log import AccessLog
from .app import create_app
from .auth import new_token, persisted_token, write_token_file
from .connections import serve as serve_capped
from .hosts import HostPolicy
from .logs import add_secret
from .mcp import base_url_from_bind


class InsecureBind(ValueError):
    """A bind that would expose the daemon without authentication (refused)."""


def check_bind(host: str, auth: bool = True, token_given: bool = True) -> None:
    """Refuse to turn authentication off, or to mint a token, anywhere but on a loopback address.

    Off loopback the operator names the token (``--token`` / ``$TRELLIS_TOKEN``):
    a minted one lives only in the local token file, out of reach of the
    remote clients such a bind is for.
    """
    if not auth and not is_loopback_host(host):
        raise InsecureBind(f"refusing to serve on {host} without authentication: --no-auth (auth=False) is "
                           "only allowed on a loopback address such as 127.0.0.1")
    if auth and not token_given and not is_loopback_host(host):
        raise InsecureBind(f"refusing to serve on {host} without a token: pass --token or set TRELLIS_TOKEN "
                           "(a non-loopback bind does not mint one)")


async def serve(
    daemon: Daemon,
    *,
    host: str = "127.0.0.1",
    port: int = 4170,
    token: str | None = None,
    auth: bool = True,
    allowed_origins: tuple[str, ...] = (),
    allowed_hosts: tuple[str, ...] = (),
    acp_grace: float = 10.0,
    max_connections: int | None = None,
    cluster: Any = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``daemon`` over HTTP until cancelled or the daemon stopped; reports the bound URL through ``task_status``.

    Every route but ``GET /health`` and the subagents' ``/signal/mcp/<token>``
    wants ``Authorization: Bearer <token>``, on loopback too. With ``token`` it is
    that one; without, it is the one persisted in ``<state_dir>/token`` (the same
    across restarts; :class:`~transport.auth.TokenFileError` before anything is
    bound for a file the group or others can read), or, when there is none yet, a
    fresh token minted once the port is bound and written there (mode 0600, see
    :mod:`transport.auth`) before the URL is reported, so a client can read it
    with :func:`transport.auth.read_token_file`. Either needs the daemon to have a
    ``state_dir`` (``ValueError`` otherwise).

    Requests are answered only when their ``Host`` names the daemon: the bound
    address or ``localhost`` with the bound port, or an ``allowed_hosts`` entry
    (``"name"`` for the bound port, ``"name:port"`` for that port, e.g. behind a
    proxy); on a wildcard bind (``0.0.0.0``/``::``) any IP literal with the bound
    port too. Others get 421 ``misdirected_host`` before any handler runs
    (DNS-rebinding protection; rules in :mod:`transport.hosts`; a malformed
    entry raises ``ValueError``). Browser ``Origin``s are allowed when
    same-origin with the daemon (``http``, an accepted host, the bound port) or
    listed in ``allowed_origins``; others get 403 ``origin_not_allowed``.

    At most ``max_connections`` connections are open at once (default: the
    ``limits.maxConnections`` setting, 256), idle keep-alive ones and event
    streams included; one more is answered 503 ``too_many_connections`` and
    closed before any request is read (see :mod:`transport.connections`).

    Each answer gets an access line on logger ``trellis.access`` at ``info``
    (:mod:`transport.access_log`: no header, no query value, signal tokens
    redacted), and the token is never written by :mod:`transport.logs`' handler.

    ``cluster`` (an :class:`actors.cluster.node.ClusterNode`) makes this daemon a node of a cluster: see
    :mod:`transport.cluster`.

    ``auth=False`` serves without any token, and only on a loopback ``host``
    (:class:`InsecureBind` otherwise); it cannot be combined with ``token``.

    While the daemon shuts down (:meth:`actors.Daemon.shutdown_gracefully`),
    requests that would start work answer 503 ``shutting_down`` and the rest
    keep answering; once every session is closed (their event streams have had
    their last events), the server stops accepting, gives open requests
    ``graceful_timeout`` (1 s) to finish, and ``serve`` returns.
    """
    check_bind(host, auth, token_given=bool(token))
    hosts = HostPolicy(allowed_hosts, names=(host.strip("[]"),))
    mint_into: Path | None = None  # the state directory whose token file gets the minted token
    if not auth:
        if token:
            raise ValueError("serve: pass either token= or auth=False, not both")
    elif not token:
        mint_into = daemon.runtime.state_dir
        if mint_into is None:
            raise ValueError("serve: authentication is on but there is no token: pass token=, or open the "
                             "daemon with a state_dir to mint one into <state_dir>/token (or pass auth=False "
                             "on loopback)")
        token = persisted_token(mint_into)
        if token is not None:
            mint_into = None  # reused: the file stays as it is
        else:
            token = new_token()
    add_secret(token)  # whatever a log line might carry, never this (transport.logs)
    config = Config()
    bind_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    config.bind = [f"{bind_host}:{port}"]
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = daemon.settings.limits.keep_alive_seconds  # then closed (transport.connections)
    config.accesslog = None  # ours instead, with tokens redacted (transport.access_log)
    config.errorlog = None
    if port:  # known before the bind; with port 0 only once hypercorn has one (until then, all refused)
        hosts.bind([f"http://{bind_host}:{port}"])
    app = create_app(daemon, token=token, allowed_origins=allowed_origins, acp_grace=acp_grace, hosts=hosts,
                     cluster=cluster)
    async with trio.open_nursery() as nursery:
        cap = max_connections if max_connections is not None else daemon.settings.limits.max_connections
        binds = await nursery.start(partial(serve_capped, AccessLog(app), config, max_connections=cap,
                                            shutdown_trigger=daemon.stopped.wait))
        hosts.bind(binds)  # the real port (--port 0) and the address(es) as bound
        if mint_into is not None:
            # Written only once the port is ours: a daemon that fails to bind leaves the file of
            # another one on the same state directory alone.
            write_token_file(mint_into, token)
        daemon.subagents.base_url = base_url_from_bind(binds[0])  # where subagents' signal URLs point
        task_status.started(binds[0])
