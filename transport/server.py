"""Serving the daemon's HTTP surface inside a caller's Trio nursery."""

from __future__ import annotations

import ipaddress
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from actors import Daemon

from .app import create_app
from .mcp import base_url_from_bind


class InsecureBind(ValueError):
    """A non-loopback bind without a token (refused)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, require_auth: bool = False) -> None:
    """Refuse a bind that would expose the daemon without a token."""
    if not token and (require_auth or not is_loopback(host)):
        raise InsecureBind(f"refusing to serve on {host} without a token (pass --token or set TRELLIS_TOKEN)")


async def serve(
    daemon: Daemon,
    *,
    host: str = "127.0.0.1",
    port: int = 4170,
    token: str | None = None,
    require_auth: bool = False,
    allowed_origins: tuple[str, ...] = (),
    acp_grace: float = 10.0,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``daemon`` over HTTP until cancelled; reports the bound URL through ``task_status``.

    A loopback bind may run without a token; any other bind, or ``require_auth``,
    refuses to start without one.
    """
    check_bind(host, token, require_auth)
    config = Config()
    bind_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    config.bind = [f"{bind_host}:{port}"]
    config.graceful_timeout = 1.0
    config.accesslog = None
    config.errorlog = None
    app = create_app(daemon, token=token, allowed_origins=allowed_origins, acp_grace=acp_grace)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(hypercorn_serve, app, config, shutdown_trigger=trio.sleep_forever))
        daemon.subagents.base_url = base_url_from_bind(binds[0])  # where subagents' signal URLs point
        task_status.started(binds[0])
