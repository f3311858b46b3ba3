"""PostgresStore on a real PostgreSQL: LocalStore's semantics, fencing by lease epoch, rewrites all or nothing, the inbox."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from actors.cluster.database import Database, DatabaseUnavailable
from actors.cluster.store import (
    Fence,
    LeaseLost,
    PostgresStore,
    PostgresTranscript,
    StoreUnavailable,
)
from actors.model import ChatMessage, ToolCall
from actors.session.transcript import TranscriptError
from actors.storage import LocalStore, StorageError

TABLES = ("trellis_session_records", "trellis_journal", "trellis_transcripts", "trellis_replays", "trellis_inbox")


def sql(db: Database, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    def run(conn: Any) -> list[tuple[Any, ...]]:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []
    return db.run(run, "the test's SQL")


def lease(db: Database, session_id: str, node: str = "a", epoch: int = 1) -> None:
    sql(db, "INSERT INTO trellis_leases (session_id, node_id, epoch, expires_at) "
            "VALUES (%s, %s, %s, now() + interval '30 seconds')", (session_id, node, epoch))


def takeover(db: Database, session_id: str = "s") -> None:
    sql(db, "UPDATE trellis_leases SET node_id = 'b', epoch = epoch + 1 WHERE session_id = %s", (session_id,))


def snapshot(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table the store writes (inbox ids and times left out)."""
    return {
        "trellis_session_records": sql(db, "SELECT session_id, record FROM trellis_session_records ORDER BY 1"),
        "trellis_journal": sql(db, "SELECT session_id, seq, record FROM trellis_journal ORDER BY seq"),
        "trellis_transcripts": sql(db, "SELECT session_id, seq, record FROM trellis_transcripts ORDER BY seq"),
        "trellis_replays": sql(db, "SELECT session_id, seq, segment, bytes FROM trellis_replays ORDER BY seq"),
        "trellis_inbox": sql(db, "SELECT id, session_id, record, admitted_by FROM trellis_inbox ORDER BY id"),
    }


class Node:
    """A store with its fence, recording the sessions its on_lost was called for."""

    def __init__(self, db: Database, node_id: str = "a") -> None:
        self.lost: list[str] = []
        self.fence = Fence(node_id, on_lost=self.lost.append)
        self.store = PostgresStore(db, self.fence)


@pytest.fixture
def node(db: Database) -> Node:
    """Node "a", holding session "s" at epoch 1."""
    lease(db, "s")
    n = Node(db)
    n.fence.hold("s", 1)
    return n


def hello(n: int) -> ChatMessage:
    return ChatMessage("user", f"hello {n}", origin="prompt")


# ------------------------------------------------------------- LocalStore's semantics


def exercise(store: Any, check: Callable[[Any], None]) -> list[Any]:
    """The same calls on either store; everything read back, in order."""
    out: list[Any] = []
    s = "s"
    t = store.transcript(s)
    out += [store.journal_read(s), store.replay_read(s), store.record_read(s), store.exists(s), store.session_ids(),
            t.exists, t.records()]
    store.journal_append(s, {"op": "admitted", "promptId": "p1", "text": "é ü"})
    store.journal_append(s, {"op": "usage", "promptId": "p1", "usage": {"inputTokens": 3}}, durable=False)
    store.journal_append(s, {"op": "started", "promptId": "p1"})
    out += [store.journal_read(s), store.exists(s), store.session_ids()]
    store.journal_rewrite(s, [{"op": "turn", "record": {"promptId": "p1"}}])
    out.append(store.journal_read(s))
    store.journal_rewrite(s, [])
    out += [store.journal_read(s), store.exists(s), store.session_ids()]
    out.append([store.replay_append(s, [{"type": "session_update", "n": n, "text": "ß" * n}]) for n in range(3)])
    out.append(store.replay_read(s))
    store.replay_rewrite(s, [[{"type": "x"}]])
    out += [store.replay_read(s), store.replay_append(s, [{"type": "y"}])]
    store.replay_rewrite(s, [])
    out += [store.replay_read(s), store.replay_append(s, [])]
    store.record_write(s, {"sessionId": s, "cwd": "/a"})
    store.record_write(s, {"sessionId": s, "cwd": "/b"})
    out.append(store.record_read(s))
    t.append(hello(1))
    t.append_record({"type": "turn_error", "promptId": "p1"})
    t.append(ChatMessage("assistant", "", (ToolCall("c1", "read", {"path": "x"}),)))
    t.append(ChatMessage("tool", "ok", tool_call_id="c1", name="read"))
    out += [t.exists, t.records(), t.messages()]
    t.rewrite([hello(2)])
    out += [t.records(), t.messages()]
    t.rewrite([])
    out += [t.exists, t.records(), t.messages(), store.transcript(s).records()]
    store.replay_append("r", [{"type": "only a replay"}])
    store.transcript("t").append(hello(3))
    store.record_write("a-record", {"sessionId": "a-record"})
    out += [store.session_ids(), [store.exists(x) for x in ("r", "t", "a-record", "nobody")]]
    check(store)
    return out


def test_every_method_reads_back_what_the_local_store_does(db: Database, tmp_path: Path) -> None:
    for session in ("s", "r", "t", "a-record"):
        lease(db, session)
    n = Node(db)
    for session in ("s", "r", "t", "a-record"):
        n.fence.hold(session, 1)
    local = exercise(LocalStore(tmp_path, fsync="never"), lambda store: None)
    remote = exercise(n.store, lambda store: None)
    assert remote == local
    assert local[0] == [] and local[1] is None  # nothing yet: no journal, no replay
    assert n.lost == []


def test_the_journal_keeps_its_order_and_replaces_whole(node: Node) -> None:
    store = node.store
    records = [{"op": "admitted", "promptId": f"p{i}"} for i in range(20)]
    for i, record in enumerate(records):
        store.journal_append("s", record, durable=i % 2 == 0)
    assert store.journal_read("s") == records
    assert store.journal_read("other") == []
    store.journal_rewrite("s", records[5:7])
    assert store.journal_read("s") == records[5:7]


def test_the_replay_is_none_until_written_and_its_size_is_every_rows_bytes(node: Node, db: Database) -> None:
    store = node.store
    assert store.replay_read("s") is None
    first = store.replay_append("s", [{"type": "a", "text": "é"}])
    assert first == len('[{"type":"a","text":"é"}]'.encode()) + 1  # the local file's line, newline included
    second = store.replay_append("s", [{"type": "b"}])
    assert second == first + len(b'[{"type":"b"}]') + 1
    assert store.replay_read("s") == [[{"type": "a", "text": "é"}], [{"type": "b"}]]
    assert sql(db, "SELECT sum(bytes) FROM trellis_replays WHERE session_id = 's'") == [(second,)]
    store.replay_rewrite("s", [])
    assert store.replay_read("s") == []  # a replay known to be empty, not none (the transcript is not replayed)


def test_the_record_is_replaced_and_unreadable_ones_are_none(node: Node, db: Database) -> None:
    store = node.store
    assert store.record_read("s") is None
    store.record_write("s", {"cwd": "/a", "model": "m"})
    store.record_write("s", {"cwd": "/b"})
    assert store.record_read("s") == {"cwd": "/b"}
    assert sql(db, "SELECT count(*) FROM trellis_session_records") == [(1,)]
    sql(db, "UPDATE trellis_session_records SET record = '[1]'")
    assert store.record_read("s") is None


def test_session_ids_are_sorted_and_exists_counts_journal_record_and_transcript(db: Database) -> None:
    n = Node(db)
    for session in ("zed", "Alpha", "mid", "rep"):
        lease(db, session)
        n.fence.hold(session, 1)
    n.store.journal_append("zed", {"op": "x"})
    n.store.journal_append("zed", {"op": "y"})
    n.store.record_write("Alpha", {})
    n.store.transcript("mid").append(hello(1))
    n.store.replay_append("rep", [])
    assert n.store.session_ids() == ["Alpha", "mid", "rep", "zed"]  # once each, in sorted()'s order
    # a replay alone lists a session but is not one that exists, as with the local store's files
    assert [n.store.exists(x) for x in ("zed", "Alpha", "mid", "rep", "nope")] == [True, True, True, False, False]


def test_a_row_that_is_not_json_is_an_error_naming_the_session_and_row(node: Node, db: Database) -> None:
    node.store.journal_append("s", {"op": "a"})
    sql(db, "INSERT INTO trellis_journal (session_id, record) VALUES ('s', '{torn')")
    with pytest.raises(StorageError, match=r"journal of session s, seq \d+: invalid JSON"):
        node.store.journal_read("s")
    sql(db, "INSERT INTO trellis_replays (session_id, segment, bytes) VALUES ('s', '[', 1)")
    with pytest.raises(StorageError, match=r"compacted replay of session s, seq \d+: invalid JSON"):
        node.store.replay_read("s")


def test_a_durable_false_append_commits_asynchronously_and_reads_back(node: Node) -> None:
    statements: list[str] = []
    real = node.store.db

    class Recording:
        def __init__(self, conn: Any) -> None:
            self.conn = conn

        def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
            statements.append(query)
            return self.conn.execute(query, *args, **kwargs)

    class Spy:
        def run(self, fn: Callable[[Any], Any], doing: str) -> Any:
            return real.run(lambda conn: fn(Recording(conn)), doing)

    node.store.db = Spy()  # type: ignore[assignment]
    node.store.journal_append("s", {"op": "admitted", "promptId": "p1"})
    assert not any("synchronous_commit" in s for s in statements)
    node.store.journal_append("s", {"op": "usage", "promptId": "p1"}, durable=False)
    assert "SET LOCAL synchronous_commit = off" in statements
    node.store.db = real
    assert node.store.journal_read("s") == [{"op": "admitted", "promptId": "p1"}, {"op": "usage", "promptId": "p1"}]


# ------------------------------------------------------------- the transcript


def test_a_transcript_appends_rewrites_and_has_no_path(node: Node) -> None:
    transcript = node.store.transcript("s")
    assert isinstance(transcript, PostgresTranscript) and transcript.path is None
    assert not transcript.exists and transcript.records() == [] and transcript.messages() == []
    for n in range(3):
        transcript.append(hello(n))
    transcript.append_record({"type": "turn_error", "promptId": "p"})
    assert transcript.exists
    assert [m.content for m in transcript.messages()] == ["hello 0", "hello 1", "hello 2"]
    assert transcript.records()[-1] == {"type": "turn_error", "promptId": "p"}
    transcript.rewrite([hello(7), ChatMessage("assistant", "hi")])
    assert node.store.transcript("s").messages() == [hello(7), ChatMessage("assistant", "hi")]
    assert len(transcript.records()) == 2


def test_a_bad_transcript_record_is_named(node: Node, db: Database) -> None:
    transcript = node.store.transcript("s")
    transcript.append(hello(1))
    transcript.append_record({"type": "message", "message": {"role": "wizard", "content": "x"}})
    with pytest.raises(TranscriptError, match=r"^session s, transcript record 2: not a conversation message$"):
        transcript.messages()
    sql(db, "DELETE FROM trellis_transcripts")
    transcript.rewrite([])  # the empty rewrite's row is not counted
    transcript.append(hello(1))
    sql(db, "INSERT INTO trellis_transcripts (session_id, record) VALUES ('s', 'nope')")
    with pytest.raises(TranscriptError, match=r"^session s, transcript record 2: invalid JSON$"):
        transcript.records()


# ------------------------------------------------------------- fencing

WRITES: dict[str, Callable[[PostgresStore], Any]] = {
    "journal_append": lambda s: s.journal_append("s", {"op": "admitted", "promptId": "late"}),
    "journal_append_not_durable": lambda s: s.journal_append("s", {"op": "usage"}, durable=False),
    "journal_rewrite": lambda s: s.journal_rewrite("s", [{"op": "turn"}]),
    "journal_rewrite_empty": lambda s: s.journal_rewrite("s", []),
    "replay_append": lambda s: s.replay_append("s", [{"type": "late"}]),
    "replay_rewrite": lambda s: s.replay_rewrite("s", [[{"type": "late"}]]),
    "record_write": lambda s: s.record_write("s", {"cwd": "/late"}),
    "transcript_append": lambda s: s.transcript("s").append(hello(9)),
    "transcript_append_record": lambda s: s.transcript("s").append_record({"type": "turn_error"}),
    "transcript_rewrite": lambda s: s.transcript("s").rewrite([hello(9)]),
    "inbox_take": lambda s: s.inbox_take("s"),
    "forget": lambda s: s.forget("s"),
}


def fill(store: PostgresStore) -> None:
    store.journal_append("s", {"op": "admitted", "promptId": "p1"})
    store.replay_append("s", [{"type": "t"}])
    store.record_write("s", {"cwd": "/a"})
    store.transcript("s").append(hello(1))
    store.inbox_admit("s", {"op": "admitted", "promptId": "p2"}, "b")


@pytest.mark.parametrize("write", list(WRITES))
def test_after_a_takeover_every_write_of_the_old_owner_is_refused(node: Node, db: Database, write: str) -> None:
    fill(node.store)
    takeover(db)
    before = snapshot(db)
    with pytest.raises(LeaseLost, match=r"session s: node a no longer holds its lease at epoch 1") as caught:
        WRITES[write](node.store)
    assert (caught.value.session_id, caught.value.epoch) == ("s", 1)
    assert isinstance(caught.value, StorageError)
    assert node.lost == ["s"]
    assert snapshot(db) == before
    new = Node(db, "b")
    new.fence.hold("s", 2)
    WRITES[write](new.store)  # the new owner's write goes through
    assert new.lost == []


@pytest.mark.parametrize("write", list(WRITES))
def test_a_session_the_fence_holds_no_epoch_for_is_never_written(node: Node, db: Database, write: str) -> None:
    fill(node.store)
    before = snapshot(db)
    node.fence.drop("s")
    assert node.fence.epoch("s") is None
    with pytest.raises(LeaseLost, match="session s: node a holds no lease on it") as caught:
        WRITES[write](node.store)
    assert caught.value.epoch is None and node.lost == ["s"]
    assert snapshot(db) == before


def test_the_fence_checks_node_and_epoch_but_not_expiry(node: Node, db: Database) -> None:
    sql(db, "UPDATE trellis_leases SET expires_at = now() - interval '1 hour'")
    node.store.journal_append("s", {"op": "a"})  # expired, unclaimed: still ours
    sql(db, "UPDATE trellis_leases SET node_id = 'b'")  # same epoch, another node
    with pytest.raises(LeaseLost):
        node.store.journal_append("s", {"op": "b"})
    sql(db, "UPDATE trellis_leases SET node_id = 'a', epoch = 2")  # ours again, at another epoch
    with pytest.raises(LeaseLost):
        node.store.record_write("s", {})
    node.fence.hold("s", 2)
    node.store.journal_append("s", {"op": "c"})
    assert node.store.journal_read("s") == [{"op": "a"}, {"op": "c"}]
    assert node.lost == ["s", "s"]


def test_a_takeover_waits_for_a_write_and_a_write_after_it_is_refused(node: Node, postgres_url: str) -> None:
    """The lease check locks the row: a takeover in progress holds the write until it commits, then refuses it."""
    with psycopg.connect(postgres_url) as other:  # a transaction, left open
        other.execute("UPDATE trellis_leases SET node_id = 'b', epoch = epoch + 1 WHERE session_id = 's'")
        outcome: list[OSError | None] = []

        def write() -> None:
            try:
                node.store.journal_append("s", {"op": "late"})
                outcome.append(None)
            except OSError as exc:  # LeaseLost, StoreUnavailable
                outcome.append(exc)

        thread = threading.Thread(target=write)
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive()  # waiting for the takeover's row lock
        other.commit()
        thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLost)
    assert node.store.journal_read("s") == []


def test_a_failed_callback_still_refuses(node: Node, db: Database) -> None:
    def fails(session_id: str) -> None:
        raise RuntimeError("boom")
    node.fence.on_lost = fails
    takeover(db)
    with pytest.raises(LeaseLost):
        node.store.journal_append("s", {"op": "x"})
    node.fence.on_lost = None
    with pytest.raises(LeaseLost):
        node.store.journal_append("s", {"op": "x"})


# ------------------------------------------------------------- rewrites: all or nothing


@pytest.fixture
def failing_insert(db: Database) -> None:
    """Any row holding "boom" fails to insert (after the rows before it went in)."""
    sql(db, """CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN IF NEW::text LIKE '%boom%' THEN RAISE EXCEPTION 'boom refused'; END IF; RETURN NEW; END $$""")
    for table in ("trellis_journal", "trellis_transcripts", "trellis_replays"):
        sql(db, f"CREATE TRIGGER boom BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION boom()")


def test_a_failed_rewrite_leaves_the_old_rows(node: Node, db: Database, failing_insert: None) -> None:
    store = node.store
    store.journal_append("s", {"op": "old"})
    store.replay_append("s", [{"type": "old"}])
    store.transcript("s").append(hello(1))
    before = snapshot(db)
    rewrites = [
        lambda: store.journal_rewrite("s", [{"op": "new"}, {"op": "boom"}]),
        lambda: store.replay_rewrite("s", [[{"type": "new"}], [{"type": "boom"}]]),
        lambda: store.transcript("s").rewrite([hello(2), ChatMessage("user", "boom")]),
    ]
    for rewrite in rewrites:
        with pytest.raises(StoreUnavailable, match="boom refused") as caught:
            rewrite()
        assert isinstance(caught.value, StorageError) and isinstance(caught.value, DatabaseUnavailable)
        assert snapshot(db) == before
    assert node.lost == []


def test_a_database_failure_is_a_storage_error(node: Node, db: Database) -> None:
    db.close()
    for call in (lambda: node.store.journal_append("s", {}), lambda: node.store.journal_read("s"),
                 lambda: node.store.session_ids(), lambda: node.store.inbox_admit("s", {}, "b")):
        with pytest.raises(StoreUnavailable, match="PostgreSQL at .*session s|listing the sessions") as caught:
            call()
        assert isinstance(caught.value, StorageError)


# ------------------------------------------------------------- the inbox


def test_the_inbox_moves_into_the_journal_in_the_order_admitted(node: Node, db: Database) -> None:
    store = node.store
    lease(db, "other", node="b")
    store.journal_append("s", {"op": "admitted", "promptId": "own"})
    admitted = [{"op": "admitted", "promptId": f"p{i}", "body": {"n": i}} for i in range(30)]
    for i, record in enumerate(admitted):
        store.inbox_admit("s", record, "b" if i % 2 else "c")
        if i % 10 == 0:
            store.inbox_admit("other", {"op": "admitted", "promptId": f"x{i}"}, "c")
    assert store.inbox_count("s") == 30 and store.inbox_count("other") == 3
    sql(db, "UPDATE trellis_inbox SET admitted_by = admitted_by WHERE id IN (SELECT min(id) FROM trellis_inbox)")
    sql(db, "UPDATE trellis_inbox SET admitted_by = admitted_by WHERE id IN (SELECT max(id) - 5 FROM trellis_inbox)")
    sql(db, "DROP INDEX trellis_inbox_session")  # the take's DELETE scans the table, in the order stored:
    # the rows updated lie last in it, so the order admitted (ids) is not the order the rows come back in
    assert sql(db, "SELECT admitted_by FROM trellis_inbox WHERE session_id = 's' ORDER BY id LIMIT 2") == [("c",),
                                                                                                            ("b",)]
    lease(db, "idle", node="b")
    assert store.inbox_sessions(["s", "other", "idle", "nobody"]) == ["other", "s"]
    assert store.inbox_sessions([]) == []
    assert store.inbox_take("s") == admitted
    assert store.inbox_sessions(["s", "other"]) == ["other"]
    assert store.inbox_count("s") == 0 and store.inbox_count("other") == 3
    assert store.journal_read("s") == [{"op": "admitted", "promptId": "own"}, *admitted]  # ordered by seq
    assert store.inbox_take("s") == []
    assert store.journal_read("other") == []


def test_the_inbox_of_a_session_without_a_lease_refuses(node: Node, db: Database) -> None:
    with pytest.raises(KeyError) as caught:
        node.store.inbox_admit("nobody", {"op": "admitted", "promptId": "p"}, "b")
    assert caught.value.args == ("nobody",)
    assert snapshot(db)["trellis_inbox"] == []
    sql(db, "UPDATE trellis_leases SET node_id = NULL, released = true")  # released: still admits
    node.store.inbox_admit("s", {"op": "admitted", "promptId": "p"}, "b")
    assert node.store.inbox_count("s") == 1


def test_a_take_under_a_stale_epoch_moves_nothing(node: Node, db: Database) -> None:
    node.store.inbox_admit("s", {"op": "admitted", "promptId": "p1"}, "b")
    node.store.inbox_admit("s", {"op": "admitted", "promptId": "p2"}, "b")
    takeover(db)
    with pytest.raises(LeaseLost):
        node.store.inbox_take("s")
    assert node.store.inbox_count("s") == 2 and node.store.journal_read("s") == []
    new = Node(db, "b")
    new.fence.hold("s", 2)
    assert [r["promptId"] for r in new.store.inbox_take("s")] == ["p1", "p2"]


# ------------------------------------------------------------- forget, close, the fence


def test_forget_deletes_everything_of_the_session_but_its_lease(node: Node, db: Database) -> None:
    lease(db, "kept")
    node.fence.hold("kept", 1)
    fill(node.store)
    node.store.journal_append("kept", {"op": "kept"})
    node.store.forget("s")
    node.store.close("s")
    assert not node.store.exists("s") and node.store.session_ids() == ["kept"]
    assert node.store.journal_read("kept") == [{"op": "kept"}]
    assert sql(db, "SELECT session_id FROM trellis_leases ORDER BY 1") == [("kept",), ("s",)]
    for table in TABLES:
        assert sql(db, f"SELECT count(*) FROM {table} WHERE session_id = 's'") == [(0,)]


def test_the_fence_holds_drops_and_answers() -> None:
    fence = Fence("n1")
    assert fence.node_id == "n1" and fence.on_lost is None and fence.epoch("s") is None
    fence.hold("s", 3)
    fence.hold("t", 1)
    fence.hold("s", 4)
    assert fence.epochs == {"s": 4, "t": 1} and fence.epoch("s") == 4
    fence.drop("s")
    fence.drop("never")
    assert fence.epochs == {"t": 1}


# ------------------------------------------------------------- reading ahead for a takeover


def test_rows_read_ahead_are_what_each_read_would_return_until_a_write_or_the_drop(node: Node, db: Database) -> None:
    store = node.store
    for session in ("t", "empty"):
        lease(db, session)
        node.fence.hold(session, 1)
    store.journal_append("s", {"op": "admitted", "promptId": "p1"})
    store.journal_append("s", {"op": "started", "promptId": "p1"})
    store.replay_append("s", [{"type": "x"}])
    store.record_write("s", {"sessionId": "s", "cwd": "/a"})
    store.transcript("s").append(hello(1))
    store.transcript("t").append(hello(2))
    store.inbox_admit("t", {"op": "admitted", "promptId": "p2"}, "b")

    def reads() -> list[Any]:
        return [[store.journal_read(x), store.replay_read(x), store.record_read(x), store.exists(x),
                 store.transcript(x).exists, store.transcript(x).records()] for x in ("s", "t", "empty", "nobody")]

    expected = reads()
    statements = []
    run = db.run
    db.run = lambda fn, doing: (statements.append(doing), run(fn, doing))[1]  # type: ignore[method-assign]
    try:
        assert store.prefetch(["s", "t", "empty", "nobody"]) == {"t"}  # and which have an inbox
        assert len(statements) == 1  # one transaction for the lot
        assert reads() == expected and len(statements) == 1  # ... and none after it
        store.journal_append("s", {"op": "finished", "promptId": "p1"})  # a write: read afresh from then on
        assert store.journal_read("s")[-1] == {"op": "finished", "promptId": "p1"}
        assert store.record_read("t") == expected[1][2] and len(statements) == 3  # "t" still read ahead
        store.drop_prefetched(["s", "t", "empty", "nobody"])
        assert store.record_read("t") == expected[1][2] and len(statements) == 4
    finally:
        db.run = run  # type: ignore[method-assign]
