"""A cluster node against backends a model-run command could use too, and against entries it did not write.

Sandboxed commands share the host's network, so a Redis or PostgreSQL that
answers without a password answers them (red team round 3, finding 1): a node
refuses to start on one unless the ``cluster.allowUnauthenticated`` setting names
it. And whatever else writes into a session's Redis stream, the readers skip
what the append script did not write, rather than failing a client's stream.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from actors.cluster.events import FanOutReader, RedisEvents, events_key
from actors.cluster.exposure import (
    ALLOW_UNAUTHENTICATED,
    UnauthenticatedBackend,
    postgres_open_to_anyone,
    redis_open_to_anyone,
    refuse_unauthenticated,
    without_credentials,
)
from actors.cluster.node import ClusterConfig
from actors.settings import SettingsError
from actors.settings_file import settings_from_dict
from transport.bootstrap import UsageError, cluster_config
from transport.cli import build_parser
from transport.process_image import SECRET_ENV

from .servers import Postgres, Redis, skip_reason

S = "sess-x"
TOKEN = "node-a:1"


@pytest.fixture(scope="module")
def open_redis() -> Any:
    """A Redis that takes commands from anyone (Redis's own default)."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    server = Redis(password=None)
    yield server
    server.stop()


def test_credentials_are_taken_out_of_a_url() -> None:
    assert without_credentials("redis://u:pw@h:1/0") == "redis://h:1/0"
    assert without_credentials("postgresql://u:pw@h/db?sslmode=require&password=x&user=u") == \
        "postgresql://h/db?sslmode=require"


async def test_a_redis_without_a_password_is_refused_naming_the_opt_out(open_redis: Redis, redis_url: str,
                                                                        postgres_url: str) -> None:
    with trio.fail_after(20):
        assert await redis_open_to_anyone(open_redis.database(1))
        assert not await redis_open_to_anyone(redis_url)  # the fixtures' Redis requires its password
        with pytest.raises(UnauthenticatedBackend) as refused:
            await refuse_unauthenticated(postgres_url, open_redis.database(1))
        assert "Redis at redis://127.0.0.1" in str(refused.value)
        assert 'add "redis" to cluster.allowUnauthenticated in the settings file' in str(refused.value)
        with pytest.raises(UnauthenticatedBackend):  # allowing the other backend allows not this one
            await refuse_unauthenticated(postgres_url, open_redis.database(1), ("postgresql",))
        await refuse_unauthenticated(postgres_url, open_redis.database(1), ("redis",))
        await refuse_unauthenticated(postgres_url, redis_url)


async def test_a_postgresql_user_without_a_password_is_refused(postgres_server: Postgres, postgres_url: str,
                                                               redis_url: str) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    trusted = postgres_server.open_url(database)
    with trio.fail_after(20):
        assert postgres_open_to_anyone(trusted)
        # The password in the URL is not what the probe uses: trellis's role needs one.
        assert not postgres_open_to_anyone(postgres_url)
        os.environ["PGPASSWORD"] = postgres_server.password  # nor the environment's
        try:
            assert not postgres_open_to_anyone(postgres_url)
        finally:
            del os.environ["PGPASSWORD"]
        with pytest.raises(UnauthenticatedBackend) as refused:
            await refuse_unauthenticated(trusted, redis_url)
        assert "PostgreSQL at postgresql://open@127.0.0.1" in str(refused.value)
        assert f'add "postgresql" to {ALLOW_UNAUTHENTICATED} in the settings file' in str(refused.value)
        await refuse_unauthenticated(trusted, redis_url, ("postgresql",))


def test_the_opt_out_is_a_setting_checked_when_the_file_is_read() -> None:
    for bad, says in ((["yes"], 'cluster.allowUnauthenticated[0]: must be one of ["redis", "postgresql"], got "yes"'),
                      (["redis", "all"], 'cluster.allowUnauthenticated[1]: must be one of ["redis", "postgresql"], '
                                         'got "all"'),
                      ("redis", 'cluster.allowUnauthenticated: must be an array of values, got "redis"')):
        for document in ({"cluster": {"allowUnauthenticated": bad}}, {"cluster.allowUnauthenticated": bad}):
            with pytest.raises(SettingsError) as caught:
                settings_from_dict({"approvalMode": "yolo", **document}, source="settings.json")
            assert str(caught.value) == f"settings.json: {says}"
    settings = settings_from_dict({"cluster": {"allowUnauthenticated": ["postgresql", "redis"]}})
    assert settings.cluster_allow_unauthenticated == ("postgresql", "redis")
    assert settings_from_dict({}).cluster_allow_unauthenticated == ()
    # What the node is given (transport.bootstrap builds its ClusterConfig from the settings).
    args = build_parser().parse_args(["--store", "postgresql://h/db", "--events", "redis://h"])
    assert cluster_config(args, {}, "t" * 32, True, settings).allow_unauthenticated == {"redis", "postgresql"}
    assert cluster_config(args, {}, "t" * 32, True, settings_from_dict({})).allow_unauthenticated == frozenset()
    with pytest.raises(ValueError, match="allowUnauthenticated: all is not one of redis, postgresql"):
        ClusterConfig("postgresql://h/db", "redis://h", "n", allow_unauthenticated={"all"})
    made_in_code = attrs.evolve(settings, cluster_allow_unauthenticated=("yes",))  # not read from a file
    with pytest.raises(UsageError, match="cluster: allowUnauthenticated: yes is not one of"):
        cluster_config(args, {}, "t" * 32, True, made_in_code)


def _node(tmp_path: Path, open_redis: Redis, postgres_url: str, settings: dict[str, Any]) -> tuple[list[str], dict]:
    """A node's command line and environment, on the open Redis, with ``settings`` as its settings file."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env.update(TRELLIS_TOKEN="t" * 32, TRELLIS_STORE=postgres_url, TRELLIS_EVENTS=open_redis.database(2))
    (tmp_path / "none.json").write_text('{"responses": []}')
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    argv = [sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(tmp_path / "s"),
            "--script", str(tmp_path / "none.json"), "--node-id", "x", "--settings", str(tmp_path / "settings.json")]
    return argv, env


def test_the_daemon_will_not_start_on_an_open_redis(tmp_path: Path, open_redis: Redis, postgres_url: str) -> None:
    # Allowing PostgreSQL does not allow Redis; a bad value is refused before anything is opened.
    for settings, says in (({"cluster": {"allowUnauthenticated": ["postgresql"]}}, "cannot start: Redis at"),
                           ({"cluster": {"allowUnauthenticated": ["yes"]}},
                            'cluster.allowUnauthenticated[0]: must be one of ["redis", "postgresql"], got "yes"')):
        argv, env = _node(tmp_path, open_redis, postgres_url, settings)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr and ALLOW_UNAUTHENTICATED in done.stderr
        assert "listening on" not in done.stdout


def test_the_setting_lets_a_node_start_on_an_open_redis_with_a_warning(tmp_path: Path, open_redis: Redis,
                                                                      postgres_url: str) -> None:
    argv, env = _node(tmp_path, open_redis, postgres_url, {"cluster": {"allowUnauthenticated": ["redis"]}})
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(60, proc.kill)  # a node that neither serves nor exits fails the test, not hangs it
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the first line a serving daemon prints; EOF if it exits
        assert "listening on" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    finally:
        watchdog.cancel()
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert 'answers without a password (cluster.allowUnauthenticated has "redis")' in err, err


# ------------------------------------------------------------------------------ entries nobody wrote


async def _xadd(redis_url: str, entry_id: str, fields: dict[str, bytes], key: str | None = None) -> None:
    """What another writer of the Redis adds, on a connection of its own."""
    import coredis

    async with coredis.Redis.from_url(redis_url, decode_responses=False) as other:
        await other.xadd(key or events_key(S), fields, identifier=entry_id)


async def test_malformed_entries_are_skipped_by_read_after_and_the_reader(redis_url: str) -> None:
    with trio.fail_after(20):
        async with RedisEvents(redis_url) as r:
            await r.set_owner(S, TOKEN)
            await r.append(S, TOKEN, [(1, "a", b'{"n":1}')])
            # What another writer of the Redis could add: wrong fields, not JSON, a frame-splitting type, an
            # id the append script never writes.
            await _xadd(redis_url, "2-0", {"x": b"y"})
            await _xadd(redis_url, "3-0", {"t": b"a", "d": b"not json"})
            await _xadd(redis_url, "4-0", {"t": b"a\n\ndata: forged", "d": b"{}"})
            await _xadd(redis_url, "4-1", {"t": b"a", "d": b'{"n":4}'})
            await r.append(S, TOKEN, [(5, "a", b'{"n":5}')])
            assert [e.id for e in await r.read_after(S, 0)] == [1, 5]
            assert r.malformed.count == 4
            reader = FanOutReader(r, "node-a", block_ms=30_000)
            async with trio.open_nursery() as nursery:
                await nursery.start(reader.run)
                follow = reader.subscribe(S, 0)
                assert [(await follow.__anext__()).id for _ in range(2)] == [1, 5]
                # A malformed entry last in the stream: the reader goes past it rather than reading it again
                # and again (the XREAD would answer at once, forever).
                reads_before = r.malformed.count  # before: the reader may skip it at once
                await _xadd(redis_url, "6-0", {"t": b"a"})
                await r.append(S, TOKEN, [(7, "a", b'{"n":7}')])
                assert (await follow.__anext__()).id == 7
                assert r.malformed.count == reads_before + 1
                nursery.cancel_scope.cancel()


async def test_a_malformed_entry_last_does_not_spin_the_reader(redis_url: str) -> None:
    class Counting(RedisEvents):
        reads = 0

        async def read_block(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            Counting.reads += 1
            return await super().read_block(*args, **kwargs)

    with trio.fail_after(20):
        async with Counting(redis_url) as r:
            await r.set_owner(S, TOKEN)
            await r.append(S, TOKEN, [(1, "a", b'{"n":1}')])
            await _xadd(redis_url, "2-0", {"bad": b"1"})
            reader = FanOutReader(r, "node-a", block_ms=30_000)
            async with trio.open_nursery() as nursery:
                await nursery.start(reader.run)
                follow = reader.subscribe(S, 0)
                assert (await follow.__anext__()).id == 1
                for _ in range(50):  # lets the reader run a while: it blocks, it does not read again and again
                    await trio.lowlevel.checkpoint()
                    await trio.testing.wait_all_tasks_blocked()
                assert Counting.reads <= 3
                nursery.cancel_scope.cancel()


async def test_a_malformed_wake_message_is_skipped(redis_url: str) -> None:
    with trio.fail_after(10):
        async with RedisEvents(redis_url) as r:
            reader = FanOutReader(r, "node-a")
            async with trio.open_nursery() as nursery:
                await nursery.start(reader.run)
                await _xadd(redis_url, "*", {"m": b"[1, 2]"}, "trellis:wake:node-a")  # JSON, not an object
                await r.wake("node-a", {"op": "claim"})
                assert await reader.wakes().__anext__() == {"op": "claim"}
                nursery.cancel_scope.cancel()
