"""Fixtures for the cluster tests: one PostgreSQL and one Redis per test session, a fresh database per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from .servers import Postgres, Redis, skip_reason

if not skip_reason():
    from actors.cluster.database import Database

_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    reason = skip_reason()
    if reason:
        pytest.skip(f"cluster tests need PostgreSQL and Redis: {reason}")
    server = Postgres()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Redis]:
    reason = skip_reason()
    if reason:
        pytest.skip(f"cluster tests need PostgreSQL and Redis: {reason}")
    server = Redis()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: Postgres) -> str:
    """A fresh, empty database of its own for this test."""
    return postgres_server.database(f"test{next(_numbers)}")


@pytest.fixture
def redis_url(redis_server: Redis) -> str:
    """An emptied logical database of its own for this test."""
    return redis_server.database(next(_numbers) % 255 + 1)


@pytest.fixture
def db(postgres_url: str) -> Iterator[Database]:
    """The test's database with the cluster schema, through the daemon's own pool."""
    database = Database(postgres_url)
    database.migrate()
    yield database
    database.close()
