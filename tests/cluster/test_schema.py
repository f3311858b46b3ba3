"""The cluster schema's migrations on a real PostgreSQL: applied once, in order, each whole, under a lock."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from actors.cluster.database import Database
from actors.cluster.schema import (
    _LOCK,
    MIGRATIONS,
    SCHEMA_VERSION,
    SchemaTooNew,
    migrate,
)

TABLES = {"trellis_schema", "trellis_nodes", "trellis_leases", "trellis_session_records", "trellis_journal",
          "trellis_transcripts", "trellis_replays", "trellis_inbox"}


def tables(conn: Any) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {r[0] for r in rows}


def version(conn: Any) -> int:
    return conn.execute("SELECT version FROM trellis_schema").fetchone()[0]


def test_migrate_creates_the_tables_and_a_second_run_changes_nothing(postgres_url: str) -> None:
    db = Database(postgres_url)
    try:
        assert db.migrate() == SCHEMA_VERSION == len(MIGRATIONS)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            assert tables(conn) == TABLES
            conn.execute("INSERT INTO trellis_journal (session_id, record) VALUES ('s', '{}')")
        assert db.migrate() == SCHEMA_VERSION
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            assert version(conn) == SCHEMA_VERSION
            assert conn.execute("SELECT count(*) FROM trellis_schema").fetchone()[0] == 1
            assert conn.execute("SELECT record FROM trellis_journal").fetchall() == [("{}",)]
    finally:
        db.close()


def test_a_database_from_a_newer_daemon_is_refused_and_the_lock_released(postgres_url: str) -> None:
    db = Database(postgres_url)
    try:
        db.migrate()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("UPDATE trellis_schema SET version = %s", (SCHEMA_VERSION + 1,))
        with pytest.raises(SchemaTooNew, match=f"version {SCHEMA_VERSION + 1}; this daemon knows only up to "
                                               f"{SCHEMA_VERSION}: upgrade the daemon"):
            db.migrate()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            assert conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK,)).fetchone()[0] is True
            assert version(conn) == SCHEMA_VERSION + 1  # left as it was
    finally:
        db.close()


def test_only_the_migrations_past_the_version_run_each_with_its_bump(postgres_url: str) -> None:
    first = "CREATE TABLE one (x integer)"
    second = "CREATE TABLE two (x integer); INSERT INTO one VALUES (2)"
    broken = "CREATE TABLE three (x integer); SELECT no_such_function()"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert migrate(conn, (first,)) == 1
        conn.execute("INSERT INTO one VALUES (1)")
        assert migrate(conn, (first, second)) == 2  # the first is not run again: its table exists
        assert conn.execute("SELECT x FROM one ORDER BY x").fetchall() == [(1,), (2,)]
        with pytest.raises(psycopg.errors.UndefinedFunction):
            migrate(conn, (first, second, broken))
        assert version(conn) == 2  # the broken migration is rolled back with its bump
        assert "three" not in tables(conn)
        assert migrate(conn, (first, second)) == 2


def test_two_nodes_migrating_at_once_both_succeed(postgres_url: str) -> None:
    errors: list[BaseException] = []
    versions: list[int] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        try:
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                barrier.wait()
                versions.append(migrate(conn))
        except (psycopg.Error, SchemaTooNew, threading.BrokenBarrierError) as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and versions == [SCHEMA_VERSION] * 4
