"""Opening a node's connections: the database (migrated), the fenced store, leases and Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .database import Database
from .events import RedisEvents
from .exposure import refuse_unauthenticated
from .leases import Leases
from .node import ClusterConfig, ClusterNode
from .store import Fence, PostgresStore


@asynccontextmanager
async def open_cluster(config: ClusterConfig) -> AsyncIterator[ClusterNode]:
    """A node of the cluster ``config`` describes, connected (schema migrated) but not yet running.

    Attach it to the daemon with :meth:`ClusterNode.attach` (before the daemon
    starts a session) and run it with :meth:`ClusterNode.run` once the daemon
    serves. ``DatabaseUnavailable`` / ``EventsUnavailable`` (``OSError``\\ s)
    when PostgreSQL or Redis cannot be reached; the message names which.
    :class:`~.exposure.UnauthenticatedBackend` (an ``OSError`` too) when either
    answers a connection without credentials (see :mod:`.exposure`).
    """
    db = await trio.to_thread.run_sync(Database, config.store_url)
    try:
        async with RedisEvents(config.events_url) as events:
            # After our own connections worked, so "cannot connect" is never mistaken for "protected"; before
            # the migration, so a refused start leaves the database as it was (no tables of the wrong owner).
            await refuse_unauthenticated(config.store_url, config.events_url, config.allow_unauthenticated)
            await trio.to_thread.run_sync(db.migrate)
            fence = Fence(config.node_id)
            leases = Leases(db, config.node_id, config.advertise_url or "", lease_seconds=config.lease_seconds,
                            max_sessions=config.max_sessions)
            yield ClusterNode(config, PostgresStore(db, fence), fence, leases, events)
    finally:
        await trio.to_thread.run_sync(db.close)
