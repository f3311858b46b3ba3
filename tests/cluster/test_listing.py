"""The stored sessions a listing shows (GET /session, ACP session/list) from PostgresStore on a real PostgreSQL:
the same summaries as reading each session by itself, in a number of round trips that does not grow with them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from actors.cluster.database import Database
from actors.cluster.store import Fence, PostgresStore
from actors.daemon import stored_cwds, stored_summaries
from actors.model import ChatMessage
from actors.session.transcript import is_safe_session_id
from actors.storage import replay


def sql(db: Database, query: str, params: Any = None) -> None:
    db.run(lambda conn: conn.execute(query, params), "the test's SQL")


class Counting:
    """The test's Database as the store sees it, counting transactions (``run``) and the statements in them."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.transactions = 0
        self.statements = 0

    def run(self, fn: Callable[[Any], Any], doing: str) -> Any:
        self.transactions += 1
        return self.db.run(lambda conn: fn(_CountedConnection(conn, self)), doing)


class _CountedConnection:
    def __init__(self, conn: Any, counts: Counting) -> None:
        self.conn = conn
        self.counts = counts

    def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        self.counts.statements += 1
        return self.conn.execute(query, *args, **kwargs)


def store_of(db: Database, sessions: list[str]) -> PostgresStore:
    """A store holding the lease of ``sessions`` (so it may write them)."""
    fence = Fence("a")
    for session_id in sessions:
        sql(db, "INSERT INTO trellis_leases (session_id, node_id, epoch, expires_at) "
                "VALUES (%s, 'a', 1, now() + interval '30 seconds') ON CONFLICT DO NOTHING", (session_id,))
        fence.hold(session_id, 1)
    return PostgresStore(db, fence)


def add_sessions(db: Database, first: int, count: int) -> None:
    """Sessions ``s<first>``… with a record and a journal: prompts queued, one running, input waiting mid-turn."""
    ids = [f"s{i:04d}" for i in range(first, first + count)]
    store = store_of(db, ids)
    for i, session_id in zip(range(first, first + count), ids, strict=True):
        store.record_write(session_id, {"sessionId": session_id, "cwd": f"/work/{i % 3}", "title": f"t{i}",
                                        "createdAt": 1000 + i, "updatedAt": 2000 + i})
        for n in range(i % 4):
            store.journal_append(session_id, {"op": "admitted", "promptId": f"p{n}", "text": f"prompt {n}"})
        if i % 4 >= 2:
            store.journal_append(session_id, {"op": "started", "promptId": "p0"})
        if i % 5 == 0:
            store.journal_append(session_id, {"op": "mid_turn", "messageId": f"m{i}", "text": "also"})


def add_odd_sessions(db: Database) -> None:
    """The sessions a listing must take as the per-session reads do."""
    store = store_of(db, ["torn", "no-record", "bad-record", "emptied", "live"])
    store.journal_append("torn", {"op": "admitted", "promptId": "p1"})
    sql(db, "INSERT INTO trellis_journal (session_id, record) VALUES ('torn', '{torn')")  # unreadable journal
    store.record_write("torn", {"cwd": "/torn"})
    store.transcript("no-record").append(ChatMessage("user", "hi", origin="prompt"))  # a transcript alone
    store.journal_append("bad-record", {"op": "admitted", "promptId": "p1"})
    sql(db, "INSERT INTO trellis_session_records (session_id, record) VALUES ('bad-record', '[1]')")
    store.journal_append("emptied", {"op": "admitted", "promptId": "p1"})
    store.journal_rewrite("emptied", [])  # one null row
    store.record_write("live", {"cwd": "/live"})
    sql(db, "INSERT INTO trellis_session_records (session_id, record) VALUES ('../x', '{\"cwd\": \"/unsafe\"}')")


def one_by_one(store: PostgresStore, skip: frozenset[str] = frozenset()) -> dict[str, dict[str, Any]]:
    """The listing as it was made before: a record and a journal read for each session."""
    out: dict[str, dict[str, Any]] = {}
    for session_id in store.session_ids():
        if session_id in skip or not is_safe_session_id(session_id):
            continue
        record = store.record_read(session_id) or {}
        try:
            pending = replay(store.journal_read(session_id))
        except OSError:
            pending = replay([])
        out[session_id] = {
            "sessionId": session_id, "live": False, "restorable": True, "state": "stored",
            "cwd": record.get("cwd"), "title": record.get("title"),
            "createdAt": record.get("createdAt"), "updatedAt": record.get("updatedAt"),
            "queuedCount": len(pending.queued),
            "pendingCount": len(pending.queued) + len(pending.interrupted),
            "midTurnQueued": len(pending.mid_turn),
        }
    return out


def test_a_listing_shows_what_reading_each_session_shows(db: Database) -> None:
    add_sessions(db, 0, 24)
    add_odd_sessions(db)
    store = PostgresStore(db, Fence("b"))  # a node holding none of them, as for sessions not live on it
    skip = frozenset({"live", "s0003"})
    listed = stored_summaries(store, skip)
    assert listed == one_by_one(store, skip)
    assert list(listed) == [s for s in store.session_ids() if s not in skip and s != "../x"]  # in the same order
    # Not alike by accident: the journals and records were read.
    assert listed["s0002"] | {"queuedCount": 1, "pendingCount": 2, "midTurnQueued": 0} == listed["s0002"]
    assert listed["s0005"]["midTurnQueued"] == 1 and listed["s0005"]["title"] == "t5"
    assert listed["torn"]["pendingCount"] == 0 and listed["torn"]["cwd"] == "/torn"  # unreadable: nothing pending
    assert listed["bad-record"]["cwd"] is None and listed["bad-record"]["queuedCount"] == 1
    assert listed["no-record"]["cwd"] is None and listed["emptied"]["queuedCount"] == 0
    assert stored_cwds(store) == {(store.record_read(s) or {}).get("cwd") for s in store.session_ids()} - {None}
    assert "/unsafe" in stored_cwds(store)  # as before: the cwds of every record


def test_many_sessions_are_read_as_each_read_would_read_them(db: Database) -> None:
    add_sessions(db, 0, 6)
    add_odd_sessions(db)
    store = PostgresStore(db, Fence("b"))
    ids = [*store.session_ids(), "nobody"]
    assert store.records_read(ids) == {s: store.record_read(s) for s in ids}
    journals = store.journals_read(ids)
    assert journals.pop("torn") is None  # what journal_read raises StorageError for
    assert journals == {s: store.journal_read(s) for s in ids if s != "torn"}


def test_a_listing_takes_as_many_round_trips_for_many_sessions_as_for_few(db: Database) -> None:
    counting = Counting(db)
    store = PostgresStore(counting, Fence("b"))  # type: ignore[arg-type]

    def cost(listing: Callable[[], Any]) -> tuple[int, int]:
        before = counting.transactions, counting.statements
        listing()
        return counting.transactions - before[0], counting.statements - before[1]

    add_sessions(db, 0, 3)
    few = cost(lambda: stored_summaries(store)), cost(lambda: stored_cwds(store))
    add_sessions(db, 3, 57)
    many = cost(lambda: stored_summaries(store)), cost(lambda: stored_cwds(store))
    assert len(stored_summaries(store)) == 60
    assert many == few
    assert few[0][0] <= 3 and few[1][0] <= 2  # the ids, then the records and the journals: a transaction each


def test_a_listing_of_more_sessions_than_a_batch_reads_them_a_batch_at_a_time(db: Database,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    add_sessions(db, 0, 10)
    add_odd_sessions(db)
    expected = one_by_one(PostgresStore(db, Fence("b")))
    monkeypatch.setattr("actors.daemon.STORED_READ_BATCH", 4)
    counting = Counting(db)
    store = PostgresStore(counting, Fence("b"))  # type: ignore[arg-type]
    assert stored_summaries(store) == expected
    assert counting.transactions == 1 + 2 * 4  # the ids, then 15 sessions' records and journals 4 at a time
