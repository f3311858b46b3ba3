"""The cluster's PostgreSQL connection: a small pool of sync psycopg 3 connections.

psycopg's async API does not run under Trio; its sync API does, in worker
threads. Two ways in:

- :meth:`Database.run` on the calling thread, for the store's writes: a
  journal append is acknowledged only once PostgreSQL has it, exactly as a
  local append waits for its ``fsync`` (one loopback round trip holds the
  event loop about as long);
- :meth:`Database.run_in_thread`, for the node's own periodic work (lease
  renewal, claims, heartbeats), which must never hold the event loop.

Every call takes a connection from the pool, runs its function inside one
transaction and gives the connection back. A connection that fails is
discarded by the pool; the error reaches the caller as
:class:`DatabaseUnavailable` naming what was being done (never the URL, which
may hold a password).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from .schema import migrate

T = TypeVar("T")


class DatabaseUnavailable(OSError):
    """PostgreSQL could not be reached, or refused the statement; the message says doing what."""


def redact(url: str) -> str:
    """``url`` with its password shown as ``***`` (for messages and logs): ``postgresql://user:***@host/db``,
    ``redis://***@host:6379/0``; a ``password=`` parameter too."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # A password= parameter first: its value may hold "@", which would pass for the end of the user part.
    rest = _PASSWORD_PARAM.sub(r"\1***", rest)
    # The last "@": a password left unencoded may hold "@" or "/" and must not show either way.
    credentials, at, host = rest.rpartition("@")
    if not at:
        return f"{scheme}://{host}"
    user, colon, _ = credentials.partition(":")
    shown = (f"{user}:***" if user else "***") if colon else user
    return f"{scheme}://{shown}@{host}"


_PASSWORD_PARAM = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)


class Database:
    """A pool of connections to one PostgreSQL database (``postgresql://…``)."""

    def __init__(self, url: str, *, max_connections: int = 6, connect_timeout: float = 5.0) -> None:
        try:
            import psycopg  # noqa: F401
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # the cluster extra is not installed
            raise DatabaseUnavailable(f"cluster mode needs psycopg and psycopg-pool: pip install "
                                      f"'trellis[cluster]' ({exc.name} is missing)") from None
        self.where = redact(url)
        self._pool = ConnectionPool(url, min_size=1, max_size=max_connections, open=False,
                                    timeout=connect_timeout, kwargs={"autocommit": True,
                                                                     "connect_timeout": max(1, int(connect_timeout))})
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except Exception as exc:
            self._pool.close()
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {self.where}: {_reason(exc)}") from None

    def migrate(self) -> int:
        """Create or migrate the schema (:mod:`actors.cluster.schema`); returns its version."""
        return self.run(migrate, "migrating the schema", transaction=False)

    def run(self, fn: Callable[[Any], T], doing: str, *, transaction: bool = True) -> T:
        """``fn(connection)`` inside one transaction, on this thread; :class:`DatabaseUnavailable` on failure."""
        import psycopg
        try:
            with self._pool.connection() as conn:
                if not transaction:
                    return fn(conn)
                with conn.transaction():
                    return fn(conn)
        except psycopg.Error as exc:
            raise DatabaseUnavailable(f"PostgreSQL at {self.where}, {doing}: {_reason(exc)}") from None
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg_pool"):  # PoolTimeout, PoolClosed
                raise DatabaseUnavailable(f"PostgreSQL at {self.where}, {doing}: {_reason(exc)}") from None
            raise

    async def run_in_thread(self, fn: Callable[[Any], T], doing: str) -> T:
        """:meth:`run` in a worker thread (the event loop goes on meanwhile)."""
        return await trio.to_thread.run_sync(self.run, fn, doing, abandon_on_cancel=True)

    def close(self) -> None:
        self._pool.close()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
