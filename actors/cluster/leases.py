"""Nodes, session leases and placement, in SQL: who owns which session, at which fencing epoch.

One node owns a session at a time, through its row in ``trellis_leases``
(:mod:`actors.cluster.schema`). Every function here is synchronous and runs
one transaction through :meth:`Database.run`; the caller decides the thread
(:meth:`Database.run_in_thread` from Trio).

**Only database time.** Every timestamp is written and compared with
``now()`` in SQL (the transaction's start, on the PostgreSQL server); the
node's own clock is never read, so nodes with skewed clocks still agree on
who is live. Durations travel as parameters (``now() + make_interval(secs =>
lease_seconds)``). All nodes of a cluster must use the same ``lease_seconds``:
a node's heartbeat counts as fresh for *the reader's* lease time.

**Live.** A lease is *live* when it has a node, has not expired, and that
node's row exists with a heartbeat within the lease time. A lease that is not
live may be claimed by any registered node; claiming it always moves the epoch
to ``epoch + 1`` (never reset, never reused), so a write fenced on the old
epoch is refused.

Life cycle of one session's lease (``-`` = no row; "me" is the calling node,
``n`` another one; a claim = :meth:`~Leases.claim`, :meth:`~Leases.claim_orphans`
or :meth:`~Leases.acquire` of a row that is not live):

=========================  ===========================  ===========================================
state                      event                        next state
=========================  ===========================  ===========================================
-                          acquire                      owned(me, 1), expires now()+lease
owned(me, e)               renew                        owned(me, e), expires now()+lease
owned(me, e)               acquire / claim              owned(me, e+1), live or not
owned(n, e), live          acquire                      unchanged; :class:`SessionOwned`
owned(n, e), live          claim / claim_orphans        unchanged; nothing claimed (claim: None)
owned(n, e)                expires_at <= now(), or n's  expired(n, e); n's renew still revives it
                           heartbeat stale / row gone   (same epoch) until another node claims it
expired(n, e)              claim                        owned(me, e+1), released=False;
                                                        Claimed(released=False, previous_node=n)
expired(me, e)             claim_orphans                unchanged (its renew revives it)
owned(me, e)               release(e)                   released(e): node_id NULL, released=True,
                                                        expires_at now()
released(e)                claim                        owned(me, e+1), released=False;
                                                        Claimed(released=True, previous_node=None)
owned(me, e)               drop(e)                      - (the session was deleted)
any other row              release(e) / drop(e)         unchanged; False (fenced by node and epoch)
=========================  ===========================  ===========================================

claim and claim_orphans claim nothing on a draining node, nor past its cap
(``max_sessions`` of its row); acquire checks neither (placement decided, see
:meth:`Leases.place`). A claim on an unregistered node raises
:class:`NotRegistered`. The epoch only grows while the row exists; after
``drop`` a new lease for the same id would start at 1 again, so session ids
must not be reused.

Renewal is one statement, ``UPDATE … WHERE node_id = me RETURNING
session_id, epoch`` (after the heartbeat, in the same transaction): a session
the caller holds that is missing from the answer, or comes back at another
epoch, was lost. ``renew`` extends *every* lease naming this node, also ones
the running process does not know about (left by an earlier process with the
same node id): adopt or release those at start (:meth:`Leases.held`).

Claims are serialised per node by locking the node's own row first (so two
threads of one node cannot claim past its cap together), then the lease rows;
every transaction here takes its locks in that order (own node row, then
leases), so none can deadlock another. Nodes racing :meth:`Leases.claim_orphans`
take the lease rows ``FOR UPDATE SKIP LOCKED``, and only rows still exactly as
their snapshot saw them: each orphan goes to exactly one of them. A lease row
is never locked through a join to its node: PostgreSQL rechecks a row updated
while it waited against the *old* joined row (a LEFT JOIN then comes back
null-extended, i.e. "no live node"), which would let two nodes claim one
session.

Counts (``Node.sessions``, the cap, :meth:`Leases.held`) take every lease row
naming the node, expired or not: an expired lease nobody claimed yet is still
the node's (its renew revives it).
"""

from __future__ import annotations

from typing import Any

import attrs

from .database import Database


@attrs.frozen
class Node:
    """One node's row, with the leases it holds now."""

    node_id: str
    advertise_url: str
    draining: bool
    max_sessions: int
    sessions: int  # lease rows naming this node
    alive: bool  # heartbeat within the lease time


@attrs.frozen
class Owner:
    """Who owns a session: ``node_id`` is ``None`` once released (and ``advertise_url`` without a node row)."""

    session_id: str
    node_id: str | None
    advertise_url: str | None
    epoch: int
    live: bool  # the lease has not expired and its node's heartbeat is fresh


@attrs.frozen
class Claimed:
    """A session this node just claimed, at ``epoch``."""

    session_id: str
    epoch: int
    released: bool  # the previous owner handed it over cleanly (release), rather than letting it expire
    previous_node: str | None  # whose lease expired (maybe this node's); None after a release (node_id is NULL)


class SessionOwned(Exception):
    """A live node (not this one) already owns the session; :attr:`owner` says which."""

    def __init__(self, owner: Owner) -> None:
        super().__init__(f"session {owner.session_id} is owned by node {owner.node_id} at epoch {owner.epoch}")
        self.owner = owner


class NotRegistered(RuntimeError):
    """This node has no row in ``trellis_nodes`` (never registered, or deregistered): it cannot own sessions."""


# The one definition of a live lease, for a lease ``l`` LEFT JOINed to its node ``n``.
_LIVE = ("(l.node_id IS NOT NULL AND l.expires_at > now() AND n.node_id IS NOT NULL"
         " AND n.heartbeat_at > now() - make_interval(secs => %(lease)s))")
_ALIVE = "(n.heartbeat_at > now() - make_interval(secs => %(lease)s))"
_EXPIRES = "now() + make_interval(secs => %(lease)s)"


class Leases:
    """This node's view of the cluster tables: its own row, its leases, everyone's placement."""

    def __init__(self, db: Database, node_id: str, advertise_url: str, *, lease_seconds: float = 5.0,
                 max_sessions: int = 100) -> None:
        if not node_id:
            raise ValueError("node_id must not be empty")
        if not lease_seconds > 0:
            raise ValueError(f"lease_seconds must be positive, not {lease_seconds!r}")
        if max_sessions < 0:
            raise ValueError(f"max_sessions must not be negative, not {max_sessions!r}")
        self.db = db
        self.node_id = node_id
        self.advertise_url = advertise_url
        self.lease_seconds = float(lease_seconds)
        self.max_sessions = max_sessions

    def _params(self, **more: Any) -> dict[str, Any]:
        return {"me": self.node_id, "lease": self.lease_seconds, **more}

    # ------------------------------------------------------------- this node's row

    def register(self) -> None:
        """Insert or refresh this node's row: URL, cap, heartbeat now(), not draining."""
        def fn(conn: Any) -> None:
            conn.execute(
                "INSERT INTO trellis_nodes (node_id, advertise_url, max_sessions, heartbeat_at, draining)"
                " VALUES (%(me)s, %(url)s, %(cap)s, now(), false)"
                " ON CONFLICT (node_id) DO UPDATE SET advertise_url = EXCLUDED.advertise_url,"
                " max_sessions = EXCLUDED.max_sessions, heartbeat_at = now(), draining = false",
                self._params(url=self.advertise_url, cap=self.max_sessions))
        self.db.run(fn, f"registering node {self.node_id}")

    def heartbeat(self) -> None:
        """heartbeat_at = now(); :class:`NotRegistered` if this node's row is gone."""
        self.db.run(self._heartbeat, f"heartbeat of node {self.node_id}")

    def _heartbeat(self, conn: Any) -> None:
        cur = conn.execute("UPDATE trellis_nodes SET heartbeat_at = now() WHERE node_id = %(me)s", self._params())
        if cur.rowcount != 1:
            raise NotRegistered(f"node {self.node_id} is not registered")

    def set_draining(self) -> None:
        """Mark this node draining: placement skips it and it claims nothing more."""
        def fn(conn: Any) -> None:
            cur = conn.execute("UPDATE trellis_nodes SET draining = true WHERE node_id = %(me)s", self._params())
            if cur.rowcount != 1:
                raise NotRegistered(f"node {self.node_id} is not registered")
        self.db.run(fn, f"marking node {self.node_id} draining")

    def deregister(self) -> None:
        """Delete this node's row (leases still naming it stop being live at once)."""
        self.db.run(lambda conn: conn.execute("DELETE FROM trellis_nodes WHERE node_id = %(me)s", self._params()),
                    f"deregistering node {self.node_id}")

    def _lock_me(self, conn: Any) -> tuple[bool, int]:
        """Lock this node's row (serialising its claims); its (draining, max_sessions)."""
        row = conn.execute("SELECT draining, max_sessions FROM trellis_nodes WHERE node_id = %(me)s FOR UPDATE",
                           self._params()).fetchone()
        if row is None:
            raise NotRegistered(f"node {self.node_id} is not registered")
        return row[0], row[1]

    def _lock_lease(self, conn: Any, session_id: str) -> tuple[Owner, bool] | None:
        """Lock the session's lease row; its owner as of now, and whether it was released. ``None``: no row.

        The lease row is locked alone (no join: a join rechecked after waiting
        for a lock could pair the new row with a stale node row), and its node
        is read in a statement of its own, whose snapshot postdates the lock.
        """
        row = conn.execute("SELECT node_id, epoch, released, expires_at > now() FROM trellis_leases"
                           " WHERE session_id = %(sid)s FOR UPDATE", self._params(sid=session_id)).fetchone()
        if row is None:
            return None
        node_id, epoch, released, unexpired = row
        url, fresh = None, False
        if node_id is not None:
            node = conn.execute(f"SELECT n.advertise_url, {_ALIVE} FROM trellis_nodes n WHERE n.node_id = %(node)s",
                                self._params(node=node_id)).fetchone()
            if node is not None:
                url, fresh = node
        return Owner(session_id, node_id, url, epoch, node_id is not None and unexpired and fresh), released

    def _take(self, conn: Any, session_id: str) -> int:
        """Claim the (locked) lease for this node at the next epoch; that epoch."""
        return conn.execute(f"UPDATE trellis_leases SET node_id = %(me)s, epoch = epoch + 1, expires_at = {_EXPIRES},"
                            " released = false WHERE session_id = %(sid)s RETURNING epoch",
                            self._params(sid=session_id)).fetchone()[0]

    def _count_mine(self, conn: Any) -> int:
        return conn.execute("SELECT count(*) FROM trellis_leases WHERE node_id = %(me)s", self._params()).fetchone()[0]

    # ------------------------------------------------------------- leases

    def acquire(self, session_id: str) -> int:
        """Own ``session_id`` (a new session placed here); its epoch.

        No row: epoch 1. A row that is not live, or is this node's: claimed at
        epoch + 1. A row live-owned by another node: :class:`SessionOwned`.
        Neither the cap nor draining is checked (placement decided).
        """
        def fn(conn: Any) -> int:
            self._lock_me(conn)
            while True:
                inserted = conn.execute(
                    "INSERT INTO trellis_leases (session_id, node_id, epoch, expires_at, released)"
                    f" VALUES (%(sid)s, %(me)s, 1, {_EXPIRES}, false) ON CONFLICT (session_id) DO NOTHING"
                    " RETURNING epoch", self._params(sid=session_id)).fetchone()
                if inserted is not None:
                    return inserted[0]
                lease = self._lock_lease(conn, session_id)
                if lease is None:  # dropped since the INSERT saw it: insert again
                    continue
                owner, _ = lease
                if owner.live and owner.node_id != self.node_id:
                    raise SessionOwned(owner)
                return self._take(conn, session_id)
        return self.db.run(fn, f"acquiring session {session_id}")

    def renew(self) -> dict[str, int]:
        """Heartbeat, and extend every lease naming this node; session id -> epoch, as the database has them.

        The caller compares with what it holds: a session missing here, or at
        another epoch, was lost (claimed by another node, or re-claimed).
        :class:`NotRegistered` (and nothing renewed) if this node's row is gone.
        """
        def fn(conn: Any) -> dict[str, int]:
            self._heartbeat(conn)  # the node row first: the lock order of every transaction here
            rows = conn.execute(f"UPDATE trellis_leases SET expires_at = {_EXPIRES} WHERE node_id = %(me)s"
                                " RETURNING session_id, epoch", self._params()).fetchall()
            return dict(rows)
        return self.db.run(fn, f"renewing the leases of node {self.node_id}")

    def claim_orphans(self, limit: int) -> list[Claimed]:
        """Claim up to ``limit`` sessions no live node owns (never another node's live lease).

        Oldest expiry first; never past this node's cap (``max_sessions`` of its
        row, counting the leases it holds), nothing while draining. Rows are
        taken ``FOR UPDATE SKIP LOCKED``: nodes claiming at the same time split
        the orphans and never both get one. This node's own expired leases are
        left alone (its renew revives them; :meth:`claim` re-claims one).
        """
        def fn(conn: Any) -> list[Claimed]:
            draining, cap = self._lock_me(conn)
            room = min(limit, cap - self._count_mine(conn))
            if draining or room <= 0:
                return []
            # ``seen``: the orphans in this statement's snapshot, with their row as seen. ``c`` locks the
            # rows that are still exactly as seen, skipping rows another transaction holds; a row changed
            # since the snapshot (claimed, renewed, released) fails the recheck after its lock and is left.
            rows = conn.execute(
                "WITH seen AS (SELECT l.session_id, l.node_id, l.epoch, l.expires_at, l.released"
                " FROM trellis_leases l LEFT JOIN trellis_nodes n ON n.node_id = l.node_id"
                f" WHERE l.node_id IS DISTINCT FROM %(me)s AND NOT {_LIVE}),"
                " c AS (SELECT t.session_id, seen.node_id AS previous, seen.released AS was_released"
                " FROM trellis_leases t JOIN seen ON seen.session_id = t.session_id"
                " AND seen.epoch = t.epoch AND seen.expires_at = t.expires_at AND seen.released = t.released"
                " AND seen.node_id IS NOT DISTINCT FROM t.node_id"
                " ORDER BY seen.expires_at, seen.session_id LIMIT %(room)s FOR UPDATE OF t SKIP LOCKED)"
                " UPDATE trellis_leases t SET node_id = %(me)s, epoch = t.epoch + 1,"
                f" expires_at = {_EXPIRES}, released = false"
                " FROM c WHERE t.session_id = c.session_id"
                " RETURNING t.session_id, t.epoch, c.was_released, c.previous",
                self._params(room=room)).fetchall()
            return sorted((Claimed(sid, epoch, released, previous) for sid, epoch, released, previous in rows),
                          key=lambda c: c.session_id)
        return self.db.run(fn, f"claiming orphaned sessions for node {self.node_id}")

    def claim(self, session_id: str) -> Claimed | None:
        """Claim ``session_id`` if no live node but this one owns it; its own lease, live or not, too.

        ``None`` when it was not claimed: another live node owns it, there is
        no lease for it (a new session: :meth:`acquire`), or this node is
        draining or (for another node's lease) at its cap. Ask :meth:`owner`
        again then. Claiming its own lease fences whatever in this node held
        it at the old epoch (a session left by an earlier process of this node).
        """
        def fn(conn: Any) -> Claimed | None:
            draining, cap = self._lock_me(conn)
            if draining:
                return None
            lease = self._lock_lease(conn, session_id)
            if lease is None:
                return None
            owner, released = lease
            if owner.node_id != self.node_id and (owner.live or self._count_mine(conn) >= cap):
                return None
            return Claimed(session_id, self._take(conn, session_id), released, owner.node_id)
        return self.db.run(fn, f"claiming session {session_id}")

    def release(self, session_id: str, epoch: int) -> bool:
        """Hand the session over (draining): no node, released, expired now. False unless held here at ``epoch``."""
        def fn(conn: Any) -> bool:
            cur = conn.execute("UPDATE trellis_leases SET node_id = NULL, released = true, expires_at = now()"
                               " WHERE session_id = %(sid)s AND node_id = %(me)s AND epoch = %(epoch)s",
                               self._params(sid=session_id, epoch=epoch))
            return cur.rowcount == 1
        return self.db.run(fn, f"releasing session {session_id}")

    def drop(self, session_id: str, epoch: int) -> bool:
        """Delete the lease (the session was deleted). False unless held here at ``epoch``."""
        def fn(conn: Any) -> bool:
            cur = conn.execute("DELETE FROM trellis_leases"
                               " WHERE session_id = %(sid)s AND node_id = %(me)s AND epoch = %(epoch)s",
                               self._params(sid=session_id, epoch=epoch))
            return cur.rowcount == 1
        return self.db.run(fn, f"dropping the lease of session {session_id}")

    # ------------------------------------------------------------- reading

    def owner(self, session_id: str) -> Owner | None:
        """Who owns ``session_id`` (live or not); ``None`` without a lease row."""
        return self.db.run(lambda conn: self._owner(conn, session_id), f"looking up the owner of {session_id}")

    def _owner(self, conn: Any, session_id: str) -> Owner | None:
        row = conn.execute(
            f"SELECT l.session_id, l.node_id, n.advertise_url, l.epoch, {_LIVE} FROM trellis_leases l"
            " LEFT JOIN trellis_nodes n ON n.node_id = l.node_id WHERE l.session_id = %(sid)s",
            self._params(sid=session_id)).fetchone()
        return None if row is None else Owner(*row)

    def owners(self, session_ids: list[str]) -> dict[str, Owner]:
        """:meth:`owner` of many sessions in one query (those without a lease row are left out)."""
        rows = self.db.run(lambda conn: conn.execute(
            f"SELECT l.session_id, l.node_id, n.advertise_url, l.epoch, {_LIVE} FROM trellis_leases l"
            " LEFT JOIN trellis_nodes n ON n.node_id = l.node_id WHERE l.session_id = ANY(%(sids)s)",
            self._params(sids=list(session_ids))).fetchall(), "looking up the owners of sessions")
        return {row[0]: Owner(*row) for row in rows}

    def held(self) -> dict[str, int]:
        """Session id -> epoch of every lease naming this node, per the database (expired ones included)."""
        return self.db.run(
            lambda conn: dict(conn.execute("SELECT session_id, epoch FROM trellis_leases WHERE node_id = %(me)s",
                                           self._params()).fetchall()),
            f"listing the leases of node {self.node_id}")

    _NODES = ("SELECT n.node_id, n.advertise_url, n.draining, n.max_sessions, count(l.session_id)::int,"
              f" {_ALIVE} FROM trellis_nodes n LEFT JOIN trellis_leases l ON l.node_id = n.node_id"
              " GROUP BY n.node_id")

    def nodes(self) -> list[Node]:
        """Every node's row, with its lease count and liveness, by node id."""
        rows = self.db.run(lambda conn: conn.execute(self._NODES + " ORDER BY n.node_id", self._params()).fetchall(),
                           "listing the nodes")
        return [Node(*row) for row in rows]

    def place(self) -> Node | None:
        """Where a new session should go: the least-loaded live, non-draining node under its cap (ties: node id)."""
        row = self.db.run(
            lambda conn: conn.execute(
                f"SELECT * FROM ({self._NODES}) AS s (node_id, advertise_url, draining, max_sessions, sessions, alive)"
                " WHERE alive AND NOT draining AND sessions < max_sessions ORDER BY sessions, node_id LIMIT 1",
                self._params()).fetchone(),
            "placing a session")
        return None if row is None else Node(*row)
