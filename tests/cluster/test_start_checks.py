"""A node's start on real backends: passwords that must be percent-encoded, a refused start that changes nothing,
and a probe that prints nothing (new-user report 4: D7, D8, D9)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
import trio

from actors.cluster.database import Database, redact
from actors.cluster.events import EventsUnavailable, RedisEvents
from actors.cluster.exposure import UnauthenticatedBackend, postgres_open_to_anyone, refuse_unauthenticated
from actors.cluster.node import ClusterConfig
from actors.cluster.open import open_cluster

from .servers import Postgres, Redis, skip_reason

ODD = "p/w@d: x#%y"  # what a URL's userinfo cannot hold as is


def _server(password: str | None) -> Iterator[Redis]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    server = Redis(password=password)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def odd_redis() -> Iterator[Redis]:
    """A Redis whose password holds '/', '@', ':', ' ', '#' and '%'."""
    yield from _server(ODD)


@pytest.fixture(scope="module")
def open_redis() -> Iterator[Redis]:
    yield from _server(None)


def trellis_tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'trellis%'")]


def test_urls_are_redacted_the_same_way_for_both_backends() -> None:
    assert redact("redis://:pw@h:6379/0") == "redis://***@h:6379/0"
    assert redact("redis://alice:pw@h:6379/0") == "redis://alice:***@h:6379/0"
    assert redact("postgresql://trellis:p%40ss@h:5432/db") == "postgresql://trellis:***@h:5432/db"
    assert redact("postgresql://h/db?sslmode=require&password=pw") == \
        "postgresql://h/db?sslmode=require&password=***"
    # A parameter's value holding "@" does not pass for the end of the user part (it was shown whole).
    assert redact("postgresql://db.internal/trellis?password=s3cr@t") == \
        "postgresql://db.internal/trellis?password=***"
    assert redact("postgresql://u:p@ss@h/db?password=x@y") == "postgresql://u:***@h/db?password=***"
    for plain in ("postgresql://open@h/db", "redis://h:6379/0", "postgresql:///db"):
        assert redact(plain) == plain


async def test_a_percent_encoded_redis_password_is_decoded(odd_redis: Redis, postgres_url: str) -> None:
    url = odd_redis.database(3)
    assert quote(ODD, safe="") in url
    with trio.fail_after(20):
        async with RedisEvents(url) as events:
            await events.set_owner("s", "t")
            await events.append("s", "t", [(1, "a", b"{}")])
            assert [e.id for e in await events.read_after("s", 0)] == [1]
        await refuse_unauthenticated(postgres_url, url)  # still needs the password without it
        async with open_cluster(ClusterConfig(postgres_url, url, "odd")) as node:
            assert node.events.where == f"redis://***@127.0.0.1:{odd_redis.port}/3"
        wrong = url.replace(quote(ODD, safe=""), quote("not/it", safe=""))
        with pytest.raises(EventsUnavailable) as refused:
            async with RedisEvents(wrong):
                pass
    said = str(refused.value)
    assert f"Redis at redis://***@127.0.0.1:{odd_redis.port}/3" in said, said
    assert "not" not in said.split("/3")[0] and "%2F" not in said


async def test_a_start_refused_on_an_open_redis_creates_no_tables(open_redis: Redis, postgres_url: str) -> None:
    with trio.fail_after(30):
        with pytest.raises(UnauthenticatedBackend):
            async with open_cluster(ClusterConfig(postgres_url, open_redis.database(4), "x")):
                pytest.fail("the node started")
    assert trellis_tables(postgres_url) == []


async def test_a_start_refused_on_a_trusting_postgresql_creates_no_tables(postgres_server: Postgres,
                                                                          postgres_url: str,
                                                                          redis_url: str) -> None:
    trusted = postgres_server.open_url(postgres_url.rsplit("/", 1)[1])
    with trio.fail_after(30):
        with pytest.raises(UnauthenticatedBackend):
            async with open_cluster(ClusterConfig(trusted, redis_url, "x")):
                pytest.fail("the node started")
    assert trellis_tables(postgres_url) == []
    # The next, correct start (as another role) migrates as usual.
    with trio.fail_after(30):
        async with open_cluster(ClusterConfig(postgres_url, redis_url, "x")):
            pass
    assert "trellis_schema" in trellis_tables(postgres_url)


def test_the_postgresql_probe_prints_nothing_and_reads_no_password_file(
        postgres_server: Postgres, postgres_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert not postgres_open_to_anyone(postgres_url)
    assert capfd.readouterr().err == ""  # libpq warned of a password file that is "not a plain file"
    # The right password in a password file, where libpq would look, is not used by the probe either.
    line = f"127.0.0.1:{postgres_server.port}:*:trellis:{postgres_server.password}\n"
    for name, place in (("PGPASSFILE", tmp_path / "pgpass"), ("HOME", tmp_path)):
        file = tmp_path / ("pgpass" if name == "PGPASSFILE" else ".pgpass")
        file.write_text(line)
        file.chmod(0o600)
        with monkeypatch.context() as env:
            env.setenv(name, str(place))
            env.delenv("PGPASSWORD", raising=False)
            unauthenticated = postgres_url.replace(f":{postgres_server.password}@", "@")
            Database(unauthenticated).close()  # the file works: libpq reads it for a URL without a password
            assert not postgres_open_to_anyone(postgres_url)
        file.unlink()
    assert "password file" not in capfd.readouterr().err
    assert os.environ.get("PGPASSFILE") is None
