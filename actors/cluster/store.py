"""The cluster's store: :class:`~actors.storage.base.SessionStore` on the shared PostgreSQL database.

One row a record, in the tables of :mod:`actors.cluster.schema`:

    trellis_journal          the prompt journal, one orjson document a row, in order by ``seq``
    trellis_transcripts      the transcript (see actors.session.transcript), in order by ``seq``
    trellis_session_records  the session record, one row, replaced
    trellis_replays          the compacted replay: one folded turn (a JSON array) a row, with its size
    trellis_inbox            prompts another node admitted, until the owner takes them into its journal

**Fencing.** Every write is made only while this node holds the session's
lease at the epoch its :class:`Fence` says: the check is in the write's own
statement or transaction (``… WHERE EXISTS (SELECT 1 FROM trellis_leases
WHERE session_id = … AND node_id = … AND epoch = … FOR SHARE)``). ``FOR
SHARE`` matters: a takeover is an ``UPDATE`` of the lease row (``node_id``,
``epoch + 1``), which waits for a write in progress to commit, and a write
that starts after the takeover committed sees the new epoch and writes
nothing. So every write is either before the takeover (the new owner reads
it) or refused. ``expires_at`` is not checked: an expired lease nobody has
claimed is still ours; only a claim bumps the epoch. A refused write calls
``fence.on_lost(session_id)`` and raises :class:`LeaseLost`; a session the
fence holds no epoch for is refused without asking the database.

**Atomicity.** Rewrites (journal compaction, the replay's, a transcript
rewind) check the lease (``FOR SHARE``), delete and insert in one transaction:
a reader sees the old rows or the new, never a part. There are no torn rows,
so nothing is skipped on read; a row that is not JSON is an error naming the
session and row. An empty rewrite leaves one ``null`` row (skipped on read),
as the local store leaves an empty file: the journal, transcript or replay
still exists (``exists``, ``session_ids``; ``replay_read`` gives ``[]``, not
``None``).

**Durability** follows :class:`~actors.storage.local.LocalStore`: a journal
append waits for PostgreSQL's commit (its ``fsync``) before it returns;
``durable=False`` journal appends, transcript appends and rewrites and replay
appends (all written, not synced, by the local store) commit with
``synchronous_commit = off``: they survive this daemon's death, not the
database server's crash.

**Errors.** Every call runs through :meth:`Database.run` on the calling thread
(the actor's, as a local append's ``fsync`` does). A database failure is
raised as :class:`StoreUnavailable`, both a
:class:`~actors.storage.base.StorageError` (what the daemon and the HTTP layer
catch: a session refused with 503) and a
:class:`~actors.cluster.database.DatabaseUnavailable` (what the node code
catches), with its message.

**The inbox.** A node that does not own a session admits a prompt into
``trellis_inbox`` (:meth:`PostgresStore.inbox_admit`: unfenced, but only for a
session with a lease row); the owner moves the rows into its journal in one
fenced statement (:meth:`PostgresStore.inbox_take`), in the order admitted
(:meth:`~PostgresStore.inbox_sessions` says which of its sessions have any
waiting, for the owner's sweep).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..session.transcript import TranscriptError, message_from_dict, message_to_dict
from ..storage.base import StorageError
from ..telemetry import count_process
from .database import Database, DatabaseUnavailable

if TYPE_CHECKING:
    from ..model import ChatMessage

T = TypeVar("T")
log = logging.getLogger("trellis.cluster")

EMPTY = "null"  # the row an empty rewrite leaves: the thing exists and holds nothing

_HELD = ("EXISTS (SELECT 1 FROM trellis_leases WHERE session_id = %(s)s AND node_id = %(node)s "
         "AND epoch = %(epoch)s FOR SHARE)")
_ASYNC = "SET LOCAL synchronous_commit = off"
_TABLES = ("trellis_session_records", "trellis_journal", "trellis_transcripts", "trellis_replays", "trellis_inbox")
# What a restore reads of a session, by table (the first three also say whether it exists): see prefetch. A
# listing reads the first two (records_read, journals_read).
_RESTORE_READS = {
    "record": "SELECT session_id, 0, record FROM trellis_session_records WHERE session_id = ANY(%s)",
    "journal": "SELECT session_id, seq, record FROM trellis_journal WHERE session_id = ANY(%s) ORDER BY seq",
    "transcript": "SELECT session_id, seq, record FROM trellis_transcripts WHERE session_id = ANY(%s) ORDER BY seq",
    "replay": "SELECT session_id, seq, segment FROM trellis_replays WHERE session_id = ANY(%s) ORDER BY seq",
}


class LeaseLost(StorageError):
    """A write refused: this node no longer holds the session's lease at the epoch it thinks it does."""

    def __init__(self, session_id: str, epoch: int | None, node_id: str) -> None:
        if epoch is None:
            text = f"session {session_id}: node {node_id} holds no lease on it; nothing written"
        else:
            text = (f"session {session_id}: node {node_id} no longer holds its lease at epoch {epoch} "
                    "(another node took it over); nothing written")
        super().__init__(text)
        self.session_id = session_id
        self.epoch = epoch
        self.node_id = node_id


class StoreUnavailable(StorageError, DatabaseUnavailable):
    """The database failed a store call; the message says doing what (never the password)."""


class _NotHeld(Exception):
    """Raised inside a transaction whose lease check failed (rolls it back)."""


class Fence:
    """The leases this node holds: session id -> fencing epoch (the node code keeps it current)."""

    def __init__(self, node_id: str, on_lost: Callable[[str], None] | None = None) -> None:
        self.node_id = node_id
        self.epochs: dict[str, int] = {}
        self.on_lost = on_lost  # called with the session id when a write finds the lease gone

    def hold(self, session_id: str, epoch: int) -> None:
        self.epochs[session_id] = epoch

    def drop(self, session_id: str) -> None:
        self.epochs.pop(session_id, None)

    def epoch(self, session_id: str) -> int | None:
        return self.epochs.get(session_id)


def _dumps(document: Any) -> str:
    return orjson.dumps(document).decode()


def _loads(text: str, where: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise StorageError(f"{where}: invalid JSON") from None


class PostgresStore:
    """:class:`~actors.storage.base.SessionStore` on PostgreSQL, every write fenced by ``fence``."""

    def __init__(self, db: Database, fence: Fence) -> None:
        self.db = db
        self.fence = fence
        # Rows read ahead for sessions being restored (prefetch): session -> table -> (seq, text) rows.
        self._prefetched: dict[str, dict[str, list[tuple[int, str]]]] = {}

    # ------------------------------------------------------------- reading ahead for a takeover

    def prefetch(self, session_ids: list[str]) -> set[str]:
        """Read what restoring ``session_ids`` reads (record, journal, transcript, compacted replay) in one
        transaction of four statements, kept until :meth:`drop_prefetched`; which of them have prompts in the
        inbox. A takeover of many sessions then costs a few round trips per batch, not some six a session.

        Call it only for sessions this node holds the lease of: no other node can change their rows then
        (writes are fenced), and any write through this store drops what was read ahead of its session.
        """
        ids = list(session_ids)

        def read(conn: Any) -> tuple[dict[str, dict[str, list[tuple[int, str]]]], set[str]]:
            got: dict[str, dict[str, list[tuple[int, str]]]] = {s: {kind: [] for kind in _RESTORE_READS} for s in ids}
            for kind, sql in _RESTORE_READS.items():
                for session_id, seq, text in conn.execute(sql, (ids,)).fetchall():
                    got[session_id][kind].append((seq, text))
            inbox = conn.execute("SELECT DISTINCT session_id FROM trellis_inbox WHERE session_id = ANY(%s)",
                                 (ids,)).fetchall()
            return got, {r[0] for r in inbox}

        got, waiting = self._run(read, f"reading {len(ids)} sessions ahead of their restore")
        self._prefetched.update(got)
        return waiting

    def drop_prefetched(self, session_ids: list[str]) -> None:
        for session_id in session_ids:
            self._prefetched.pop(session_id, None)

    def transcript(self, session_id: str) -> PostgresTranscript:
        return PostgresTranscript(self, session_id)

    def close(self, session_id: str) -> None:
        """Nothing to release: the store keeps nothing open per session (connections are pooled)."""

    # A durable write here is its transaction's commit: nothing to sync apart from it.
    sync_in_thread = False

    def journal_syncer(self, session_id: str) -> None:
        return None

    def journal_compaction(self, session_id: str) -> None:
        return None  # a rewrite is one transaction, on the loop as every write here (journal_rewrite)

    # ------------------------------------------------------------- the database, fenced

    def _run(self, fn: Callable[[Any], T], doing: str) -> T:
        try:
            return self.db.run(fn, doing)
        except StoreUnavailable:
            raise
        except DatabaseUnavailable as exc:
            raise StoreUnavailable(str(exc)) from None

    def _write(self, session_id: str, doing: str, fn: Callable[[Any, dict[str, Any]], T]) -> T:
        """``fn(conn, params)`` in one transaction, if this node holds the lease (``params``: s, node, epoch).

        ``fn`` raises :class:`_NotHeld` when its check finds the lease gone: nothing is written, the fence's
        ``on_lost`` is called and :class:`LeaseLost` raised.
        """
        self._prefetched.pop(session_id, None)  # what was read ahead may not be what is there after this
        epoch = self.fence.epoch(session_id)
        if epoch is not None:
            params = {"s": session_id, "node": self.fence.node_id, "epoch": epoch}
            try:
                return self._run(lambda conn: fn(conn, params), f"{doing} of session {session_id}")
            except _NotHeld:
                # Said here too: a woken paused owner can meet its lost lease at a write before its lease round.
                log.warning("node %s: lease of session %s lost (epoch %s): its %s was refused", self.fence.node_id,
                            session_id, epoch, doing)
        if self.fence.on_lost is not None:
            try:
                self.fence.on_lost(session_id)
            except Exception:
                log.exception("session %s: the lease-lost callback failed", session_id)
        count_process("cluster_fenced_writes_refused", "")  # GET /metrics (in a worker thread: a process count)
        raise LeaseLost(session_id, epoch, self.fence.node_id)

    @staticmethod
    def _check(conn: Any, params: dict[str, Any]) -> None:
        """The lease check of a transaction: held (and locked against a takeover until commit), or _NotHeld."""
        if conn.execute(f"SELECT {_HELD}", params).fetchone()[0] is not True:
            raise _NotHeld

    def _insert(self, session_id: str, table: str, columns: str, values: tuple[Any, ...], doing: str, *,
                durable: bool = True) -> None:
        """One fenced ``INSERT`` of one row (``values`` for ``columns`` after ``session_id``)."""
        marks = ", ".join(f"%(v{i})s" for i in range(len(values)))
        sql = f"INSERT INTO {table} (session_id, {columns}) SELECT %(s)s, {marks} WHERE {_HELD}"

        def insert(conn: Any, params: dict[str, Any]) -> None:
            if not durable:
                conn.execute(_ASYNC)
            if conn.execute(sql, {**params, **{f"v{i}": v for i, v in enumerate(values)}}).rowcount != 1:
                raise _NotHeld

        self._write(session_id, doing, insert)

    def _replace(self, session_id: str, table: str, columns: str, rows: list[tuple[Any, ...]], doing: str, *,
                 durable: bool = True) -> None:
        """Replace the session's rows of ``table`` with ``rows``, in order, fenced, all or nothing."""
        marks = ", ".join(["%s"] * (len(rows[0]) + 1))

        def replace(conn: Any, params: dict[str, Any]) -> None:
            if not durable:
                conn.execute(_ASYNC)
            self._check(conn, params)
            conn.execute(f"DELETE FROM {table} WHERE session_id = %s", (session_id,))
            with conn.cursor() as cursor:  # executemany: pipelined, one statement a row, in order
                cursor.executemany(f"INSERT INTO {table} (session_id, {columns}) VALUES ({marks})",
                                   [(session_id, *row) for row in rows])

        self._write(session_id, doing, replace)

    def _documents(self, sql: str, session_id: str, doing: str, kind: str) -> list[tuple[int, str]]:
        ahead = self._prefetched.get(session_id)
        if ahead is not None:
            return list(ahead[kind])
        return self._run(lambda conn: conn.execute(sql, (session_id,)).fetchall(), f"{doing} of session {session_id}")

    # ------------------------------------------------------------- journal

    def journal_append(self, session_id: str, record: dict[str, Any], *, durable: bool = True) -> None:
        self._insert(session_id, "trellis_journal", "record", (_dumps(record),), "appending to the journal",
                     durable=durable)

    def journal_read(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._documents("SELECT seq, record FROM trellis_journal WHERE session_id = %s ORDER BY seq",
                               session_id, "reading the journal", "journal")
        return _journal(session_id, rows)

    def journal_rewrite(self, session_id: str, records: list[dict[str, Any]]) -> None:
        self._replace(session_id, "trellis_journal", "record", [(_dumps(r),) for r in records] or [(EMPTY,)],
                      "rewriting the journal")

    # ------------------------------------------------------------- compacted replay

    def replay_append(self, session_id: str, segment: list[dict[str, Any]]) -> int:
        """Append one folded turn; returns the replay's size: its rows' bytes, as the local file's would be."""
        text = _dumps(segment)
        sql = (f"WITH added AS (INSERT INTO trellis_replays (session_id, segment, bytes) "
               f"SELECT %(s)s, %(doc)s, %(bytes)s WHERE {_HELD} RETURNING bytes) "
               "SELECT (SELECT count(*) FROM added), (SELECT coalesce(sum(bytes), 0) FROM added) "
               "+ (SELECT coalesce(sum(bytes), 0) FROM trellis_replays WHERE session_id = %(s)s)")

        def append(conn: Any, params: dict[str, Any]) -> int:
            conn.execute(_ASYNC)
            added, size = conn.execute(sql, {**params, "doc": text, "bytes": _size(text)}).fetchone()
            if added != 1:
                raise _NotHeld
            return int(size)

        return self._write(session_id, "appending to the compacted replay", append)

    def replay_read(self, session_id: str) -> list[list[dict[str, Any]]] | None:
        rows = self._documents("SELECT seq, segment FROM trellis_replays WHERE session_id = %s ORDER BY seq",
                               session_id, "reading the compacted replay", "replay")
        if not rows:
            return None
        segments = (_loads(text, f"the compacted replay of session {session_id}, seq {seq}") for seq, text in rows)
        return [s for s in segments if isinstance(s, list)]

    def replay_rewrite(self, session_id: str, segments: list[list[dict[str, Any]]]) -> None:
        texts = [_dumps(s) for s in segments]
        self._replace(session_id, "trellis_replays", "segment, bytes", [(t, _size(t)) for t in texts] or [(EMPTY, 0)],
                      "rewriting the compacted replay")

    def replay_rewriter(self, session_id: str) -> Callable[[list[list[dict[str, Any]]]], None]:
        return lambda segments: self.replay_rewrite(session_id, segments)  # nothing held open here

    # ------------------------------------------------------------- session record

    def record_write(self, session_id: str, record: dict[str, Any]) -> None:
        sql = (f"INSERT INTO trellis_session_records (session_id, record) SELECT %(s)s, %(doc)s WHERE {_HELD} "
               "ON CONFLICT (session_id) DO UPDATE SET record = EXCLUDED.record, updated_at = now()")

        def write(conn: Any, params: dict[str, Any]) -> None:
            if conn.execute(sql, {**params, "doc": _dumps(record)}).rowcount != 1:
                raise _NotHeld

        self._write(session_id, "writing the session record", write)

    def record_read(self, session_id: str) -> dict[str, Any] | None:
        rows = self._documents("SELECT 0, record FROM trellis_session_records WHERE session_id = %s", session_id,
                               "reading the session record", "record")
        return _record(rows)

    # ------------------------------------------------------------- many sessions at once (a listing's)

    def records_read(self, session_ids: list[str]) -> dict[str, dict[str, Any] | None]:
        """:meth:`record_read` of each of ``session_ids``, in one statement (a listing's: not a round trip each)."""
        rows = self._rows_of_many("record", session_ids, "reading the session records")
        return {session_id: _record(found) for session_id, found in rows.items()}

    def journals_read(self, session_ids: list[str]) -> dict[str, list[dict[str, Any]] | None]:
        """:meth:`journal_read` of each of ``session_ids``, in one statement; ``None`` for a journal with a row
        that is not JSON (what journal_read raises for), as a listing shows it: with nothing pending."""
        out: dict[str, list[dict[str, Any]] | None] = {}
        for session_id, found in self._rows_of_many("journal", session_ids, "reading the journals").items():
            try:
                out[session_id] = _journal(session_id, found)
            except StorageError:
                out[session_id] = None
        return out

    def _rows_of_many(self, kind: str, session_ids: list[str], doing: str) -> dict[str, list[tuple[int, str]]]:
        """The rows of ``kind`` (a table of _RESTORE_READS) of every one of ``session_ids``, in one statement.

        Read from the database even for a session read ahead (prefetch): its rows there are the same, as
        only this node writes them, and a listing does not need them kept.
        """
        ids = list(dict.fromkeys(session_ids))

        def read(conn: Any) -> dict[str, list[tuple[int, str]]]:
            got: dict[str, list[tuple[int, str]]] = {s: [] for s in ids}
            for session_id, seq, text in conn.execute(_RESTORE_READS[kind], (ids,)).fetchall():
                got[session_id].append((seq, text))
            return got

        return self._run(read, f"{doing} of {len(ids)} sessions")

    # ------------------------------------------------------------- listing

    def session_ids(self) -> list[str]:
        """Every session with a record, journal, transcript or replay row (as the local store lists files)."""
        sql = " UNION ".join(f"SELECT DISTINCT session_id FROM {t}" for t in _TABLES[:4])
        rows = self._run(lambda conn: conn.execute(sql).fetchall(), "listing the sessions")
        return sorted(r[0] for r in rows)  # Python's order, not the database's collation

    def exists(self, session_id: str) -> bool:
        """Whether the session has a journal, record or transcript row (a replay alone does not count)."""
        ahead = self._prefetched.get(session_id)
        if ahead is not None:
            return bool(ahead["record"] or ahead["journal"] or ahead["transcript"])
        sql = "SELECT " + " OR ".join(f"EXISTS (SELECT 1 FROM {t} WHERE session_id = %(s)s)" for t in _TABLES[:3])
        return bool(self._run(lambda conn: conn.execute(sql, {"s": session_id}).fetchone()[0],
                              f"looking up session {session_id}"))

    def forget(self, session_id: str) -> None:
        """Delete every row of the session but its lease (the session is deleted for good); fenced."""
        def forget(conn: Any, params: dict[str, Any]) -> None:
            self._check(conn, params)
            for table in _TABLES:
                conn.execute(f"DELETE FROM {table} WHERE session_id = %s", (session_id,))

        self._write(session_id, "deleting the rows", forget)

    # ------------------------------------------------------------- inbox

    def inbox_admit(self, session_id: str, record: dict[str, Any], admitted_by: str) -> None:
        """Queue a journal record (an ``admitted`` one) for the session's owner; ``KeyError`` if it has no lease.

        Unfenced: the admitting node holds no lease. Committed before it returns, as a journal append is.
        """
        sql = ("INSERT INTO trellis_inbox (session_id, record, admitted_by) SELECT %(s)s, %(doc)s, %(by)s "
               "WHERE EXISTS (SELECT 1 FROM trellis_leases WHERE session_id = %(s)s FOR KEY SHARE)")
        params = {"s": session_id, "doc": _dumps(record), "by": admitted_by}
        if self._run(lambda conn: conn.execute(sql, params).rowcount, f"admitting to session {session_id}") != 1:
            raise KeyError(session_id)

    def inbox_take(self, session_id: str) -> list[dict[str, Any]]:
        """Move the session's inbox into its journal, in the order admitted, fenced, in one statement; the records."""
        sql = ("WITH moved AS (DELETE FROM trellis_inbox WHERE session_id = %(s)s RETURNING id, record) "
               "INSERT INTO trellis_journal (session_id, record) SELECT %(s)s, record FROM moved ORDER BY id "
               "RETURNING seq, record")

        def take(conn: Any, params: dict[str, Any]) -> list[tuple[int, str]]:
            self._check(conn, params)
            return conn.execute(sql, params).fetchall()

        rows = self._write(session_id, "taking the inbox", take)
        return [_loads(text, f"the journal of session {session_id}, seq {seq}") for seq, text in sorted(rows)]

    def inbox_count(self, session_id: str) -> int:
        return int(self._run(lambda conn: conn.execute("SELECT count(*) FROM trellis_inbox WHERE session_id = %s",
                                                       (session_id,)).fetchone()[0],
                             f"counting the inbox of session {session_id}"))

    def inbox_sessions(self, session_ids: list[str]) -> list[str]:
        """Which of ``session_ids`` have prompts waiting in the inbox (sorted): one query for a node's sweep."""
        sql = "SELECT DISTINCT session_id FROM trellis_inbox WHERE session_id = ANY(%s)"
        rows = self._run(lambda conn: conn.execute(sql, (list(session_ids),)).fetchall(), "sweeping the inbox")
        return sorted(r[0] for r in rows)

    # ------------------------------------------------------------- transcript (PostgresTranscript's)

    def _transcript_rows(self, session_id: str) -> list[tuple[int, str]]:
        return self._documents("SELECT seq, record FROM trellis_transcripts WHERE session_id = %s ORDER BY seq",
                               session_id, "reading the transcript", "transcript")

    def _transcript_exists(self, session_id: str) -> bool:
        ahead = self._prefetched.get(session_id)
        if ahead is not None:
            return bool(ahead["transcript"])
        return bool(self._run(lambda conn: conn.execute(
            "SELECT EXISTS (SELECT 1 FROM trellis_transcripts WHERE session_id = %s)", (session_id,)).fetchone()[0],
            f"looking up the transcript of session {session_id}"))


def _record(rows: list[tuple[int, str]]) -> dict[str, Any] | None:
    """A session record from its row (none: ``None``; one not a JSON object, ``None`` too)."""
    try:
        data = orjson.loads(rows[0][1]) if rows else None
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _journal(session_id: str, rows: list[tuple[int, str]]) -> list[dict[str, Any]]:
    """A journal's records from its rows, in order (an empty rewrite's ``null`` row skipped); ``StorageError``
    naming the row for one that is not JSON."""
    records = (_loads(text, f"the journal of session {session_id}, seq {seq}") for seq, text in rows)
    return [r for r in records if isinstance(r, dict)]


def _size(text: str) -> int:
    """A replay row's size: what its line would take in the local store's file (UTF-8 and a newline)."""
    return len(text.encode()) + 1


class PostgresTranscript:
    """:class:`~actors.storage.base.TranscriptLog` of one session in ``trellis_transcripts``; writes fenced."""

    path = None  # no file: hooks get no transcript_path, the web shell no title from it

    def __init__(self, store: PostgresStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id

    @property
    def exists(self) -> bool:
        return self.store._transcript_exists(self.session_id)

    def append(self, message: ChatMessage) -> None:
        self.append_record({"type": "message", "message": message_to_dict(message)})

    def append_record(self, record: dict[str, Any]) -> None:
        self.store._insert(self.session_id, "trellis_transcripts", "record", (_dumps(record),),
                           "appending to the transcript", durable=False)

    def records(self) -> list[dict[str, Any]]:
        """Every record, in order (an empty rewrite's ``null`` row skipped); ``TranscriptError`` for one not JSON."""
        texts = [text for _, text in self.store._transcript_rows(self.session_id) if text != EMPTY]
        out = []
        for n, text in enumerate(texts, 1):
            try:
                out.append(orjson.loads(text))
            except orjson.JSONDecodeError:
                raise TranscriptError(f"session {self.session_id}, transcript record {n}: invalid JSON") from None
        return out

    def messages(self) -> list[ChatMessage]:
        return [
            message_from_dict(r.get("message"), f"session {self.session_id}, transcript record {i}")
            for i, r in enumerate(self.records(), 1)
            if r.get("type") == "message"
        ]

    def rewrite(self, messages: list[ChatMessage]) -> None:
        """Replace the whole transcript (rewind), fenced, all or nothing."""
        rows = [(_dumps({"type": "message", "message": message_to_dict(m)}),) for m in messages]
        self.store._replace(self.session_id, "trellis_transcripts", "record", rows or [(EMPTY,)],
                            "rewriting the transcript", durable=False)
