"""The node (actors/cluster/node.py) in process, on real PostgreSQL and Redis: takeovers that race."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio

from actors import Settings, open_daemon
from actors.cluster.node import ClusterConfig
from actors.cluster.open import open_cluster


@asynccontextmanager
async def node_and_daemon(tmp_path, postgres_url: str, redis_url: str) -> AsyncIterator[tuple[Any, Any]]:
    """A registered node "n1" (5 s leases) and a daemon storing through it."""
    config = ClusterConfig(postgres_url, redis_url, "n1", "http://127.0.0.1:9", lease_seconds=5)
    async with open_cluster(config) as node, \
            open_daemon(Settings(), state_dir=tmp_path / "state", store=node.store) as daemon:
        node.attach(daemon)
        await trio.to_thread.run_sync(node.leases.register)
        yield node, daemon


def seed_lost_session(db, session_id: str) -> None:
    """A session whose node died mid-turn: its lease expired at epoch 1, one prompt running, one queued."""
    records = [{"op": "admitted", "promptId": "p-run", "body": {"prompt": [{"type": "text", "text": "ran"}]},
                "text": "ran", "queuedAt": 1, "clientId": None, "waited": False},
               {"op": "started", "promptId": "p-run", "startedAt": 2},
               {"op": "admitted", "promptId": "p-next", "body": {"prompt": [{"type": "text", "text": "next"}]},
                "text": "next", "queuedAt": 3, "clientId": None, "waited": True}]

    def seed(conn) -> None:
        conn.execute("INSERT INTO trellis_nodes (node_id, advertise_url, max_sessions, heartbeat_at)"
                     " VALUES ('dead', 'http://127.0.0.1:9', 10, now() - interval '1 hour')")
        conn.execute("INSERT INTO trellis_leases (session_id, node_id, epoch, expires_at)"
                     " VALUES (%s, 'dead', 1, now() - interval '1 second')", (session_id,))
        conn.execute("INSERT INTO trellis_session_records (session_id, record) VALUES (%s, %s)",
                     (session_id, orjson.dumps({"sessionId": session_id, "eventEpoch": "e-1"}).decode()))
        for r in records:
            conn.execute("INSERT INTO trellis_journal (session_id, record) VALUES (%s, %s)",
                         (session_id, orjson.dumps(r).decode()))

    db.run(seed, "seeding")


async def test_a_lease_round_and_a_request_taking_one_session_over_together_restore_it_once(
        tmp_path, postgres_url, redis_url, db):
    seed_lost_session(db, "s-raced")
    with trio.fail_after(30):
        async with node_and_daemon(tmp_path, postgres_url, redis_url) as (node, daemon):
            claimed = await trio.to_thread.run_sync(node.leases.claim, "s-raced")  # the lease round's claim
            assert claimed is not None and claimed.epoch == 2
            async with trio.open_nursery() as nursery:
                nursery.start_soon(node._restore_claimed, [claimed])  # the round restores it ...
                nursery.start_soon(node.take_over, "s-raced")  # ... while a request asks for it here
            handle = daemon.get("s-raced")
            turn = await handle.turn("p-run")
            assert (turn["state"], turn["errorCode"]) == ("error", "node_lost")
            # Whichever went first restored it; the other waited for it (if the request went first, it
            # claimed the session again itself: one epoch more, never a second restore, never a lost fence).
            owner = await trio.to_thread.run_sync(node.leases.owner, "s-raced")
            assert (owner.node_id, owner.epoch in (2, 3)) == ("n1", True)
            assert node.fence.epoch("s-raced") == owner.epoch
            assert handle.epoch == "e-1"  # the session's event epoch, kept


async def test_a_node_whose_redis_is_gone_still_starts_and_stops(tmp_path, postgres_url):
    from .servers import Redis

    redis = Redis()  # its own: this test stops it
    try:
        config = ClusterConfig(postgres_url, redis.url, "n1", "http://127.0.0.1:9", lease_seconds=5)
        with trio.fail_after(30):
            async with open_cluster(config) as node, \
                    open_daemon(Settings(), state_dir=tmp_path / "state", store=node.store) as daemon:
                node.attach(daemon)
                await trio.to_thread.run_sync(redis.stop)
                async with trio.open_nursery() as nursery:
                    await nursery.start(node.run, None)  # registered and serving, Redis or not
                    assert node.ticks == 1
                    nursery.cancel_scope.cancel()  # what a SIGTERM's shutdown does in the end
    finally:
        redis.stop()


@pytest.mark.parametrize("way", ["not renewed", "events refused"])
async def test_every_way_a_node_loses_a_lease_stops_the_session_and_says_so(tmp_path, postgres_url, redis_url, db,
                                                                           caplog, way):
    seed_lost_session(db, "s-lost")
    with trio.fail_after(30):
        async with node_and_daemon(tmp_path, postgres_url, redis_url) as (node, daemon):
            await node.take_over("s-lost")
            epoch = node.fence.epoch("s-lost")
            assert epoch is not None
            if way == "not renewed":  # the lease rounds failed (PostgreSQL away, the node paused) past a lease
                node._renewed_at = trio.current_time() - node.config.lease_seconds - 1
                node._give_up_if_stale()
            else:  # Redis refused its events: a newer owner writes the stream (what the publisher calls)
                node.publisher.on_stale("s-lost")
            assert node.fence.epoch("s-lost") is None
            with trio.fail_after(10):
                while any(h.session_id == "s-lost" for h in daemon.sessions()):  # stopped here
                    await trio.sleep(0.01)
    said = [r.getMessage() for r in caplog.records if "lease of session s-lost lost" in r.getMessage()]
    assert len(said) == 1 and f"epoch {epoch}" in said[0]


async def test_a_session_held_while_a_renewal_runs_is_not_taken_for_lost(tmp_path, postgres_url, redis_url):
    with trio.fail_after(30):
        async with node_and_daemon(tmp_path, postgres_url, redis_url) as (node, daemon):
            renew = node.leases.renew

            def renew_while_a_request_starts_a_session() -> dict[str, int]:
                held = renew()  # its statement has run: the session below is not in its answer
                node.fence.hold("s-new", node.leases.acquire("s-new"))
                return held

            node.leases.renew = renew_while_a_request_starts_a_session
            await node._renew()
            assert node.fence.epoch("s-new") == 1  # still held: its lease was never renewed, nor lost
            node.leases.renew = renew
            await node._renew()  # the next round judges it, and finds it
            assert node.fence.epoch("s-new") == 1


async def test_the_owners_follows_get_its_events_from_the_publisher_continuing_the_stream(
        tmp_path, postgres_url, redis_url, db):
    from actors.cluster.events import events_key
    from actors.cluster.follow import remote_subscription

    seed_lost_session(db, "s-lost")
    key = events_key("s-lost")
    with trio.fail_after(30):
        async with node_and_daemon(tmp_path, postgres_url, redis_url) as (node, daemon):
            events = node.events
            await events.set_owner("s-lost", "dead:1")  # what the dead owner had streamed: events 1 to 5
            await events.append("s-lost", "dead:1", [(n, "t", b'{"n":%d}' % n) for n in range(1, 6)])
            reads: list[set[str]] = []
            read_block = events.read_block

            async def recording(streams: dict[str, str], *args: Any, **kwargs: Any) -> Any:
                reads.append(set(streams))
                return await read_block(streams, *args, **kwargs)

            events.read_block = recording
            async with trio.open_nursery() as nursery:
                await nursery.start(node.publisher.run)
                await nursery.start(node.reader.run)
                # A client on this node before it owns the session: from Redis, after its cursor 3.
                _, before = await remote_subscription(node, "s-lost", 3, "e-1")
                claimed = await trio.to_thread.run_sync(node.leases.claim, "s-lost")
                await node._restore_claimed([claimed])
                got = [await before.get()]
                while got[-1].type != "turn_error":
                    got.append(await before.get())
                assert "state_resync_required" not in [e.type for e in got]
                ids = [e.id for e in got if e.id is not None]
                assert ids == list(range(4, 4 + len(ids))) and len(ids) > 2  # 4, 5 replayed, then this node's
                assert orjson.loads(got[-1].json())["data"]["code"] == "node_lost"
                # Owned here now: once the read under way at the takeover is done, the stream is not read back.
                with trio.fail_after(5):
                    while key in reads[-1]:
                        await trio.sleep(0.01)
                # A client resuming with its cursor here: Redis' record after it, then this node's live events.
                _, again = await remote_subscription(node, "s-lost", ids[2], "e-1")
                await daemon.get("s-lost").set_title("again")
                resumed = [await again.get()]
                while b'"again"' not in resumed[-1].json():
                    resumed.append(await again.get())
                resumed_ids = [e.id for e in resumed if e.id is not None]
                assert resumed_ids == list(range(ids[2] + 1, ids[2] + 1 + len(resumed_ids)))
                assert "state_resync_required" not in [e.type for e in resumed]
                before.close(), again.close()
                nursery.cancel_scope.cancel()


async def test_a_takeover_of_many_sessions_renews_between_its_batches(tmp_path, postgres_url, redis_url, db,
                                                                        monkeypatch):
    import actors.cluster.node as node_module

    monkeypatch.setattr(node_module, "RESTORE_BATCH", 1)
    for n in range(3):
        (seed_more_lost if n else seed_lost_session)(db, f"s-{n}")
    with trio.fail_after(30):
        async with node_and_daemon(tmp_path, postgres_url, redis_url) as (node, daemon):
            claimed = await trio.to_thread.run_sync(node.leases.claim_orphans, 10)
            assert len(claimed) == 3
            renewals = []
            renew = node.leases.renew
            node.leases.renew = lambda: (renewals.append(1), renew())[1]
            node._renewed_at = trio.current_time() - node.config.lease_seconds  # the round began a lease ago
            await node._restore_claimed(claimed)
            assert len(renewals) == 1  # before the second batch; the third came right after it
            assert sorted(node.fence.epochs) == ["s-0", "s-1", "s-2"]
            assert all(node.live_here(f"s-{n}") for n in range(3))


def seed_more_lost(db, session_id: str) -> None:
    """Another session of the dead node of :func:`seed_lost_session` (whose node row is there already)."""
    def seed(conn) -> None:
        conn.execute("INSERT INTO trellis_leases (session_id, node_id, epoch, expires_at)"
                     " VALUES (%s, 'dead', 1, now() - interval '1 second')", (session_id,))
        conn.execute("INSERT INTO trellis_session_records (session_id, record) VALUES (%s, %s)",
                     (session_id, orjson.dumps({"sessionId": session_id, "eventEpoch": "e-1"}).decode()))

    db.run(seed, "seeding")
