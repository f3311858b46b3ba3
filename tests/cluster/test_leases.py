"""actors/cluster/leases.py against a real PostgreSQL: nodes, leases, fencing epochs, orphan claims, placement.

No sleeps: expiry is simulated by moving ``expires_at`` into the past, a dead
node by moving its ``heartbeat_at`` an hour back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from actors.cluster.database import Database
from actors.cluster.leases import (
    Claimed,
    Leases,
    Node,
    NotRegistered,
    Owner,
    SessionOwned,
)


@pytest.fixture
def node(db: Database) -> Callable[..., Leases]:
    """``node("a", max_sessions=...)``: a registered :class:`Leases` for node ``a``."""
    def make(node_id: str, *, register: bool = True, **kw: Any) -> Leases:
        leases = Leases(db, node_id, f"http://{node_id}.test:7000", **kw)
        if register:
            leases.register()
        return leases
    return make


def sql(db: Database, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    def fn(conn: Any) -> list[tuple[Any, ...]]:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []
    return db.run(fn, "test")


def expire(db: Database, *session_ids: str) -> None:
    sql(db, "UPDATE trellis_leases SET expires_at = now() - interval '1 second' WHERE session_id = ANY(%s)",
        (list(session_ids),))


def kill(db: Database, node_id: str) -> None:
    sql(db, "UPDATE trellis_nodes SET heartbeat_at = now() - interval '1 hour' WHERE node_id = %s", (node_id,))


def lease_row(db: Database, session_id: str) -> tuple[Any, ...]:
    return sql(db, "SELECT node_id, epoch, released FROM trellis_leases WHERE session_id = %s", (session_id,))[0]


# ----------------------------------------------------------------- acquire, renew, owner


def test_acquire_renew_owner(db: Database, node: Callable[..., Leases]) -> None:
    a = node("a")
    assert a.owner("s1") is None
    assert a.acquire("s1") == 1
    assert a.owner("s1") == Owner("s1", "a", "http://a.test:7000", 1, True)
    assert a.renew() == {"s1": 1}
    assert a.held() == {"s1": 1}


def test_renew_extends_the_lease_and_heartbeats(db: Database, node: Callable[..., Leases]) -> None:
    a = node("a")
    a.acquire("s1")
    expire(db, "s1")
    kill(db, "a")
    assert a.owner("s1").live is False
    assert a.renew() == {"s1": 1}  # nobody claimed it meanwhile: the same epoch lives on
    assert a.owner("s1").live is True
    assert [n.alive for n in a.nodes()] == [True]


def test_lease_and_heartbeat_use_database_time_and_lease_seconds(db: Database, node: Callable[..., Leases]) -> None:
    a = node("a", lease_seconds=60)
    a.acquire("s1")
    (left,) = sql(db, "SELECT extract(epoch FROM expires_at - now()) FROM trellis_leases")[0]
    assert 59 < float(left) <= 60
    sql(db, "UPDATE trellis_leases SET expires_at = now() + interval '1 second'")
    a.renew()
    (left,) = sql(db, "SELECT extract(epoch FROM expires_at - now()) FROM trellis_leases")[0]
    assert 59 < float(left) <= 60
    # a heartbeat 30 s old is fresh for a 60 s lease, stale for a 5 s one
    sql(db, "UPDATE trellis_nodes SET heartbeat_at = now() - interval '30 seconds'")
    assert [n.alive for n in a.nodes()] == [True]
    assert a.owner("s1").live is True
    short = node("b", lease_seconds=5)
    assert [(n.node_id, n.alive) for n in short.nodes()] == [("a", False), ("b", True)]
    assert short.owner("s1").live is False


def test_renew_returns_only_this_nodes_leases(db: Database, node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    a.acquire("s1")
    a.acquire("s2")
    b.acquire("s3")
    assert a.renew() == {"s1": 1, "s2": 1}
    assert b.renew() == {"s3": 1}
    assert a.held() == {"s1": 1, "s2": 1}
    assert b.held() == {"s3": 1}


def test_acquire_of_a_live_owned_session_raises_session_owned(db: Database, node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    a.acquire("s1")
    with pytest.raises(SessionOwned) as raised:
        b.acquire("s1")
    assert raised.value.owner == Owner("s1", "a", "http://a.test:7000", 1, True)
    assert lease_row(db, "s1") == ("a", 1, False)
    assert b.held() == {}


def test_acquire_claims_an_expired_released_or_own_lease_at_epoch_plus_one(db: Database,
                                                                           node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    a.acquire("s1")
    assert a.acquire("s1") == 2  # its own: re-claimed, fencing the earlier holder in this node
    expire(db, "s1")
    assert b.acquire("s1") == 3
    assert b.release("s1", 3)
    assert a.acquire("s1") == 4
    assert lease_row(db, "s1") == ("a", 4, False)
    assert a.owner("s1").live


def test_a_dead_or_deregistered_nodes_unexpired_lease_is_not_live(db: Database, node: Callable[..., Leases]) -> None:
    a, b, c = node("a"), node("b"), node("c")
    a.acquire("s1")
    b.acquire("s2")
    kill(db, "a")
    b.deregister()
    assert c.owner("s1").live is False
    assert c.owner("s2") == Owner("s2", "b", None, 1, False)
    assert c.acquire("s1") == 2
    assert sorted(c.claim_orphans(10), key=lambda x: x.session_id) == [Claimed("s2", 2, False, "b")]


def test_unregistered_node_cannot_own(db: Database, node: Callable[..., Leases]) -> None:
    ghost = node("ghost", register=False)
    for attempt in (lambda: ghost.acquire("s1"), lambda: ghost.claim("s1"), lambda: ghost.claim_orphans(5),
                    ghost.heartbeat, ghost.renew, ghost.set_draining):
        with pytest.raises(NotRegistered):
            attempt()
    assert sql(db, "SELECT count(*) FROM trellis_leases") == [(0,)]


def test_register_is_an_upsert_that_ends_draining(db: Database, node: Callable[..., Leases]) -> None:
    a = node("a", max_sessions=3)
    a.set_draining()
    kill(db, "a")
    assert a.nodes() == [Node("a", "http://a.test:7000", True, 3, 0, False)]
    again = Leases(db, "a", "http://a2.test:7000", max_sessions=7)
    again.register()
    assert a.nodes() == [Node("a", "http://a2.test:7000", False, 7, 0, True)]
    again.deregister()
    assert a.nodes() == []


# ----------------------------------------------------------------- expiry and takeover


def test_expired_lease_is_taken_over_at_the_next_epoch_and_the_old_owner_is_fenced(
        db: Database, node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    a.acquire("s1")
    assert b.claim_orphans(10) == []  # live: not an orphan
    expire(db, "s1")
    assert b.owner("s1").live is False
    assert b.claim_orphans(10) == [Claimed("s1", 2, False, "a")]
    assert b.owner("s1") == Owner("s1", "b", "http://b.test:7000", 2, True)
    assert a.renew() == {}  # a sees it lost s1
    assert a.held() == {}
    assert a.release("s1", 1) is False
    assert a.drop("s1", 1) is False
    assert lease_row(db, "s1") == ("b", 2, False)
    assert b.release("s1", 1) is False  # the epoch is in the WHERE: b's own stale epoch is refused too
    assert b.drop("s1", 1) is False
    assert b.renew() == {"s1": 2}
    assert b.drop("s1", 2) is True
    assert b.owner("s1") is None


def test_claim_orphans_leaves_live_and_own_leases_alone(db: Database, node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    a.acquire("mine-expired")
    a.acquire("mine-live")
    b.acquire("theirs-live")
    expire(db, "mine-expired")
    assert a.claim_orphans(10) == []
    assert a.renew() == {"mine-expired": 1, "mine-live": 1}


def test_claim_orphans_takes_the_oldest_expiry_first_up_to_the_limit(db: Database,
                                                                     node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    for sid in ("s1", "s2", "s3"):
        a.acquire(sid)
    sql(db, "UPDATE trellis_leases SET expires_at = now() - interval '1 minute' WHERE session_id = 's3'")
    sql(db, "UPDATE trellis_leases SET expires_at = now() - interval '2 minutes' WHERE session_id = 's2'")
    sql(db, "UPDATE trellis_leases SET expires_at = now() - interval '1 second' WHERE session_id = 's1'")
    assert [c.session_id for c in b.claim_orphans(2)] == ["s2", "s3"]
    assert [c.session_id for c in b.claim_orphans(2)] == ["s1"]
    assert b.claim_orphans(2) == []


def _race(postgres_url: str, work: Callable[[Leases], Any]) -> dict[str, Any]:
    """``work(leases)`` for nodes a and b at once, each in a thread with a pool of its own; node id -> result."""
    databases = [Database(postgres_url), Database(postgres_url)]
    racers = [Leases(db, node_id, f"http://{node_id}.test:7000", max_sessions=10_000)
              for db, node_id in zip(databases, ("a", "b"))]
    for racer in racers:
        racer.register()
    barrier = threading.Barrier(2)

    def run(leases: Leases) -> Any:
        barrier.wait()
        return work(leases)

    try:
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(run, racer) for racer in racers]
            return {racer.node_id: future.result(timeout=60) for racer, future in zip(racers, futures)}
    finally:
        for database in databases:
            database.close()


def test_two_nodes_racing_claim_orphans_never_both_claim_a_session(postgres_url: str, db: Database,
                                                                   node: Callable[..., Leases]) -> None:
    node("old")

    def claim_all(leases: Leases) -> list[Claimed]:
        claimed: list[Claimed] = []
        while got := leases.claim_orphans(2):
            claimed.extend(got)
        return claimed

    everything: set[str] = set()
    for round in range(5):  # a lost race shows in most rounds, not all: several make it near certain
        sessions = [f"r{round}-{i:03}" for i in range(100)]
        everything |= set(sessions)
        sql(db, "INSERT INTO trellis_leases (session_id, node_id, expires_at)"
                " SELECT unnest(%s::text[]), 'old', now() - interval '1 second'", (sessions,))
        claimed = _race(postgres_url, claim_all)
        a_got = {c.session_id for c in claimed["a"]}
        b_got = {c.session_id for c in claimed["b"]}
        assert len(a_got) == len(claimed["a"]) and len(b_got) == len(claimed["b"])
        assert a_got & b_got == set()
        assert a_got | b_got == set(sessions)
        assert {(c.epoch, c.released, c.previous_node) for c in claimed["a"] + claimed["b"]} == {(2, False, "old")}
        owners = dict(sql(db, "SELECT session_id, node_id FROM trellis_leases WHERE session_id = ANY(%s)",
                          (sessions,)))
        assert owners == {**{sid: "a" for sid in a_got}, **{sid: "b" for sid in b_got}}
    assert sql(db, "SELECT count(*), max(epoch) FROM trellis_leases") == [(len(everything), 2)]


def test_two_nodes_claiming_the_same_sessions_by_name_never_both_get_one(
        postgres_url: str, db: Database, node: Callable[..., Leases]) -> None:
    old = node("old")
    sessions = [f"s{i:02}" for i in range(40)]
    for sid in sessions:
        old.acquire(sid)
    expire(db, *sessions)
    got = _race(postgres_url, lambda leases: [leases.claim(sid) for sid in sessions])
    for i, sid in enumerate(sessions):
        winners = [claimed for claimed in (got["a"][i], got["b"][i]) if claimed is not None]
        assert winners == [Claimed(sid, 2, False, "old")]
    assert sql(db, "SELECT max(epoch) FROM trellis_leases") == [(2,)]


def test_two_nodes_acquiring_the_same_new_sessions_never_both_get_one(postgres_url: str, db: Database) -> None:
    sessions = [f"s{i:02}" for i in range(40)]

    def acquire_all(leases: Leases) -> list[int | None]:
        epochs: list[int | None] = []
        for sid in sessions:
            try:
                epochs.append(leases.acquire(sid))
            except SessionOwned as exc:
                assert exc.owner.live and exc.owner.node_id != leases.node_id
                epochs.append(None)
        return epochs

    got = _race(postgres_url, acquire_all)
    for i in range(len(sessions)):
        assert sorted((got["a"][i], got["b"][i]), key=str) == [1, None]
    owners = dict(sql(db, "SELECT session_id, node_id FROM trellis_leases"))
    assert owners == {sid: "a" if got["a"][i] else "b" for i, sid in enumerate(sessions)}


# ----------------------------------------------------------------- release


def test_released_sessions_are_claimed_with_released_true(db: Database, node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    a.acquire("s1")
    a.acquire("s2")
    assert a.release("s1", 1) is True
    assert a.release("s1", 1) is False  # no longer a's
    assert a.owner("s1") == Owner("s1", None, None, 1, False)
    assert lease_row(db, "s1") == (None, 1, True)
    assert a.renew() == {"s2": 1}
    assert b.claim_orphans(10) == [Claimed("s1", 2, True, None)]
    assert lease_row(db, "s1") == ("b", 2, False)  # released reset on the claim
    # and through claim() of the one session
    assert a.release("s2", 1) is True
    assert b.claim("s2") == Claimed("s2", 2, True, None)
    assert lease_row(db, "s2") == ("b", 2, False)


def test_release_and_drop_need_this_node_and_the_current_epoch(db: Database, node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    a.acquire("s1")
    assert b.release("s1", 1) is False
    assert b.drop("s1", 1) is False
    assert a.release("s1", 2) is False
    assert a.drop("s1", 2) is False
    assert lease_row(db, "s1") == ("a", 1, False)
    assert a.drop("s1", 1) is True
    assert a.owner("s1") is None


# ----------------------------------------------------------------- claim of one session


def test_claim_of_one_session(db: Database, node: Callable[..., Leases]) -> None:
    a, b = node("a"), node("b")
    assert b.claim("nope") is None  # no lease: nothing to claim
    a.acquire("s1")
    assert b.claim("s1") is None  # live owner
    assert lease_row(db, "s1") == ("a", 1, False)
    assert a.claim("s1") == Claimed("s1", 2, False, "a")  # its own live lease: re-claimed, fencing epoch 1
    expire(db, "s1")
    assert b.claim("s1") == Claimed("s1", 3, False, "a")
    assert a.renew() == {}
    expire(db, "s1")
    assert b.claim("s1") == Claimed("s1", 4, False, "b")  # its own expired lease, re-claimed
    assert lease_row(db, "s1") == ("b", 4, False)


# ----------------------------------------------------------------- caps and draining


def test_claim_orphans_never_claims_past_the_cap(db: Database, node: Callable[..., Leases]) -> None:
    old = node("old")
    b = node("b", max_sessions=3)
    b.acquire("held")
    orphans = [f"o{i}" for i in range(5)]
    for sid in orphans:
        old.acquire(sid)
    expire(db, *orphans)
    assert len(b.claim_orphans(10)) == 2
    assert b.claim_orphans(10) == []
    assert len(b.held()) == 3
    left = [sid for sid in orphans if sid not in b.held()]
    assert b.claim(left[0]) is None  # claim() respects the cap too
    assert b.release("held", 1)
    assert b.claim(left[0]) == Claimed(left[0], 2, False, "old")


def test_a_draining_node_claims_nothing(db: Database, node: Callable[..., Leases]) -> None:
    old, b = node("old"), node("b")
    old.acquire("s1")
    old.acquire("s2")
    expire(db, "s1", "s2")
    b.set_draining()
    assert b.claim_orphans(10) == []
    assert b.claim("s1") is None
    assert lease_row(db, "s1") == ("old", 1, False)
    b.register()  # no longer draining
    assert [c.session_id for c in b.claim_orphans(10)] == ["s1", "s2"]


# ----------------------------------------------------------------- placement


def test_nodes_lists_every_node_with_its_lease_count(db: Database, node: Callable[..., Leases]) -> None:
    a, b = node("a", max_sessions=5), node("b", max_sessions=2)
    node("c").set_draining()
    a.acquire("s1")
    a.acquire("s2")
    b.acquire("s3")
    kill(db, "b")
    assert a.nodes() == [Node("a", "http://a.test:7000", False, 5, 2, True),
                         Node("b", "http://b.test:7000", False, 2, 1, False),
                         Node("c", "http://c.test:7000", True, 100, 0, True)]


def test_place_picks_the_least_loaded_node_ties_by_node_id(db: Database, node: Callable[..., Leases]) -> None:
    a, b, c = node("a"), node("b"), node("c")
    assert a.place().node_id == "a"  # all empty: the first by id
    a.acquire("s1")
    a.acquire("s2")
    c.acquire("s3")
    assert a.place() == Node("b", "http://b.test:7000", False, 100, 0, True)
    b.acquire("s4")
    b.acquire("s5")
    assert a.place().node_id == "c"
    c.acquire("s6")
    assert a.place().node_id == "a"  # 2, 2, 2: the tie goes to the first id


def test_place_skips_dead_draining_and_full_nodes(db: Database, node: Callable[..., Leases]) -> None:
    dead, draining, full, busy = node("a"), node("b"), node("c", max_sessions=1), node("d")
    busy.acquire("s1")
    busy.acquire("s2")
    full.acquire("s3")
    assert busy.place().node_id == "a"
    kill(db, "a")
    assert busy.place().node_id == "b"
    draining.set_draining()
    assert busy.place().node_id == "d"  # c (1 session) is at its cap
    busy.set_draining()
    assert busy.place() is None
    dead.heartbeat()
    assert busy.place().node_id == "a"


# ----------------------------------------------------------------- fencing epochs


def test_epochs_only_grow_across_takeovers(db: Database, node: Callable[..., Leases]) -> None:
    a, b, c = node("a"), node("b"), node("c")
    epochs = [a.acquire("s1")]

    expire(db, "s1")
    epochs.append(b.claim_orphans(5)[0].epoch)  # expiry, taken over by another node
    assert b.release("s1", epochs[-1])
    epochs.append(c.claim("s1").epoch)  # released, claimed by name
    kill(db, "c")
    epochs.append(a.acquire("s1"))  # dead node's lease, acquired
    assert a.release("s1", epochs[-1])
    epochs.append(a.claim_orphans(5)[0].epoch)  # its own released lease, claimed back
    epochs.append(a.acquire("s1"))  # its own live lease, re-acquired
    expire(db, "s1")
    epochs.append(a.claim("s1").epoch)  # its own expired lease, re-claimed
    c.heartbeat()
    expire(db, "s1")
    epochs.append(c.claim_orphans(5)[0].epoch)

    assert epochs == list(range(1, 9))
    assert lease_row(db, "s1") == ("c", 8, False)
    for stale in range(1, 8):
        assert not c.release("s1", stale) and not c.drop("s1", stale)
    assert c.renew() == {"s1": 8}
