"""Where a daemon keeps what must survive it: one small interface, so storage can change without the actors.

Per session, four things:

- the **journal** (:mod:`actors.storage.journal`): admissions, aborts, starts,
  terminal states and waiting mid-turn input, appended before they are
  acknowledged;
- the **transcript**: the conversation, as :class:`~actors.session.transcript.Transcript`
  lines;
- the **session record**: cwd, approval mode, model name, created/updated
  times — what a restored session starts from;
- the **compacted replay** (:mod:`actors.events.compaction`): its finished
  turns folded, what a restored session's clients are shown of them.

:class:`~actors.storage.local.LocalStore` keeps them in files under the state
directory; a shared database can implement :class:`SessionStore` later. A
write that fails raises :class:`StorageError` and must leave nothing half
done that a reader would take for a record.

A store may also read many sessions at once (:class:`ManySessionReads`): a
listing of thousands of stored sessions then costs a few database round trips,
not two a session. :func:`records_of` and :func:`journals_of` use those reads
where the store has them, and read one session at a time where it has not
(files: there is nothing to save by batching).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..model import ChatMessage


class StorageError(OSError):
    """A write the store could not make durable (disk full, read-only directory); the message says where."""


class TranscriptLog(Protocol):
    """One session's conversation log (:class:`~actors.session.transcript.Transcript` on local files)."""

    @property
    def exists(self) -> bool: ...

    def append(self, message: ChatMessage) -> None: ...

    def append_record(self, record: dict[str, Any]) -> None: ...

    def records(self) -> list[dict[str, Any]]: ...

    def messages(self) -> list[ChatMessage]: ...

    def rewrite(self, messages: list[ChatMessage]) -> None: ...


class JournalCompaction(Protocol):
    """A journal rewritten with its slow steps in worker threads (:class:`~actors.storage.writer.JournalWriter`
    calls them in this order; ``actors.storage.local.FileJournalCompaction`` says what each guarantees)."""

    def write(self, records: list[dict[str, Any]]) -> None:
        """In a worker thread: the snapshot's records written and made durable beside the journal."""

    def install(self, tail: list[dict[str, Any]], *, sync: bool) -> None:
        """On the event loop, without a checkpoint: ``tail`` (the records appended since the snapshot) carried
        over, made durable if ``sync``, and the new journal put in place of the old."""

    def sync_directory(self) -> None:
        """In a worker thread: the new journal's place made durable."""

    def directory_synced(self) -> None:
        """On the event loop, after :meth:`sync_directory` worked."""

    def abandon(self) -> None:
        """What :meth:`write` left, removed (a compaction that stops before :meth:`install`)."""


class SessionStore(Protocol):
    def transcript(self, session_id: str) -> TranscriptLog:
        """The session's transcript (it need not exist yet)."""
    def journal_append(self, session_id: str, record: dict[str, Any], *, durable: bool = True) -> None:
        """Append one journal record, durable (per the fsync policy) before it returns; ``durable=False``
        for a record no promise rests on (a model call's usage): written, not synced."""

    def journal_read(self, session_id: str) -> list[dict[str, Any]]:
        """Every readable record, in order; a torn last record (a crash mid-write) is dropped."""

    def journal_rewrite(self, session_id: str, records: list[dict[str, Any]]) -> None:
        """Replace the journal atomically (compaction)."""

    def replay_append(self, session_id: str, segment: list[dict[str, Any]]) -> int:
        """Append one folded turn (events in wire form) to the compacted replay; returns its size in bytes."""

    def replay_read(self, session_id: str) -> list[list[dict[str, Any]]] | None:
        """The compacted replay's turns, oldest first; ``None`` when the session has none on disk."""

    def replay_rewrite(self, session_id: str, segments: list[list[dict[str, Any]]]) -> None:
        """Replace the compacted replay atomically (with the turns still kept)."""

    def replay_rewriter(self, session_id: str) -> Callable[[list[list[dict[str, Any]]]], None]:
        """:meth:`replay_rewrite` for a worker thread: what the store keeps of the replay on this thread (an
        open descriptor) is let go now, and the returned function does the rest there. Used only where
        :attr:`sync_in_thread`; nothing is appended to the replay until the function has run."""

    def record_write(self, session_id: str, record: dict[str, Any]) -> None:
        """Replace the session record atomically."""

    def record_read(self, session_id: str) -> dict[str, Any] | None:
        """The session record, or ``None``."""

    def session_ids(self) -> list[str]:
        """Every session the store can restore."""

    def exists(self, session_id: str) -> bool:
        """Whether the store holds anything of ``session_id`` (journal, record or transcript)."""

    def close(self, session_id: str) -> None:
        """The session closed: release what the store holds open for it."""
    @property
    def sync_in_thread(self) -> bool:
        """Whether durable writes are synced in a worker thread, off the event loop: then a journal's writer
        appends with ``durable=False`` and syncs by :meth:`journal_syncer`."""

    def journal_syncer(self, session_id: str) -> Callable[[], None] | None:
        """What makes the journal's appends durable, to run in a worker thread; ``None`` when there is nothing
        this store syncs apart from its appends."""

    def journal_compaction(self, session_id: str) -> JournalCompaction | None:
        """A journal rewrite whose fsyncs run in worker threads, or ``None``: :meth:`journal_rewrite` then
        rewrites it on the loop."""


class SessionDeletion(Protocol):
    """What a store may add to :class:`SessionStore`: deleting a closed session for good
    (``POST /sessions/delete``). Cluster mode's store has none: there a session is deleted by no node."""

    def delete(self, session_id: str) -> None:
        """Delete everything the store holds of the closed session ``session_id``; none of it is fine."""


class ManySessionReads(Protocol):
    """What a store may add to :class:`SessionStore`: its reads of many sessions at once (a listing's)."""

    def records_read(self, session_ids: list[str]) -> dict[str, dict[str, Any] | None]:
        """:meth:`SessionStore.record_read` of each of ``session_ids``."""

    def journals_read(self, session_ids: list[str]) -> dict[str, list[dict[str, Any]] | None]:
        """:meth:`SessionStore.journal_read` of each of ``session_ids``; ``None`` for a journal that one would
        raise :class:`OSError` for (a row or line that is not JSON). A failure of the store itself raises."""


def records_of(store: SessionStore, session_ids: list[str]) -> dict[str, dict[str, Any] | None]:
    """The session record of each of ``session_ids`` (``None`` for none): in one read if the store can."""
    many = getattr(store, "records_read", None)  # optional: see ManySessionReads
    if many is not None:
        return many(session_ids)
    return {session_id: store.record_read(session_id) for session_id in session_ids}


def journals_of(store: SessionStore, session_ids: list[str]) -> dict[str, list[dict[str, Any]] | None]:
    """The journal records of each of ``session_ids``, ``None`` for one that cannot be read: in one read if the
    store can."""
    many = getattr(store, "journals_read", None)  # optional: see ManySessionReads
    if many is not None:
        return many(session_ids)
    out: dict[str, list[dict[str, Any]] | None] = {}
    for session_id in session_ids:
        try:
            out[session_id] = store.journal_read(session_id)
        except OSError:
            out[session_id] = None
    return out
