"""One session's journal in a store: appends, compaction so it never grows without bound, and deferred syncs.

Inside :meth:`JournalWriter.deferring` (an actor's handler, see
:func:`actors._actor.serve_mailbox`), where the store syncs in a thread
(``LocalStore.sync_in_thread``: the daemon's), a durable append is
written without its sync, and :meth:`JournalWriter.commit` then makes
everything written durable in a worker thread: the event loop runs on while
the disk takes its time, and the actor's replies (a 202) wait for the sync as
they waited for the inline one. Otherwise (PostgreSQL, ``storage.fsync``
``never``, an embedder, a daemon under virtual time) each durable append
syncs itself, as outside the block.

Compaction, every :data:`COMPACT_AFTER` records, is the same split where the
store can do it in threads (``LocalStore.journal_compaction``): past the
bound :meth:`JournalWriter.compact_if_due` only notes the snapshot to take,
and the next :meth:`JournalWriter.commit` takes it, has it written and
fsynced in a worker thread, carries over what was appended meanwhile (a
session's timers, a model call's usage: their appends go on to the old
journal too, so it holds everything until the new one replaces it), renames
it into place and syncs the directory in a worker thread again. The actor's
replies wait for that as for a sync. Elsewhere the journal is rewritten in
place on the loop, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .base import JournalCompaction, SessionStore, StorageError

COMPACT_AFTER = 2048  # records appended since the last compaction

log = logging.getLogger("trellis.storage")


class JournalWriter:
    """Appends a session's journal records; :meth:`compact_if_due` rewrites it from a snapshot."""

    def __init__(self, store: SessionStore, session_id: str, *, existing: int = 0) -> None:
        self._store = store
        self._session_id = session_id
        self._count = existing
        self._deferring = False
        self._unsynced = False  # a durable record was written in a deferring block and not synced yet
        self._sync_failed = False  # the last deferred sync failed: durable appends sync inline until one works
        # A compaction due at the next commit: the snapshot to take, and the store's rewrite in threads.
        self._due: tuple[Callable[[], list[dict[str, Any]]], JournalCompaction] | None = None
        self._carried: list[tuple[dict[str, Any], bool]] | None = None  # appended while one is written

    def existing(self, count: int) -> None:
        self._count = count

    def append(self, record: dict[str, Any], *, durable: bool = True) -> None:
        """Append ``record`` (synced unless ``durable=False``, or by the next :meth:`commit` inside
        :meth:`deferring`); raises ``StorageError`` (an ``OSError``) and changes nothing if it cannot."""
        if durable and self._deferring and not self._sync_failed:
            self._store.journal_append(self._session_id, record, durable=False)
            self._unsynced = True
        else:
            self._store.journal_append(self._session_id, record, durable=durable)
            if durable:
                self._sync_failed = False
        self._appended(record, durable)

    def append_then_sync(self, record: dict[str, Any]) -> Awaitable[None] | None:
        """Append ``record`` now (``StorageError`` if it cannot) and return what makes it durable, to await
        before anything rests on it: its sync in a worker thread where the store syncs in threads (a
        session's timers, outside any handler); ``None`` where it was synced here, as :meth:`append` does
        (tests and replays under virtual time: no checkpoint, the same schedule)."""
        if not self._store.sync_in_thread or self._sync_failed:
            self.append(record)
            return None
        self._store.journal_append(self._session_id, record, durable=False)
        self._appended(record, True)  # durable, for a compaction that carries it over
        return self._sync_now()

    async def _sync_now(self) -> None:
        sync = self._store.journal_syncer(self._session_id)
        if sync is None:
            return
        try:
            await trio.to_thread.run_sync(sync)
        except OSError as exc:
            self._sync_failed = True  # as after a failed commit: durable appends sync inline until one works
            raise StorageError(f"cannot sync the journal of {self._session_id}: {exc.strerror or exc}") from None

    def _appended(self, record: dict[str, Any], durable: bool) -> None:
        self._count += 1
        if self._carried is not None:  # a compaction is being written: the new journal gets this too
            self._carried.append((record, durable))

    @property
    def unsynced(self) -> bool:
        """A durable record written in a :meth:`deferring` block, or a compaction, waits for :meth:`commit`."""
        return self._unsynced or (self._due is not None and self._carried is None)

    def deferring(self) -> _Deferring:
        """Durable appends in the block are written now and synced by the next :meth:`commit`."""
        return _Deferring(self)

    async def commit(self) -> None:
        """Sync what :meth:`deferring` wrote, in a worker thread; no checkpoint when there is nothing.
        A compaction that is due is made here instead (see the module's docstring), off the loop.

        A failed sync is logged, not raised: what the records describe has been
        done and answered. The durable appends after it then sync on the event
        loop, as without this writer's deferral, so the next one that cannot be
        made durable is refused (the FIFO fails closed again) until one is.
        """
        if self._due is not None and self._carried is None and await self._compact():
            return
        if not self._unsynced:
            return
        self._unsynced = False
        try:
            sync = self._store.journal_syncer(self._session_id)
            if sync is not None:
                await trio.to_thread.run_sync(sync)
        except OSError as exc:
            self._sync_failed = True
            log.error("session %s: journal not synced (the next records sync before they are answered): %s",
                      self._session_id, exc)

    def compact_if_due(self, snapshot: Callable[[], list[dict[str, Any]]]) -> None:
        """Past the bound, replace the journal with ``snapshot()`` (taken after the last change was applied):
        at the next :meth:`commit` where the store compacts in threads, here otherwise."""
        if self._count < COMPACT_AFTER or self._carried is not None or self._due is not None:
            return  # not due, being written, or noted already
        compaction = self._store.journal_compaction(self._session_id) if self._store.sync_in_thread else None
        if compaction is not None:
            self._due = snapshot, compaction
            return
        records = snapshot()
        try:
            self._store.journal_rewrite(self._session_id, records)
        except OSError as exc:
            log.error("session %s: journal not compacted: %s", self._session_id, exc)
            return
        self._count = len(records)
        self._unsynced = False  # the rewritten journal is durable, and holds what was waiting for a sync

    async def _compact(self) -> bool:
        """The compaction :meth:`compact_if_due` noted, its fsyncs in worker threads; whether the new journal
        is in place (it then holds every record, the unsynced ones among them, written and fsynced)."""
        assert self._due is not None
        (snapshot, compaction), self._due = self._due, None
        records = snapshot()  # encoded in the worker thread: nothing changes these dicts meanwhile
        carried = self._carried = []
        try:
            await trio.to_thread.run_sync(compaction.write, records)
            compaction.install([r for r, _ in carried], sync=any(durable for _, durable in carried))
        except StorageError as exc:  # the old journal is kept, and holds everything: synced as it would be
            log.error("session %s: journal not compacted: %s", self._session_id, exc)
            return False
        except BaseException:
            compaction.abandon()
            raise
        finally:
            self._carried = None
        self._count = len(records) + len(carried)
        try:
            await trio.to_thread.run_sync(compaction.sync_directory)
        except StorageError as exc:
            # Its name may not be durable: the records are synced again, as without a compaction (the journal
            # reopened by name, its directory with it), before the replies go.
            log.error("session %s: compacted journal's directory not synced: %s", self._session_id, exc)
            self._unsynced = True
            return False
        compaction.directory_synced()
        self._unsynced = False  # written and fsynced in the new journal, its name durable
        self._sync_failed = False
        return True


class _Deferring:
    """:meth:`JournalWriter.deferring`'s block (a class, not a ``@contextmanager``: the FIFO enters one for
    every message, where a generator per message showed in profiles)."""

    __slots__ = ("_writer",)

    def __init__(self, writer: JournalWriter) -> None:
        self._writer = writer

    def __enter__(self) -> None:
        self._writer._deferring = self._writer._store.sync_in_thread

    def __exit__(self, *exc_info: object) -> None:
        self._writer._deferring = False
