"""Refusing to run a cluster on a Redis or PostgreSQL that anyone on the network can use without a password.

Sandboxed commands share the host's network (``docs/isolation.md``), so a
Redis or PostgreSQL the daemon reaches on loopback or an internal host name, a
model-run command reaches too. Without authentication it could read every
session's events and records, and write into them. So a node checks at start,
after its own (authenticated) connections succeeded: it connects again *without*
the URL's credentials (and, for PostgreSQL, without a password file or
``PGPASSWORD``) and tries a read. If that read is answered, the node refuses to
start with :class:`UnauthenticatedBackend`, naming the backend and the
opt-out, unless the ``cluster.allowUnauthenticated`` setting
(:attr:`~actors.cluster.node.ClusterConfig.allow_unauthenticated`) names that
backend: ``"redis"``, ``"postgresql"``, or both.

Only an answered read counts as open: a refusal (``NOAUTH``, ``NOPERM``,
``no password supplied``) or a failure to connect without credentials is not.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Collection
from contextlib import AsyncExitStack
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import trio

from ..settings import CLUSTER_BACKENDS
from .database import redact

log = logging.getLogger("trellis.cluster")

ALLOW_UNAUTHENTICATED = "cluster.allowUnauthenticated"  # the setting, as errors and logs name it
BACKENDS = CLUSTER_BACKENDS  # "redis", "postgresql"
PROBE_TIMEOUT = 5.0
_CREDENTIAL_PARAMS = frozenset({"username", "password", "user", "passfile", "sslpassword"})


class UnauthenticatedBackend(OSError):
    """Redis or PostgreSQL answered a connection that gave no credentials; the message names the opt-out."""


def without_credentials(url: str) -> str:
    """``url`` with no user name, password or password file (in the authority or the query)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k.lower() not in _CREDENTIAL_PARAMS])
    return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))


def _user(url: str) -> str | None:
    parts = urlsplit(url)
    named = dict(parse_qsl(parts.query)).get("user")
    return parts.username or named or None


def _refusal(backend: str, where: str, how: str) -> UnauthenticatedBackend:
    return UnauthenticatedBackend(
        f"{backend} at {where} {how} without a password: every model-run command on a host that reaches it "
        f"(sandboxed commands share the network) could read and write every session's "
        f"{'events' if backend == 'Redis' else 'records and journals'}. Require authentication "
        f"({'requirepass or an ACL user' if backend == 'Redis' else 'scram-sha-256 in pg_hba.conf'}) and put the "
        f"credentials in the URL (from $TRELLIS_{'EVENTS' if backend == 'Redis' else 'STORE'} or the settings "
        f"file, never a flag), or add \"{backend.lower()}\" to {ALLOW_UNAUTHENTICATED} in the settings file to "
        "run anyway (docs/cluster.md)")


async def redis_open_to_anyone(url: str) -> bool:
    """Whether the Redis at ``url`` answers a read of trellis's keys from a connection with no credentials."""
    import coredis
    from coredis.exceptions import RedisError

    client = coredis.Redis.from_url(without_credentials(url), decode_responses=False,
                                    connect_timeout=PROBE_TIMEOUT, decode_components=True)  # as RedisEvents
    stack = AsyncExitStack()
    answered = False
    try:
        await stack.enter_async_context(client)
        with trio.move_on_after(PROBE_TIMEOUT):
            await client.exists(["trellis:owner:probe"])
            answered = True
    except (RedisError, OSError):
        answered = False  # refused (NOAUTH, NOPERM) or unreachable without credentials: not open
    finally:
        try:
            await stack.aclose()
        except Exception:  # noqa: BLE001 - coredis reports the refused connection again on the way out
            pass
    return answered


def postgres_open_to_anyone(url: str) -> bool:
    """Whether PostgreSQL accepts a connection as the URL's user with no password (``trust``, or ``peer`` for
    this process's user); run in a worker thread."""
    import psycopg

    try:
        # An empty password (PGPASSWORD is then not read) and a password file that does not exist (libpq looks
        # one up for an empty password: not ~/.pgpass nor PGPASSFILE, then): libpq sends none, whatever the
        # environment or the URL hold. Not os.devnull: libpq warns on stderr that it is "not a plain file".
        # In a directory of our own, so no one can put a file there meanwhile.
        user = {"user": name} if (name := _user(url)) else {}
        with tempfile.TemporaryDirectory(prefix="trellis-probe-") as private, \
                psycopg.connect(without_credentials(url), **user, password="",
                                passfile=os.path.join(private, "none"),
                                connect_timeout=max(1, int(PROBE_TIMEOUT)), autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


async def refuse_unauthenticated(store_url: str, events_url: str, allow: Collection[str] = ()) -> None:
    """Raise :class:`UnauthenticatedBackend` when a backend not in ``allow`` (``cluster.allowUnauthenticated``:
    ``"redis"``, ``"postgresql"``; checked by :class:`~actors.cluster.node.ClusterConfig`) answers without
    credentials; log a warning for one that is allowed."""
    if await redis_open_to_anyone(events_url):
        if "redis" not in allow:
            raise _refusal("Redis", redact(events_url), "answers")
        log.warning("Redis at %s answers without a password (%s has \"redis\"): a model-run command can read and "
                    "write every session's events", redact(events_url), ALLOW_UNAUTHENTICATED)
    if await trio.to_thread.run_sync(postgres_open_to_anyone, store_url, abandon_on_cancel=True):
        if "postgresql" not in allow:
            raise _refusal("PostgreSQL", redact(store_url), "accepts its user")
        log.warning("PostgreSQL at %s accepts its user without a password (%s has \"postgresql\"): a model-run "
                    "command can read and write every session's records", redact(store_url), ALLOW_UNAUTHENTICATED)
