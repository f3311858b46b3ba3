"""The cluster's PostgreSQL schema, as versioned migrations the daemon applies itself.

Every node runs :func:`migrate` at start: under an advisory lock (so two
nodes starting together do not both migrate), it applies the migrations past
the version in ``trellis_schema`` in order, each in its own transaction with
the version bump. A database already at a newer version than this daemon
knows is refused (an older daemon must not write into a newer schema).

Tables (version 1):

    trellis_nodes            one row per node: advertise URL, heartbeat (database time), draining, cap
    trellis_leases           session ownership: node_id (NULL once released), fencing epoch, expires_at
    trellis_session_records  the session record (:mod:`actors.session.persistence`), one per session
    trellis_journal          the prompt journal, FIFO by ``seq``
    trellis_transcripts      the transcript, in order by ``seq``
    trellis_replays          the compacted replay's folded turns, in order by ``seq``
    trellis_inbox            prompts admitted by a node that does not own the session, not yet taken
                             into its journal by the owner

Documents are stored as ``text`` holding JSON exactly as :mod:`orjson` wrote
it (read back with orjson; nothing queries inside them).
"""

from __future__ import annotations

from typing import Any

MIGRATIONS: tuple[str, ...] = (
    # 1: the first cluster schema
    """
    CREATE TABLE trellis_nodes (
        node_id       text PRIMARY KEY,
        advertise_url text NOT NULL,
        started_at    timestamptz NOT NULL DEFAULT now(),
        heartbeat_at  timestamptz NOT NULL DEFAULT now(),
        draining      boolean NOT NULL DEFAULT false,
        max_sessions  integer NOT NULL
    );
    CREATE TABLE trellis_leases (
        session_id text PRIMARY KEY,
        node_id    text,
        epoch      bigint NOT NULL DEFAULT 1,
        expires_at timestamptz NOT NULL,
        released   boolean NOT NULL DEFAULT false
    );
    CREATE INDEX trellis_leases_node ON trellis_leases (node_id);
    CREATE INDEX trellis_leases_expiry ON trellis_leases (expires_at);
    CREATE TABLE trellis_session_records (
        session_id text PRIMARY KEY,
        record     text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE trellis_journal (
        session_id text NOT NULL,
        seq        bigserial,
        record     text NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE trellis_transcripts (
        session_id text NOT NULL,
        seq        bigserial,
        record     text NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE trellis_replays (
        session_id text NOT NULL,
        seq        bigserial,
        segment    text NOT NULL,
        bytes      integer NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE trellis_inbox (
        id          bigserial PRIMARY KEY,
        session_id  text NOT NULL,
        record      text NOT NULL,
        admitted_by text NOT NULL,
        admitted_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX trellis_inbox_session ON trellis_inbox (session_id, id);
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
_LOCK = 0x7472656C6C6973  # "trellis": the advisory lock migrations run under


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer daemon than this one."""


def migrate(conn: Any, migrations: tuple[str, ...] = MIGRATIONS) -> int:
    """Bring the database on ``conn`` (a psycopg connection, autocommit) to the last version; returns it."""
    conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK,))
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS trellis_schema (version integer NOT NULL)")
        row = conn.execute("SELECT version FROM trellis_schema").fetchone()
        if row is None:
            conn.execute("INSERT INTO trellis_schema (version) VALUES (0)")
            version = 0
        else:
            version = row[0]
        if version > len(migrations):
            raise SchemaTooNew(f"the database's trellis schema is version {version}; this daemon knows only up "
                               f"to {len(migrations)}: upgrade the daemon")
        for number in range(version + 1, len(migrations) + 1):
            with conn.transaction():
                conn.execute(migrations[number - 1])
                conn.execute("UPDATE trellis_schema SET version = %s", (number,))
            version = number
        return version
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK,))
