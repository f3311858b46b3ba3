"""A created app served on a loopback port by transport.connections.serve (hypercorn, the connection cap), for
tests that need the app itself in hand (its extensions, its hooks) or the server's settings; and a record of the
tasks spawned meanwhile (hypercorn's app task, quart-trio's two)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config

from actors import CountingIds, ScriptedModel, Settings, open_daemon
from transport.access_log import AccessLog
from transport.app import create_app
from transport.connections import serve as serve_capped
from transport.hosts import HostPolicy


class Spawned(trio.abc.Instrument):
    """The names of the tasks spawned while it is installed."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


@dataclass
class ServedApp:
    app: Any
    daemon: Any
    url: str
    token: str


@asynccontextmanager
async def served_app(model: Any = None, settings: Settings | None = None, *,
                     max_requests: int = 1000) -> AsyncIterator[ServedApp]:
    """The daemon's app with a fresh token, served on 127.0.0.1:0 as :func:`transport.serve` serves it. Idle
    connections are kept 600 s, so one seen closed was closed by an answer."""
    token = secrets.token_urlsafe(32)
    async with open_daemon(settings, model=model or ScriptedModel(), ids=CountingIds()) as daemon:
        hosts = HostPolicy()
        app = create_app(daemon, token=token, hosts=hosts)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = config.errorlog = None
        config.keep_alive_max_requests = max_requests
        config.keep_alive_timeout = 600
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve_capped, AccessLog(app), config, max_connections=16,
                                                shutdown_trigger=trio.sleep_forever))
            hosts.bind(binds)
            yield ServedApp(app, daemon, binds[0], token)
            nursery.cancel_scope.cancel()
